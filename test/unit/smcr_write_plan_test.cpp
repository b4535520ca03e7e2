// SPDX-License-Identifier: MIT
// What an SMC-R sender WRITEs before its CDC (engine/smcr/write_plan): one
// WRITE, two across the ring's end, none for nothing new, and refusal of
// cursors no sender could have.
#include "engine/smcr/write_plan.hpp"

#include <catch2/catch.hpp>

using namespace usmc;
using namespace usmc::smcr;

TEST_CASE("smcr write plan: one WRITE at the same offset in the peer's RMB") {
    auto p = plan_writes({0, 100}, {0, 612}, 4096, 0x10000);
    REQUIRE(p);
    REQUIRE(p->count == 1);
    CHECK(p->seg[0].offset == 100);
    CHECK(p->seg[0].len == 512);
    CHECK(p->seg[0].remote_addr == 0x10000 + 100);
    CHECK(p->bytes() == 512);
}

TEST_CASE("smcr write plan: across the ring's end, two WRITEs") {
    auto p = plan_writes({3, 4000}, {4, 200}, 4096, 0x10000);
    REQUIRE(p);
    REQUIRE(p->count == 2);
    CHECK(p->seg[0].offset == 4000);
    CHECK(p->seg[0].len == 96);
    CHECK(p->seg[0].remote_addr == 0x10000 + 4000);
    CHECK(p->seg[1].offset == 0);
    CHECK(p->seg[1].len == 200);
    CHECK(p->seg[1].remote_addr == 0x10000);
    CHECK(p->bytes() == 296);
    // Ending exactly at the end: one WRITE.
    auto e = plan_writes({0, 4000}, {1, 0}, 4096, 0);
    REQUIRE(e);
    CHECK(e->count == 1);
    CHECK(e->seg[0].len == 96);
    // A whole ring from the middle.
    auto w = plan_writes({0, 2048}, {1, 2048}, 4096, 0);
    REQUIRE(w);
    CHECK(w->count == 2);
    CHECK(w->bytes() == 4096);
}

TEST_CASE("smcr write plan: nothing new, nothing written; impossible cursors refused") {
    auto none = plan_writes({2, 10}, {2, 10}, 4096, 0);
    REQUIRE(none);
    CHECK(none->count == 0);
    CHECK(none->bytes() == 0);
    CHECK_FALSE(plan_writes({2, 10}, {2, 9}, 4096, 0));   // behind
    CHECK_FALSE(plan_writes({2, 10}, {3, 11}, 4096, 0));  // more than a ring ahead
    CHECK_FALSE(plan_writes({0, 4096}, {1, 0}, 4096, 0)); // a count outside the ring
    CHECK_FALSE(plan_writes({0, 0}, {0, 1}, 0, 0));       // no ring
}
