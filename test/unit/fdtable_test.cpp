// SPDX-License-Identifier: MIT
#include "engine/base/fdtable.hpp"

#include <catch2/catch.hpp>

#include <memory>

using namespace usmc;

TEST_CASE("SockInfo packs into one word and back") {
    SockInfo s;
    s.kind = SockKind::Stream;
    s.family = 10;
    s.role = SockRole::Listener;
    s.mode = SockMode::SmcR;
    s.flags = kFlagLimitHs | kFlagAfSmc | kFlagDecided;
    s.reason = 0x0a010000;
    s.hints = kHintNonblock;
    SockInfo t = SockInfo::unpack(s.pack());
    CHECK(t.kind == s.kind);
    CHECK(t.hints == kHintNonblock);
    CHECK(t.family == s.family);
    CHECK(t.role == s.role);
    CHECK(t.mode == s.mode);
    CHECK(t.flags == s.flags);
    CHECK(t.reason == s.reason);
    CHECK(SockInfo{}.pack() == 0);
    CHECK_FALSE(SockInfo::unpack(0).tracked());
}

TEST_CASE("fd table: set, get, copy, clear, ranges, bounds") {
    FdTable table;
    CHECK_FALSE(table.get(3).tracked()); // not attached yet: everything untracked
    SockInfo s;
    s.kind = SockKind::Stream;
    s.family = 2;
    CHECK_FALSE(table.set(3, s));

    auto slots = std::make_unique<std::atomic<uint64_t>[]>(64);
    auto mirror = std::make_unique<std::atomic<uint64_t>[]>(64);
    std::atomic<uint32_t> high{0};
    table.attach(slots.get(), 64, mirror.get(), &high);
    CHECK(table.set(3, s));
    CHECK(high.load() == 4);
    CHECK(table.high() == 4);
    CHECK(mirror[3].load() == s.pack()); // written through to the mirror
    CHECK(table.get(3).tracked());
    CHECK(table.get(3).family == 2);
    CHECK_FALSE(table.get(4).tracked());

    table.copy(3, 10); // dup
    CHECK(table.get(10).tracked());
    CHECK(high.load() == 11);
    table.copy(5, 10); // dup2 of an untracked fd over a tracked one
    CHECK_FALSE(table.get(10).tracked());

    CHECK_FALSE(table.set(64, s)); // beyond capacity
    CHECK_FALSE(table.set(-1, s));
    CHECK_FALSE(table.get(-1).tracked());
    CHECK_FALSE(table.get(1 << 30).tracked());
    table.clear(-5); // harmless

    for (int fd = 20; fd < 30; ++fd)
        table.set(fd, s);
    table.clear_range(22, ~0u); // close_range(22, ~0U)
    CHECK(table.get(21).tracked());
    CHECK_FALSE(table.get(22).tracked());
    CHECK_FALSE(table.get(29).tracked());
    CHECK(table.get(3).tracked());
    table.clear(3);
    CHECK_FALSE(table.get(3).tracked());
    CHECK(mirror[3].load() == 0);

    // A forked child's new mirror is rebuilt from the private table.
    auto fresh = std::make_unique<std::atomic<uint64_t>[]>(64);
    std::atomic<uint32_t> fresh_high{0};
    table.remirror(fresh.get(), &fresh_high);
    CHECK(fresh_high.load() == table.high());
    CHECK(fresh[21].load() == s.pack());
    CHECK(fresh[22].load() == 0);
}

TEST_CASE("fd table: hints change alone, only on tracked fds") {
    FdTable table;
    auto slots = std::make_unique<std::atomic<uint64_t>[]>(16);
    auto mirror = std::make_unique<std::atomic<uint64_t>[]>(16);
    std::atomic<uint32_t> high{0};
    table.attach(slots.get(), 16, mirror.get(), &high);
    SockInfo s;
    s.kind = SockKind::Stream;
    s.family = 10;
    s.role = SockRole::Client;
    s.flags = kFlagDecided | kFlagAllowD;
    s.reason = 0x0a0b0000;
    REQUIRE(table.set(5, s));

    table.set_hint(5, kHintNonblock, true);
    SockInfo t = table.get(5);
    CHECK(t.hints == kHintNonblock);
    CHECK(t.kind == s.kind); // the rest of the word as it was
    CHECK(t.family == s.family);
    CHECK(t.role == s.role);
    CHECK(t.flags == s.flags);
    CHECK(t.reason == s.reason);
    CHECK(mirror[5].load() == t.pack());
    table.set_hint(5, kHintNonblock, false);
    CHECK(table.get(5).hints == 0);
    CHECK(table.get(5).pack() == s.pack());

    table.set_hint(6, kHintNonblock, true); // untracked: stays untracked
    CHECK(slots[6].load() == 0);
    CHECK(mirror[6].load() == 0);
    table.set_hint(99, kHintNonblock, true); // beyond capacity: harmless
    table.set_hint(-1, kHintNonblock, true);
}
