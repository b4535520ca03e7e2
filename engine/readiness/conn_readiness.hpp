// SPDX-License-Identifier: MIT
#pragma once
// A connection side's readiness: what the application's poll, epoll and
// select sets and its blocked calls wait on (`sig`, wakeup.hpp), with the
// bookkeeping that saves system calls on it. One of the three objects a
// connection side is (engine/conn/conn.hpp): it knows no transport and no
// cursor; the data path decides when to arm, drain and wake it.
#include "engine/readiness/sig_life.hpp"
#include "engine/readiness/wakeup.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <sys/epoll.h>
#include <vector>

namespace usmc::readiness {

struct ConnReadiness {
    // Ours (wakeup.hpp), made only when a wait first needs it (or a spare
    // taken at the handshake): an epoll program's connections, kept in
    // user memory, never make one. -1 until then; changed under sig_mu.
    std::atomic<int> sig{-1};
    std::mutex sig_mu;
    std::atomic<int> sink{-1}; // where `sig` puts its fill (made at the first)
    wakeup::Name sink_name;    // the sink's (kernel-chosen), set before `sink`
    wakeup::Name sig_name;     // ours, for wake-ups of our own
    uint32_t sig_forks = 0;    // forkref::forks_so_far() when `sig` was made
    // g_epoll_sets_closed when `sig` was taken, and whether it goes to the
    // spares when the connection ends (release(): out of every epoll set).
    uint32_t sig_epoll_gen = 0;
    bool sig_reusable = false;
    bool sig_clean = false; // `sig` holds nothing of ours or the peer's (smc_withdraw_requests)

    std::mutex epoll_mu;
    // The epoll sets `sig` is in. Event loops (ae, libevent) change a
    // descriptor's events around every request; each application call
    // becomes a kernel call only if the registration really changes. A
    // deleted registration is parked (`sig` left in the set with no events)
    // so a later add is a modify. (An entry whose set was closed is stale
    // until the kernel says so: af_smc_poll.cpp.)
    struct EpollMember {
        int epfd;
        epoll_event k;       // what the kernel holds for `sig`
        bool parked = false; // the application deleted it
    };
    std::vector<EpollMember> epoll_members;
    // In an epoll set (ever): an edge-triggered watcher that read the ring
    // empty waits for a new edge without calling recv again, so emptying the
    // ring must arm the peer's wake-up, as EAGAIN does.
    std::atomic<bool> epoll_watched{false};
    uint64_t peer_watch_id = 0; // its key in peer_watch (0: not watched), under that lock
    // Its TCP socket's end is being watched by this process's peer watch,
    // not yet fired: the fork generation it was armed in (peer_watch::armed).
    std::atomic<uint32_t> peer_watch_armed{0};
    uint64_t space_key = 0; // its key in space_watch (0: not waiting), under that lock
    // While Connecting: the application's registrations, replayed on the TCP
    // socket if the handshake falls back (under epoll_mu).
    struct EpollReg {
        int epfd;
        epoll_event ev;
    };
    std::vector<EpollReg> connecting_regs;
    // `sig`'s life (sig_life.hpp): blocked while connecting, then open;
    // the poll()s of ours inside a call on it; retired when the connection
    // goes TCP (a fallback keeps no usmc descriptor: `sig` is closed once no
    // poll() of ours is inside a call on it, smc_retire_wakeups); closed once.
    SigLife sig_life;
    // The Close step's work is done (close.cpp): the word says Closed before
    // the thread it chose has let go of the pair, and the object may be
    // freed only after that.
    std::atomic<bool> pair_let_go{false};

    // System calls saved on `sig` (rx.cpp, tx.cpp). The peer sends a
    // wake-up only after taking our request for data, so while the request
    // still stands and we sent nothing ourselves, `sig` holds no datagram
    // and needs no draining; the sink needs draining only if we filled `sig`.
    std::atomic<bool> self_woken{false}; // we woke `sig` since our last drain
    std::atomic<bool> sig_filled{false}; // we filled `sig` since our last drain
    std::atomic<bool> sig_shrunk{false}; // its send buffer is at the minimum (wakeup::fill)
    // A read that found nothing skipped draining `sig` on the flag's word:
    // the next one in a row drains (a stranger's datagram, smc_drain_wakeup).
    std::atomic<bool> drain_skipped{false};
    // We asked the peer for data: ever (until then only a stranger can
    // have sent `sig` anything), and since our last drain (a request it
    // took since then means its wake-up is in `sig`: smc_wake_queued).
    std::atomic<bool> ever_asked{false};
    std::atomic<bool> asked_since_drain{false};
    std::atomic<bool> wake_seen{false}; // smc_wake_queued found it, since our last drain

    // Issue 44: the epoll set kept in user memory that holds this side (at
    // most one per process; others watch `sig`), by its bell's id (0: none):
    // where this process's own wake-ups for it go (the peer watch, the space
    // watch). `user_set` is engine/sock's, under its lock.
    std::atomic<uint64_t> user_bell{0};
    void* user_set = nullptr;
    uint64_t user_slot = 0; // its key in the set's gates (0: not gated)
    // The set's wake-up counts (conn/conn_source.hpp).
    std::atomic<uint64_t> end_wakes{0};
    std::atomic<uint64_t> out_wakes{0};
    std::atomic<bool> nospace{false};
};

} // namespace usmc::readiness
