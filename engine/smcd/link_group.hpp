// SPDX-License-Identifier: MIT
#pragma once
// Link groups (the kernel's smc_conn_create: first contact or reuse): what
// this process and one peer process have exchanged, so that a connection
// between them claims buffers and nothing more.
//
// A first contact is today's attach on the Unix link (ism_endpoint.hpp):
// each side's DMB travels as its segment's descriptor, with the segment's
// serial, and the kernel says who the peer is (SO_PEERCRED). The group then
// keeps, for that peer process (by its GID): its user, the peer's segments
// we map (pinned in the device's mapping cache) and our segments it has. A
// later connection whose DMBs both lie in segments the other side has
// already names them in CLC: the Accept and the Confirm carry the segment's
// serial (link_id), the slot (dmbe_idx) and the token; the receiver maps
// the slot from the segment it holds and believes it only if the owner's
// token in the slot's control line matches the message's (smcd/cdc_line.hpp): only a
// process that can write the owner's segment can make it match, and the
// owner gives its segment only to peers of the user it serves. No
// descriptor travels, there is no attach round trip and no endpoint hop.
//
// Anything that does not fit (no group, a new segment on either side, a
// name that does not check out) takes the attach, which also serves a
// server's DMB claimed at Accept time: reuse is an optimisation, never a
// requirement. A GID claimed by two peer processes (another local user may
// claim anyone's: GIDs are visible in /proc/net/unix) is never reused: both
// attach every time.
//
// A group goes when its peer process exits (a pidfd watched on the engine
// loop): nobody will name the peer's segments again, so they are unmapped
// at once (Device::forget_peer) and their memory returns to the system.
// Otherwise a server answering short-lived client processes (a curl, a
// job per request) would keep each one's segment, with the bytes it sent
// it, until the group had been idle for kIdleMs. Groups not used for
// kIdleMs are dropped too (their pins released).
#include "engine/smcd/ism.hpp"

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <sys/types.h>
#include <vector>

namespace usmc::ism {

class LinkGroups {
  public:
    static constexpr uint64_t kIdleMs = 60000;
    // Segments of one peer process a group keeps mapped, at most.
    static constexpr size_t kMaxPinnedSegments = 256;

    explicit LinkGroups(Device& dev);
    ~LinkGroups();

    // The user of the one peer process that has a group under `gid`;
    // nullopt if none (or more than one) has.
    std::optional<uid_t> peer_user(uint64_t gid);
    // An attach with the peer process (pid, uid) of `gid` completed: it has
    // our segment `our_serial` now, and we map its segment `their_serial`
    // (`theirs`: our view of its DMB, from map_peer). Serial 0 (a DMB of
    // its own file) is not kept.
    void note_attach(uint64_t gid, pid_t pid, uid_t uid, uint32_t our_serial, uint32_t their_serial,
                     const Dmb& theirs);
    // Whether the peer of `gid` has our segment `serial`.
    bool peer_has(uint64_t gid, uint32_t serial);
    // The peer's DMB its CLC message names: slot `slot` (`size` bytes) of
    // its segment `serial`, if we map that segment and the owner's token in
    // the slot is `token` (its secret, told only in CLC; never 0). Give it
    // back with Device::unmap_peer.
    std::optional<Dmb> their_slot(uint64_t gid, uint32_t serial, uint32_t slot, uint32_t size,
                                  uint64_t token);
    size_t count();
    // A forked child: the parent's groups are not this process's (the
    // child gets a device of its own). Closes their pidfds unless a parent
    // thread held the lock at the fork (then they stay: a few descriptors).
    void abandon_after_fork();

  private:
    struct TheirSeg {
        uint32_t serial;
        Dmb pin; // a view of the whole file: keeps it mapped
    };
    struct Group {
        uint64_t gid;
        pid_t pid;
        uid_t uid;
        std::vector<TheirSeg> theirs;
        std::vector<uint32_t> ours;
        uint64_t used_ns;
        int pidfd = -1;     // the peer process, watched on the engine loop
        uint64_t watch = 0; // that watch (0: none)
        uint32_t id = 0;    // its number in this process, as `usmc linkgroup` shows it
        int shown = -1;     // its record in the stats segment (-1: none)
    };
    // What a pidfd watch's handler reaches: `owner` is cleared by the
    // destructor (under `mu`, which a running handler holds).
    struct Watched {
        std::mutex mu;
        LinkGroups* owner;
    };
    Device& dev_;
    std::mutex mu_;
    std::vector<Group> groups_; // few: one per peer process
    uint32_t next_id_ = 1;
    std::shared_ptr<Watched> watched_;

    // Under mu_: the one group of `gid` (nullptr: none or several), used now.
    Group* find_locked(uint64_t gid);
    void expire_locked(uint64_t now_ns);
    void drop(Group& g);       // its pins and its watch; under mu_ (or alone)
    void watch_peer(Group& g); // under mu_
    // Under mu_: the group's record in the stats segment (statseg::LgrRecord)
    // written or rewritten, and the number of groups.
    void show(Group& g);
    void show_count();
    void peer_exited(int pidfd); // the loop: `pidfd`'s process exited
    static void close_pidfd(int pidfd);
};

} // namespace usmc::ism
