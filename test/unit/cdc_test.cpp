// SPDX-License-Identifier: MIT
// The CDC receive every transport feeds (core/cdc.hpp), and SMC-D's copy of
// it out of the control line (smcd/cdc_line.hpp).
#include "engine/core/cdc.hpp"
#include "engine/smcd/cdc_line.hpp"

#include <catch2/catch.hpp>

#include <optional>

using namespace usmc;
using core::Cursor;
using core::PeerCdc;

namespace {
constexpr uint32_t kRing = 1000;

struct Row {
    const char* what;
    Cursor ours;                      // our consumer cursor (readable) / producer cursor (space)
    Cursor peers;                     // the peer's producer cursor / consumer cursor
    std::optional<uint32_t> readable; // nullopt: impossible, the connection breaks
    std::optional<uint32_t> space;
};

// The same pair of cursors read both ways: as the peer's producer cursor
// against our consumer cursor (bytes to read), and as the peer's consumer
// cursor behind our producer cursor (free space in its ring).
const Row kRows[] = {
    {"nothing new", {4, 300}, {4, 300}, 0u, kRing},
    {"ahead in the same lap", {4, 300}, {4, 450}, 150u, std::nullopt},
    {"ahead across the wrap", {4, 900}, {5, 100}, 200u, std::nullopt},
    {"one whole ring ahead", {4, 900}, {5, 900}, kRing, std::nullopt},
    {"behind in the same lap", {4, 450}, {4, 300}, std::nullopt, 850u},
    {"behind across the wrap", {5, 100}, {4, 900}, std::nullopt, 800u},
    {"one whole ring behind", {5, 900}, {4, 900}, std::nullopt, 0u},
    {"the wrap counter wraps", {0xffff, 900}, {0, 10}, 110u, std::nullopt},
    {"more than a ring ahead", {4, 900}, {5, 901}, std::nullopt, std::nullopt},
    {"more than a ring behind", {5, 901}, {4, 900}, std::nullopt, std::nullopt},
    {"two laps apart", {4, 100}, {6, 100}, std::nullopt, std::nullopt},
    {"the peer's count outside the ring", {4, 0}, {4, kRing}, std::nullopt, std::nullopt},
    {"a count far outside the ring", {4, 0}, {4, 0xffffffff}, std::nullopt, std::nullopt},
};
} // namespace

TEST_CASE("CDC receive: the peer's cursors count only when they fit ours, whichever transport") {
    for (const Row& r : kRows) {
        INFO(r.what);
        PeerCdc as_prod;
        as_prod.prod = r.peers;
        CHECK(core::cdc_readable(as_prod, r.ours, kRing) == r.readable);
        PeerCdc as_cons;
        as_cons.cons = r.peers;
        CHECK(core::cdc_space(as_cons, r.ours, kRing) == r.space);
    }
}

TEST_CASE("CDC receive: only the connection flags that end something are taken") {
    PeerCdc m;
    for (int f = 0; f < 256; ++f) {
        m.conn_flags = uint8_t(f);
        uint8_t taken = core::cdc_ending_flags(m);
        CHECK((taken & ~core::kConnFlagsKnown) == 0);
        CHECK(taken == (f & core::kConnFlagsKnown));
    }
}

TEST_CASE("SMC-D's receive copies every field of the peer's control line words") {
    smcd::Control line{};
    line.prod.store(smcd::pack_prod({7, 12345}, 3));
    line.cons.store(
        smcd::pack_cons({9, 54321}, smcd::kWriteBlocked, core::kPeerDoneWriting | 0x01));
    line.urg.store(smcd::pack_prod({7, 12000}, 3));
    PeerCdc m = smcd::receive(line);
    CHECK(m.prod == Cursor{7, 12345});
    CHECK(m.urg_count == 3);
    CHECK(m.cons == Cursor{9, 54321});
    CHECK(m.prod_flags == smcd::kWriteBlocked);
    CHECK(m.conn_flags == (core::kPeerDoneWriting | 0x01)); // as sent; the core drops the 0x01
    CHECK(core::cdc_ending_flags(m) == core::kPeerDoneWriting);
    core::UrgentMark mark = smcd::receive_urgent_mark(line);
    CHECK(mark.after == Cursor{7, 12000});
    CHECK(mark.count == 3);
}

TEST_CASE("SMC-D's send stores what the peer's receive reads back, flags and urgent mark alike") {
    smcd::Control line{};
    smcd::send_urgent_mark(line, {2, 700}, 5);
    smcd::send_prod(line, {2, 900}, 5);
    smcd::send_cons(line, {1, 40}, core::kPeerConnClosed);
    PeerCdc m = smcd::receive(line);
    CHECK(m.prod == Cursor{2, 900});
    CHECK(m.urg_count == 5);
    CHECK(m.cons == Cursor{1, 40});
    CHECK(m.prod_flags == 0);
    CHECK(core::cdc_ending_flags(m) == core::kPeerConnClosed);
    CHECK(smcd::sent(line).prod == m.prod);
    core::UrgentMark mark = smcd::receive_urgent_mark(line);
    CHECK(mark.after == Cursor{2, 700});
    CHECK(mark.count == 5);
}
