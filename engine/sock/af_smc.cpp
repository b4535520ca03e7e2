// SPDX-License-Identifier: MIT
// The socket layer's descriptor bookkeeping and data calls. connect() is in
// af_smc_connect.cpp, listen()/accept() in af_smc_accept.cpp, readiness in
// af_smc_poll.cpp.
#include "config/size.hpp"
#include "engine/base/count.hpp"
#include "engine/base/fallback.hpp"
#include "engine/base/fdtable.hpp"
#include "engine/base/log.hpp"
#include "engine/base/loop.hpp"
#include "engine/base/sys.hpp"
#include "engine/clc/clc_io.hpp"
#include "engine/conn/peer_watch.hpp"
#include "engine/conn/space_watch.hpp"
#include "engine/conn/tx.hpp"
#include "engine/discovery/registry.hpp"
#include "engine/handshake/connect_watch.hpp"
#include "engine/readiness/wakeup.hpp"
#include "engine/sock/af_smc_internal.hpp"
#include "engine/sock/diag.hpp"
#include "engine/sock/learn.hpp"
#include "engine/sock/runtime.hpp"
#include "engine/sock/sockopt.hpp"
#include "engine/sock/user_sets.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <new>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace usmc::af_smc {

std::atomic<std::atomic<SmcConn*>*> g_conns{nullptr};
uint32_t g_conns_capacity = 0;

namespace detail {

std::atomic<SmcListener*>* g_listeners = nullptr;
std::mutex g_listen_mu;
std::mutex g_engine_mu;
Engine g_engine;

// Under g_engine_mu.
static bool make_devices(bool need_endpoint) {
    return transports_ensure(g_engine.devs, runtime::get().cfg.max_dmb_memory,
                             handshake_config().dmb_size, need_endpoint);
}

bool ensure_engine(bool need_endpoint) {
    std::lock_guard lock(g_engine_mu);
    return make_devices(need_endpoint);
}

HandshakeConfig handshake_config() {
    const auto& cfg = runtime::get().cfg;
    HandshakeConfig h;
    // The kernel holds a connection's bytes in flight in the sender's sndbuf
    // (wmem) and the receiver's RMB (rmem); usmc writes straight into the
    // peer's DMB, so the DMB holds both. (With rmem alone, 64 KB messages
    // fill the ring and every message costs a sleep and a wake-up, which
    // made streaming slower than TCP.) CLC encodes DMB sizes as
    // 16 KiB << n, so the size is a power of two.
    h.dmb_size = static_cast<uint32_t>(
        std::bit_floor(std::clamp<uint64_t>(cfg.rmem + cfg.wmem, 16 << 10, 1 << 20)));
    // Sizes the user gave the program (SMC_RCVBUF / SMC_SNDBUF, smc_run's -r
    // and -t) are kept, as a socket buffer set with SO_RCVBUF is not
    // autotuned by TCP.
    const auto& opts = runtime::get().opts;
    if (cfg.autotune_dmb && !opts.rmem && !opts.wmem) h.dmb_roomy = 1 << 20;
    h.busy_poll_us = cfg.busy_poll_us;
    h.autocorking_size = static_cast<uint32_t>(std::min<uint64_t>(cfg.autocorking_size, 1u << 30));
    if (cfg.testonly_clc_timeout_ms) h.clc_timeout_ms = int(cfg.testonly_clc_timeout_ms);
    return h;
}

void set_mode(int fd, SockMode mode, uint32_t reason) {
    SockInfo s = g_fds.get(fd);
    if (!s.tracked()) return;
    s.mode = mode;
    s.reason = reason;
    g_fds.set(fd, s);
    if (mode == SockMode::SmcD && log::enabled(config::LogLevel::Info))
        if (SmcConn* c = slot(fd).load(std::memory_order_acquire); c && !is_late(c))
            log::info("fd {}: SMC-D, DMB {} here, {} at the peer", fd,
                      config::format_size(c->transport.rx_buffer_bytes()),
                      config::format_size(c->transport.tx_buffer_bytes()));
}

void count_result(uint32_t reason, bool smc) {
    counters::count(smc ? counters::conn_smcd : counters::conn_tcp);
    if (!smc && reason) counters::count_fallback(reason);
}

void install(int fd, std::unique_ptr<SmcConn> c, bool nonblock) {
    c->nonblock.store(nonblock);
    c->start_owner_refs();
    learn::begin(*c);
    SmcConn* conn = c.get();
    slot(fd).store(c.release(), std::memory_order_release);
    set_mode(fd, SockMode::SmcD, 0);
    if (conn->phase.load(std::memory_order_acquire) == Phase::Active) activated(fd, *conn);
}

void activated(int fd, SmcConn& c) {
    using namespace counters;
    smc_unblock(c); // writable now, and reachable by the peer's wake-ups
    counters::count_traffic(kRx, kBufs + bucket_of(c.transport.rx_buffer_bytes()));
    counters::count_traffic(kTx, kBufs + bucket_of(c.transport.tx_buffer_bytes()));
    diag::publish(runtime::get().seg, c, fd);
}

namespace {

// RX/TX requests (counters.hpp): one increment, in the bucket of the
// length asked for when the call moved data. Returns that length.
size_t count_request(counters::Dir dir, const iovec* iov, int iovcnt, ssize_t r) {
    size_t asked = 0;
    for (int i = 0; i < iovcnt; ++i)
        asked += iov[i].iov_len;
    unsigned slot =
        r > 0 ? counters::kReqs + counters::bucket_of(asked) : unsigned{counters::kNoData};
    counters::count_traffic(dir, slot);
    return asked;
}

void fold_counters(SmcConn* c) {
    counters::count(counters::notifications, c->notifications.load());
    counters::count(counters::notifications_suppressed, c->notifications_suppressed.load());
    counters::count(counters::cursor_updates, c->cursor_updates.load());
}

// Our copies of the descriptors and mappings, without touching the peer or
// the DMB pool (another process may still use them). Our DMB leaves our
// device's count if the device made it (else every connection a forked
// child closes last would keep its bytes counted here until MAX_DMB); the
// peer's DMB may be a mapping our device caches: it goes back there.
void drop_local(SmcConn* c) {
    space_watch::remove(c);
    smc_close_wakeups(*c);
    {
        std::lock_guard lock(g_engine_mu);
        transports_leave(*c, g_engine.devs);
    }
    c->transport.unmap();
}

// A poll() of another thread may still be inside a call on the wake-up
// pair of this (once Connecting) connection: it leaves before the object
// goes. Counted in ourselves, the pair cannot close under us while we wake
// them (the retirement leaves it to the last one out); retired, no new one
// comes in; the last to leave closes the pair.
void quiesce_pollers(SmcConn* c) {
    timespec pause{0, 100000};
    if (smc_sig_enter(*c)) {
        smc_retire_wakeups(*c);
        for (int spins = 0; c->sig_life.pollers() > 1; ++spins) {
            if (spins % 64 == 0) {
                smc_wake_all(*c);
            }
            nanosleep(&pause, nullptr);
        }
        smc_sig_leave(*c);
    }
    // (Retired before: the retirement woke them.) The last of them to leave
    // closes the pair after its count is off the word: wait for that too.
    while (c->sig_life.pollers() != 0 || (c->sig_life.phase() == readiness::SigPhase::Closed &&
                                          !c->pair_let_go.load(std::memory_order_acquire)))
        nanosleep(&pause, nullptr);
}

// Our last close says abort where TCP's sends a reset: data left unread
// (every byte, an urgent mark's or not), or SO_LINGER with a zero time
// (set on the socket before it connected, or on the listener it came
// from: the kernel's socket holds it).
bool aborts(SmcConn& c) {
    auto unread = core::cdc_readable(smc_peer_cdc(c), c.rx_cons.load(), c.transport.rx_ring_size());
    if (!unread || *unread > 0) return true;
    linger l{};
    socklen_t len = sizeof l;
    return c.tcp_fd >= 0 &&
           sys::real().getsockopt(c.tcp_fd, SOL_SOCKET, SO_LINGER, &l, &len) == 0 && l.l_onoff &&
           l.l_linger == 0;
}

} // namespace

void release(SmcConn* c) {
    user_leave(c);                 // before anything of it goes: its set looks at it
    peer_watch::remove_closing(c); // (every caller closes the TCP descriptor next)
    loop::forget(c->tcp_fd);
    smc_quiesce(*c); // no other thread of ours is inside a call on it any more
    smc_flush(*c);   // held (corked) bytes are sent, as close() sends them
    smc_cork_forget(*c);
    space_watch::remove(c);
    // Take `sig` out of every epoll set: forked children may hold copies
    // of it, so the kernel would keep the registrations (and their
    // epoll_data). With no fork since it was made, it is ours alone: its
    // close below (smc_close_wakeups, in either branch) drops them; unless
    // it becomes a spare, for the next connection (parked ones too: a
    // spare's kernel registrations must all be gone).
    {
        std::lock_guard lock(c->epoll_mu);
        bool ours_alone = c->sig_forks == forkref::forks_so_far();
        c->sig_reusable = smc_sig_reusable(*c);
        for (auto& m : c->epoll_members) {
            if (!ours_alone || c->sig_reusable)
                sys::real().epoll_ctl(m.epfd, EPOLL_CTL_DEL, c->sig, nullptr);
            if (!m.parked) note_epoll_member(m.epfd, -1);
        }
        c->epoll_members.clear();
    }
    // Nor may the peer wake it any more.
    if (c->sig_reusable) c->sig_reusable = smc_withdraw_requests(*c);
    fold_counters(c);
    diag::withdraw(runtime::get().seg, *c);
    // (Counted out before an exec that failed, and closed meanwhile by
    // the processes that still held it: not ours to close again.)
    if (!c->exec_out && forkref::unhold(*c->owner_refs)) {
        forkref::free(c->owner_refs);
        learn::end(*c); // unpaid, unless some process of ours saw it pay
        // The last process holding this side: tell the peer. Unread data
        // means an abort, as TCP answers with a reset.
        if (c->shared_by_fork() && !c->moved) c->adopt_published();
        // (Moved to TCP: the TCP close tells the peer.)
        if (!c->moved) smc_close(*c, aborts(*c));
        std::lock_guard lock(g_engine_mu);
        // A forked child that closes an inherited connection last gives its
        // DMB back to the process that made it (a slot: through the state
        // page they share, ism.hpp), which takes a device of its own; a
        // device is a GID and empty lists, no file.
        make_devices(false);
        transports_release(*c, g_engine.devs);
    } else {
        drop_local(c);
    }
    delete c;
}

void discard(SmcConn* c) {
    quiesce_pollers(c);
    diag::withdraw(runtime::get().seg, *c);
    if (c->learn_word) forkref::free(c->learn_word); // never handed out: nothing learned
    peer_watch::remove(c);
    loop::forget(c->tcp_fd);
    smc_cork_forget(*c);
    space_watch::remove(c);
    for (auto& r : c->connecting_regs) // closed while its handshake ran
        note_epoll_member(r.epfd, -1);
    c->connecting_regs.clear();
    if (c->transport.has_buffers()) {
        if (c->transport.attached()) smc_close(*c, true); // (else no peer to tell)
        std::lock_guard lock(g_engine_mu);
        transports_release(*c, g_engine.devs);
    }
    drop_local(c);
    delete c;
}

void discard_accepted(Accepted& a) {
    // No fork since it was queued: no other process holds a copy, and it
    // goes as any connection does (the peer told, the DMB back in the pool).
    if (a.claim && forkref::forks_so_far() == a.claim_forks) {
        forkref::free(a.claim);
        a.claim = nullptr;
    }
    if (a.claim) {
        // A copy another process may still hand out (SmcListener::claim):
        // ours goes without a word to the peer or the DMB pool. (The last
        // copy's TCP close tells the peer if nobody does.)
        if (SmcConn* c = a.conn.release()) {
            drop_local(c);
            delete c;
        }
        if (a.fd >= 0) {
            g_fds.clear(a.fd);
            sys::real().close(a.fd);
            a.fd = -1;
        }
        return;
    }
    if (a.conn) discard(a.conn.release());
    if (a.fd >= 0) {
        g_fds.clear(a.fd);
        sys::real().close(a.fd);
        a.fd = -1;
    }
}

bool fd_budget_ok(int fd) {
    // usmc's descriptors live in the top quarter of RLIMIT_NOFILE
    // (sys::place_high_strict); the application's, from the bottom. New SMC
    // connections only while the application stays clear of that quarter.
    constexpr int kReserve = 16;
    return fd + kReserve < sys::high_base();
}

bool fd_nonblocking(int fd) {
    int fl = sys::real().fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

} // namespace detail

using namespace detail;

namespace {

// A connection that went TCP while CLC messages may still be on their way
// (a Proposal after the server chose TCP; the server's Accept or Decline
// after the client gave up waiting): they are taken off the stream before
// the application reads. Data once the stream head is application data
// (or its end); LookAgain if it must be looked at again at the next read;
// TimedOut if a blocking read's SO_RCVTIMEO ran out with nothing there.
// A nonblocking read never waits: a CLC frame not whole yet (a single
// send arrives whole on this host: only a hostile peer sends half of one)
// goes to the application as it is, as after the wait a blocking read
// gives it (a peer that held every nonblocking read for that wait stalled
// an event-loop server a second per connection).
enum class LateClc { Data, LookAgain, TimedOut };

// A blocking read's SO_RCVTIMEO in ms (-1: none, it waits for ever).
int receive_timeout_ms(int fd) {
    timeval tv{};
    socklen_t len = sizeof tv;
    if (sys::real().getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) != 0 ||
        (!tv.tv_sec && !tv.tv_usec))
        return -1;
    return int(std::min<long>(tv.tv_sec * 1000L + (tv.tv_usec + 999) / 1000,
                              std::numeric_limits<int>::max()));
}

// A client that gave up waiting (registry::announce_gave_up) has its
// server's late answer: the server took the Proposal off the stream, and the
// port it kept known goes.
void forget_gave_up(int fd) {
    sockaddr_storage local{}, server{};
    socklen_t llen = sizeof local, slen = sizeof server;
    if (sys::real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
        sys::real().getpeername(fd, reinterpret_cast<sockaddr*>(&server), &slen) != 0)
        return;
    uint16_t port =
        ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    registry::announce_answered(reinterpret_cast<sockaddr*>(&server), slen, port);
}

LateClc skip_late_clc(int fd, bool nonblock, bool answer) {
    // A blocking read's receive timeout, asked for when first needed: one
    // deadline for all its waits (new bytes, the rest of a frame begun: a
    // peer that trickles CLC messages holds the read no longer), and a
    // second at most for the rest of a frame without one.
    int timeout = nonblock ? 0 : -2;
    uint64_t deadline_ns = 0;
    auto timeout_ms = [&] { // what is left: 0 never waits, -1 waits for ever
        if (timeout == -2) {
            timeout = receive_timeout_ms(fd);
            if (timeout > 0) deadline_ns = sys::mono_ns() + uint64_t(timeout) * 1000000;
        }
        if (timeout <= 0) return timeout;
        uint64_t now = sys::mono_ns();
        return now >= deadline_ns ? 0 : int((deadline_ns - now + 999999) / 1000000);
    };
    auto rest_ms = [&] {
        int left = timeout_ms();
        return left < 0 ? 1000 : std::min(1000, left);
    };
    for (int round = 0; round < 8; ++round) {
        switch (clc::classify(fd, 0)) {
        case clc::FirstBytes::Proposal:
            // Answered with a Decline only if we have written nothing: a
            // client that already read our bytes has gone TCP, and a Decline
            // would land in its data.
            if (answer)
                smc_decline_late_proposal(fd, fallback::PEERNOSMC);
            else if (clc::read_message(fd, rest_ms()).status != clc::ReadStatus::Message)
                return LateClc::LookAgain;
            counters::count(counters::late_proposals);
            continue;
        case clc::FirstBytes::OtherClc:
            if (clc::read_message(fd, rest_ms()).status != clc::ReadStatus::Message)
                return LateClc::LookAgain;
            forget_gave_up(fd); // (a client's: the server has answered)
            continue;
        case clc::FirstBytes::Other:
        case clc::FirstBytes::Closed:
            return LateClc::Data;
        case clc::FirstBytes::Nothing: {
            if (nonblock) return LateClc::LookAgain;
            // A blocking read must not take CLC bytes that arrive later; it
            // waits as long as the socket's receive timeout lets it.
            pollfd p{fd, POLLIN, 0};
            int n = sys::real().poll(&p, 1, timeout_ms());
            if (n == 0) return LateClc::TimedOut;
            if (n < 0) return LateClc::LookAgain;
            continue;
        }
        }
    }
    return LateClc::LookAgain;
}

// False: a blocking read's receive timeout ran out (EAGAIN, as TCP's).
bool handle_late_clc(SmcConn* c, int fd, int flags) {
    bool nonblock = (flags & MSG_DONTWAIT) || fd_nonblocking(fd);
    LateClc r = skip_late_clc(fd, nonblock, c == kLateClc);
    if (r == LateClc::TimedOut) return false;
    if (r == LateClc::LookAgain) return true; // look again at the next read
    if (is_late(c)) {
        SmcConn* expected = c;
        slot(fd).compare_exchange_strong(expected, nullptr);
    } else {
        c->late_clc.store(false, std::memory_order_release);
    }
    return true;
}

// A call on a connection whose handshake may still run on a worker: 0 when
// it is Active, kPassThrough when it ended as TCP, -EAGAIN for a nonblocking
// call while the handshake runs (a blocking one waits for it).
ssize_t await_handshake(SmcConn* c, bool nonblock) {
    Phase p = c->phase.load(std::memory_order_acquire);
    while (p == Phase::Connecting) {
        if (nonblock) return -EAGAIN;
        c->phase.wait(p, std::memory_order_acquire);
        p = c->phase.load(std::memory_order_acquire);
    }
    return p == Phase::Active ? 0 : kPassThrough;
}

namespace {
// The kernel's most bytes of one read or write (MAX_RW_COUNT).
constexpr size_t kMaxRwCount = 0x7ffff000;

// sendfile through a buffer: read (at `offset`, or at the file's position,
// which may be a pipe's and block) outside the send lock, then sent. Read
// straight into the peer's ring under the send lock instead, nginx's
// keep-alive load ran 5 % slower (docs/bench-history.md).
ssize_t sendfile_buffered(SmcConn* c, int fd, int in_fd, off_t* offset, size_t count) {
    char buf[65536];
    size_t done = 0;
    off_t pos = offset ? *offset : 0;
    while (done < count) {
        size_t want = std::min(sizeof buf, count - done);
        ssize_t n = offset ? pread(in_fd, buf, want, pos) : sys::real().read(in_fd, buf, want);
        if (n < 0) {
            if (done) break;
            return -1;
        }
        if (n == 0) break;
        iovec iov{buf, size_t(n)};
        ssize_t w = send(c, fd, &iov, 1, 0);
        if (w < 0) {
            if (done) break;
            return -1;
        }
        done += size_t(w);
        pos += w;
        if (w < n) {
            // The peer's ring is full: give back what we read beyond it.
            if (!offset) lseek(in_fd, w - n, SEEK_CUR);
            break;
        }
    }
    if (offset) *offset = pos;
    return ssize_t(done);
}

// Threads walking the connection table for a fork (before_fork,
// fork_returned): a connection they loaded must outlive the walk, and a
// failed fork's undo must come before a close's count (else the close
// took 2 -> 1, saw another holder, and the undo's 1 -> 0 told nobody).
std::atomic<int> g_fork_scans{0};
thread_local bool t_fork_scanning = false;
struct ForkScan {
    ForkScan() {
        t_fork_scanning = true;
        g_fork_scans.fetch_add(1);
    }
    ~ForkScan() {
        g_fork_scans.fetch_sub(1);
        t_fork_scanning = false;
    }
};

// A connection leaving the table (close, dup2 over it): a fork's walk that
// may have loaded it finishes first (it is short; our own, if a signal
// handler closes during it, is not waited for).
void wait_for_fork_scans() {
    if (t_fork_scanning) return;
    while (g_fork_scans.load() != 0)
        sched_yield();
}
} // namespace

// Waits (bounded by the CLC timeouts the worker applies) until the thread
// that ran a connection's handshake (a worker, the loop) has let go of it.
void wait_for_worker(SmcConn* c) {
    while (!c->worker_done.load(std::memory_order_acquire)) {
        timespec pause{0, 200000};
        nanosleep(&pause, nullptr);
    }
}

} // namespace

void init(uint32_t capacity, uint32_t busy_poll_us) {
    size_t bytes = size_t{capacity} * sizeof(void*);
    if (busy_poll_us > 0) {
        void* sets = mmap(nullptr, size_t{capacity} * sizeof(int32_t), PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (sets != MAP_FAILED) {
            g_epoll_smc = static_cast<std::atomic<int32_t>*>(sets);
            g_busy_poll_us = busy_poll_us;
        }
    }
    void* conns = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void* listeners = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (conns == MAP_FAILED || listeners == MAP_FAILED) return;
    g_listeners = static_cast<std::atomic<SmcListener*>*>(listeners);
    user_sets_init(capacity);
    g_conns_capacity = capacity;
    g_conns.store(static_cast<std::atomic<SmcConn*>*>(conns), std::memory_order_release);
}

bool is_listener(int fd) {
    return in_table(fd) && g_listeners[fd].load(std::memory_order_acquire) != nullptr;
}

Closed on_close(int fd) {
    Closed closed;
    if (!in_table(fd)) return closed;
    if (has_user_set(fd)) user_set_closed(fd);
    // An epoll set closed with SMC registrations still counted: the next set
    // to get its number must not spin for them. (Only with busy polling.)
    if (auto* sets = g_epoll_smc; sets && sets[fd].load(std::memory_order_relaxed) != 0) {
        sets[fd].store(0, std::memory_order_relaxed);
        g_epoll_sets_closed.fetch_add(1, std::memory_order_acq_rel);
    }
    // Most closes are of fds usmc holds nothing for: two loads, no stores.
    if (g_listeners[fd].load(std::memory_order_acquire) == nullptr &&
        slot(fd).load(std::memory_order_acquire) == nullptr)
        return closed;
    if (auto* l = g_listeners[fd].exchange(nullptr, std::memory_order_acq_rel)) {
        listen_watch_remove(l); // before the descriptor number can be reused
        struct stat st;
        closed.listener = l;
        closed.inode = fstat(fd, &st) == 0 ? st.st_ino : 0;
        closed.fd = fd;
    }
    SmcConn* c = slot(fd).exchange(nullptr, std::memory_order_acq_rel);
    if (!c || is_late(c)) return closed;
    if (c->fd_refs.fetch_sub(1, std::memory_order_acq_rel) > 1) {
        // Another descriptor (dup) still names it: keep watching a live one.
        if (c->tcp_fd == fd) {
            auto* conns = g_conns.load();
            for (uint32_t i = 0; i < g_fds.high() && i < g_conns_capacity; ++i)
                if (conns[i].load() == c) {
                    c->tcp_fd = static_cast<int>(i);
                    // Observers find it under the descriptor that names it now.
                    diag::withdraw(runtime::get().seg, *c);
                    if (c->phase.load() == Phase::Active)
                        diag::publish(runtime::get().seg, *c, c->tcp_fd);
                    break;
                }
        }
        return closed;
    }
    wait_for_fork_scans();
    if (c->phase.load() == Phase::Connecting) {
        // The worker still talks CLC on this socket: cut it short, wait until
        // it lets go, then the descriptor number may be reused.
        sys::real().shutdown(fd, SHUT_RDWR);
        wait_for_worker(c);
    } else {
        // Active or Tcp, with the handshake's last steps (making `sig`
        // writable and the first arm, or the switch back to TCP) still
        // running on the loop or a worker: microseconds.
        wait_for_worker(c);
    }
    // The peer moved to TCP and we never looked: what we wrote that it did
    // not read goes over TCP before our close does.
    if (c->phase.load() == Phase::Active && smc_move_noticed(*c)) take_move(fd, c);
    if (c->phase.load() == Phase::Active || c->moved.load()) {
        release(c);
    } else {
        user_leave(c); // (a set held it while it connected: its end let go already)
        discard(c);
    }
    return closed;
}

void after_close(const Closed& closed) {
    auto* l = static_cast<SmcListener*>(closed.listener);
    if (!l) return;
    l->reg().socket_closed(closed.inode, closed.fd);
    for (auto& a : l->close())
        discard_accepted(a);
    std::lock_guard lock(g_listen_mu); // congestion updates walk the listeners under it
    l->unref();
}

void on_dup(int from, int to) {
    if (!in_table(from) || !in_table(to)) return;
    // An epoll set under two numbers: its user-memory part cannot follow.
    if (has_user_set(from)) user_set_fallback(from);
    if (has_user_set(to)) user_set_closed(to);
    SmcConn* c = slot(from).load();
    if (is_late(c)) c = nullptr;
    if (c) c->fd_refs.fetch_add(1, std::memory_order_acq_rel);
    SmcConn* old = slot(to).exchange(c);
    if (old && !is_late(old) && old->fd_refs.fetch_sub(1) == 1) {
        wait_for_fork_scans();
        wait_for_worker(old);
        if (old->phase.load() == Phase::Active || old->moved.load())
            release(old);
        else
            discard(old);
    }
}

ssize_t recv(SmcConn* c, int fd, const iovec* iov, int iovcnt, int flags) {
    if (is_late(c)) return handle_late_clc(c, fd, flags) ? kPassThrough : fail(EAGAIN);
    if (c->phase.load(std::memory_order_acquire) == Phase::Tcp) {
        if (c->moved_left.load(std::memory_order_acquire)) return moved_recv(c, iov, iovcnt, flags);
        if (c->late_clc.load(std::memory_order_acquire) && !handle_late_clc(c, fd, flags))
            return fail(EAGAIN);
        return kPassThrough;
    }
    bool nonblock = c->nonblock.load(std::memory_order_relaxed) || (flags & MSG_DONTWAIT);
    if (c->phase.load(std::memory_order_acquire) != Phase::Active)
        if (ssize_t r = await_handshake(c, nonblock); r != 0)
            return r == kPassThrough ? r : fail(int(-r));
    if (flags & MSG_OOB) [[unlikely]] {
        // The urgent byte goes into the first buffer with room (none: 0, as TCP).
        int i = 0;
        while (i < iovcnt && iov[i].iov_len == 0)
            ++i;
        ssize_t r = i < iovcnt
                        ? smc_recv_urgent(*c, iov[i].iov_base, iov[i].iov_len, flags & MSG_PEEK)
                        : smc_recv_urgent(*c, nullptr, 0, flags & MSG_PEEK);
        if (!(flags & MSG_PEEK)) count_request(counters::kRx, iov, iovcnt, r);
        if (r < 0) return fail(int(-r));
        if (!(flags & MSG_PEEK)) counters::count(counters::smcd_bytes_rx, uint64_t(r));
        return r;
    }
    ssize_t r = smc_recv(*c, iov, iovcnt, flags & (MSG_PEEK | MSG_WAITALL), nonblock,
                         c->rcvtimeo_ms.load());
    if (r == kSmcNoSig) [[unlikely]] {
        move_out(fd, c, false); // nothing to sleep on: TCP has its own
        if (c->phase.load(std::memory_order_acquire) == Phase::Active) return fail(ENOBUFS);
        return recv(c, fd, iov, iovcnt, flags); // (once: it is TCP now)
    }
    if (r == kSmcMoved) [[unlikely]] {
        if (!take_move(fd, c)) return fail(ECONNRESET);
        return recv(c, fd, iov, iovcnt, flags); // (once: it is TCP now)
    }
    if (!(flags & MSG_PEEK)) count_request(counters::kRx, iov, iovcnt, r);
    if (r < 0) return fail(int(-r));
    if (!(flags & MSG_PEEK)) {
        counters::count(counters::smcd_bytes_rx, uint64_t(r));
        if (r > 0) learn::note_io(*c, SmcConn::kLearnIn, uint64_t(r));
    }
    return r;
}

ssize_t send(SmcConn* c, int fd, const iovec* iov, int iovcnt, int flags) {
    bool nonblock = c->nonblock.load(std::memory_order_relaxed) || (flags & MSG_DONTWAIT);
    if (c->phase.load(std::memory_order_acquire) != Phase::Active) {
        ssize_t r = await_handshake(c, nonblock);
        if (r == kPassThrough && c->moved_left.load(std::memory_order_acquire))
            if (int pushed = moved_push(c, fd, nonblock); pushed != 0) {
                if (pushed == -EPIPE && !(flags & MSG_NOSIGNAL)) raise(SIGPIPE);
                return fail(-pushed);
            }
        if (r == kPassThrough) {
            msghdr m{};
            m.msg_iov = const_cast<iovec*>(iov);
            m.msg_iovlen = size_t(iovcnt);
            return sys::real().sendmsg(fd, &m, flags);
        }
        if (r < 0) return fail(int(-r));
    }
    ssize_t r = smc_send(*c, iov, iovcnt, nonblock, c->sndtimeo_ms.load(), flags & MSG_MORE,
                         flags & MSG_OOB);
    if (r == kSmcNoSig) [[unlikely]] {
        move_out(fd, c, false); // nothing to sleep on: TCP has its own
        if (c->phase.load(std::memory_order_acquire) == Phase::Active) return fail(ENOBUFS);
        return send(c, fd, iov, iovcnt, flags); // (once: it is TCP now)
    }
    if (r == kSmcMoved) [[unlikely]] {
        if (!take_move(fd, c)) return fail(ECONNRESET);
        return send(c, fd, iov, iovcnt, flags); // (once: it is TCP now)
    }
    size_t asked = count_request(counters::kTx, iov, iovcnt, r);
    if (asked > c->transport.tx_ring_size()) [[unlikely]]
        counters::count_traffic(counters::kTx, counters::kTooSmallPeer);
    if (r == -EPIPE && !(flags & MSG_NOSIGNAL)) raise(SIGPIPE);
    if (r < 0) return fail(int(-r));
    counters::count(counters::smcd_bytes_tx, uint64_t(r));
    if (r > 0) learn::note_io(*c, SmcConn::kLearnOut, uint64_t(r));
    return r;
}

ssize_t sendfile(SmcConn* c, int fd, int in_fd, off_t* offset, size_t count) {
    if (ssize_t(count) < 0) return fail(EINVAL);
    count = std::min<size_t>(count, kMaxRwCount);
    if (c->phase.load(std::memory_order_acquire) != Phase::Active) {
        ssize_t r = await_handshake(c, c->nonblock.load());
        if (r == kPassThrough && c->moved_left.load(std::memory_order_acquire))
            if (int pushed = moved_push(c, fd, c->nonblock.load()); pushed != 0)
                return fail(-pushed);
        if (r == kPassThrough) return sys::real().sendfile(fd, in_fd, offset, count);
        if (r < 0) return fail(int(-r));
    }
    if (count == 0) return 0;
    return sendfile_buffered(c, fd, in_fd, offset, count);
}

int shutdown(SmcConn* c, int fd, int how) {
    if (c->phase.load(std::memory_order_acquire) == Phase::Active && smc_move_noticed(*c))
        take_move(fd, c);
    if (c->phase.load(std::memory_order_acquire) != Phase::Active) {
        // Moved to TCP: its resend goes before the end of the stream.
        if (how != SHUT_RD && c->moved_left.load(std::memory_order_acquire))
            moved_push(c, fd, false);
        return sys::real().shutdown(fd, how); // mid-handshake: the handshake fails, TCP stays
    }
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return fail(EINVAL);
    if (how != SHUT_WR && !c->rd_shut.exchange(true, std::memory_order_acq_rel)) {
        // As TCP's RCV_SHUTDOWN: reads that would wait end (our blocked
        // readers wake to see it), sets and poll report IN|RDHUP. Nothing
        // is said to the peer; what it sends is still read.
        smc_self_wake(*c);
        smc_wake_user(*c);
    }
    if (how != SHUT_RD) {
        smc_flush(*c); // held (corked) bytes go before the end of the stream
        smc_shutdown_write(*c);
    }
    return 0;
}

namespace {

tcp_opts::Opt opt_of(int optname) {
    return optname == TCP_CORK ? tcp_opts::Opt::Cork : tcp_opts::Opt::Nodelay;
}

int name_of(tcp_opts::Opt o) {
    return o == tcp_opts::Opt::Cork ? TCP_CORK : TCP_NODELAY;
}

// One compare-and-swap of the connection's option byte: the new byte.
template <class Fn>
uint8_t update_tcp_opts(SmcConn& c, Fn next) {
    uint8_t w = c.tcp_opts.load();
    uint8_t n;
    do {
        n = next(w);
    } while (!c.tcp_opts.compare_exchange_weak(w, n));
    return n;
}

// The send path as the kernel's TCP follows the option: TCP_CORK holds
// bytes back, and pushes what it held when it goes off; TCP_NODELAY on
// pushes what is pending, corked or not (the cork itself stays).
void tcp_option_to_send_path(SmcConn& c, tcp_opts::Opt o, bool on) {
    if (o == tcp_opts::Opt::Cork)
        smc_set_cork(c, on);
    else if (on)
        smc_flush(c);
}

} // namespace

int set_tcp_option(SmcConn* c, int fd, int optname, const void* optval, socklen_t optlen) {
    tcp_opts::Opt o = opt_of(optname);
    if (c->phase.load(std::memory_order_acquire) != Phase::Active || c->shared_by_fork()) {
        // The kernel's socket keeps it: a handshake may still fall back; a
        // process sharing the connection sees only the socket.
        if (sys::real().setsockopt(fd, IPPROTO_TCP, optname, optval, optlen) != 0) return -1;
        bool on = *static_cast<const int*>(optval) != 0; // (the kernel read an int there)
        uint8_t w = update_tcp_opts(*c, [&](uint8_t x) { return tcp_opts::set(x, o, on, true); });
        // Active meanwhile (tcp_options_active reads the byte after the
        // phase changed): the send path follows.
        if (c->phase.load() == Phase::Active) tcp_option_to_send_path(*c, o, tcp_opts::on(w, o));
        return 0;
    }
    bool on = false;
    if (int err = sockopt::tcp_flag(optval, optlen, on)) return fail(err);
    update_tcp_opts(*c, [&](uint8_t x) { return tcp_opts::set(x, o, on, false); });
    tcp_option_to_send_path(*c, o, on);
    // Moved to TCP meanwhile: its sync may have read the byte before.
    if (c->phase.load() != Phase::Active) sync_tcp_options(fd, *c);
    return 0;
}

int get_tcp_option(SmcConn* c, int fd, int optname, void* optval, socklen_t* optlen) {
    if (c->phase.load(std::memory_order_acquire) != Phase::Active || c->shared_by_fork())
        return sys::real().getsockopt(fd, IPPROTO_TCP, optname, optval, optlen);
    tcp_opts::Opt o = opt_of(optname);
    uint8_t w = c->tcp_opts.load();
    if (!tcp_opts::known(w, o)) {
        // Never set through usmc: the kernel's socket holds it (set before
        // connect(), inherited from the listener). Read once.
        int v = 0;
        socklen_t len = sizeof v;
        if (sys::real().getsockopt(fd, IPPROTO_TCP, optname, &v, &len) != 0) return -1;
        w = update_tcp_opts(*c, [&](uint8_t x) { return tcp_opts::read(x, o, v != 0); });
    }
    int err = sockopt::put_int(tcp_opts::on(w, o) ? 1 : 0, optval, optlen);
    return err ? fail(err) : 0;
}

namespace detail {

void sync_tcp_options(int fd, SmcConn& c) {
    uint8_t w = c.tcp_opts.load();
    for (tcp_opts::Opt o : tcp_opts::kOpts) {
        if (!tcp_opts::to_apply(w, o)) continue;
        int v = tcp_opts::on(w, o) ? 1 : 0;
        if (sys::real().setsockopt(fd, IPPROTO_TCP, name_of(o), &v, sizeof v) == 0)
            update_tcp_opts(c, [&](uint8_t x) { return tcp_opts::applied(x, o, v != 0); });
        else
            log::warn("fd {}: the kernel's socket refused {} = {} ({})", fd,
                      o == tcp_opts::Opt::Cork ? "TCP_CORK" : "TCP_NODELAY", v,
                      std::strerror(errno));
    }
}

void tcp_options_active(SmcConn& c) {
    uint8_t w = c.tcp_opts.load();
    if (tcp_opts::known(w, tcp_opts::Opt::Cork) && tcp_opts::on(w, tcp_opts::Opt::Cork))
        smc_set_cork(c, true);
}

} // namespace detail

void set_nonblock(SmcConn* c, bool on) {
    c->nonblock.store(on, std::memory_order_relaxed);
}

void set_timeout(SmcConn* c, int optname, const void* optval, socklen_t optlen) {
    if (!optval || optlen < sizeof(timeval)) return;
    const auto* tv = static_cast<const timeval*>(optval);
    int ms =
        (tv->tv_sec == 0 && tv->tv_usec == 0) ? -1 : int(tv->tv_sec * 1000 + tv->tv_usec / 1000);
    if (ms == 0) ms = 1;
    (optname == SO_RCVTIMEO ? c->rcvtimeo_ms : c->sndtimeo_ms).store(ms);
}

int ioctl_queue(SmcConn* c, int fd, unsigned long request, int* out) {
    if (!out) return fail(EFAULT);
    Phase p = c->phase.load(std::memory_order_acquire);
    if (p == Phase::Tcp) return sys::real().ioctl(fd, request, out);
    if (request == FIONREAD)
        *out = p == Phase::Active ? int(smc_rx_available(*c)) : 0;
    else if (request == SIOCOUTQ)
        *out = p == Phase::Active ? int(smc_tx_unconsumed(*c)) : 0;
    else if (request == SIOCATMARK)
        *out = p == Phase::Active && smc_at_mark(*c);
    else
        return fail(EINVAL);
    return 0;
}

void note_late_write(int fd) {
    SmcConn* expected = kLateClc;
    slot(fd).compare_exchange_strong(expected, kLateClcWrote);
}

bool take_so_error(int fd, int* err) {
    SmcConn* c = conn_of(fd);
    if (reinterpret_cast<uintptr_t>(c) <= 2) return false;
    if ((*err = c->so_error.exchange(0))) return true;
    if (c->phase.load(std::memory_order_acquire) != Phase::Active) return false;
    // The peer's reset, as TCP's sk_err: reported once, by whichever call
    // comes first (recv, send, this). A peer that aborted by SO_LINGER 0
    // reset the TCP connection too: that error is the same one.
    bool took = smc_take_error(*c);
    if (!took && smc_close_state(*c) != core::CloseState::ResetTaken) return false;
    int kernel = 0;
    socklen_t len = sizeof kernel;
    sys::real().getsockopt(fd, SOL_SOCKET, SO_ERROR, &kernel, &len);
    *err = took ? ECONNRESET : 0;
    return true;
}

namespace {
uint64_t g_walk = 0; // SmcConn::walk_mark

// Each descriptor of an established connection: `fn(fd, c)`. No allocation
// (exit, exec).
template <class Fn>
void each_fd(Fn fn) {
    auto* conns = g_conns.load();
    for (uint32_t fd = 0; conns && fd < g_fds.high() && fd < g_conns_capacity; ++fd) {
        SmcConn* c = conns[fd].load();
        if (!c || is_late(c) || c->phase.load() != Phase::Active || !c->transport.has_buffers())
            continue;
        fn(fd, c);
    }
}

// Each connection once, however many descriptors name it (dup).
template <class Fn>
void each_conn(Fn fn) {
    uint64_t mark = ++g_walk;
    each_fd([&](uint32_t, SmcConn* c) {
        if (c->walk_mark == mark) return;
        c->walk_mark = mark;
        fn(c);
    });
}
// Connections moved to TCP with a resend left: it goes now, for a while
// (exit, exec, a seccomp filter: the loop will not push it any more, or
// `send` may be fatal).
void push_moved_left(bool exec) {
    auto* conns = g_conns.load();
    for (uint32_t fd = 0; conns && fd < g_fds.high() && fd < g_conns_capacity; ++fd)
        if (SmcConn* c = conns[fd].load();
            c && !is_late(c) && c->moved_left.load(std::memory_order_acquire))
            moved_at_exit(int(fd), c, exec);
}
} // namespace

void on_exit() {
    static std::atomic<bool> done{false};
    if (done.exchange(true)) return; // exit() after an _exit() we saw, or twice
    // Moved to TCP (by the peer, noticed or not): what we wrote that it
    // never read goes over TCP before our exit closes it.
    each_fd([](uint32_t fd, SmcConn* c) {
        if (smc_move_noticed(*c)) take_move(int(fd), c, false);
    });
    push_moved_left(false);
    each_conn([](SmcConn* c) {
        // Held by another process too (a forked child, or the parent): its
        // close is now the last, and tells the peer.
        if (c->exec_out || !forkref::unhold(*c->owner_refs)) return;
        forkref::free(c->owner_refs);
        if (c->shared_by_fork()) c->adopt_published();
        // Unread data makes it an abort, as TCP's close at exit sends a reset.
        if (!c->moved && !(c->conn_flags.load() & (core::kPeerConnClosed | core::kPeerConnAbort)))
            smc_close(*c, aborts(*c));
        // (A forked child that exits with the connection open: the slot
        // would stay "used" in its parent's segment for good.)
        c->transport.release_at_exit();
    });
}

void detail::conns_before_exec() {
    user_sets_before_exec(); // a set the new image keeps is the kernel's
    // A connection closes with the exec unless one of its descriptors lacks
    // close-on-exec (the new program holds that one; usmc's state of it goes
    // with this image, so its count stays as it is).
    each_fd([](uint32_t, SmcConn* c) { c->exec_closes = true; });
    each_fd([](uint32_t fd, SmcConn* c) {
        int fl = sys::real().fcntl(int(fd), F_GETFD);
        if (fl >= 0 && !(fl & FD_CLOEXEC)) c->exec_closes = false;
    });
    // One the new program holds moves to TCP with its peer: the new program
    // reads and writes the socket, wrapped or not (af_smc_move.cpp). One
    // whose peer moved already follows it (its resend goes below).
    each_fd([](uint32_t fd, SmcConn* c) {
        if (smc_move_noticed(*c))
            take_move(int(fd), c, false);
        else if (!c->exec_closes)
            move_out(int(fd), c, true);
    });
    push_moved_left(true);
    // Count this process out of those another process still holds (a forked
    // child that execs: its parent's close is then the last, and tells the
    // peer). The last holder stays counted: its exec ends the TCP
    // connection, which the peer reads as a close (rx.cpp).
    each_conn([](SmcConn* c) {
        if (!c->exec_closes || c->exec_out) return;
        c->exec_gen = forkref::generation(*c->owner_refs);
        c->exec_out = forkref::leave_unless_last(*c->owner_refs);
    });
}

namespace {
// Every connection of this process to TCP with its peer (one whose peer
// moved first follows it).
void move_every_connection() {
    each_fd([](uint32_t fd, SmcConn* c) {
        if (smc_move_noticed(*c))
            take_move(int(fd), c);
        else
            move_out(int(fd), c, false);
    });
    push_moved_left(false);
}
} // namespace

void before_sandbox() {
    // A seccomp filter may forbid what the SMC data path calls (OpenSSH's
    // preauth sandbox kills on sendto): every connection moves to TCP
    // first, while this process may still make any call.
    runtime::note_sandboxed();
    move_every_connection();
}

void before_io_uring() {
    static std::atomic<bool> done{false};
    if (done.exchange(true)) return;
    runtime::note_io_uring();
    log::info("io_uring set up: this process's SMC connections move to TCP, new ones are TCP");
    move_every_connection();
}

void before_pass(const msghdr* msg) {
    if (!msg || !msg->msg_control || msg->msg_controllen < sizeof(cmsghdr)) return;
    const char* end = static_cast<const char*>(msg->msg_control) + msg->msg_controllen;
    for (cmsghdr* h = CMSG_FIRSTHDR(const_cast<msghdr*>(msg)); h;
         h = CMSG_NXTHDR(const_cast<msghdr*>(msg), h)) {
        // (glibc checks no header's length against the buffer's: the
        // kernel refuses such a message, and it is read no further here.)
        if (h->cmsg_len < sizeof(cmsghdr) ||
            h->cmsg_len > size_t(end - reinterpret_cast<const char*>(h)))
            break;
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS || h->cmsg_len < CMSG_LEN(0))
            continue;
        size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const unsigned char* at = CMSG_DATA(h);
        for (size_t i = 0; i < n; ++i) {
            int fd;
            std::memcpy(&fd, at + i * sizeof(int), sizeof fd);
            if (epoll_in_user_memory(fd)) user_set_fallback(fd);
            if (is_listener(fd)) listener_passed(fd);
            SmcConn* c = conn_of(fd);
            if (reinterpret_cast<uintptr_t>(c) <= 2 || is_late(c)) continue;
            // (A handshake still running ends first: the other process must
            // not read its CLC messages, nor find the socket gone SMC.)
            if (await_handshake(c, false) != 0) continue;
            if (smc_move_noticed(*c)) {
                // The peer moved first: what it wrote that we had not read
                // is ours alone (our stash), and the other process cannot
                // read it.
                take_move(fd, c, false);
                if (auto L = c->left; L && L->stash_left.load(std::memory_order_acquire)) {
                    counters::count(counters::moved_bytes_lost, L->stash.size() - L->stashed);
                    log::warn("fd {}: passed after its peer moved to TCP: {} bytes not read "
                              "here are lost to the other process",
                              fd, L->stash.size() - L->stashed);
                }
            } else {
                move_out(fd, c, false, true);
            }
        }
    }
}

void detail::conns_exec_failed() {
    if (auto* conns = g_conns.load())
        for (uint32_t fd = 0; fd < g_fds.high() && fd < g_conns_capacity; ++fd)
            if (SmcConn* c = conns[fd].load(); c && !is_late(c) && c->moved.load())
                moved_exec_failed(int(fd), c);
    each_conn([](SmcConn* c) {
        if (!c->exec_out) return;
        if (forkref::rehold(*c->owner_refs, c->exec_gen)) {
            c->exec_out = false;
            return;
        }
        // Its other holders closed it while we were out: the peer was told,
        // its buffers may serve another connection. Ours fails from now on.
        log::warn("a connection closed by another process during a failed exec is broken");
        smc_break(*c);
    });
}

namespace {
uint64_t g_fork_gen = 1;
// The fork this thread's prepare handler counted for (0: none): a fork()
// that fails returns in the thread that began it (fork_returned).
thread_local uint64_t t_fork_gen = 0;

template <typename F>
void for_each_listener(F&& f) {
    if (!g_listeners) return;
    std::lock_guard lock(g_listen_mu); // a listener closed meanwhile is not deleted
    for (uint32_t fd = 0; fd < g_fds.high() && fd < g_conns_capacity; ++fd)
        if (SmcListener* l = g_listeners[fd].load(std::memory_order_acquire)) f(*l);
}
} // namespace

// Every connection gains the reference the child will hold (each once,
// however many descriptors name it). Runs in the prepare handler: no
// allocation.
void before_fork() {
    // A connection the child shares runs on `sig` in both processes, and
    // only one of them could bind its name later: made before the child
    // exists, and before the fork is counted (a `sig` made before a fork
    // is never a spare: the other process may still use it). A fork from
    // a signal handler does not wait for a thread it interrupted; a
    // process that then has none moves the connection to TCP at its
    // first wait.
    if (ForkScan scan; auto* conns = g_conns.load()) {
        for (uint32_t fd = 0; fd < g_fds.high() && fd < g_conns_capacity; ++fd) {
            SmcConn* c = conns[fd].load();
            if (c && !is_late(c) && c->phase.load() == Phase::Active && !c->exec_out)
                smc_ensure_sig(*c, false);
        }
    }
    forkref::note_fork();
    uint64_t gen = ++g_fork_gen;
    t_fork_gen = gen;
    if (ForkScan scan; auto* conns = g_conns.load()) {
        for (uint32_t fd = 0; fd < g_fds.high() && fd < g_conns_capacity; ++fd) {
            SmcConn* c = conns[fd].load();
            if (!c || is_late(c) || c->phase.load() != Phase::Active || c->exec_out) continue;
            uint64_t was = c->fork_gen.load(std::memory_order_acquire);
            if (was == gen) continue;
            c->prev_fork_gen.store(was, std::memory_order_relaxed);
            c->fork_gen.store(gen, std::memory_order_release);
            forkref::hold(*c->owner_refs);
            // From here on both processes look at the kernel's socket.
            sync_tcp_options(int(fd), *c);
        }
    }
    // Either process may use a set next: every set falls back. After the
    // connections are marked shared, so that an epoll_ctl of another thread
    // cannot take one into a new set kept in user memory between the two
    // (it sees the mark under the sets' lock, or its set falls back here).
    user_sets_before_fork();
    // Each listener reserves the child's place among its holders before
    // the child exists, so its siblings never miss it (listen_share.hpp).
    for_each_listener([gen](SmcListener& l) {
        l.share().before_fork(gen);
        l.before_fork();
    });
}

// glibc's parent handler, after the fork whether it succeeded or not.
void after_fork_parent() {
    for_each_listener([](SmcListener& l) { l.after_fork_parent(); });
}

// fork() returned in the parent (the shim's fork, in the thread that began
// it). Failed: no child, so the references and reservations made for it
// go, each only while still this fork's (a compare-and-swap of the mark:
// another thread's fork that began since keeps its own). What a concurrent
// close or fork leaves stays a phantom holder, as before this was undone
// at all: it costs the peer only the SMC close (it reads the TCP one) and
// a shared listener the watcher's help.
void fork_returned(bool failed) {
    uint64_t gen = t_fork_gen;
    t_fork_gen = 0; // (a fork in a signal handler meanwhile: nothing undone)
    if (!gen || !failed) return;
    if (ForkScan scan; auto* conns = g_conns.load()) {
        for (uint32_t fd = 0; fd < g_fds.high() && fd < g_conns_capacity; ++fd) {
            SmcConn* c = conns[fd].load();
            // (Once per connection however many descriptors name it: the
            // mark may come back to this number, put back by the undo of
            // a fork that began after this one and failed too.)
            if (!c || is_late(c) || c->undone_gen.load(std::memory_order_relaxed) == gen) continue;
            uint64_t mark = gen;
            uint64_t prev = c->prev_fork_gen.load(std::memory_order_relaxed);
            if (c->fork_gen.compare_exchange_strong(mark, prev, std::memory_order_acq_rel)) {
                c->undone_gen.store(gen, std::memory_order_relaxed);
                forkref::unhold(*c->owner_refs); // (ours is held: a close waits for this walk)
            }
        }
    }
    for_each_listener([gen](SmcListener& l) { l.share().fork_failed(gen); });
}

bool holds_smc_connections() {
    auto* conns = g_conns.load();
    for (uint32_t fd = 0; conns && fd < g_fds.high() && fd < g_conns_capacity; ++fd) {
        SmcConn* c = conns[fd].load();
        if (c && !is_late(c) && c->phase.load() == Phase::Active) return true;
    }
    return false;
}

void on_fork_child() {
    // The parent's threads (endpoint, handshake workers) do not exist here;
    // its GID is the parent's. This process gets its own device, endpoint and
    // queues on first need. (The parent's objects are left alone: their
    // locks may be held.)
    log::on_fork_child();
    peer_watch::on_fork_child();
    space_watch::on_fork_child();
    wakeup::after_fork_child();
    connect_watch::on_fork_child();
    smc_cork_after_fork_child();
    listen_watch_fork_child();
    registry::on_fork_child();
    transports_after_fork_child(g_engine.devs);
    g_engine.server_q = nullptr;
    g_engine.client_q.store(nullptr);
    new (&g_engine_mu) std::mutex();
    new (&g_listen_mu) std::mutex();
    user_sets_after_fork_child();
    auto* conns = g_conns.load();
    for (uint32_t fd = 0; conns && fd < g_fds.high() && fd < g_conns_capacity; ++fd) {
        SmcConn* c = conns[fd].load();
        // A handshake the parent's worker runs: this copy just passes through.
        if (c && !is_late(c)) c->reset_locks_after_fork();
        // (And one the parent's loop or worker was finishing, Active or
        // Tcp, is finished here: no thread of this process will let go
        // of it, and close() waits for that.)
        if (c && !is_late(c)) c->worker_done.store(true);
        if (c && !is_late(c) && c->phase.load() == Phase::Connecting) {
            c->phase.store(Phase::Tcp);
            sync_tcp_options(int(fd), *c);
            if (c->user_set) { // (taken into a new set after the fork's fallback)
                std::lock_guard user_lock(user_sets_mutex());
                std::lock_guard lock(c->epoll_mu);
                user_connect_ended_locked(c);
            }
            c->worker_done.store(true);
            // The parent's worker may have taken DMBs for it already: they
            // are the parent's (a slot given back from here would be freed
            // under the parent's connection).
            c->transport.forget();
        }
        if (SmcListener* l = g_listeners ? g_listeners[fd].load() : nullptr) l->after_fork_child();
    }
    // Our new segment's records start empty: publish what this child holds
    // (each connection once, though dup may name it twice).
    diag::after_fork_child();
    for (uint32_t fd = 0; conns && fd < g_fds.high() && fd < g_conns_capacity; ++fd)
        if (SmcConn* c = conns[fd].load(); c && !is_late(c)) c->diag_slot = -1;
    for (uint32_t fd = 0; conns && fd < g_fds.high() && fd < g_conns_capacity; ++fd) {
        SmcConn* c = conns[fd].load();
        if (c && !is_late(c) && c->phase.load() == Phase::Active)
            diag::publish(runtime::get().seg, *c, c->tcp_fd);
    }
}

} // namespace usmc::af_smc

namespace usmc::runtime {
constinit const EngineHooks engine_hooks{
    af_smc::init,          af_smc::before_fork,   af_smc::after_fork_parent,
    af_smc::fork_returned, af_smc::on_fork_child, af_smc::holds_smc_connections,
    af_smc::on_exit};
} // namespace usmc::runtime
