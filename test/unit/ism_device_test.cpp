// SPDX-License-Identifier: MIT
// DMB accounting of ism::Device across fork: the process whose device made a
// DMB counts it until it gives it back, whichever process closes last.
#include "engine/smcd/ism.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

using namespace usmc;

namespace {

constexpr uint32_t k64K = 64 * 1024;
constexpr uid_t kPeer = 1000;

// What a forked child holds of `d`: its own descriptor and mapping of the
// same file (as fork gives it), so each side can unmap its copy.
ism::Dmb forked_copy(const ism::Dmb& d) {
    ism::Dmb c = d;
    c.fd = fcntl(d.fd, F_DUPFD_CLOEXEC, 0);
    REQUIRE(c.fd >= 0);
    void* p = mmap(nullptr, d.size, PROT_READ | PROT_WRITE, MAP_SHARED, c.fd, 0);
    REQUIRE(p != MAP_FAILED);
    c.base = static_cast<uint8_t*>(p);
    return c;
}

} // namespace

// These are about DMBs of their own (segments: ism_segment_test.cpp).
constexpr bool kOwnFiles = false;

TEST_CASE("DMB device: allocate, release, disown keep the count exact", "[dmb]") {
    ism::Device dev(4 * k64K, kOwnFiles);
    std::vector<ism::Dmb> held;
    for (int i = 0; i < 4; ++i) {
        auto d = dev.allocate(k64K, kPeer);
        REQUIRE(d);
        CHECK(d->owner == dev.gid());
        held.push_back(*d);
    }
    CHECK_FALSE(dev.allocate(k64K, kPeer)); // the cap
    CHECK(dev.memory_in_use() == 4 * k64K);
    // Disowned: uncounted, unmapped, never a spare.
    dev.disown(held[0]);
    CHECK_FALSE(held[0].valid());
    CHECK(dev.memory_in_use() == 3 * k64K);
    CHECK(dev.spare_count() == 0);
    CHECK(dev.accounting_consistent());
    dev.disown(held[0]); // an empty one: nothing
    CHECK(dev.memory_in_use() == 3 * k64K);
    // Released: a spare, still counted, and room for the next.
    dev.release(held[1], kPeer);
    CHECK(dev.spare_bytes() == k64K);
    CHECK(dev.memory_in_use() == 3 * k64K);
    CHECK(dev.has_room(k64K));
    CHECK(dev.accounting_consistent());
    auto a = dev.allocate(k64K, kPeer); // the spare, reused
    auto b = dev.allocate(k64K, kPeer); // the disowned one's room
    REQUIRE(a);
    REQUIRE(b);
    CHECK(dev.spare_bytes() == 0);
    CHECK_FALSE(dev.allocate(k64K, kPeer));
    CHECK(dev.memory_in_use() == 4 * k64K);
    for (auto* d : {&*a, &*b, &held[2], &held[3]})
        dev.release(*d, ism::kUnknownPeer); // never reused: unmapped and uncounted
    CHECK(dev.memory_in_use() == 0);
    CHECK(dev.spare_count() == 0);
    CHECK(dev.accounting_consistent());
}

TEST_CASE("DMB device across fork: the parent closes first, the child last", "[dmb]") {
    ism::Device parent(2 * k64K, kOwnFiles);
    ism::Device child(2 * k64K, kOwnFiles); // a forked child's own device: another GID
    REQUIRE(parent.gid() != child.gid());
    // Many more connections than the cap holds: one whose bytes stayed
    // counted in the parent would end them with MAX_DMB within three.
    for (int i = 0; i < 50; ++i) {
        auto d = parent.allocate(k64K, kPeer);
        REQUIRE(d);
        ism::Dmb theirs = forked_copy(*d);
        parent.disown(*d); // not the last owner
        CHECK(parent.memory_in_use() == 0);
        // The child, last, is handed a DMB it did not make: unmapped, and
        // its own count untouched (never subtracted: no wrap).
        child.release(theirs, kPeer);
        CHECK(child.memory_in_use() == 0);
        CHECK(child.spare_count() == 0);
        CHECK(child.accounting_consistent());
        CHECK(parent.accounting_consistent());
    }
    // Both caps still hold.
    auto c1 = child.allocate(k64K, kPeer);
    auto c2 = child.allocate(k64K, kPeer);
    REQUIRE(c1);
    REQUIRE(c2);
    CHECK_FALSE(child.allocate(k64K, kPeer));
    child.release(*c1, ism::kUnknownPeer);
    child.release(*c2, ism::kUnknownPeer);
    CHECK(child.memory_in_use() == 0);
}

TEST_CASE("DMB device across fork: the child closes first, the parent last", "[dmb]") {
    ism::Device parent(2 * k64K, kOwnFiles);
    ism::Device child(2 * k64K, kOwnFiles);
    // The child's own connection: its count must stay its own.
    auto own = child.allocate(k64K, kPeer);
    REQUIRE(own);
    for (int i = 0; i < 50; ++i) {
        auto d = parent.allocate(k64K, kPeer);
        REQUIRE(d);
        ism::Dmb theirs = forked_copy(*d);
        child.disown(theirs); // not its DMB: unmapped, its count untouched
        CHECK_FALSE(theirs.valid());
        CHECK(child.memory_in_use() == k64K);
        parent.release(*d, kPeer); // the last owner: a spare, counted
        CHECK(parent.memory_in_use() == k64K);
        CHECK(parent.spare_bytes() == k64K);
        CHECK(parent.accounting_consistent());
        CHECK(child.accounting_consistent());
    }
    // The spare is reused and the cap holds: two, not three.
    auto a = parent.allocate(k64K, kPeer);
    auto b = parent.allocate(k64K, kPeer);
    REQUIRE(a);
    REQUIRE(b);
    CHECK(parent.spare_bytes() == 0);
    CHECK_FALSE(parent.allocate(k64K, kPeer));
    parent.release(*a, ism::kUnknownPeer);
    parent.release(*b, ism::kUnknownPeer);
    child.release(*own, ism::kUnknownPeer);
    CHECK(parent.memory_in_use() == 0);
    CHECK(child.memory_in_use() == 0);
}

TEST_CASE("DMB device: a DMB it did not count never takes the count below zero", "[dmb]") {
    ism::Device dev(2 * k64K, kOwnFiles);
    auto d = dev.allocate(k64K, kPeer);
    REQUIRE(d);
    // Copies that claim this device but were never counted here (as after a
    // double release): neither release nor disown takes more than is
    // counted for connections, so the spares stay covered.
    ism::Dmb claims = forked_copy(*d);
    ism::Dmb again = forked_copy(*d);
    dev.release(*d, kPeer); // the real one: a spare
    CHECK(dev.memory_in_use() == k64K);
    dev.release(claims, kPeer); // nothing counted for connections now
    CHECK(dev.memory_in_use() == k64K);
    CHECK(dev.spare_bytes() == k64K);
    dev.disown(again);
    CHECK(dev.memory_in_use() == k64K);
    CHECK(dev.accounting_consistent());
    CHECK(dev.has_room(2 * k64K));
    // The cap is exact still: the spare and one more, not three.
    auto x = dev.allocate(k64K, kPeer);
    auto y = dev.allocate(k64K, kPeer);
    REQUIRE(x);
    REQUIRE(y);
    CHECK_FALSE(dev.allocate(k64K, kPeer));
    CHECK(dev.accounting_consistent());
    dev.release(*x, ism::kUnknownPeer);
    dev.release(*y, ism::kUnknownPeer);
    CHECK(dev.memory_in_use() == 0);
    CHECK(dev.accounting_consistent());
}
