// DMB slots in segments (ism.hpp): one memfd for the DMBs of peers of one
// user, slots claimed and given back under the rules of reused DMBs, the
// count exact, a forked child's close giving the slot back to its parent.
#include "engine/smcd/cdc_line.hpp"
#include "engine/smcd/ism.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
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
