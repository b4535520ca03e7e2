// SPDX-License-Identifier: MIT
// Moving a live SMC-D connection to TCP, with its peer, byte for byte.
//
// A process that can no longer run the SMC data path hands its connections
// to TCP: an exec that a connection's descriptor survives (the new program
// inherits the socket but none of usmc's state: sshd re-executing itself for
// each connection, inetd-style servers, socat EXEC:) and a seccomp filter
// (usmc cannot know which system calls it allows: OpenSSH's preauth sandbox
// kills on sendto). The TCP connection under every SMC-D connection is
// idle and in step: both ends just start using it. What the rings hold is
// handed over so that each end reads exactly what the other wrote:
//
//   mover    (move_out) publishes its exact consumer cursor with kMovedOut,
//            after its last bytes, and wakes the peer. It never looks at
//            either ring again.
//   peer     (take_move, at its next call on the connection: a read, a
//            write, a poll, an epoll wake-up the mover's wake-up makes)
//            publishes kMovedTook, copies what it wrote that the mover
//            never read (the resend: sent over TCP before any later write)
//            and what the mover wrote that it has not read (the stash:
//            read before the kernel's bytes), and runs as TCP.
//
// Only one process holding a side takes the move (fork: a compare-and-swap
// on that side's word in the peer's line); the others find their side's
// flag and just run as TCP. Both ends moving out at once (both exec with
// the connection) cannot hand over what each wrote and the other had not
// read yet: the later one sends its own resend, and what it had not read is
// lost, counted and logged (an exec right after a read, before the peer
// wrote again, loses nothing).
#include "engine/base/count.hpp"
#include "engine/base/fallback.hpp"
#include "engine/base/fdtable.hpp"
#include "engine/base/forkref.hpp"
#include "engine/base/log.hpp"
#include "engine/base/loop.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/peer_watch.hpp"
#include "engine/conn/space_watch.hpp"
#include "engine/conn/tx.hpp"
#include "engine/sock/af_smc_internal.hpp"
#include "engine/sock/diag.hpp"
#include "engine/sock/runtime.hpp"
#include "engine/sock/user_sets.hpp"

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <time.h>

namespace usmc::af_smc {

using namespace detail;

namespace {

// The loop pushes a resend the application does not write after for at
// most this many turns of a minute each (a peer that reads nothing for ten
// minutes gets the rest at the application's next write, if any).
constexpr int kPushTurnMs = 60000;
constexpr int kPushTurns = 10;
// A mover whose peer moved out too sends its resend itself, before its
// exec: this long at most.
constexpr int kOwnResendMs = 2000;

std::vector<uint8_t> copy_ring(const uint8_t* ring, uint32_t size, core::Cursor from, uint32_t n) {
    std::vector<uint8_t> out(n);
    uint32_t first = std::min(n, size - from.count);
    std::memcpy(out.data(), ring + from.count, first);
    std::memcpy(out.data() + first, ring, n - first);
    return out;
}

// Under L.mu: as much of the resend as the socket takes now. 0: all of it
// went; -EAGAIN: the socket is full; else the socket's error.
int push_some(MovedLeft& L, int fd) {
    while (L.resent < L.resend.size()) {
        ssize_t n = sys::real().send(fd, L.resend.data() + L.resent, L.resend.size() - L.resent,
                                     MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        L.resent += size_t(n);
    }
    if (L.shut_wr) sys::real().shutdown(fd, SHUT_WR);
    L.resend.clear();
    L.resend.shrink_to_fit();
    L.resend_left.store(false, std::memory_order_release);
    return 0;
}

void update_left(SmcConn* c, MovedLeft& L) {
    if (!L.resend_left.load(std::memory_order_acquire) &&
        !L.stash_left.load(std::memory_order_acquire))
        c->moved_left.store(false, std::memory_order_release);
}

void push_turn(const std::shared_ptr<MovedLeft>& L, uint32_t, int turn) {
    std::lock_guard lock(L->mu);
    if (L->push_fd < 0) return;
    int r = L->resend_left.load() ? push_some(*L, L->push_fd) : 0;
    if (r == -EAGAIN && turn < kPushTurns) {
        int fd = L->push_fd;
        if (loop::add(fd, EPOLLOUT, kPushTurnMs,
                      [L, turn](uint32_t ev) { push_turn(L, ev, turn + 1); }))
            return;
    }
    if (r != 0)
        log::warn("a connection moved to TCP: {} bytes for its peer not sent yet ({})",
                  L->resend.size() - L->resent, r == -EAGAIN ? "the peer reads nothing" : "error");
    loop::forget(L->push_fd);
    sys::real().close(L->push_fd);
    L->push_fd = -1;
}

// The resend goes out now as far as the socket takes it; the loop pushes
// the rest through a duplicate of the socket (so a close of the
// application's descriptor sends its FIN only after it).
void start_push(int fd, const std::shared_ptr<MovedLeft>& L) {
    std::lock_guard lock(L->mu);
    if (!L->resend_left.load() || push_some(*L, fd) != -EAGAIN || L->push_fd >= 0) return;
    int dup = sys::real().fcntl(fd, F_DUPFD_CLOEXEC, sys::high_base());
    if (dup < 0) return; // the application's next write pushes it
    L->push_fd = dup;
    if (!loop::add(dup, EPOLLOUT, kPushTurnMs, [L](uint32_t ev) { push_turn(L, ev, 1); })) {
        sys::real().close(dup);
        L->push_fd = -1;
    }
}

// A blocking push, bounded: before an exec or an exit nobody else will.
void push_bounded(int fd, MovedLeft& L, int ms) {
    std::lock_guard lock(L.mu);
    uint64_t deadline = sys::mono_ns() + uint64_t(ms) * 1000000;
    while (L.resend_left.load() && push_some(L, fd) == -EAGAIN) {
        uint64_t now = sys::mono_ns();
        if (now >= deadline) break;
        pollfd p{fd, POLLOUT, 0};
        sys::real().poll(&p, 1, int((deadline - now) / 1000000) + 1);
    }
    if (L.resend_left.load())
        log::warn("fd {}: a connection moved to TCP: {} bytes for its peer could not be sent", fd,
                  L.resend.size() - L.resent);
}

// This process's copy runs as TCP from here on: the application's epoll
// registrations move from `sig` to the socket (`sig` stays beside them,
// readable, while a stash is left to read), and `sig` goes.
void switch_local(int fd, SmcConn* c) {
    user_move_out(c); // its registrations are `sig` ones from here
    const MovedLeft* L = c->left.get();
    bool stash = L && L->stash_left.load();
    set_mode(fd, SockMode::Tcp, fallback::MOVED);
    peer_watch::remove(c);
    space_watch::remove(c);
    diag::withdraw(runtime::get().seg, *c);
    {
        std::lock_guard lock(c->epoll_mu);
        for (auto& m : c->epoll_members) {
            if (!m.parked) {
                epoll_event ev = m.k;
                sys::real().epoll_ctl(m.epfd, EPOLL_CTL_ADD, fd, &ev);
            }
            if (stash) continue;
            sys::real().epoll_ctl(m.epfd, EPOLL_CTL_DEL, c->sig, nullptr);
            if (!m.parked) note_epoll_member(m.epfd, -1);
        }
        if (!stash) c->epoll_members.clear();
    }
    if (stash) {
        smc_self_wake(*c);
    } else {
        smc_wake_all(*c); // poll()ers on `sig` look again, and see TCP
        smc_retire_wakeups(*c);
    }
}

// The stash is read: `sig` leaves the sets it stayed in, and goes.
void stash_done(SmcConn* c) {
    {
        std::lock_guard lock(c->epoll_mu);
        for (auto& m : c->epoll_members) {
            sys::real().epoll_ctl(m.epfd, EPOLL_CTL_DEL, c->sig, nullptr);
            if (!m.parked) note_epoll_member(m.epfd, -1);
        }
        c->epoll_members.clear();
    }
    smc_retire_wakeups(*c);
}

} // namespace

namespace detail {

bool take_move(int fd, SmcConn* c, bool wait) {
    if (c->moved.load(std::memory_order_acquire)) return true;
    // Our threads blocked in a recv or send (holding its lock) wake, see the
    // move and leave.
    smc_wake_all(*c);
    bool mine = false;
    {
        std::unique_lock rx(c->rx_mu, std::defer_lock), tx(c->tx_mu, std::defer_lock);
        if (wait)
            std::lock(rx, tx);
        else if (std::try_lock(rx, tx) != -1) // (exit, exec: maybe a signal handler's)
            return false;
        if (c->moved.load(std::memory_order_acquire)) return true;
        if (smc_broken(*c)) return false;
        if (!smc_move_noticed(*c)) {
            // Seen, then gone: no peer takes back a move. A lie.
            log::warn("fd {}: the peer withdrew its move to TCP: connection broken", fd);
            smc_break(*c);
            return false;
        }
        if (!(c->transport.sent_conn_flags() & core::kMovedFlags)) {
            if (c->shared_by_fork() && (!c->adopt_published_tx() || !c->adopt_published_rx())) {
                smc_break(*c);
                return false;
            }
            // The peer's cursors are final: it moved out. Both are its
            // words, checked before anything is published or copied.
            core::PeerCdc peer = smc_peer_cdc(*c);
            uint32_t tx_ring = c->transport.tx_ring_size(), rx_ring = c->transport.rx_ring_size();
            auto unread_there = core::distance(peer.cons, c->tx_prod.load(), tx_ring);
            auto unread_here = core::cdc_readable(peer, c->rx_cons.load(), rx_ring);
            if (!unread_there || !unread_here || !core::valid(peer.cons, tx_ring) ||
                !core::valid(peer.prod, rx_ring)) {
                log::warn("fd {}: impossible cursors in the peer's move to TCP: connection broken",
                          fd);
                smc_break(*c);
                return false;
            }
            // Copied before our flag goes out: with it the mover's DMB may
            // serve another connection (ism.cpp).
            auto L = std::make_shared<MovedLeft>();
            if (*unread_there) {
                L->resend = copy_ring(c->transport.tx_ring(), tx_ring, peer.cons, *unread_there);
                L->resend_left.store(true);
            }
            if (*unread_here) {
                L->stash =
                    copy_ring(c->transport.rx_ring(), rx_ring, c->rx_cons.load(), *unread_here);
                L->stash_left.store(true);
            }
            mine = c->publish_move(core::kMovedTook);
            if (mine) {
                c->tx_held = 0; // (in the resend)
                // Done writing, said over SMC: TCP says it too, after the resend.
                bool done = c->conn_flags.load() & core::kPeerDoneWriting;
                if (done && *unread_there)
                    L->shut_wr = true;
                else if (done)
                    sys::real().shutdown(fd, SHUT_WR);
                // Reading shut here: the kernel's socket ends its reads too.
                if (c->rd_shut.load(std::memory_order_acquire)) sys::real().shutdown(fd, SHUT_RD);
                if (*unread_there || *unread_here) {
                    c->left = std::move(L);
                    c->moved_left.store(true, std::memory_order_release);
                }
                log::info("fd {}: the peer moved to TCP: {} bytes of ours sent again, {} of its to "
                          "read first",
                          fd, *unread_there, *unread_here);
            }
        }
        c->phase.store(Phase::Tcp, std::memory_order_release);
        c->moved.store(true, std::memory_order_release);
        sync_tcp_options(fd, *c); // before the resend goes
    }
    if (mine) counters::count(counters::moved_to_tcp);
    switch_local(fd, c);
    if (c->left) start_push(fd, c->left);
    return true;
}

void move_out(int fd, SmcConn* c, bool exec, bool passed) {
    if (c->moved.load(std::memory_order_acquire) || !c->transport.attached()) return;
    // Our threads stop using the rings first: one looping or entering sees
    // the move (and goes to the socket), one asleep is woken. Bytes they
    // copied before are in the cursors published below.
    c->phase.store(Phase::Tcp, std::memory_order_release);
    c->moved.store(true, std::memory_order_release);
    sync_tcp_options(fd, *c); // the socket then corks (or not) as the application asked
    smc_wake_all(*c);
    std::unique_lock rx(c->rx_mu, std::defer_lock), tx(c->tx_mu, std::defer_lock);
    if (exec || passed) {
        // (A thread that does not let go ends with the image; one a signal
        // handler interrupted cannot let go: it finds the move after.)
        for (int i = 0; i < 20 && !(rx.owns_lock() && tx.owns_lock()); ++i) {
            if (!rx.owns_lock()) (void)rx.try_lock();
            if (!tx.owns_lock()) (void)tx.try_lock();
            if (!(rx.owns_lock() && tx.owns_lock())) {
                timespec pause{0, 1000000};
                nanosleep(&pause, nullptr);
            }
        }
    } else {
        std::lock(rx, tx);
    }
    if (c->shared_by_fork()) {
        // Another process of ours may have read or written since we last did.
        if (rx.owns_lock()) (void)c->adopt_published_rx();
        if (tx.owns_lock() && c->tx_held == 0) (void)c->adopt_published_tx();
    }
    if (tx.owns_lock()) smc_flush_locked(*c);
    bool mine =
        !(c->transport.sent_conn_flags() & core::kMovedFlags) && c->publish_move(core::kMovedOut);
    if (mine) {
        counters::count(counters::moved_to_tcp);
        // Wake the peer: its next call takes the move.
        core::Requests was = c->transport.take_all_requests();
        c->transport.wake_reader();
        // (A peer asleep on a set kept in user memory waits at its bell.)
        if (was.data_bell) c->transport.ring_data_bell(was.data_bell);
        if (was.space) smc_ring_peer_bell(*c);
        log::info("fd {}: moved to TCP ({})", fd,
                  exec     ? "exec"
                  : passed ? "passed to another process"
                           : "seccomp filter, or no wake-up socket to wait on");
        // Done writing, said over SMC: TCP says it too (after our last
        // bytes, which are in the peer's ring).
        if (c->conn_flags.load() & core::kPeerDoneWriting) sys::real().shutdown(fd, SHUT_WR);
        uint8_t peer_flags = c->transport.peer_conn_flags();
        if ((peer_flags & (core::kPeerConnClosed | core::kPeerConnAbort)) ||
            c->peer_gone.load(std::memory_order_acquire)) {
            // The peer closed: nobody will send again what it wrote that we
            // never read.
            if (auto here = core::cdc_readable(smc_peer_cdc(*c), c->rx_cons.load(),
                                               c->transport.rx_ring_size());
                here && *here) {
                counters::count(counters::moved_bytes_lost, *here);
                log::warn("fd {}: moved to TCP after the peer closed: {} bytes it wrote that "
                          "were not read are lost",
                          fd, *here);
            }
        } else if (peer_flags & core::kMovedOut) {
            // The peer moved out too, before us: what we wrote that it never
            // read is ours to send; what it wrote that we never read,
            // nobody can hand over.
            core::PeerCdc peer = smc_peer_cdc(*c);
            uint32_t tx_ring = c->transport.tx_ring_size();
            auto there = core::distance(peer.cons, c->tx_prod.load(), tx_ring);
            auto here = core::cdc_readable(peer, c->rx_cons.load(), c->transport.rx_ring_size());
            if (there && *there && core::valid(peer.cons, tx_ring)) {
                MovedLeft L;
                L.resend = copy_ring(c->transport.tx_ring(), tx_ring, peer.cons, *there);
                L.resend_left.store(true);
                push_bounded(fd, L, kOwnResendMs);
            }
            if (here && *here) {
                counters::count(counters::moved_bytes_lost, *here);
                log::warn("fd {}: both ends moved to TCP at once: {} bytes the peer wrote are "
                          "lost; the connection is shut down",
                          fd, *here);
                sys::real().shutdown(fd, SHUT_RDWR);
            }
        }
    }
    if (exec) {
        // This image leaves the connection (its holders' count), and the
        // last holder its DMB: reused once the peer has taken the move
        // (ism.cpp), never again by us (a failed exec finds it TCP).
        c->exec_gen = forkref::generation(*c->owner_refs);
        if (!forkref::leave_unless_last(*c->owner_refs)) {
            forkref::free(c->owner_refs);
            c->transport.release_at_exit();
            c->transport.forget();
        }
        c->exec_out = true; // (a failed exec has nothing of it to count or give back)
    }
    if (rx.owns_lock()) rx.unlock();
    if (tx.owns_lock()) tx.unlock();
    // (An exec: the registrations and `sig` go with the image, a failed
    // exec finds the connection TCP.)
    if (!exec) switch_local(fd, c);
}

ssize_t moved_recv(SmcConn* c, const iovec* iov, int iovcnt, int flags) {
    std::shared_ptr<MovedLeft> L = c->left;
    if (!L || !L->stash_left.load(std::memory_order_acquire) || (flags & MSG_OOB))
        return kPassThrough;
    std::unique_lock lock(c->rx_mu);
    if (!L->stash_left.load()) return kPassThrough;
    size_t got = 0, at = L->stashed;
    for (int i = 0; i < iovcnt && at < L->stash.size(); ++i) {
        size_t n = std::min(iov[i].iov_len, L->stash.size() - at);
        std::memcpy(iov[i].iov_base, L->stash.data() + at, n);
        at += n;
        got += n;
    }
    if (flags & MSG_PEEK) return ssize_t(got);
    L->stashed = at;
    if (at < L->stash.size()) return ssize_t(got);
    L->stash.clear();
    L->stash.shrink_to_fit();
    L->stash_left.store(false, std::memory_order_release);
    lock.unlock();
    update_left(c, *L);
    stash_done(c);
    return ssize_t(got);
}

int moved_push(SmcConn* c, int fd, bool nonblock) {
    std::shared_ptr<MovedLeft> L = c->left;
    if (!L || !L->resend_left.load(std::memory_order_acquire)) return 0;
    std::unique_lock lock(L->mu);
    int timeout = c->sndtimeo_ms.load();
    uint64_t deadline = timeout > 0 ? sys::mono_ns() + uint64_t(timeout) * 1000000 : 0;
    while (L->resend_left.load()) {
        int r = push_some(*L, fd);
        if (r == 0) break;
        if (r != -EAGAIN || nonblock) return r;
        int left = -1;
        if (deadline) {
            uint64_t now = sys::mono_ns();
            if (now >= deadline) return -EAGAIN;
            left = int((deadline - now) / 1000000) + 1;
        }
        pollfd p{fd, POLLOUT, 0};
        lock.unlock();
        int n = sys::real().poll(&p, 1, left);
        if (n < 0 && errno == EINTR) return -EINTR;
        lock.lock();
    }
    lock.unlock();
    update_left(c, *L);
    return 0;
}

bool moved_stash_waiting(const SmcConn* c) {
    if (!c->moved_left.load(std::memory_order_acquire)) return false;
    const MovedLeft* L = c->left.get();
    return L && L->stash_left.load(std::memory_order_acquire);
}

void moved_ctl(SmcConn* c, int epfd, int op, const epoll_event* ev) {
    if (!moved_stash_waiting(c)) return;
    std::lock_guard lock(c->epoll_mu);
    auto& members = c->epoll_members;
    auto it = std::find_if(members.begin(), members.end(),
                           [&](const SmcConn::EpollMember& m) { return m.epfd == epfd; });
    if (it == members.end() || op == EPOLL_CTL_ADD) return;
    if (op == EPOLL_CTL_DEL) {
        sys::real().epoll_ctl(epfd, EPOLL_CTL_DEL, c->sig, nullptr);
        if (!it->parked) note_epoll_member(epfd, -1);
        members.erase(it);
        return;
    }
    epoll_event k = sig_registration(*ev);
    if (sys::real().epoll_ctl(epfd, EPOLL_CTL_MOD, c->sig, &k) == 0) it->k = k;
}

void moved_exec_failed(int fd, SmcConn* c) {
    if (!c->sig_life.retired()) switch_local(fd, c);
}

void moved_at_exit(int fd, SmcConn* c, bool exec) {
    std::shared_ptr<MovedLeft> L = c->left;
    if (!L) return;
    if (L->resend_left.load()) push_bounded(fd, *L, kOwnResendMs);
    // Before an exec the new program inherits the socket from: what the
    // stash holds cannot follow it.
    int fl = sys::real().fcntl(fd, F_GETFD);
    if (exec && L->stash_left.load() && fl >= 0 && !(fl & FD_CLOEXEC)) {
        size_t n = L->stash.size() - L->stashed;
        counters::count(counters::moved_bytes_lost, n);
        log::warn("fd {}: {} bytes the peer wrote before its move to TCP were not read before "
                  "the exec: lost",
                  fd, n);
    }
}

} // namespace detail

} // namespace usmc::af_smc
