// SPDX-License-Identifier: MIT
// DMB slots in segments (ism.hpp): one memfd for the DMBs of peers of one
// user, slots claimed and given back under the rules of reused DMBs, the
// count exact, a forked child's close giving the slot back to its parent.
#include "engine/smcd/cdc_line.hpp"
#include "engine/smcd/gate.hpp"
#include "engine/smcd/ism.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <dirent.h>
#include <set>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace usmc;

namespace {

constexpr uint32_t k64K = 64 * 1024;
constexpr uid_t kPeer = 1000;

int open_fds() {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (readdir(d))
            ++n;
        closedir(d);
    }
    return n;
}

// The peer's close, as it lands in our control line.
void peer_closes(const ism::Dmb& d) {
    d.control()->cons.store(smcd::pack_cons({0, 0}, 0, core::kPeerConnClosed));
}

} // namespace

TEST_CASE("DMB segments: a peer user's DMBs are slots of one file, one descriptor", "[dmb]") {
    ism::Device dev(64 << 20);
    int before = open_fds();
    std::vector<ism::Dmb> held;
    for (int i = 0; i < 4; ++i) {
        auto d = dev.allocate(k64K, kPeer);
        REQUIRE(d);
        held.push_back(*d);
    }
    CHECK(open_fds() == before + 1); // the segment's memfd, nothing per DMB
    CHECK(dev.segment_count() == 1);
    CHECK(dev.slots_in_use() == 4);
    std::set<uint32_t> offsets;
    for (const auto& d : held) {
        CHECK(d.ino == held[0].ino);
        CHECK(d.fd == held[0].fd);
        CHECK(d.file_size >= 4 * k64K);
        CHECK(d.size == k64K);
        CHECK(ism::slot_claim_ok(d.size, d.offset, d.file_size));
        offsets.insert(d.offset);
        CHECK(d.control()->type == smcd::kCdcType);
    }
    CHECK(offsets.size() == 4); // no two share a slot
    // Another user's peers never share it.
    auto other = dev.allocate(k64K, kPeer + 1);
    REQUIRE(other);
    CHECK(other->ino != held[0].ino);
    CHECK(dev.segment_count() == 2);
    // A peer of unknown user gets a DMB of its own.
    auto unknown = dev.allocate(k64K, ism::kUnknownPeer);
    REQUIRE(unknown);
    CHECK_FALSE(unknown->seg);
    CHECK(unknown->ino != held[0].ino);
    CHECK(dev.accounting_consistent());
    for (auto& d : held)
        dev.release(d, kPeer);
    dev.release(*other, kPeer + 1);
    dev.release(*unknown, ism::kUnknownPeer);
    CHECK(dev.slots_in_use() == 0);
    CHECK(dev.accounting_consistent());
    CHECK(dev.spare_bytes() == dev.memory_in_use()); // every slot free, counted as spare
}

TEST_CASE("DMB segments: a slot is reused zeroed, and only after its old peer's close", "[dmb]") {
    ism::Device dev(64 << 20);
    auto a = dev.allocate(k64K, kPeer);
    REQUIRE(a);
    uint32_t slot = a->slot;
    // The peer wrote 100 bytes and published them.
    std::memset(a->ring(), 0xAB, 100);
    a->control()->prod.store(smcd::pack_prod({0, 100}));
    uint64_t old_token = a->token;
    ism::Dmb kept = *a;                         // (the test's own view, to play the old peer)
    dev.release(*a, kPeer, /*reusable=*/false); // the old peer has not closed yet
    std::vector<ism::Dmb> others;
    for (int i = 0; i < 3; ++i) { // the segment's other slots
        auto d = dev.allocate(k64K, kPeer);
        REQUIRE(d);
        CHECK(d->slot != slot);
        others.push_back(*d);
    }
    auto next = dev.allocate(k64K, kPeer); // all taken or waiting: a new segment
    REQUIRE(next);
    CHECK(next->ino != kept.ino);
    CHECK(dev.segment_count() == 2);
    peer_closes(kept);
    dev.release(others[0], kPeer); // frees a slot of the first segment too
    std::vector<ism::Dmb> again;
    bool got_old = false;
    for (int i = 0; i < 8 && !got_old; ++i) {
        auto d = dev.allocate(k64K, kPeer);
        REQUIRE(d);
        if (d->ino == kept.ino && d->slot == slot) {
            got_old = true;
            CHECK(d->token != old_token);
            CHECK(std::all_of(d->ring(), d->ring() + 100, [](uint8_t b) { return b == 0; }));
            CHECK(smcd::conn_flags_of(d->control()->cons.load()) == 0);
            CHECK(d->control()->prod.load() == 0);
        }
        again.push_back(*d);
    }
    CHECK(got_old);
    CHECK(dev.accounting_consistent());
    for (auto& d : again)
        dev.release(d, kPeer);
    for (size_t i = 1; i < others.size(); ++i)
        dev.release(others[i], kPeer);
    dev.release(*next, kPeer);
    CHECK(dev.accounting_consistent());
}

TEST_CASE("DMB segments: a slot given up in a failed handshake is never reused", "[dmb]") {
    ism::Device dev(64 << 20);
    auto a = dev.allocate(k64K, kPeer);
    REQUIRE(a);
    ism::Dmb view = *a;
    dev.release(*a, ism::kUnknownPeer); // the peer may have it mapped and write
    peer_closes(view);                  // (even a close flag is no promise then)
    for (int i = 0; i < 12; ++i) {
        auto d = dev.allocate(k64K, kPeer);
        REQUIRE(d);
        CHECK_FALSE((d->ino == view.ino && d->slot == view.slot));
        // The segment takes no more claims (a peer can make handshakes fail
        // at will: lost slots must not pin segments), and went as soon as
        // none of its slots was held.
        CHECK(d->ino != view.ino);
        dev.release(*d, kPeer);
    }
    CHECK(dev.segment_count() == 1);
    CHECK(dev.accounting_consistent());
}

TEST_CASE("DMB segments: a stale copy's release leaves the slot's next claim alone", "[dmb]") {
    ism::Device dev(64 << 20);
    auto a = dev.allocate(k64K, kPeer);
    REQUIRE(a);
    ism::Dmb stale = *a;
    dev.release(*a, kPeer);
    auto b = dev.allocate(k64K, kPeer); // the same slot, claimed again
    REQUIRE(b);
    REQUIRE(b->slot == stale.slot);
    dev.release(stale, kPeer); // (a second release of the old claim)
    dev.disown(stale);         // (or a late disown of it)
    CHECK(dev.slots_in_use() == 1);
    auto c = dev.allocate(k64K, kPeer);
    REQUIRE(c);
    CHECK(c->slot != b->slot);
    CHECK(dev.accounting_consistent());
    dev.release(*b, kPeer);
    dev.release(*c, kPeer);
    CHECK(dev.accounting_consistent());
}

TEST_CASE("DMB segments: under the memory cap, then DMBs stop (the connection runs TCP)", "[dmb]") {
    ism::Device dev(6 * k64K);
    std::vector<ism::Dmb> held;
    for (int i = 0; i < 20; ++i) {
        auto d = dev.allocate(k64K, kPeer);
        if (!d) break;
        held.push_back(*d);
        CHECK(dev.memory_in_use() <= 6 * k64K);
        CHECK(dev.accounting_consistent());
    }
    // A segment of 4, then one of 2 (the 4 that would follow does not fit).
    CHECK(held.size() == 6);
    CHECK(dev.memory_in_use() == 6 * k64K);
    CHECK_FALSE(dev.has_room(k64K));
    // Another user: idle segments go to make room, live ones stay.
    dev.release(held.back(), kPeer);
    held.pop_back();
    dev.release(held.back(), kPeer);
    held.pop_back(); // the segment of 2 is idle now
    auto other = dev.allocate(k64K, kPeer + 1);
    REQUIRE(other);
    CHECK(dev.memory_in_use() <= 6 * k64K);
    CHECK(dev.accounting_consistent());
    for (auto& d : held)
        dev.release(d, kPeer);
    dev.release(*other, kPeer + 1);
    CHECK(dev.accounting_consistent());
}

TEST_CASE("DMB segments: a peer's slots map its segment once", "[dmb]") {
    ism::Device server(64 << 20), client(64 << 20);
    auto a = server.allocate(k64K, kPeer);
    auto b = server.allocate(k64K, kPeer);
    REQUIRE(a);
    REQUIRE(b);
    auto va = client.map_peer(dup(a->fd), a->size, a->offset, a->file_size);
    auto vb = client.map_peer(dup(b->fd), b->size, b->offset, b->file_size);
    REQUIRE(va);
    REQUIRE(vb);
    CHECK(vb->base - vb->offset == va->base - va->offset); // one mapping
    va->ring()[0] = 0x11;
    vb->ring()[0] = 0x22;
    CHECK(a->ring()[0] == 0x11);
    CHECK(b->ring()[0] == 0x22);
    client.unmap_peer(*va);
    vb->ring()[1] = 0x33; // still mapped for the other connection
    CHECK(b->ring()[1] == 0x33);
    client.unmap_peer(*vb);
    CHECK(client.idle_peer_maps() == 1);
    // Claims a peer may not make: refused before the file is looked at.
    for (auto [size, offset, file] :
         {std::tuple{k64K, k64K / 2, 4 * k64K}, std::tuple{k64K, 4 * k64K, 4 * k64K},
          std::tuple{k64K, 0u, 8 * k64K}, // not the file's size
          std::tuple{k64K, 0u, ism::kMaxSegmentBytes * 2}}) {
        int fd = dup(a->fd);
        CHECK_FALSE(client.map_peer(fd, size, offset, file));
        close(fd);
    }
    server.release(*a, kPeer);
    server.release(*b, kPeer);
}

TEST_CASE("DMB segments: a forked child that closes last gives the slot back", "[dmb]") {
    ism::Device dev(64 << 20);
    auto a = dev.allocate(k64K, kPeer);
    REQUIRE(a);
    uint32_t slot = a->slot;
    uint64_t ino = a->ino;
    std::vector<ism::Dmb> rest; // the segment's other slots, so a claim must find this one
    while (rest.size() < 3) {
        auto d = dev.allocate(k64K, kPeer);
        REQUIRE(d);
        rest.push_back(*d);
    }
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ism::Device child(64 << 20); // a forked child's own device
        child.release(*a, kPeer);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    dev.disown(*a); // the parent had let go of its copy (not the last)
    auto b = dev.allocate(k64K, kPeer);
    REQUIRE(b);
    CHECK(b->ino == ino);
    CHECK(b->slot == slot);
    CHECK(dev.segment_count() == 1);
    CHECK(dev.accounting_consistent());
    dev.release(*b, kPeer);
    for (auto& d : rest)
        dev.release(d, kPeer);
    CHECK(dev.accounting_consistent());
}

TEST_CASE("crowd_size: the configured size up to half the cap, then shares the rest", "[dmb]") {
    constexpr uint32_t k16K = 16 * 1024, k128K = 128 * 1024;
    constexpr uint64_t kCap = 256ull << 20;
    CHECK(ism::crowd_size(k128K, 0, kCap) == k128K);
    CHECK(ism::crowd_size(k128K, kCap / 2, kCap) == k128K);
    // Three quarters full: half the room of the half past it is left.
    CHECK(ism::crowd_size(k128K, kCap * 3 / 4, kCap) == k128K / 2);
    CHECK(ism::crowd_size(k128K, kCap * 7 / 8, kCap) == k128K / 4);
    CHECK(ism::crowd_size(k128K, kCap - (1 << 20), kCap) == k16K);
    // Never more than fits (a cap below two of them), never below
    // SMC_BUF_MIN_SIZE (a caller's room check declines then), always a
    // power of two (CLC's size code).
    CHECK(ism::crowd_size(k128K, 70 << 10, 192 << 10) == 64 * 1024);
    CHECK(ism::crowd_size(k128K, kCap, kCap) == k16K);
    CHECK(ism::crowd_size(k128K, kCap + k128K, kCap) == k16K); // (counts may lag)
    CHECK(ism::crowd_size(k16K, kCap - k16K, kCap) == k16K);
    for (uint64_t live = 0; live <= kCap; live += kCap / 97) {
        uint32_t s = ism::crowd_size(1 << 20, live, kCap);
        CHECK(std::has_single_bit(s));
        CHECK(s >= k16K);
        CHECK(s <= (1u << 20));
        if (live + k16K <= kCap) CHECK(live + s <= kCap);
    }
    // A small cap: the same shape.
    CHECK(ism::crowd_size(k128K, 0, 1 << 20) == k128K);
    CHECK(ism::crowd_size(k128K, 768 << 10, 1 << 20) == 64 * 1024);
}

TEST_CASE("DMB device: a crowd gets smaller DMBs instead of none", "[dmb]") {
    constexpr uint32_t k128K = 128 * 1024;
    constexpr uint64_t kCap = 8ull << 20;
    ism::Device dev(kCap, true, k128K);
    std::vector<ism::Dmb> held;
    uint32_t last = k128K;
    for (int i = 0; i < 1000; ++i) {
        uint32_t size = dev.size_for(k128K, 0);
        CHECK(size <= last); // shrinking as the cap fills, never growing
        last = size;
        // (A free slot of a larger size than asked, up to the configured
        // one, is memory held already: taken before a new segment.)
        auto d = dev.allocate(size, kPeer, k128K);
        if (!d) break;
        CHECK(d->size >= size);
        CHECK(d->size <= k128K);
        held.push_back(*d);
    }
    // Base-sized DMBs alone: 64 of them. Shared: half the cap at 128 KiB
    // (32), then 64 KiB, 32 KiB and 16 KiB as the rest fills (128 in all,
    // less what segments of each size hold free when the cap is reached).
    CHECK(held.size() >= 100);
    CHECK(last == 16 * 1024);
    CHECK(dev.memory_in_use() <= kCap);
    CHECK(dev.accounting_consistent());
    // As they go, the size comes back.
    for (auto& d : held) {
        peer_closes(d);
        dev.release(d, kPeer);
    }
    CHECK(dev.size_for(k128K, 0) == k128K);
    auto again = dev.allocate(k128K, kPeer);
    CHECK(again);
    if (again) dev.release(*again, kPeer);
    CHECK(dev.accounting_consistent());
}

TEST_CASE("DMB device: a caller that tells the size after takes a free slot of another size",
          "[dmb]") {
    constexpr uint32_t k16K = 16 * 1024, k128K = 128 * 1024;
    ism::Device dev(512 * 1024, true, k128K);
    // A segment of 16 KiB slots, one of them taken.
    auto small = dev.allocate(k16K, kPeer, k128K);
    REQUIRE(small);
    CHECK(small->size == k16K);
    std::vector<ism::Dmb> held;
    while (held.size() < 16) { // 128 KiB exactly, until nothing of it fits
        auto d = dev.allocate(k128K, kPeer);
        if (!d) break;
        held.push_back(*d);
    }
    CHECK(held.size() >= 2);
    CHECK_FALSE(dev.allocate(k128K, kPeer)); // exact: nothing
    // Told after: a free 16 KiB slot (memory held already) serves.
    auto flexible = dev.allocate(k128K, kPeer, k128K);
    REQUIRE(flexible);
    CHECK(flexible->size == k16K);
    CHECK(flexible->seg == small->seg);
    CHECK(dev.memory_in_use() <= 512 * 1024);
    // A free larger slot before a new segment: every 16 KiB slot taken
    // (and every segment that fits made), one 128 KiB slot given back: a
    // 16 KiB request of such a caller takes it whole.
    std::vector<ism::Dmb> smalls{*small, *flexible};
    while (smalls.size() < 64) {
        auto d = dev.allocate(k16K, kPeer);
        if (!d) break;
        smalls.push_back(*d);
    }
    CHECK_FALSE(dev.allocate(k16K, kPeer));
    // (A slot: past the segments, the last ones were DMBs of their own.)
    auto slot = std::find_if(held.begin(), held.end(), [](const ism::Dmb& d) { return d.seg; });
    REQUIRE(slot != held.end());
    peer_closes(*slot);
    dev.release(*slot, kPeer);
    held.erase(slot);
    size_t segments = dev.segment_count();
    auto whole = dev.allocate(k16K, kPeer, k128K);
    REQUIRE(whole);
    CHECK(whole->size == k128K);
    CHECK(dev.segment_count() == segments);
    held.push_back(*whole);
    for (auto& d : smalls)
        dev.release(d, kPeer);
    for (auto& d : held)
        dev.release(d, kPeer);
    CHECK(dev.accounting_consistent());
}

TEST_CASE("DMB segments: a set's gate line, knocked through the peer's view (issue 44)", "[dmb]") {
    ism::Device server(64 << 20), client(64 << 20);
    auto a = server.allocate(k64K, kPeer);
    auto b = server.allocate(k64K, kPeer);
    REQUIRE(a);
    REQUIRE(b);
    REQUIRE(a->seg);
    // The file is the slots and one page of gate lines; the slots are counted.
    CHECK(a->file_size == a->seg->slot_bytes() + smcd::kGatePageBytes);
    CHECK(ism::slot_claim_ok(a->size, a->offset, a->file_size));
    auto va = client.map_peer(dup(a->fd), a->size, a->offset, a->file_size);
    auto vb = client.map_peer(dup(b->fd), b->size, b->offset, b->file_size);
    REQUIRE(va);
    REQUIRE(vb);
    unsigned sa = 99, sb = 99;
    smcd::GateLine* la = smcd::peer_gate(*va, 5, &sa);
    smcd::GateLine* lb = smcd::peer_gate(*vb, 5, &sb);
    REQUIRE(la);
    CHECK(la == lb); // one line per set and segment
    CHECK(sa == a->slot);
    CHECK(sb == b->slot);
    smcd::GateLine& own = smcd::own_gate(*a->seg, 5);
    constexpr uint64_t kBell = 77;
    // Nobody's line (or another set's): every request rings its own bell.
    CHECK(smcd::knock(*la, sa, kBell));
    CHECK(smcd::take_ready(own) == 0);
    smcd::gate_own(own, kBell);
    // Awake: the writers leave their bits and ring nobody.
    CHECK_FALSE(smcd::knock(*la, sa, kBell));
    CHECK(smcd::take_ready(own) == uint64_t{1} << a->slot);
    CHECK(smcd::take_ready(own) == 0);
    // Asleep: the first writer rings, the next only leaves its bit.
    smcd::gate_sleep(own);
    CHECK(smcd::knock(*la, sa, kBell));
    CHECK_FALSE(smcd::knock(*lb, sb, kBell));
    CHECK(smcd::take_ready(own) == ((uint64_t{1} << a->slot) | (uint64_t{1} << b->slot)));
    // A request of a set that gave the line up: its own bell, the line untouched.
    smcd::gate_sleep(own);
    CHECK(smcd::knock(*la, sa, kBell + 1));
    CHECK(own.sleeping.load() == 1);
    CHECK(smcd::take_ready(own) == 0);
    // Woken for another reason: quiet again.
    smcd::gate_sleep(own);
    smcd::gate_wake(own);
    CHECK_FALSE(smcd::knock(*lb, sb, kBell));
    // Another set's line is its own.
    CHECK(smcd::take_ready(smcd::own_gate(*a->seg, 6)) == 0);
    // A DMB of its own (no segment), and a line out of range: no gate.
    auto own_file = ism::create_dmb(k64K);
    REQUIRE(own_file);
    CHECK_FALSE(smcd::peer_gate(*own_file, 5, &sa));
    CHECK_FALSE(smcd::peer_gate(*va, smcd::kGates, &sa));
    ism::unmap(*own_file);
    client.unmap_peer(*va);
    client.unmap_peer(*vb);
    server.release(*a, kPeer);
    server.release(*b, kPeer);
    CHECK(server.accounting_consistent());
}
