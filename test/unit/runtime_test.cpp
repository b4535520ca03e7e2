#include "engine/runtime.hpp"

#include <catch2/catch.hpp>

using namespace usmc;

TEST_CASE("launcher options from the environment") {
    bool ok = false;
    auto o = runtime::parse_options(nullptr, nullptr, nullptr, &ok);
    CHECK(ok);
    CHECK(o.modes == config::kModeAuto);
    CHECK(o.limit_hs == -1);
    CHECK_FALSE(o.verbose);

    o = runtime::parse_options("smcd", "1", "1", &ok);
    CHECK(ok);
    CHECK(o.modes == config::kModeSmcD);
    CHECK(o.limit_hs == 1);
    CHECK(o.verbose);

    o = runtime::parse_options("tcp", "0", "0", &ok);
    CHECK(ok);
    CHECK(o.modes == 0);
    CHECK(o.limit_hs == 0);
    CHECK_FALSE(o.verbose);

    o = runtime::parse_options("smcr,smcd", "", "", &ok);
    CHECK(ok);
    CHECK(o.modes == config::kModeAuto);

    o = runtime::parse_options("rdma", nullptr, nullptr, &ok);
    CHECK_FALSE(ok);
    CHECK(o.modes == 0); // unknown mode: plain TCP, the safe choice

    runtime::parse_options(nullptr, "yes", nullptr, &ok);
    CHECK_FALSE(ok);
}
