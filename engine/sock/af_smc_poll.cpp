// SPDX-License-Identifier: MIT
// Readiness for SMC connections and SMC listeners: poll()/ppoll() (and
// select via poll in the preload) substitute a connection's wake-up socket
// (`sig`, wakeup.hpp); epoll_ctl() registers it in the application's epoll
// sets with its own epoll_data, so epoll_wait needs no translation at all.
#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/peer_watch.hpp"
#include "engine/conn/spin.hpp"
#include "engine/conn/wait.hpp"
#include "engine/sock/af_smc_internal.hpp"
#include "engine/sock/runtime.hpp"
#include "engine/sock/user_sets.hpp"

#include <algorithm>
#include <cstddef>
#include <memory_resource>
#include <time.h>
#include <vector>

namespace usmc::af_smc {

using namespace detail;

namespace {

// An SMC listener's queue eventfd, or -1; `stalled` says whether the kernel
// listener should be left out (backlog full). No reference is kept.
int listener_event(int fd, bool* stalled) {
    if (!in_table(fd)) return -1;
    SmcListener* l = g_listeners[fd].load(std::memory_order_acquire);
    if (!l) return -1;
    *stalled = l->stalled();
    return l->done_event();
}

int ms_left(const timespec& start, int timeout_ms) {
    if (timeout_ms < 0) return -1;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t spent = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    return spent >= timeout_ms ? 0 : int(timeout_ms - spent);
}

// Our books say which epoll sets hold `sig`, but a set closed without a
// delete is gone from the kernel while its entry stays here, and a new set
// may get its number (select.epoll() opened and closed around each wait):
// an entry is believed only while the kernel agrees. An add goes to the
// kernel (EEXIST is its answer, not ours; one that takes back a parked
// registration, as a modify); a modify or delete the kernel answers ENOENT
// shows the entry stale, and it goes.

// The `sig` registration of a connection whose handshake still runs:
// readable / writable only once it is done (af_smc_connect.cpp).
int connecting_ctl(SmcConn* c, int epfd, int op, epoll_event* ev) {
    auto& regs = c->connecting_regs;
    auto it = std::find_if(regs.begin(), regs.end(),
                           [&](const SmcConn::EpollReg& r) { return r.epfd == epfd; });
    if (op != EPOLL_CTL_ADD && it == regs.end()) return fail(ENOENT);
    epoll_event k{};
    if (ev) k = sig_registration(*ev);
    const bool del = op == EPOLL_CTL_DEL;
    if (sys::real().epoll_ctl(epfd, op, c->sig, del ? nullptr : &k) != 0) {
        if (op != EPOLL_CTL_ADD && errno == ENOENT) regs.erase(it); // stale
        return -1;
    }
    if (del) {
        regs.erase(it);
        note_epoll_member(epfd, -1);
    } else if (op == EPOLL_CTL_MOD) {
        it->ev = *ev;
    } else {
        if (it != regs.end()) regs.erase(it); // stale: the kernel took the add
        regs.push_back({epfd, *ev});
        note_epoll_member(epfd, 1);
    }
    c->epoll_watched.store(true, std::memory_order_relaxed);
    return 0;
}

bool same_reg(const epoll_event& a, const epoll_event& b) {
    return a.events == b.events && a.data.u64 == b.data.u64;
}

int active_ctl(SmcConn* c, int epfd, int op, epoll_event* ev) {
    // (epoll_ctl made `sig` before it took epoll_mu; a set falling back
    // makes it here.)
    if (op == EPOLL_CTL_ADD && !smc_ensure_sig(*c)) return -1;
    // Only `sig` goes into the application's set; the TCP socket is
    // watched by peer_watch (a vanished peer wakes `sig`).
    auto& members = c->epoll_members;
    auto it = std::find_if(members.begin(), members.end(),
                           [&](const SmcConn::EpollMember& m) { return m.epfd == epfd; });
    const bool member = it != members.end() && !it->parked;
    if (op != EPOLL_CTL_ADD && !member) return fail(ENOENT);
    if (op == EPOLL_CTL_DEL) {
        // Park: keep `sig` in the set with no events, so the add that event
        // loops do next (redis-benchmark's ae: a delete and an add around
        // each request) costs one modify, not a removal and an insert of
        // a connected datagram socket's wait queues. EPOLLEXCLUSIVE
        // registrations cannot be modified: those really go.
        if (it->k.events & EPOLLEXCLUSIVE) {
            int rc = sys::real().epoll_ctl(epfd, EPOLL_CTL_DEL, c->sig, nullptr);
            int err = errno;
            members.erase(it);
            if (rc != 0) return fail(err); // (ENOENT: stale)
            note_epoll_member(epfd, -1);
            return 0;
        }
        epoll_event none{};
        if (it->k.events && sys::real().epoll_ctl(epfd, EPOLL_CTL_MOD, c->sig, &none) != 0) {
            if (errno == ENOENT) members.erase(it); // stale
            return -1;
        }
        it->k = none;
        it->parked = true;
        note_epoll_member(epfd, -1);
        return 0;
    }
    epoll_event k = sig_registration(*ev);
    short newly = 0;
    if (op == EPOLL_CTL_ADD) {
        // A parked registration is taken back with a modify; any other add
        // goes to the kernel, whose EEXIST is the answer (an entry of ours
        // the kernel lacks is stale).
        bool added = false;
        if (it != members.end() && it->parked) {
            if (sys::real().epoll_ctl(epfd, EPOLL_CTL_MOD, c->sig, &k) == 0) {
                added = true;
            } else if (errno != ENOENT) {
                return -1;
            }
        }
        if (!added) {
            if (sys::real().epoll_ctl(epfd, EPOLL_CTL_ADD, c->sig, &k) != 0) return -1;
            if (it != members.end()) members.erase(it); // stale: the kernel took the add
            members.push_back({epfd, k, false});
            peer_watch::add(c); // once per connection (it ignores repeats)
        } else {
            it->k = k;
            it->parked = false;
        }
        note_epoll_member(epfd, 1);
        newly =
            short(((ev->events & EPOLLIN) ? POLLIN : 0) | ((ev->events & EPOLLOUT) ? POLLOUT : 0));
    } else {
        // Only a registration that changes is modified (ae and libevent
        // re-arm a descriptor around every request). A one-shot registration
        // is re-armed by every modify, so it is always touched.
        bool touch = !same_reg(it->k, k) || (k.events & EPOLLONESHOT);
        if (touch) {
            if (sys::real().epoll_ctl(epfd, EPOLL_CTL_MOD, c->sig, &k) != 0) {
                if (errno == ENOENT) members.erase(it); // stale
                return -1;
            }
            it->k = k;
            newly =
                short(((k.events & EPOLLIN) ? POLLIN : 0) | ((k.events & EPOLLOUT) ? POLLOUT : 0));
        }
    }
    c->epoll_watched.store(true, std::memory_order_relaxed);
    // Make `sig` tell the truth now (level-triggered), or arm the peer's
    // wake-ups for when it becomes true.
    if (newly) smc_arm(*c, newly, TcpEndWatch::EpollSets);
    return 0;
}

// A connecting connection whose `sig` cannot be made: its handshake ends
// without the application (event loop, worker); waited for here, at most
// kAwaitConnectedMs. False if it did not end.
constexpr int kAwaitConnectedMs = 10000;
bool await_connected(SmcConn* c, int max_ms = kAwaitConnectedMs) {
    for (int ms = 0; ms < max_ms; ++ms) {
        if (c->phase.load(std::memory_order_acquire) != Phase::Connecting) return true;
        timespec pause{0, 1000000};
        nanosleep(&pause, nullptr);
    }
    if (max_ms < kAwaitConnectedMs)
        return c->phase.load(std::memory_order_acquire) != Phase::Connecting;
    log::warn("fd {}: no descriptor for its wake-up socket, and its handshake did not end in {} "
              "ms (an epoll registration fails with ENOMEM)",
              c->tcp_fd, kAwaitConnectedMs);
    return c->phase.load(std::memory_order_acquire) != Phase::Connecting;
}

template <typename Probe>
int spin_probe(int timeout_ms, Probe probe) {
    if (timeout_ms == 0) return 0;
    // (A loop that always has events waiting, thousands of short
    // connections, found nothing in most spins: spin.hpp's backoff.)
    uint64_t budget_ns = spin::begin(g_busy_poll_us);
    if (budget_ns == 0) return 0;
    if (timeout_ms > 0) budget_ns = std::min<uint64_t>(budget_ns, uint64_t(timeout_ms) * 1000000);
    timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (true) {
        int n = probe();
        if (n != 0) {
            spin::end(n > 0);
            return n;
        }
        timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t spent = uint64_t(now.tv_sec - start.tv_sec) * 1000000000ull +
                         uint64_t(now.tv_nsec) - uint64_t(start.tv_nsec);
        if (spent >= budget_ns) break;
        for (int i = 0; i < 32; ++i)
            wait::cpu_relax();
    }
    spin::end(false);
    return 0;
}

} // namespace

int detail::kernel_ctl(SmcConn* c, int epfd, int op, epoll_event* ev) {
    // (A set falling back may hold a connection that is still connecting.)
    if (c->phase.load(std::memory_order_acquire) == Phase::Connecting) {
        if (op == EPOLL_CTL_ADD && !smc_ensure_sig(*c)) return -1;
        return connecting_ctl(c, epfd, op, ev);
    }
    return active_ctl(c, epfd, op, ev);
}

epoll_event detail::sig_registration(const epoll_event& ev) {
    // (No EPOLLPRI: `sig` never shows it, and epoll_wait's results are not
    // translated. Urgent data arrives as data: EPOLLIN wakes for it.)
    epoll_event k{};
    k.events =
        ev.events & (EPOLLIN | EPOLLRDHUP | EPOLLOUT | EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE);
    k.data = ev.data;
    return k;
}

std::atomic<int32_t>* g_epoll_smc = nullptr;
uint32_t g_busy_poll_us = 0;

void detail::note_epoll_member(int epfd, int delta) {
    auto* sets = g_epoll_smc;
    if (!sets || static_cast<unsigned>(epfd) >= g_conns_capacity) return;
    auto& n = sets[epfd];
    int32_t v = n.load(std::memory_order_relaxed);
    while (v + delta >= 0 && !n.compare_exchange_weak(v, v + delta, std::memory_order_relaxed)) {
    }
}

int epoll_wait_spin(int epfd, epoll_event* evs, int max, int timeout_ms, const sigset_t* mask) {
    int n = spin_probe(timeout_ms, [&] {
        int r = sys::real().epoll_wait(epfd, evs, max, 0);
        return r < 0 && errno == EINTR ? 0 : r;
    });
    if (n != 0) return n;
    // What is left of the timeout (whole milliseconds; the spin is far shorter).
    int left = timeout_ms < 0 ? -1 : std::max(0, timeout_ms - int(g_busy_poll_us / 1000));
    return mask ? sys::real().epoll_pwait(epfd, evs, max, left, mask)
                : sys::real().epoll_wait(epfd, evs, max, left);
}

// The kernel part of a poll (its descriptors that are not SMC connections)
// is asked once every this many looks at user memory while spinning (and
// always when a look found something: the answer is a snapshot of all).
constexpr unsigned kPollKernelRatio = 16;

// A poll whose SMC entries are all established connections, and whose other
// entries are the kernel's alone (no listener, no connection that moved or
// is connecting): the bits of the first from user memory. Each connection's
// TCP socket is watched for the peer's end by this process's peer watch
// (added now if it is not: once per connection, without allocating, as
// every poll must; given up if the engine's loop thread has not run in
// this process yet), which puts a vanished
// peer's end in the state the looks read; without that, only the full path
// (which has the socket in its wait) would see it. `kern` gets a copy of
// the kernel's entries (fd -1 for the SMC ones, which the kernel then
// skips); false if some entry needs the full path.
bool split_for_looks(const pollfd* fds, nfds_t n, std::pmr::vector<pollfd>& kern,
                     std::pmr::vector<SmcConn*>& conns, bool* any_kernel) {
    *any_kernel = false;
    bool any_smc_entry = false;
    for (nfds_t i = 0; i < n; ++i) {
        SmcConn* c = conn_of(fds[i].fd);
        if (reinterpret_cast<uintptr_t>(c) > 2) {
            if (c->phase.load(std::memory_order_acquire) != Phase::Active || smc_move_noticed(*c))
                return false;
            if (!c->peer_gone.load(std::memory_order_acquire) && !peer_watch::armed(*c)) {
                if (!peer_watch::add(c, true) && !c->peer_gone.load(std::memory_order_acquire))
                    return false;
                // An end that came before the watch is looked at now (the
                // watch reports it too, but from the loop, a moment later).
                smc_check_peer(*c);
            }
            conns.push_back(c);
            kern.push_back({-1, 0, 0});
            any_smc_entry = true;
            continue;
        }
        if (fds[i].fd >= 0 && is_listener(fds[i].fd)) return false;
        conns.push_back(nullptr);
        kern.push_back({fds[i].fd, fds[i].events, 0});
        *any_kernel |= fds[i].fd >= 0;
    }
    return any_smc_entry;
}

// One look: the SMC entries' bits from user memory, the kernel's from its
// last answer in `kern` (asked now if `ask`, or if something is ready and it
// was not asked). The number of entries with events, as poll() counts them;
// -1 if the kernel failed (errno); kLookOff if an entry changed under us
// (closed by another thread, moved to TCP): the full path answers.
constexpr int kLookOff = -2;
int look_once(pollfd* fds, nfds_t n, std::pmr::vector<pollfd>& kern,
              const std::pmr::vector<SmcConn*>& conns, bool any_kernel, bool ask) {
    int ready = 0;
    for (nfds_t i = 0; i < n; ++i) {
        if (!conns[i]) continue;
        // Read again each time, as the full path does around its wait: a
        // connection another thread closes is not read after it went.
        if (conn_of(fds[i].fd) != conns[i] || smc_move_noticed(*conns[i])) return kLookOff;
        short want = fds[i].events & (POLLIN | POLLOUT | POLLRDHUP | POLLPRI);
        fds[i].revents = short(smc_poll_events(*conns[i]) & (want | POLLERR | POLLHUP));
        if (fds[i].revents) ++ready;
    }
    if (any_kernel && (ask || ready)) {
        if (sys::real().poll(kern.data(), kern.size(), 0) < 0) return -1;
    }
    for (nfds_t i = 0; i < n; ++i) {
        if (conns[i]) continue;
        fds[i].revents = any_kernel ? kern[i].revents : 0;
        if (fds[i].revents) ++ready;
    }
    return ready;
}

bool any_smc(const pollfd* fds, nfds_t n) {
    if (!g_conns.load(std::memory_order_acquire)) return false;
    for (nfds_t i = 0; i < n; ++i) {
        SmcConn* c = conn_of(fds[i].fd);
        if (is_smc(c) || is_listener(fds[i].fd)) return true;
        if (reinterpret_cast<uintptr_t>(c) > 2 && c->moved_left.load(std::memory_order_relaxed))
            return true;
    }
    return false;
}

// Room on the stack for a poll of up to 64 descriptors (two kernel entries
// and their owners each, the connecting ones, the flags)
// (and the copy the looks at user memory take first).
constexpr size_t kPollArenaBytes =
    64 * (3 * sizeof(pollfd) + 2 * 16 + 3 * sizeof(void*) + sizeof(uint64_t) + sizeof(short)) + 256;

int poll(pollfd* fds, nfds_t n, int timeout_ms, const sigset_t* mask) {
    // Each SMC entry becomes up to two kernel entries (`sig`, the TCP
    // socket for a vanished peer), an SMC listener two (its queue's eventfd
    // and the kernel listener); results map back.
    enum class Kind : uint8_t { Plain, Queue, Smc };
    struct Owner {
        nfds_t i;
        Kind kind;
    };
    // No heap for the usual few descriptors: the caller may have unblocked
    // signals for this call alone, whose handlers allocate and fork (the
    // postmaster of PostgreSQL 15); a handler taken inside malloc would
    // hang on its lock. Only sets too large for the stack use the heap.
    alignas(std::max_align_t) std::byte arena[kPollArenaBytes];
    std::pmr::monotonic_buffer_resource mem(arena, sizeof arena);
    std::pmr::vector<pollfd> k(&mem);
    std::pmr::vector<Owner> owner(&mem);
    std::pmr::vector<bool> built_smc(n, false, &mem);
    // What the wait said of an established connection's TCP socket (in its
    // set for the peer's end), -1 where it was not in the set.
    std::pmr::vector<short> tcp_said(n, -1, &mem);
    // The connection (and its token) whose socket that was: the descriptor
    // may name another by the time the answer is read (closed and reused
    // by another thread meanwhile).
    std::pmr::vector<const SmcConn*> tcp_conn(n, nullptr, &mem);
    std::pmr::vector<uint64_t> tcp_token(n, 0, &mem);
    std::pmr::vector<SmcConn*> entered(&mem); // Connecting: `sig` used (smc_sig_enter)
    k.reserve(n * 2);
    owner.reserve(n * 2);
    entered.reserve(n);
    timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    auto leave_all = [&] {
        for (SmcConn* c : entered)
            smc_sig_leave(*c);
        entered.clear();
    };
    // First the looks at user memory, spinning while spin.hpp lets us (no
    // system call for the SMC entries, nothing asked of a peer, no `sig`
    // made): what a peer wrote meanwhile is found without its wake-up. Only
    // when they find nothing does the wait arm and sleep below.
    bool looked = false; // (then the spin is over: the wait below does not spin again)
    if (n > 0) {
        std::pmr::vector<pollfd> kern(&mem);
        std::pmr::vector<SmcConn*> conns(&mem);
        kern.reserve(n);
        conns.reserve(n);
        bool any_kernel = false;
        if (split_for_looks(fds, n, kern, conns, &any_kernel)) {
            looked = true;
            int r = look_once(fds, n, kern, conns, any_kernel, true);
            if (r != 0 && r != kLookOff) return r;
            if (r == 0 && timeout_ms == 0) return 0; // (the kernel's were asked)
            // (Not with a signal mask: ppoll lets its signals in for the
            // wait, and a spin would hold them back.)
            if (r == 0 && !mask) {
                unsigned turn = 0;
                r = spin_probe(timeout_ms, [&] {
                    int got =
                        look_once(fds, n, kern, conns, any_kernel, ++turn % kPollKernelRatio == 0);
                    return got == -1 && errno == EINTR ? 0 : got;
                });
                if (r != 0 && r != kLookOff) return r;
            }
            for (nfds_t i = 0; i < n; ++i)
                fds[i].revents = 0;
        }
    }
    while (true) {
        k.clear();
        owner.clear();
        std::fill(tcp_said.begin(), tcp_said.end(), short(-1));
        leave_all();
        int ready = 0;
        bool look_again = false; // a connecting entry with no `sig` to wait on
        for (nfds_t i = 0; i < n; ++i) {
            fds[i].revents = 0;
            SmcConn* c = conn_of(fds[i].fd);
            // Moved to TCP by the peer: follow it now, and ask the kernel.
            if (is_smc(c) && c->phase.load(std::memory_order_acquire) == Phase::Active &&
                smc_move_noticed(*c))
                take_move(fds[i].fd, c);
            built_smc[i] = is_smc(c);
            bool active = built_smc[i] && c->phase.load(std::memory_order_acquire) == Phase::Active;
            short want = fds[i].events & (POLLIN | POLLOUT | POLLRDHUP | POLLPRI);
            // The kernel waits on `sig` for us: made now if this is the
            // first wait that needs it. None to be had: a connecting one
            // waits for its handshake (which needs nothing of us), and an
            // established one goes TCP; the kernel answers for its socket.
            if (built_smc[i] && (want & (POLLIN | POLLOUT | POLLPRI)) && !smc_ensure_sig(*c)) {
                if (!active) {
                    int left = ms_left(start, timeout_ms);
                    await_connected(c, left < 0 ? kAwaitConnectedMs
                                                : std::min(left, kAwaitConnectedMs));
                }
                if (c->phase.load(std::memory_order_acquire) == Phase::Active &&
                    !smc_ensure_sig(*c))
                    move_out(fds[i].fd, c, false);
                active = built_smc[i] = c->phase.load(std::memory_order_acquire) == Phase::Active;
                if (c->phase.load(std::memory_order_acquire) == Phase::Connecting) {
                    // Not ready, and nothing of the kernel's tells when it is:
                    // looked at again in a moment, within the timeout.
                    look_again = true;
                    continue;
                }
            }
            // A stash of the rings to read before the kernel's bytes.
            if (!built_smc[i] && reinterpret_cast<uintptr_t>(c) > 2 && (want & POLLIN) &&
                moved_stash_waiting(c)) {
                fds[i].revents = POLLIN;
                ++ready;
            }
            if (built_smc[i] && !active && (want & (POLLIN | POLLOUT | POLLPRI))) {
                // Connecting: its `sig` may be retired under us once it is
                // TCP; counted in, it stays until we leave (after the wait).
                if (smc_sig_enter(*c))
                    entered.push_back(c);
                else
                    built_smc[i] = false;
            }
            if (built_smc[i]) {
                // (The wait below watches the TCP socket's end: the arm
                // need not look at it.)
                short now =
                    active ? smc_arm(*c, want & (POLLIN | POLLOUT | POLLPRI), TcpEndWatch::TheWait)
                           : 0;
                if (now) {
                    fds[i].revents = short((now & (want | POLLERR | POLLHUP)));
                    if (fds[i].revents) ++ready;
                }
                // Urgent data arrives as data: POLLPRI waits for `sig`'s POLLIN.
                short on_sig = short((want & (POLLIN | POLLOUT)) | ((want & POLLPRI) ? POLLIN : 0));
                if (on_sig) {
                    k.push_back({c->sig, on_sig, 0});
                    owner.push_back({i, Kind::Smc});
                }
                if (active && on_sig) {
                    // The TCP socket only wakes when the peer is gone (a
                    // writer waiting for space must learn it too).
                    k.push_back({fds[i].fd, POLLRDHUP, 0});
                    owner.push_back({i, Kind::Smc});
                    tcp_conn[i] = c;
                    tcp_token[i] = c->token;
                }
                continue;
            }
            bool stalled = false;
            int queue = (fds[i].events & POLLIN) ? listener_event(fds[i].fd, &stalled) : -1;
            if (queue >= 0) {
                k.push_back({queue, POLLIN, 0});
                owner.push_back({i, Kind::Queue});
                if (stalled) continue; // accept() takes nothing from the kernel now
            }
            k.push_back({fds[i].fd, fds[i].events, 0});
            owner.push_back({i, Kind::Plain});
        }
        int left = ms_left(start, timeout_ms);
        int wait_ms = ready ? 0 : left;
        if (look_again && wait_ms != 0) wait_ms = wait_ms < 0 ? 1 : std::min(wait_ms, 1);
        // Only when the timeout has run out may a look that finds nothing be
        // reported (0 = timed out). Readiness seen while arming can be gone
        // after the kernel's poll, a wake-up can say nothing the
        // application asked about: then wait on for what is left.
        bool last = left == 0;
        int r = 0;
        if (wait_ms != 0 && !looked) {
            r = spin_probe(wait_ms, [&] {
                int p = sys::real().poll(k.data(), k.size(), 0);
                return p < 0 && errno == EINTR ? 0 : p;
            });
        }
        timespec ts{wait_ms / 1000, (wait_ms % 1000) * 1000000L};
        if (r == 0)
            r = mask ? sys::real().ppoll(k.data(), k.size(), wait_ms < 0 ? nullptr : &ts, mask)
                     : sys::real().poll(k.data(), k.size(), wait_ms);
        leave_all();
        if (r < 0) return ready ? ready : -1;
        for (size_t j = 0; j < k.size(); ++j) {
            auto [i, kind] = owner[j];
            if (kind == Kind::Smc && k[j].fd == fds[i].fd) tcp_said[i] = k[j].revents;
            if (kind == Kind::Plain) fds[i].revents |= k[j].revents;
            if (kind == Kind::Queue && (k[j].revents & POLLIN)) fds[i].revents |= POLLIN;
        }
        ready = 0;
        bool changed = false;
        for (nfds_t i = 0; i < n; ++i) {
            if (built_smc[i]) {
                SmcConn* c = conn_of(fds[i].fd);
                fds[i].revents = 0;
                if (is_smc(c) && c->phase.load(std::memory_order_acquire) == Phase::Active &&
                    smc_move_noticed(*c))
                    take_move(fds[i].fd, c);
                if (!is_smc(c)) {
                    changed = true; // went TCP under us: ask the kernel instead
                } else if (c->phase.load(std::memory_order_acquire) == Phase::Active) {
                    short want = fds[i].events & (POLLIN | POLLOUT | POLLRDHUP | POLLPRI);
                    // Its TCP socket's end, from the wait's own answer
                    // where it was in the set.
                    if (c->peer_gone.load()) {
                    } else if (tcp_said[i] < 0 || c->tcp_fd != fds[i].fd || tcp_conn[i] != c ||
                               tcp_token[i] != c->token) {
                        smc_check_peer(*c);
                    } else {
                        smc_note_tcp_end(*c, tcp_said[i]);
                    }
                    fds[i].revents = short(smc_poll_events(*c) & (want | POLLERR | POLLHUP));
                }
            }
            if (fds[i].revents) ++ready;
        }
        if (ready || (last && !changed)) {
            // Entries armed for urgent data alone left `sig` unreadable.
            for (nfds_t i = 0; i < n; ++i)
                if (built_smc[i] && (fds[i].events & POLLPRI) && !(fds[i].events & POLLIN))
                    if (SmcConn* c = conn_of(fds[i].fd);
                        is_smc(c) && c->phase.load(std::memory_order_acquire) == Phase::Active)
                        smc_restore_level(*c);
            return ready;
        }
        // Woken with nothing to report (a stale wake-up byte, a handshake
        // that ended, a stranger's datagram): wait again for what is left
        // of the timeout. A `sig` that woke us for nothing is drained (on
        // the second time in a row: smc_drain_wakeup), or the next wait
        // would end at once again, and again.
        for (nfds_t i = 0; i < n; ++i)
            if (built_smc[i] && (fds[i].events & (POLLIN | POLLPRI)))
                if (SmcConn* c = conn_of(fds[i].fd);
                    is_smc(c) && c->phase.load(std::memory_order_acquire) == Phase::Active)
                    smc_drain_wakeup(*c, true);
    }
}

int epoll_ctl(int epfd, int op, int fd, epoll_event* ev) {
    if (op != EPOLL_CTL_DEL && !ev) return fail(EFAULT);
    SmcConn* c = conn_of(fd);
    // Moved to TCP by the peer: follow it first (its registrations move to
    // the socket), then this one is the kernel's.
    if (is_smc(c) && c->phase.load(std::memory_order_acquire) == Phase::Active &&
        smc_move_noticed(*c))
        take_move(fd, c);
    if (is_smc(c)) {
        // Active or still connecting: a set kept in user memory takes it.
        if (int rc = 0; user_ctl(c, epfd, op, fd, ev, &rc)) return rc;
        if (c->phase.load(std::memory_order_acquire) != Phase::Active && op == EPOLL_CTL_ADD)
            user_set_prepare(epfd);
        // The kernel set waits on `sig`: made now if this is the first
        // wait that needs it (outside epoll_mu: a move takes it). None to
        // be had (usmc's quarter of the table full): a connecting one waits
        // for its handshake, which needs nothing of the application (then
        // a set in user memory takes it, or the kernel its TCP socket); an
        // established one goes TCP, and the kernel holds its socket.
        if (op != EPOLL_CTL_DEL && !smc_ensure_sig(*c)) {
            if (c->phase.load(std::memory_order_acquire) == Phase::Connecting &&
                !await_connected(c))
                return fail(ENOMEM);
            if (c->phase.load(std::memory_order_acquire) == Phase::Active) {
                int rc = 0;
                if (user_ctl(c, epfd, op, fd, ev, &rc)) return rc;
                if (smc_ensure_sig(*c))
                    return af_smc::epoll_ctl(epfd, op, fd, ev); // (freed meanwhile)
                move_out(fd, c, false);
            }
            return sys::real().epoll_ctl(epfd, op, fd, ev);
        }
        std::unique_lock lock(c->epoll_mu);
        switch (c->phase.load(std::memory_order_acquire)) {
        case Phase::Connecting:
            return connecting_ctl(c, epfd, op, ev);
        case Phase::Active:
            return active_ctl(c, epfd, op, ev);
        case Phase::Tcp:
            break;
        }
    } else if (reinterpret_cast<uintptr_t>(c) > 2 &&
               !c->worker_done.load(std::memory_order_acquire)) {
        // TCP already, while the handshake's thread hands the registrations
        // made while connecting to the kernel: after it, so that a modify
        // or delete finds them there.
        std::lock_guard user_lock(user_sets_mutex());
        std::lock_guard lock(c->epoll_mu);
        return sys::real().epoll_ctl(epfd, op, fd, ev);
    } else if (reinterpret_cast<uintptr_t>(c) > 2 && moved_stash_waiting(c)) {
        // `sig` stands beside the socket while the stash waits: it follows.
        int rc = sys::real().epoll_ctl(epfd, op, fd, ev);
        if (rc == 0) moved_ctl(c, epfd, op, ev);
        return rc;
    } else if (SmcListener* l = acquire_listener(fd)) {
        int rc = l->epoll_ctl(epfd, op, ev);
        int saved = errno;
        l->unref();
        errno = saved;
        return rc;
    }
    return sys::real().epoll_ctl(epfd, op, fd, ev);
}

} // namespace usmc::af_smc
