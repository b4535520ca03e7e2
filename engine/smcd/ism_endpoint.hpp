// SPDX-License-Identifier: MIT
#pragma once
// Attaching to a peer's DMB: how the descriptor of a DMB (its segment)
// reaches the peer of a handshake (wake-ups need none: wakeup.hpp). The
// server side of a handshake runs an endpoint: an abstract Unix socket in
// its network namespace, named after its ISM GID, served on the engine's
// event loop (loop.hpp: its socket and each link are watches there, and
// nothing it does waits). A client process links to it once (lgr.hpp) and,
// after each CLC Accept of a first contact, presents the token from it on
// that link; the endpoint answers only for an offered, unused token (single
// use), swapping DMB descriptors both ways with SCM_RIGHTS. Nothing is
// reachable by guessing: without the 64-bit random token the endpoint
// gives nothing.
#include "engine/smcd/ism.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sys/types.h>

namespace usmc::ism {

// One side's descriptors for a connection.
struct Fds {
    int dmb = -1;
    uint32_t dmb_size = 0;
    // The DMB's place in its file (a slot of a segment, ism.hpp): `dmb_size`
    // bytes at `dmb_offset` of a file of `file_size` (0: the DMB's own file).
    uint32_t dmb_offset = 0;
    uint32_t file_size = 0;
    uint32_t serial = 0; // the segment's number in its owner's device (0: none)
};

// What arrives from the peer: its descriptors (owned by the receiver now)
// and who it is, as the kernel says (SO_PEERCRED).
struct PeerFds {
    Fds fds;
    pid_t pid = 0;
    uid_t uid = 0;
};

void close_fds(Fds& f);

// What the server offers under a token: a DMB of `dmb_size`, taken at
// attach time, or the one it claimed already (`claimed`: a connection on a
// link group, where the client's user was known at the Accept; it stays
// the connection's, a withdraw leaves it alone).
struct OfferSpec {
    uint32_t dmb_size = 0;
    std::optional<Dmb> claimed;
    // The GID the client's Proposal claimed (0: none): its link group gets
    // the client's segment as the attach is served (Endpoint::handle).
    uint64_t peer_gid = 0;
};

// A completed attach, server side: the peer, our DMB, and the peer's DMB
// mapped (map_peer took its descriptor: peer.fds.dmb is -1).
struct Attached {
    PeerFds peer;
    Dmb ours;
    Dmb theirs;
};

class Endpoint {
  public:
    // Binds the endpoint for `dev`'s GID and watches it on the event loop;
    // nullptr on failure. Offered DMBs come from `dev`.
    static Endpoint* start(Device& dev);
    ~Endpoint();

    void offer(uint64_t token, const OfferSpec& spec);
    // Waits until the peer attached under `token`, or `timeout_ms` passes.
    // Withdraws the offer either way.
    std::optional<Attached> wait_attached(uint64_t token, int timeout_ms);
    // Whether the peer attached under `token` already (wait_attached would
    // not wait). Changes nothing.
    bool attached(uint64_t token);
    // Withdraws an offer; a DMB it took goes back to the device, never to
    // be reused (the peer may have it mapped).
    void withdraw(uint64_t token);

    // In a forked child: the loop's watches are gone; forget the endpoint
    // without touching the parent's state (its socket descriptor is closed).
    void abandon_after_fork();

  private:
    Endpoint() = default;
    // On the loop thread: the listening socket readable (new links), a
    // link readable (a request, or its end). Each watch is one-shot and
    // armed again after its event.
    bool watch_listen(int delay_ms);
    void on_listen();
    void accept_links();
    bool watch_link(size_t index);
    void on_link(size_t index, uint64_t gen);
    void drop_link(size_t index);
    // One request on a link; false: the link goes (at its end, malformed,
    // or made while this process had another effective uid).
    bool handle(int link);

    // A client process's link: its credentials when it connected (the
    // kernel's SO_PEERCRED) and our effective uid then.
    struct Link {
        int fd = -1;
        pid_t pid = 0;
        uid_t uid = 0;
        uid_t our_euid = 0;
        uint64_t used_ns = 0; // made, or last served an attach (CLOCK_MONOTONIC)
        uint64_t gen = 0;     // which link of this slot a watch was made for
        uint64_t watch = 0;   // its watch on the loop
    };
    // Any local process can connect to the endpoint, and each link is a
    // descriptor of ours: links live only in usmc's quarter of the
    // descriptor range (a link that does not fit there is refused, so they
    // never take the application's descriptors), at most kMaxLinksPerUid
    // from one user other than ours and root, and a link that served no
    // attach for kLinkIdleMs is closed (its client makes a new one when it
    // needs it). A refused link's attach fails: that connection runs as TCP.
    static constexpr size_t kMaxLinks = 1024;
    static constexpr size_t kMaxLinksPerUid = 64;
    static constexpr uint64_t kLinkIdleMs = 30000;
    // accept4 out of descriptors: the listening socket stays readable, so
    // it is watched again only after this long instead of waking us at once.
    static constexpr int kFullPauseMs = 100;
    // Idle links are looked for (at most every kLinkIdleMs / 4) when the
    // endpoint has work anyway, a new link or a request: a timer would keep
    // the loop ticking for good.
    void close_idle_links(uint64_t now_ns);
    uint64_t next_sweep_ns_ = 0;
    std::mutex watch_mu_;       // listen_watch_ (the first is armed off the loop)
    uint64_t listen_watch_ = 0; // under watch_mu_
    uint64_t next_gen_ = 0;
    std::atomic<bool> stopping_{false}; // the destructor runs: handlers do nothing

    struct Offer {
        OfferSpec spec;
        bool taken = false; // an attach is being served for it
        std::optional<Attached> done;
    };
    Device* dev_ = nullptr;
    int listen_fd_ = -1;
    // Touched only on the loop thread (and, in a forked child, by
    // abandon_after_fork: a plain array it can walk without the loop).
    Link links_[kMaxLinks];
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<uint64_t, Offer> offers_;
};

// Client side: attach to endpoint `gid` with `token`, on this process's link
// to it. `ours(uid)` gives our descriptors; uid is the endpoint owner's as
// the kernel said (SO_PEERCRED): the DMB can then be one this side used
// before with a peer of that user (ism::Device reuses DMBs only for the
// same peer uid); nullopt from it ends the attach. It is called at most
// once. Returns the server's descriptors, or nullopt (no such endpoint,
// token refused, malformed answer, timeout, `ours` failed).
std::optional<PeerFds> attach(uint64_t gid, uint64_t token,
                              const std::function<std::optional<Fds>(uid_t)>& ours, int timeout_ms);

// The same without waiting, on the connect watch thread only (the link is
// held from there to the answer, lgr::hold): sends the request and calls
// `done` there with what attach() would return once the answer is in (or
// the timeout passed). False if every link to `gid` is busy: nothing was
// asked or sent, and the caller attaches the waiting way (on a worker).
bool attach_async(uint64_t gid, uint64_t token, std::function<std::optional<Fds>(uid_t)> ours,
                  int timeout_ms, std::function<void(std::optional<PeerFds>)> done);

// Memory this process hands to local processes that ask with its token
// (the registry's pending announcements): a memfd sealed against shrinking
// and growing, so that no one who maps it can be killed by a truncation
// (SIGBUS). Served by whichever endpoint of this process the asker links
// to; `share` keeps its own copy of `fd` until `unshare`. Each memfd goes
// to one user (by the link's SO_PEERCRED): several shared under one token
// are given out one per user, the first asker of a user taking one nobody
// had; a user who comes when all are taken gets none. So what one user
// writes there, no other user's processes ever see as their own.
bool share(uint64_t token, int fd);
void unshare(uint64_t token); // every memfd shared under `token`
// In a forked child: the table's lock may have been held by a parent thread.
void shares_after_fork();
// Client side: the memory endpoint `gid` shares under `token`, from the
// process `owner` only (as the kernel says: SO_PEERCRED), checked to be a
// sealed memfd of `size` bytes. Returns its descriptor, or -1.
int fetch_shared(uint64_t gid, uint64_t token, pid_t owner, size_t size, int timeout_ms);

} // namespace usmc::ism
