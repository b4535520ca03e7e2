// SPDX-License-Identifier: MIT
// Receiving on an SMC-D connection: copy out of our own DMB ring, then tell
// the peer how far we have consumed — but only past the window update limit,
// when the ring runs empty, or when the peer sleeps waiting for space.
#include "engine/base/count.hpp"
#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/conn.hpp"
#include "engine/conn/peer_watch.hpp"
#include "engine/conn/wait.hpp"
#include "engine/core/data_path.hpp"
#include "engine/readiness/wakeup.hpp"

#include <cerrno>
#include <cstring>
#include <new>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>

namespace usmc {

namespace {

// Bytes the peer has produced into our ring and we have not consumed.
// nullopt: the peer's producer cursor is impossible.
std::optional<uint32_t> available(const SmcConn& c) {
    return core::cdc_readable(smc_peer_cdc(c), c.rx_cons.load(), c.transport.rx_ring_size());
}

// Only the flags that end something (core::cdc_ending_flags).
uint8_t peer_conn_flags(const SmcConn& c) {
    return core::cdc_ending_flags(smc_peer_cdc(c));
}

// After arming: whether anything a wake-up could have meant is true now.
// Every one of them, the peer's death too: the drain of the arm may have
// taken the wake-up the peer watch sent for it, after this call had looked.
bool woken_meanwhile(const SmcConn& c, uint32_t hidden) {
    auto avail = available(c);
    return !avail || *avail > hidden || peer_conn_flags(c) ||
           c.peer_gone.load(std::memory_order_acquire);
}

// After consuming: announce the consumer cursor when it matters, and wake a
// writer that sleeps for space.
void after_consume(SmcConn& c, bool ring_empty) {
    auto unannounced =
        core::distance(c.rx_cons_announced, c.rx_cons.load(), c.transport.rx_ring_size())
            .value_or(0);
    if (!core::cons_update_due(unannounced, c.transport.rx_ring_size(), ring_empty,
                               c.transport.writer_waits(), c.shared_by_fork()))
        return;
    c.publish_cons();
    if (c.transport.notify_writer()) // (its loop makes its `sig` writable)
        c.notifications.fetch_add(1, std::memory_order_relaxed);
}

// The ring was read empty by a call that returns data: `sig` must stop
// saying "readable" (a level-triggered watcher would read and get EAGAIN,
// which some programs, wrk among them, count as an error), and the peer must
// wake us on its next write (an edge-triggered watcher waits for it). If
// data slipped in before the request was visible, wake ourselves.
//
// With the peer's end already in view the socket stays readable (the end
// is, as TCP's is), so there is nothing to ask for: no drain, and no
// wake-up of our own when one is in `sig` already.
void arm_on_empty(SmcConn& c) {
    if (peer_conn_flags(c) || c.peer_gone.load(std::memory_order_acquire)) {
        if (!c.self_woken.load(std::memory_order_acquire) && !smc_wake_queued(c)) smc_self_wake(c);
        return;
    }
    smc_arm_for_data(c);
    if (woken_meanwhile(c, 0)) smc_self_wake(c);
}

// --- Urgent data (smcd/cdc_line.hpp; TCP's semantics as Linux implements them) ---
//
// A mark stands from the read that takes it in until the consumer cursor
// passes its urgent byte. While it stands a read stops before the byte;
// at the mark the byte is left out of the stream (skipped, or passed over
// by MSG_PEEK), unless SO_OOBINLINE keeps it in. recv(MSG_OOB) reads it once.
// A newer mark replaces it (TCP keeps only the latest); the old byte is then
// ordinary data, unless the reader stood at it: then it is dropped.

enum UrgState : uint8_t { kUrgNone = 0, kUrgValid = 1, kUrgRead = 2 };

struct Urg {
    core::Cursor at; // the urgent byte
    uint8_t state = kUrgNone;
    uint8_t byte = 0;
};

uint64_t pack_urg(const Urg& u) {
    return core::pack48(u.at) | uint64_t(u.state) << 48 | uint64_t(u.byte) << 56;
}
Urg unpack_urg(uint64_t w) {
    return {core::unpack48(w), uint8_t(w >> 48), uint8_t(w >> 56)};
}

// SO_OOBINLINE as the socket has it (set on it, or inherited from the
// listener): asked only while urgent data is about.
bool oob_inline(const SmcConn& c) {
    int on = 0;
    socklen_t len = sizeof on;
    return c.tcp_fd >= 0 &&
           sys::real().getsockopt(c.tcp_fd, SOL_SOCKET, SO_OOBINLINE, &on, &len) == 0 && on;
}

// The mark that stands, or the newer one the peer's words show (not taken in
// yet: `fresh`), without changing anything (poll, ioctl). `writing`: the peer
// is between its mark and its producer word. `bad`: the peer's mark is
// outside the data it produced that we have not consumed.
struct UrgView {
    Urg urg;
    bool fresh = false, writing = false, bad = false;
};

UrgView urg_view(const SmcConn& c, const core::PeerCdc& peer) {
    UrgView v;
    uint32_t key = c.rx_urg_key.load(std::memory_order_acquire);
    if (key & SmcConn::kUrgStands) v.urg = unpack_urg(c.rx_urg.load(std::memory_order_acquire));
    uint16_t count = peer.urg_count;
    if (count == uint16_t(key)) return v;
    core::UrgentMark mark = c.transport.receive_urgent_mark();
    if (mark.count != count) {
        v.writing = true;
        return v;
    }
    uint32_t ring = c.transport.rx_ring_size();
    core::Cursor cons = c.rx_cons.load();
    auto avail = core::cdc_readable(peer, cons, ring);
    auto before = core::distance(cons, mark.after, ring);
    if (!avail || !before || *before == 0 || *before > *avail) {
        v.bad = true;
        return v;
    }
    v.urg.at = core::advance(cons, *before - 1, ring);
    v.urg.state = kUrgValid;
    v.fresh = true;
    return v;
}

void urg_clear(SmcConn& c) {
    c.rx_urg_key.store(uint16_t(c.rx_urg_key.load(std::memory_order_relaxed)),
                       std::memory_order_release);
}

// Under rx_mu: consumes `n` bytes without copying them (urgent bytes that
// leave the stream).
void consume_silently(SmcConn& c, uint32_t n, uint32_t avail) {
    core::consume(c, c.transport, n);
    after_consume(c, n == avail);
    if (n == avail && c.epoll_watched.load(std::memory_order_relaxed)) arm_on_empty(c);
}

// Under rx_mu: takes in a newer mark the peer published. False: the mark is
// impossible, and the connection is now broken.
bool urg_take_in(SmcConn& c, const core::PeerCdc& peer) {
    uint32_t key = c.rx_urg_key.load(std::memory_order_relaxed);
    uint16_t count = peer.urg_count;
    if (count == uint16_t(key)) return true;
    core::UrgentMark marked = c.transport.receive_urgent_mark();
    if (marked.count != count) return true; // being written: take it later
    uint32_t ring = c.transport.rx_ring_size();
    core::Cursor prod = peer.prod;
    auto avail = core::cdc_readable(peer, c.rx_cons.load(), ring);
    if (!avail) return true; // (the caller reports an impossible producer cursor)
    // A reader standing at the old mark, its byte out of the stream: that
    // byte is no longer urgent and would be read as data; TCP drops it.
    if (key & SmcConn::kUrgStands) {
        Urg old = unpack_urg(c.rx_urg.load(std::memory_order_relaxed));
        if (old.at == c.rx_cons.load() && *avail > 0 && !oob_inline(c)) {
            consume_silently(c, 1, *avail);
            --*avail;
        }
    }
    core::Cursor cons = c.rx_cons.load();
    core::Cursor mark = marked.after;
    auto before = core::distance(cons, mark, ring);
    if (!before || *before == 0 || *before > *avail) {
        log::warn("fd {}: impossible urgent mark {}:{} (consumed {}:{}, produced {}:{}, ring {}): "
                  "connection broken",
                  c.tcp_fd, mark.wrap, mark.count, cons.wrap, cons.count, prod.wrap, prod.count,
                  ring);
        smc_break(c);
        return false;
    }
    Urg u;
    u.at = core::advance(cons, *before - 1, ring);
    u.state = kUrgValid;
    u.byte = c.transport.rx_ring()[u.at.count]; // (at.count < ring: advance keeps it inside)
    c.rx_urg.store(pack_urg(u), std::memory_order_release);
    c.rx_urg_key.store(SmcConn::kUrgStands | count, std::memory_order_release);
    return true;
}

// What a read (under rx_mu) may take with urgent data about.
struct UrgRead {
    enum What : uint8_t { Copy, Stop, Again } what = Copy;
    uint32_t from = 0;   // bytes left out after the consumer cursor (MSG_PEEK at the mark)
    uint32_t limit = 0;  // bytes it may copy
    bool passes = false; // copying passes the mark (SO_OOBINLINE, at the mark)
};

UrgRead urg_before_read(SmcConn& c, const core::PeerCdc& peer, bool wants, bool got_some,
                        bool peek) {
    if (!urg_take_in(c, peer)) return {UrgRead::Again};
    if (!wants) return {UrgRead::Copy}; // a read of 0 bytes passes no mark
    uint32_t ring = c.transport.rx_ring_size();
    core::Cursor cons = c.rx_cons.load();
    uint32_t avail = core::cdc_readable(peer, cons, ring).value_or(0);
    if (!(c.rx_urg_key.load(std::memory_order_relaxed) & SmcConn::kUrgStands))
        return {UrgRead::Copy, 0, avail};
    Urg u = unpack_urg(c.rx_urg.load(std::memory_order_relaxed));
    auto before = core::distance(cons, u.at, ring);
    if (!before || *before >= avail) { // (cannot be: it stood inside what we had not read)
        urg_clear(c);
        return {UrgRead::Copy, 0, avail};
    }
    if (*before > 0) return {UrgRead::Copy, 0, *before}; // a read never crosses the mark
    if (got_some) return {UrgRead::Stop};
    if (oob_inline(c)) return {UrgRead::Copy, 0, avail, true};
    if (peek) return {UrgRead::Copy, 1, avail - 1};
    consume_silently(c, 1, avail); // the urgent byte leaves the stream: the mark is passed
    urg_clear(c);
    return {UrgRead::Again};
}

} // namespace

ssize_t smc_recv_urgent(SmcConn& c, void* buf, size_t len, bool peek) {
    if (oob_inline(c)) return -EINVAL;
    // Never waits, so never for rx_mu either: a reader blocked in recv
    // holds it (and takes in what arrives itself).
    std::unique_lock lock(c.rx_mu, std::try_to_lock);
    core::PeerCdc peer = smc_peer_cdc(c);
    if (lock.owns_lock()) urg_take_in(c, peer);
    if (smc_broken(c)) return -ECONNRESET;
    uint32_t key = c.rx_urg_key.load(std::memory_order_acquire);
    if (peer.urg_count != uint16_t(key)) {
        // On its way (TCP's urgent data not yet arrived): EOF ends the wait.
        if (core::recv_at_end(smc_close_state(c)) != core::AtEnd::Wait) return 0;
        return -EAGAIN;
    }
    if (!(key & SmcConn::kUrgStands)) return -EINVAL;
    uint64_t w = c.rx_urg.load(std::memory_order_acquire);
    while (true) {
        Urg u = unpack_urg(w);
        if (u.state != kUrgValid) return -EINVAL; // already read
        Urg read = u;
        read.state = kUrgRead;
        if (!peek && !c.rx_urg.compare_exchange_weak(w, pack_urg(read), std::memory_order_acq_rel))
            continue;
        if (len == 0) return 0;
        *static_cast<uint8_t*>(buf) = u.byte;
        return 1;
    }
}

bool smc_at_mark(const SmcConn& c) {
    UrgView v = urg_view(c, smc_peer_cdc(c));
    return !v.bad && v.urg.state != kUrgNone && v.urg.at == c.rx_cons.load();
}

namespace {
// Landed already, though the peer has not cleared its mark: `sig` holds a
// datagram and none of it is ours. The peer queues its datagram, then wakes
// us, then clears the mark; woken on its CPU, we run before it has. (A
// stranger's datagram, or one of an earlier request the last arm did not
// drain, can pass for it: the late one then makes `sig` readable once for
// nothing, which a read that finds nothing handles.)
bool wake_seems_landed(const SmcConn& c) {
    int sig = c.sig.load(std::memory_order_acquire);
    if (sig < 0 || c.self_woken.load(std::memory_order_acquire)) return false;
    pollfd p{sig, POLLIN, 0};
    return sys::real().poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

// A wake-up the peer is writing now must land before we drain. The peer
// may be descheduled mid-way (or hostile): bounded, then go on. A peer
// that once held it past the bound gets only the short spin from then
// on: one that holds the flag for good would otherwise cost every arm
// on its connection 2 ms of this thread (an event loop's, serving all).
// `trust_sig`: a readable `sig` counts as landed (wake_seems_landed)
// instead of spinning and yielding to the peer; not where a wrong
// guess puts a datagram in the next connection's `sig` (a spare's).
// False if it had not landed.
bool wait_wake_landed(SmcConn& c, bool trust_sig = false) {
    if (c.transport.data_wake_coming()) {
        // Looked at first: a peer preempted by its wake-up of us, on its
        // CPU, gets that CPU back only when we let go of it.
        if (trust_sig && wake_seems_landed(c)) return true;
        bool patient = !c.waking_overrun.load(std::memory_order_relaxed);
        timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; c.transport.data_wake_coming(); ++i) {
            if (i < 256) {
                wait::cpu_relax();
                continue;
            }
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (!patient ||
                (now.tv_sec - t0.tv_sec) * 1000000000L + (now.tv_nsec - t0.tv_nsec) > 2000000L) {
                c.waking_overrun.store(true, std::memory_order_relaxed);
                break;
            }
            sched_yield();
        }
    }
    return !c.transport.data_wake_coming();
}
} // namespace

bool smc_withdraw_requests(SmcConn& c) {
    if (!c.transport.attached()) return false;
    bool untaken = c.transport.unwant_data();
    // Nothing of ours or the peer's waits in `sig` since our last drain:
    // no self-wake, no wake-up seen, and no request the peer took (each
    // arm after a taken one drains first, smc_drain_wakeup). The next
    // connection need not drain it (a stranger's datagram stays a
    // spurious "readable", as on any `sig`).
    c.sig_clean = !c.self_woken.load(std::memory_order_acquire) &&
                  !c.wake_seen.load(std::memory_order_acquire) &&
                  (untaken || !c.asked_since_drain.load(std::memory_order_acquire));
    return wait_wake_landed(c);
}

void smc_arm_for_data(SmcConn& c, bool read_nothing) {
    // No `sig`: nothing to wake (a set kept in user memory asks with its
    // bell), and no drain for a wake-up on its way to wait for. A wait that
    // needs one makes it first, then arms.
    if (c.sig.load(std::memory_order_acquire) < 0) return;
    wait_wake_landed(c, true);
    smc_drain_wakeup(c, read_nothing);
    c.ever_asked.store(true, std::memory_order_relaxed);
    c.asked_since_drain.store(true, std::memory_order_release);
    c.transport.want_data();
}

void smc_drain_wakeup(SmcConn& c, bool read_nothing) {
    bool self = c.self_woken.exchange(false, std::memory_order_acq_rel);
    // Armed and not yet taken: the peer has not written, so `sig` holds
    // nothing of the peer's. Anyone local may still have sent it a datagram
    // (its name is public): a read that then found nothing was woken for
    // nothing, and a level-triggered set would wake it again at once, for
    // as long as the peer stays quiet. So only the first such read in a row
    // skips the drain.
    // Never asked: the peer has sent nothing either (a connection's first
    // arm, right after its handshake), the same case.
    bool peer_silent = c.transport.wants_data() || !c.ever_asked.load(std::memory_order_relaxed);
    if (!self && peer_silent &&
        (!read_nothing || !c.drain_skipped.exchange(true, std::memory_order_relaxed)))
        return;
    c.drain_skipped.store(false, std::memory_order_relaxed);
    c.asked_since_drain.store(false, std::memory_order_release);
    c.wake_seen.store(false, std::memory_order_release);
    if (int sig = c.sig.load(std::memory_order_acquire); sig >= 0) wakeup::drain(sig);
}

bool smc_wake_queued(SmcConn& c) {
    // The peer's word first (it took our request since our last drain, and
    // its wake-up has landed): only then is the kernel asked, so the usual
    // case costs no system call, and a peer that lies costs one.
    if (c.wake_seen.load(std::memory_order_acquire)) return true;
    if (!c.asked_since_drain.load(std::memory_order_acquire) || !c.transport.attached() ||
        c.sig < 0)
        return false;
    if (c.transport.wants_data() || c.transport.data_wake_coming()) return false;
    pollfd p{c.sig, POLLIN, 0};
    if (sys::real().poll(&p, 1, 0) != 1 || !(p.revents & POLLIN)) return false;
    c.wake_seen.store(true, std::memory_order_release);
    return true;
}

void smc_self_wake(SmcConn& c) {
    // (None yet: whoever makes it looks at the state after, smc_arm.)
    if (c.sig.load(std::memory_order_acquire) < 0) return;
    c.self_woken.store(true, std::memory_order_release);
    wakeup::send(wakeup::wakers_for_self(), c.sig_name);
}

void smc_wake_user(SmcConn& c) {
    uint64_t bell = c.user_bell.load(std::memory_order_acquire);
    if (bell) wakeup::send_token(wakeup::wakers_for_self(), wakeup::bell_name(bell), c.token);
}

void SmcConn::store_cons_word() {
    uint8_t flags = conn_flags.load(std::memory_order_acquire);
    // A move another process holding our side published stays (fork).
    if (shared_by_fork()) flags |= transport.sent_conn_flags() & core::kMovedFlags;
    transport.send_cons(announced_, flags);
}

void SmcConn::publish_cons() {
    while (pub_lock_.test_and_set(std::memory_order_acquire)) {
    }
    core::Cursor cons = rx_cons.load();
    announced_ = cons;
    store_cons_word();
    pub_lock_.clear(std::memory_order_release);
    rx_cons_announced = cons;
    cursor_updates.fetch_add(1, std::memory_order_relaxed);
}

void SmcConn::adopt_published() {
    while (pub_lock_.test_and_set(std::memory_order_acquire)) {
    }
    core::PeerCdc sent = transport.sent();
    announced_ = sent.cons;
    pub_lock_.clear(std::memory_order_release);
    rx_cons_announced = sent.cons;
    rx_cons.store(rx_cons_announced);
    uint8_t ours = core::cdc_ending_flags(sent);
    conn_flags.fetch_or(ours, std::memory_order_acq_rel);
    if (ours) smc_close_event(*this, core::CloseEvent::WeDoneWriting);
    tx_prod.store(sent.prod);
    tx_urg_count = sent.urg_count;
}

bool SmcConn::adopt_published_tx() {
    core::PeerCdc sent = transport.sent();
    if (!core::valid(sent.prod, transport.tx_ring_size())) return false;
    tx_prod.store(sent.prod);
    tx_urg_count = sent.urg_count;
    return true;
}

bool SmcConn::adopt_published_rx() {
    while (pub_lock_.test_and_set(std::memory_order_acquire)) {
    }
    core::Cursor at = transport.sent().cons;
    bool ok = core::valid(at, transport.rx_ring_size());
    if (ok) announced_ = at;
    pub_lock_.clear(std::memory_order_release);
    if (!ok) return false;
    rx_cons_announced = at;
    rx_cons.store(at);
    return true;
}

void SmcConn::start_owner_refs() {
    if (forkref::Count* shared = forkref::alloc()) {
        owner_refs = shared;
    } else {
        // Forked children would each count themselves the last.
        log::warn("fd {}: no shared fork count left; a fork would close this connection early",
                  tcp_fd);
        owner_refs = &own_refs;
        own_refs.store(1);
    }
}

void SmcConn::reset_locks_after_fork() {
    new (&rx_mu) std::mutex();
    new (&tx_mu) std::mutex();
    new (&epoll_mu) std::mutex();
    new (&sig_mu) std::mutex(); // (a make the parent's thread was in: redone here if needed)
    pub_lock_.clear(std::memory_order_release);
    // A sink the parent's thread was making at the fork: no thread here
    // ever finishes it (fill() would give up on it for good).
    int making = wakeup::kSinkMaking;
    sink.compare_exchange_strong(making, -1, std::memory_order_acq_rel);
}

bool SmcConn::publish_move(uint8_t move) {
    while (pub_lock_.test_and_set(std::memory_order_acquire)) {
    }
    core::Cursor cons = rx_cons.load();
    bool ours = transport.send_move(cons, conn_flags.load(std::memory_order_acquire), move);
    if (ours) {
        announced_ = cons;
        conn_flags.fetch_or(move, std::memory_order_acq_rel);
    }
    pub_lock_.clear(std::memory_order_release);
    if (ours) rx_cons_announced = cons;
    return ours;
}

void SmcConn::publish_flags() {
    while (pub_lock_.test_and_set(std::memory_order_acquire)) {
    }
    store_cons_word();
    pub_lock_.clear(std::memory_order_release);
}

ssize_t smc_recv(SmcConn& c, const iovec* iov, int iovcnt, int flags, bool nonblock,
                 int timeout_ms) {
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i)
        total += iov[i].iov_len;
    std::lock_guard lock(c.rx_mu);
    // Moved to TCP while we waited for the lock: its stash has the ring's bytes.
    if (c.moved.load(std::memory_order_acquire)) [[unlikely]]
        return kSmcMoved;
    if (c.shared_by_fork() && !c.adopt_published_rx()) [[unlikely]] {
        log::warn("fd {}: impossible published consumer cursor: connection broken", c.tcp_fd);
        smc_break(c);
        return -ECONNRESET;
    }
    bool peek = flags & MSG_PEEK;
    bool waitall = (flags & MSG_WAITALL) && !peek && !nonblock;
    timespec start{};
    if (timeout_ms >= 0) clock_gettime(CLOCK_MONOTONIC, &start);
    size_t got = 0;
    bool found_full = false;
    // This call drained `sig` (arming) and no wake-up has come since. Data
    // found by the look after arming may then be read only in part: `sig`
    // must be readable again while data is left, or a level-triggered
    // watcher that reads less than is there and then waits (haproxy) sleeps
    // on data whose wake-up this call took. Only epoll watchers rely on it
    // (poll and select look at the ring themselves, in smc_arm).
    bool drained = false;
    auto data_left = [&] {
        if (drained && c.epoll_watched.load(std::memory_order_relaxed)) smc_self_wake(c);
        drained = false;
    };
    while (true) {
        if (c.closing.load(std::memory_order_acquire)) return got ? ssize_t(got) : -EBADF;
        // (This process moved it: our threads stop copying at once.)
        if (c.moved.load(std::memory_order_relaxed)) [[unlikely]]
            return got ? ssize_t(got) : kSmcMoved;
        if (smc_broken(c)) return got ? ssize_t(got) : -ECONNRESET;
        // Another process holding our side (fork) moved it to TCP: what the
        // ring holds past the cursor it published is the peer's to send
        // again over TCP (it moved out), or in the stash of the one that
        // took the peer's move. Never ours to read from the ring as well.
        if (c.shared_by_fork() && (c.transport.sent_conn_flags() & core::kMovedFlags)) [[unlikely]]
            return got ? ssize_t(got) : kSmcMoved;
        // The core's receive of the peer's CDC, at each look (SMC-D's words
        // in our control line).
        core::PeerCdc peer = c.transport.receive();
        auto avail = core::cdc_recv(c, peer, c.transport.rx_ring_size(), c.transport.tx_ring_size())
                         .readable;
        if (!avail) {
            core::Cursor prod = peer.prod;
            log::warn("fd {}: impossible producer cursor {}:{} (ours {}:{}, ring {}): connection "
                      "broken",
                      c.tcp_fd, prod.wrap, prod.count, c.rx_cons.load().wrap,
                      c.rx_cons.load().count, c.transport.rx_ring_size());
            smc_break(c);
            continue;
        }
        // Our ring full (the peer could not write more): Buffer full, once a call.
        if (*avail == c.transport.rx_ring_size() && !found_full && !peek) [[unlikely]] {
            found_full = true;
            counters::count_traffic(counters::kRx, counters::kBufFull);
        }
        // Urgent data about (a newer urgent count, or a mark that stands):
        // the one branch the fast path pays.
        UrgRead urg{UrgRead::Copy, 0, *avail};
        if (peer.urg_count != c.rx_urg_key.load(std::memory_order_relaxed)) [[unlikely]] {
            urg = urg_before_read(c, peer, total > 0, got > 0, peek);
            if (urg.what == UrgRead::Stop) {
                data_left(); // (the urgent byte)
                return ssize_t(got);
            }
            if (urg.what == UrgRead::Again) continue;
        }
        if (urg.limit > 0 && total > 0) {
            uint32_t n =
                core::copy_out(c, c.transport, iov, iovcnt, got, urg.from,
                               static_cast<uint32_t>(std::min<size_t>(urg.limit, total - got)));
            // (Emptied by this read, the ring is armed for below, as EAGAIN.)
            if (peek || n < *avail) data_left();
            drained = false;
            if (peek) return n;
            core::consume(c, c.transport, n);
            if (urg.passes) urg_clear(c);
            got += n;
            after_consume(c, n == *avail);
            if (n == *avail && c.epoll_watched.load(std::memory_order_relaxed)) arm_on_empty(c);
            if (got == total || !waitall) return ssize_t(got);
            continue;
        }
        if (total == 0) return 0;
        // (Bytes there that this read may not take: an urgent byte MSG_PEEK
        // passes over. Wait for more than those.)
        uint32_t hidden = *avail;
        // Nothing left in the ring of a connection that moved to TCP: the
        // rest is the TCP socket's (af_smc_move.cpp). Before the close
        // state: the peer's end of TCP may come after its move.
        if (smc_move_noticed(c)) return got ? ssize_t(got) : kSmcMoved;
        // Nothing to read: EOF, reset, or wait.
        core::AtEnd end = core::recv_at_end(smc_close_state(c));
        if (end == core::AtEnd::Wait && c.rd_shut.load(std::memory_order_acquire))
            end = core::AtEnd::Eof; // shutdown(SHUT_RD) here
        // (Its TCP socket gone without a word: its end is in the state now.
        // Only a read that would say EAGAIN looks: one that returns data
        // needs no end, and one that sleeps watches the TCP socket in its
        // sleep, which finds the end at once. Nor while this process's peer
        // watch watches the socket, as for an epoll set's arm (smc_arm): an
        // event loop reads until EAGAIN and then waits, and the watch ends
        // that wait with the end in the state.)
        if (end == core::AtEnd::Wait && nonblock && got == 0 &&
            !c.peer_gone.load(std::memory_order_acquire) && !peer_watch::armed(c) &&
            smc_check_peer(c))
            end = core::recv_at_end(smc_close_state(c));
        if (end != core::AtEnd::Wait) {
            // The peer publishes its last bytes before its flags, and both
            // before it closes its TCP socket: the look at the ring above may
            // have come before its last bytes, the end of the stream after.
            if (auto again = available(c); !again || *again > hidden) continue;
            // Found after this call drained `sig`: the end stays readable for
            // a level-triggered watcher (as TCP goes on reporting it), and the
            // wake-up that said so may be the one the drain took.
            if (drained) smc_self_wake(c);
            drained = false;
            if (end == core::AtEnd::Reset) {
                if (got) return ssize_t(got);
                // Reported once (a peek takes it too, as TCP's): another
                // thread that took it first leaves us the end.
                if (smc_broken(c) || smc_take_error(c)) return -ECONNRESET;
                return 0;
            }
            return ssize_t(got);
        }
        if (got > 0 && !waitall) return ssize_t(got);
        if (!nonblock && wait::spin(c.busy_poll_us, [&] {
                auto a = available(c);
                return !a || *a > hidden || peer_conn_flags(c);
            }))
            continue;
        // Arm: drain `sig`, ask the peer to wake us, look once more. (A
        // sleep needs `sig`: made now if this is the first.)
        if (!nonblock && !smc_ensure_sig(c)) return got ? ssize_t(got) : kSmcNoSig;
        // A nonblocking read that finds nothing arms only for a kernel
        // epoll set on `sig`, whose watcher waits on it next; poll, select
        // and blocking calls arm themselves before they sleep. (Armed here,
        // a poll that then finds the data while it spins has cost the peer
        // a wake-up datagram and us its drain, for nothing.)
        if (nonblock && !c.epoll_watched.load(std::memory_order_relaxed)) {
            if (smc_move_noticed(c)) return got ? ssize_t(got) : kSmcMoved;
            return got ? ssize_t(got) : -EAGAIN;
        }
        smc_arm_for_data(c, got == 0);
        drained = true;
        if (woken_meanwhile(c, hidden)) continue;
        // (A close or shutdown(SHUT_RD) of another thread whose self-wake
        // came before our `sig` existed: seen here, at the top.)
        if (c.closing.load(std::memory_order_acquire) || c.rd_shut.load(std::memory_order_acquire))
            continue;
        // (The peer moves, then takes our request: one of us sees the other.)
        if (smc_move_noticed(c)) return got ? ssize_t(got) : kSmcMoved;
        if (nonblock) return got ? ssize_t(got) : -EAGAIN;
        int left = -1;
        if (timeout_ms >= 0) {
            timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            int64_t spent =
                (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
            if (spent >= timeout_ms) return got ? ssize_t(got) : -EAGAIN;
            left = static_cast<int>(timeout_ms - spent);
        }
        int w = wait::sleep(c, c.sig, POLLIN, left);
        if (w == -EINTR) return got ? ssize_t(got) : -EINTR;
        if (w == -ETIMEDOUT) return got ? ssize_t(got) : -EAGAIN;
    }
}

uint32_t smc_rx_available(const SmcConn& c) {
    core::PeerCdc peer = smc_peer_cdc(c);
    uint32_t avail =
        core::cdc_readable(peer, c.rx_cons.load(), c.transport.rx_ring_size()).value_or(0);
    if (peer.urg_count == c.rx_urg_key.load(std::memory_order_relaxed)) return avail;
    // TCP counts only the bytes before a standing mark, unless inline.
    UrgView v = urg_view(c, peer);
    if (v.bad || v.urg.state == kUrgNone || oob_inline(c)) return avail;
    return std::min(
        avail, core::distance(c.rx_cons.load(), v.urg.at, c.transport.rx_ring_size()).value_or(0));
}

bool smc_check_peer(SmcConn& c) {
    if (c.tcp_fd < 0) return false;
    // The end of the TCP stream, not of the bytes before it: usmc never
    // shuts an SMC-D connection's TCP socket down, so its FIN (or a reset)
    // means the peer's socket is gone, even with bytes still queued (a peer
    // that wrote some and died would otherwise hide its death from a look
    // at the first byte, and from the peer watch, which looks only once).
    pollfd p{c.tcp_fd, POLLRDHUP, 0};
    return sys::real().poll(&p, 1, 0) == 1 && smc_note_tcp_end(c, p.revents);
}

bool smc_note_tcp_end(SmcConn& c, short revents) {
    // FIN: POLLRDHUP (CLOSE_WAIT: we never shut it down). A reset closes
    // the socket: POLLHUP. (Not POLLERR alone: an error queue raises it on
    // a live socket, IP_RECVERR.)
    if (!(revents & (POLLRDHUP | POLLHUP))) return false;
    log::debug("fd {}: the peer's TCP socket is gone (poll {:#x})", c.tcp_fd, unsigned(revents));
    // Its last flags first: it published them before its socket closed.
    smc_close_state(c);
    bool quiet = !(revents & POLLHUP) && smc_tx_unconsumed(c) == 0;
    smc_close_event(c, quiet ? core::CloseEvent::TcpEndQuiet : core::CloseEvent::TcpEndLost);
    c.peer_gone.store(true, std::memory_order_release);
    return true;
}

short smc_arm(SmcConn& c, short want, TcpEndWatch watch) {
    short ready = smc_poll_events(c) & (want | POLLERR | POLLHUP | POLLRDHUP);
    bool drained = false;
    bool look_at_tcp =
        watch == TcpEndWatch::Nobody || (watch == TcpEndWatch::EpollSets && !peer_watch::armed(c));
    if ((want & POLLPRI) && !(want & POLLIN) && !(ready & POLLPRI)) {
        drained = true;
        // Only urgent data asked for: urgent data comes as a write, so ask
        // for a wake-up at the next one even with data waiting (which then
        // leaves `sig` unreadable: smc_restore_level gives it back).
        smc_arm_for_data(c);
        ready |= smc_poll_events(c) & (POLLPRI | POLLERR | POLLHUP);
        if (!(ready & POLLPRI) && look_at_tcp && smc_check_peer(c))
            ready |= smc_poll_events(c) & (POLLPRI | POLLERR | POLLHUP);
    }
    if (!(ready & POLLIN) && (want & POLLIN)) {
        drained = true;
        smc_arm_for_data(c);
        ready |= smc_poll_events(c) & (POLLIN | POLLRDHUP | POLLERR | POLLHUP);
        // Its TCP socket closed: its last bytes and flags were published
        // before, so a look now tells an orderly close from a crash.
        if (!(ready & POLLIN) && look_at_tcp && smc_check_peer(c))
            ready |= smc_poll_events(c) & (POLLIN | POLLRDHUP | POLLERR | POLLHUP);
    }
    bool filled = false;
    if (!(ready & POLLOUT) && (want & POLLOUT)) {
        smc_block_writable(c);
        filled = true;
        c.transport.want_space();
        ready |= smc_poll_events(c) & POLLOUT;
    }
    // Make `sig` show what is already true, for a level-triggered
    // watcher (a byte we sent and did not drain still shows). Not after our
    // own drain: a wake-up sent between its look at the flag and its read
    // (the peer watch's) was taken, and the flag says it is still there.
    if ((ready & (POLLIN | POLLERR | POLLHUP)) &&
        (drained || !c.self_woken.load(std::memory_order_acquire)) && !smc_wake_queued(c))
        smc_self_wake(c);
    if (ready & POLLOUT) smc_open_writable(c, filled);
    return ready;
}

void smc_restore_level(SmcConn& c) {
    // (Whatever the flag says: the arm drained, see smc_arm.)
    if (smc_poll_events(c) & (POLLIN | POLLERR | POLLHUP)) smc_self_wake(c);
}

short smc_poll_events(SmcConn& c) {
    short ev = 0;
    // Before the ring: a peer publishes its data before its flags, and both
    // before it closes its TCP socket, so with its end seen its last bytes
    // are seen too.
    core::CloseState st = smc_close_state(c);
    core::PeerCdc peer = smc_peer_cdc(c);
    auto avail = core::cdc_readable(peer, c.rx_cons.load(), c.transport.rx_ring_size());
    if (!avail || st == core::CloseState::Broken) return core::end_events(core::CloseState::Broken);
    // Moved to TCP: the next call on it takes the move (af_smc_move.cpp).
    if (smc_move_noticed(c)) return POLLIN | POLLOUT;
    uint32_t data = *avail;
    if (peer.urg_count != c.rx_urg_key.load(std::memory_order_relaxed)) [[unlikely]] {
        // POLLPRI while the urgent byte waits for recv(MSG_OOB). At the mark
        // without SO_OOBINLINE the byte is not readable data (tcp_poll).
        UrgView v = urg_view(c, peer);
        if (v.bad) return core::end_events(core::CloseState::Broken); // recv reports it
        if (v.urg.state == kUrgValid) ev |= POLLPRI;
        if (v.urg.state != kUrgNone && v.urg.at == c.rx_cons.load() && data > 0 && !oob_inline(c))
            --data;
    }
    if (data > 0) ev |= POLLIN;
    // EOF, reset, and writable when a write fails at once.
    ev |= core::end_events(st);
    // shutdown(SHUT_RD) here: tcp_poll's RCV_SHUTDOWN, and with writing
    // shut too, both directions (SHUTDOWN_MASK: HUP).
    if (c.rd_shut.load(std::memory_order_acquire)) [[unlikely]] {
        ev |= POLLIN | POLLRDHUP;
        if (c.conn_flags.load(std::memory_order_acquire) & core::kPeerDoneWriting) ev |= POLLHUP;
    }
    if (smc_tx_unconsumed(c) < c.transport.tx_ring_size()) ev |= POLLOUT;
    return ev;
}

} // namespace usmc
