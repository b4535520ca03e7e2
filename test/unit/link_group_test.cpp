// SPDX-License-Identifier: MIT
// Link groups (link_group.hpp): what a first contact leaves behind, and when
// a later connection's names are believed.
#include "engine/smcd/cdc_line.hpp"
#include "engine/smcd/ism.hpp"
#include "engine/smcd/link_group.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <fcntl.h>
#include <unistd.h>

using namespace usmc;

namespace {

constexpr uint32_t k64K = 64 * 1024;
constexpr uid_t kUser = 1000;
constexpr uint64_t kPeerGid = 0xabcd;

// The peer's side of a first contact: its DMB (a slot of its segment) as
// our device maps it after the attach.
struct PeerSide {
    ism::Device peer{8 << 20};
    ism::Dmb theirs; // the peer's slot 0
    ism::Dmb view;   // our mapping of it
    explicit PeerSide(ism::Device& ours) {
        theirs = *peer.allocate(k64K, kUser);
        REQUIRE(theirs.serial != 0);
        theirs.control()->owner_token.store(0x70c0);
        int copy = fcntl(theirs.fd, F_DUPFD_CLOEXEC, 0); // what the attach carries
        view = *ours.map_peer(copy, theirs.size, theirs.offset, theirs.file_size);
    }
};

} // namespace

TEST_CASE("link groups: a first contact lets later names be believed, and only names that check "
          "out") {
    ism::Device ours(8 << 20);
    ism::LinkGroups& groups = ours.groups();
    CHECK_FALSE(groups.peer_user(kPeerGid)); // no group: every connection attaches
    PeerSide p(ours);
    auto mine = ours.allocate(k64K, kUser);
    REQUIRE(mine);
    groups.note_attach(kPeerGid, 4242, kUser, mine->serial, p.theirs.serial, p.view);
    CHECK(groups.count() == 1);
    CHECK(groups.peer_user(kPeerGid) == kUser);
    CHECK(groups.peer_has(kPeerGid, mine->serial));
    CHECK_FALSE(groups.peer_has(kPeerGid, mine->serial + 1)); // a segment it never got
    CHECK_FALSE(groups.peer_has(kPeerGid + 1, mine->serial)); // another peer

    // The peer's next DMB: slot 1 of the same segment, named in CLC.
    auto next = p.peer.allocate(k64K, kUser);
    REQUIRE(next);
    REQUIRE(next->serial == p.theirs.serial);
    next->control()->owner_token.store(0xbeef);
    auto got = groups.their_slot(kPeerGid, next->serial, next->slot, k64K, 0xbeef);
    REQUIRE(got);
    CHECK(got->ring() - p.view.ring() == ptrdiff_t(next->offset) - ptrdiff_t(p.theirs.offset));
    std::memcpy(next->ring(), "same memory", 11); // the peer writes, we see it
    CHECK(std::memcmp(got->ring(), "same memory", 11) == 0);
    ours.unmap_peer(*got);

    // Names that do not check out.
    CHECK_FALSE(groups.their_slot(kPeerGid, next->serial, next->slot, k64K, 0xbad)); // token
    CHECK_FALSE(groups.their_slot(kPeerGid, next->serial + 1, next->slot, k64K, 0xbeef));
    CHECK_FALSE(groups.their_slot(kPeerGid + 1, next->serial, next->slot, k64K, 0xbeef));
    CHECK_FALSE(groups.their_slot(kPeerGid, next->serial, 200, k64K, 0xbeef));    // past the file
    CHECK_FALSE(groups.their_slot(kPeerGid, next->serial, 0, 16u << 20, 0x70c0)); // too large
    CHECK_FALSE(groups.their_slot(kPeerGid, 0, 0, k64K, 0x70c0)); // serial 0: no segment

    // The group's pin keeps the peer's segment mapped after its last
    // connection gave its view back.
    ours.unmap_peer(p.view);
    CHECK(ours.idle_peer_maps() == 0);
    CHECK(groups.their_slot(kPeerGid, next->serial, next->slot, k64K, 0xbeef));
}

TEST_CASE("link groups: a GID two processes claim is believed for neither; a process under "
          "another user is a new group") {
    ism::Device ours(8 << 20);
    ism::LinkGroups& groups = ours.groups();
    PeerSide p(ours);
    groups.note_attach(kPeerGid, 100, kUser, 0, p.theirs.serial, p.view);
    REQUIRE(groups.peer_user(kPeerGid) == kUser);
    // Another process says it has the same GID (GIDs are public): from now
    // on every connection under that GID attaches.
    groups.note_attach(kPeerGid, 200, kUser + 1, 0, 0, ism::Dmb{});
    CHECK(groups.count() == 2);
    CHECK_FALSE(groups.peer_user(kPeerGid));
    CHECK_FALSE(groups.their_slot(kPeerGid, p.theirs.serial, p.theirs.slot, k64K, 0x70c0));

    ism::Device other(8 << 20);
    PeerSide q(other);
    other.groups().note_attach(kPeerGid, 300, kUser, 0, q.theirs.serial, q.view);
    // The same process, now another user (setuid): the old group goes.
    other.groups().note_attach(kPeerGid, 300, kUser + 7, 0, 0, ism::Dmb{});
    CHECK(other.groups().count() == 1);
    CHECK(other.groups().peer_user(kPeerGid) == kUser + 7);
    CHECK_FALSE(other.groups().their_slot(kPeerGid, q.theirs.serial, 0, k64K, 0x70c0));
    other.unmap_peer(q.view);
    ours.unmap_peer(p.view);
}

TEST_CASE("link groups: a peer's segments are kept up to kMaxPinnedSegments, the rest attach") {
    // New segments cost a peer nothing (sparse memfds); each one kept pins
    // a mapping of ours. Past the bound its names are not believed, so its
    // connections attach.
    ism::Device ours(8 << 20);
    ism::LinkGroups& groups = ours.groups();
    constexpr size_t kMax = ism::LinkGroups::kMaxPinnedSegments;
    std::vector<ism::Dmb> files;
    for (size_t i = 0; i <= kMax; ++i) {
        auto d = ism::create_dmb(16384);
        REQUIRE(d);
        d->control()->owner_token.store(0x1000 + i);
        auto view = ours.map_peer(fcntl(d->fd, F_DUPFD_CLOEXEC, 0), 16384);
        REQUIRE(view);
        groups.note_attach(kPeerGid, 4242, kUser, 0, uint32_t(i + 1), *view);
        ours.unmap_peer(*view);
        files.push_back(*d);
    }
    auto first = groups.their_slot(kPeerGid, 1, 0, 16384, 0x1000);
    CHECK(first);
    if (first) ours.unmap_peer(*first);
    auto last = groups.their_slot(kPeerGid, uint32_t(kMax), 0, 16384, 0x1000 + kMax - 1);
    CHECK(last);
    if (last) ours.unmap_peer(*last);
    CHECK_FALSE(groups.their_slot(kPeerGid, uint32_t(kMax + 1), 0, 16384, 0x1000 + kMax));
    for (auto& d : files)
        ism::unmap(d);
}
