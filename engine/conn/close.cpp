// SPDX-License-Identifier: MIT
// Closing an SMC-D connection: the connection flags in our control line in
// the peer's DMB say what happened (done writing, closed, aborted), and a
// sleeping peer is woken to see them.
#include "engine/base/count.hpp"
#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/conn.hpp"
#include "engine/conn/space_watch.hpp"
#include "engine/core/cdc_recv.hpp"
#include "engine/readiness/wakeup.hpp"

#include <cstring>

namespace usmc {

namespace {
using readiness::SigAct;
using readiness::SigEvent;

// Closes `sig` and its sink and lets go of the peer's wakers: what the
// lifecycle word's Close step (sig_life.hpp) tells its one caller to do.
void close_pair(SmcConn& c) {
    // The loop must not drain the sink (nor look at the connection) after this.
    space_watch::remove(&c);
    int sig = c.sig.exchange(-1, std::memory_order_acq_rel);
    if (sig >= 0 && c.sig_reusable && wakeup::park({sig, c.token, c.sig_name, c.sig_clean}))
        counters::count(counters::sigs_spared);
    else if (sig >= 0)
        sys::real().close(sig);
    int sink = c.sink.exchange(-1, std::memory_order_acq_rel);
    if (sink >= 0) sys::real().close(sink);
    c.transport.release_wakers();
    c.pair_let_go.store(true, std::memory_order_release);
}

// Does what a step of the lifecycle word asks of its caller.
void act(SmcConn& c, readiness::SigOutcome o) {
    if (o.act == SigAct::Unblock) wakeup::unblock(c.sig);
    if (o.act == SigAct::Close) close_pair(c);
}

void made(SmcConn& c, bool blocked) {
    act(c, c.sig_life.apply(blocked ? SigEvent::MadeBlocked : SigEvent::MadeOpen));
}

void tell_peer(SmcConn& c, uint8_t flag) {
    log::debug("fd {}: tells the peer {}", c.tcp_fd,
               flag == core::kPeerDoneWriting  ? "done writing"
               : flag == core::kPeerConnClosed ? "closed"
                                               : "abort");
    c.conn_flags.fetch_or(flag, std::memory_order_acq_rel);
    smc_close_event(c, core::CloseEvent::WeDoneWriting);
    c.publish_flags();
    // The peer may sleep for data (now EOF) or for space (now EPIPE): wake it.
    core::Requests was = c.transport.take_all_requests();
    // A peer that closed (its last process) has nobody waiting and its
    // `sig` is gone: a wake-up would only fail (every `Connection: close`).
    uint8_t peer = core::cdc_ending_flags(smc_peer_cdc(c));
    if ((peer & (core::kPeerConnClosed | core::kPeerConnAbort)) ||
        c.peer_gone.load(std::memory_order_acquire))
        was = {};
    if (was.data) c.transport.wake_reader();
    if (was.data_bell) c.transport.ring_data_bell(was.data_bell);
    if (was.space) smc_ring_peer_bell(c);
    // After shutdown(SHUT_WR) our own threads blocked in send (now EPIPE)
    // must wake too: make `sig` writable. (A close has woken them in
    // smc_quiesce already, and its `sig` goes right after: nothing to do.)
    if (flag == core::kPeerDoneWriting) smc_open_writable(c, true);
}
} // namespace

bool smc_take_error(SmcConn& c) {
    if (smc_close_state(c) != core::CloseState::Reset || !core::take_error(c)) return false;
    c.end_wakes.fetch_add(1, std::memory_order_acq_rel);
    log::debug("fd {}: reset reported", c.tcp_fd);
    return true;
}

core::CloseState smc_close_event(SmcConn& c, core::CloseEvent e) {
    core::CloseState was = c.close_state.load(std::memory_order_acquire);
    core::CloseState now = core::close_event(c, e);
    c.end_wakes.fetch_add(1, std::memory_order_acq_rel);
    // (Its set's look may be far off: an armed side is looked at when rung.)
    if (now != was && c.user_bell.load(std::memory_order_relaxed)) smc_wake_user(c);
    if (now != was) log::debug("fd {}: {} -> {}", c.tcp_fd, core::name(was), core::name(now));
    return now;
}

// SMC-D's receive of the CDC flags: the core's receive action folds them
// into the close state.
core::CloseState smc_close_state(SmcConn& c) {
    return core::fold_peer_flags(c, core::cdc_ending_flags(smc_peer_cdc(c)));
}

void smc_break(SmcConn& c) {
    smc_close_event(c, core::CloseEvent::Broken);
}

std::atomic<uint32_t> g_epoll_sets_closed{0};

bool smc_sig_reusable(const SmcConn& c) {
    return c.sig >= 0 && c.sig_forks == forkref::forks_so_far() &&
           c.sig_epoll_gen == g_epoll_sets_closed.load(std::memory_order_acquire) &&
           c.sink.load(std::memory_order_acquire) < 0 &&
           !c.sig_shrunk.load(std::memory_order_acquire) && !c.sig_life.blocked() &&
           c.sig_life.pollers() == 0;
}

bool smc_conn_init_wakeups(SmcConn& c, bool blocked, uint64_t token) {
    c.sig_epoll_gen = g_epoll_sets_closed.load(std::memory_order_acquire);
    c.tx_prod.store({});
    c.rx_cons.store({});
    c.rx_cons_announced = core::Cursor{};
    c.sig_forks = forkref::forks_so_far();
    // A spare costs nothing now (a poll or blocking program's next
    // connection); without one, nothing is made until a wait needs it.
    if (auto spare = wakeup::take_spare()) {
        if (!blocked || wakeup::block(spare->fd)) {
            if (!spare->clean) wakeup::drain(spare->fd);
            c.sig = spare->fd;
            c.sig_name = spare->name;
            c.token = spare->token;
            made(c, blocked);
            counters::count(counters::sigs_reused);
            return true;
        }
        sys::real().close(spare->fd);
    }
    c.sig_name = wakeup::sig_name(token);
    c.token = token;
    return true;
}

namespace {
// Made, and the word says so (a `sig` stored but not yet applied may still
// be refused and closed by its maker).
bool sig_ready(const SmcConn& c) {
    readiness::SigPhase p = c.sig_life.phase();
    return c.sig.load(std::memory_order_acquire) >= 0 &&
           (p == readiness::SigPhase::Open || p == readiness::SigPhase::Blocked);
}
} // namespace

bool smc_ensure_sig(SmcConn& c, bool may_wait) {
    if (sig_ready(c)) return true;
    std::unique_lock lock(c.sig_mu, std::defer_lock);
    if (may_wait) {
        lock.lock();
    } else if (!lock.try_lock()) {
        errno = EAGAIN;
        return false;
    }
    if (c.sig.load(std::memory_order_acquire) >= 0) return sig_ready(c);
    if (c.sig_life.phase() != readiness::SigPhase::None || !c.sig_name.valid()) {
        errno = EBADF; // retired (went TCP) or closed: nothing to make it for
        return false;
    }
    // Blocked while connecting; the handshake's Unblock may come before
    // the word says Blocked (a no-op then), so the phase is read again
    // after: one of the two sees the other (both go through the word's
    // read-modify-write, sig_life.cpp).
    bool blocked = c.phase.load(std::memory_order_acquire) == Phase::Connecting;
    int fd = wakeup::make_sig(blocked);
    if (fd < 0) {
        int err = errno;
        // (Once a process: a full range fails every connection that waits.
        // Not from a fork's walk, which may run in a signal handler.)
        static std::atomic<bool> told{false};
        if (!may_wait) {
        } else if (err == EMFILE || err == ENFILE) {
            if (!told.exchange(true))
                log::warn("fd {}: usmc's descriptor range is full: connections that must wait "
                          "without a wake-up socket go TCP (this one, and later ones quietly)",
                          c.tcp_fd);
        } else {
            log::warn("fd {}: no wake-up socket ({}): it goes TCP", c.tcp_fd, std::strerror(err));
        }
        errno = err;
        return false;
    }
    // (Held already: by a stranger that knows our token, the peer itself,
    // or a 64-bit collision. Only this connection suffers: it goes TCP.)
    if (!wakeup::name_sig(fd, c.sig_name)) {
        sys::real().close(fd);
        if (may_wait) log::warn("fd {}: its wake-up socket's name is taken: it goes TCP", c.tcp_fd);
        errno = EADDRINUSE;
        return false;
    }
    // (sig_forks stays the connection's: one that existed before a fork is
    // shared, and its `sig` never a spare, whenever it is made.)
    c.sig_epoll_gen = g_epoll_sets_closed.load(std::memory_order_acquire);
    c.sig.store(fd, std::memory_order_release);
    readiness::SigOutcome o =
        c.sig_life.apply(blocked ? SigEvent::MadeBlocked : SigEvent::MadeOpen);
    if (o.act == SigAct::Refused) {
        // Retired or closed meanwhile (its Close step found no `sig`, or
        // took this one: whoever swaps it out closes it).
        int s = c.sig.exchange(-1, std::memory_order_acq_rel);
        if (s >= 0) sys::real().close(s);
        errno = EBADF;
        return false;
    }
    act(c, o);
    if (blocked && c.phase.load(std::memory_order_acquire) != Phase::Connecting) smc_unblock(c);
    return true;
}

void smc_unblock(SmcConn& c) {
    act(c, c.sig_life.apply(SigEvent::Unblock));
}

void smc_wake_all(SmcConn& c) {
    smc_unblock(c);
    smc_self_wake(c);
    smc_open_writable(c, true);
}

void smc_ring_peer_bell(SmcConn& c) {
    c.transport.wake_writer();
}

// Neither takes the rx/tx locks: a thread blocked in recv or send must not
// keep another from shutting the connection down (that is how it gets woken).
void smc_shutdown_write(SmcConn& c) {
    tell_peer(c, core::kPeerDoneWriting);
}

void smc_close_wakeups(SmcConn& c) {
    act(c, c.sig_life.apply(SigEvent::Close));
}

// (A poll() counted in before the retirement is seen by it, or is refused
// after it: one word, sig_life.cpp.)
void smc_retire_wakeups(SmcConn& c) {
    act(c, c.sig_life.apply(SigEvent::Retire));
}

bool smc_sig_enter(SmcConn& c) {
    return c.sig_life.apply(SigEvent::Enter).act != SigAct::Refused;
}

void smc_sig_leave(SmcConn& c) {
    act(c, c.sig_life.apply(SigEvent::Leave));
}

void smc_quiesce(SmcConn& c) {
    c.closing.store(true, std::memory_order_release);
    {
        // Nobody inside a recv or send: nobody to wake (the usual close,
        // from the one thread that used the connection).
        std::unique_lock rx(c.rx_mu, std::try_to_lock);
        std::unique_lock tx(c.tx_mu, std::try_to_lock);
        if (rx.owns_lock() && tx.owns_lock()) return;
    }
    smc_wake_all(c); // blocked recv and send
    { std::lock_guard wait_rx(c.rx_mu); }
    { std::lock_guard wait_tx(c.tx_mu); }
}

void smc_close(SmcConn& c, bool abort) {
    tell_peer(c, abort ? core::kPeerConnAbort : core::kPeerConnClosed);
}

} // namespace usmc
