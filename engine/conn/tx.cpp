// SPDX-License-Identifier: MIT
// Sending on an SMC-D connection: copy straight into the peer's DMB ring
// (there is no send buffer: the peer's ring is it), publish the producer
// cursor, wake the peer only if it sleeps waiting for data.
#include "engine/conn/tx.hpp"

#include "engine/base/count.hpp"
#include "engine/base/log.hpp"
#include "engine/base/loop.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/space_watch.hpp"
#include "engine/conn/wait.hpp"
#include "engine/core/data_path.hpp"
#include "engine/readiness/wakeup.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <time.h>
#include <unordered_map>
#include <vector>

namespace usmc {

namespace {

// Free space in the peer's ring, from its consumer cursor (the core's
// receive of its CDC). nullopt: the peer's cursor is impossible.
std::optional<uint32_t> peer_free(SmcConn& c) {
    return core::receive(c, c.transport).space;
}

// After a post: the peer's reader woken if it asked (once per call at most).
void wake_peer_reader(SmcConn& c) {
    if (c.transport.notify_reader(c.tx_prod.load()))
        c.notifications.fetch_add(1, std::memory_order_relaxed);
    else
        c.notifications_suppressed.fetch_add(1, std::memory_order_relaxed);
}

// Makes everything copied so far visible to the reader (the core's exit;
// SMC-D's is never busy).
void publish_prod(SmcConn& c) {
    core::post(c, c.transport);
    c.cursor_updates.fetch_add(1, std::memory_order_relaxed);
}

// Under tx_mu: publish held bytes and wake the reader if it waits.
void flush_locked(SmcConn& c) {
    if (c.tx_held == 0) return;
    publish_prod(c);
    wake_peer_reader(c);
}

// The backstop: held bytes are published at the latest kCorkCeilingMs after
// they were first held, by a timer on the engine's event loop.
struct Corked {
    SmcConn* c;
    uint64_t watch; // its pending timer
};
// Never destroyed (a timer may fire at exit); a forked child starts a fresh
// one (the parent's lock may have been held at the fork).
struct CorkState {
    std::mutex mu;
    // By a key never used twice, which the timer carries: a connection
    // forgotten meanwhile (and another at its address) is not its.
    std::unordered_map<uint64_t, Corked> corked; // under mu
    uint64_t next_key = 1;
};
std::atomic<CorkState*> g_cork{nullptr};

CorkState& cork_state() {
    CorkState* s = g_cork.load(std::memory_order_acquire);
    if (s) return *s;
    auto* fresh = new CorkState;
    if (g_cork.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;
    return *s;
}

void cork_due(uint64_t key);

uint64_t cork_timer(uint64_t key, int ms) {
    return loop::add(-1, 0, ms, [key](uint32_t) { cork_due(key); });
}

void cork_due(uint64_t key) {
    CorkState& st = cork_state();
    std::lock_guard lock(st.mu);
    auto it = st.corked.find(key);
    if (it == st.corked.end()) return; // forgotten meanwhile
    SmcConn& c = *it->second.c;
    // (Holding the lock keeps smc_cork_forget, and so the connection's end,
    // waiting. A sender inside tx_mu publishes by itself or holds again:
    // look again a little later.)
    // (A timer on the running loop is always to be had.)
    std::unique_lock tx(c.tx_mu, std::try_to_lock);
    if (!tx.owns_lock()) {
        it->second.watch = cork_timer(key, 1);
        return;
    }
    flush_locked(c);
    c.cork_listed.store(false, std::memory_order_relaxed);
    st.corked.erase(it);
}

// Under tx_mu: bytes are held; make sure the backstop knows.
void cork_list(SmcConn& c) {
    if (c.cork_listed.exchange(true, std::memory_order_relaxed)) return;
    CorkState& st = cork_state();
    std::lock_guard lock(st.mu);
    uint64_t key = st.next_key++;
    uint64_t watch = cork_timer(key, kCorkCeilingMs);
    if (!watch) { // no loop: nothing may stay held
        flush_locked(c);
        c.cork_listed.store(false, std::memory_order_relaxed);
        return;
    }
    c.cork_key = key;
    st.corked.emplace(key, Corked{&c, watch});
}

int deadline_left(const timespec& deadline) {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (deadline.tv_sec - now.tv_sec) * 1000 + (deadline.tv_nsec - now.tv_nsec) / 1000000;
    return ms < 0 ? 0 : static_cast<int>(ms);
}

} // namespace

void smc_block_writable(SmcConn& c) {
    c.nospace.store(true,
                    std::memory_order_release); // (TCP's SOCK_NOSPACE: room back counts a wake-up)
    // Filled: no longer writable; draining the sink makes it writable again,
    // which the peer asks of us by ringing our bell. (Already filled: the
    // send finds no room, EAGAIN.) Without a bell nobody would drain it:
    // `sig` then stays writable, a level-triggered writer spins.
    uint64_t bell = space_watch::bell();
    if (!bell) return;
    c.transport.name_space_bell(bell);
    // No `sig`: only a set kept in user memory shows writability (the
    // watch's edge reaches it). A wait that needs `sig` makes it first.
    if (int sig = c.sig.load(std::memory_order_acquire); sig >= 0) {
        c.sig_filled.store(true, std::memory_order_release);
        if (!wakeup::fill(sig, c.token, c.sink, c.sink_name,
                          !c.sig_shrunk.exchange(true, std::memory_order_relaxed)) &&
            // (Another call making the sink fills `sig` when it has it, or
            // says it could not: `sig_filled` is that call's to clear.)
            c.sink.load(std::memory_order_acquire) != wakeup::kSinkMaking) {
            c.sig_filled.store(false, std::memory_order_release);
            return;
        }
    }
    space_watch::add(&c);
}

void smc_open_writable(SmcConn& c, bool filled_here) {
    if (!c.sig_filled.exchange(false, std::memory_order_acq_rel) && !filled_here) return;
    wakeup::unfill(c.sink.load(std::memory_order_acquire));
}

bool smc_tx_space_or_end(SmcConn& c) {
    if (c.closing.load(std::memory_order_acquire)) return true;
    if (smc_move_noticed(c)) return true; // (the writer takes the move)
    if (core::send_gate(smc_close_state(c)) != core::SendGate::Go) return true;
    auto free = peer_free(c);
    return !free || *free > 0;
}

namespace {

// smc_send with the bytes from `fill(sent, max)`: it copies up to `max` of
// them into the ring at our producer cursor, `sent` bytes into the call's
// bytes, and says how many it copied (or -errno). Fewer than `max`: the
// source ended, and so does the call, with what it copied.
template <class Fill>
ssize_t send_from(SmcConn& c, size_t total, Fill&& fill, bool nonblock, int timeout_ms, bool more,
                  bool urgent) {
    std::lock_guard lock(c.tx_mu);
    if (c.shared_by_fork() && c.tx_held == 0 && !c.adopt_published_tx()) [[unlikely]] {
        log::warn("fd {}: impossible published producer cursor: connection broken", c.tcp_fd);
        smc_break(c);
        return -ECONNRESET;
    }
    // Moved to TCP (af_smc_move.cpp): what we wrote that the peer never
    // read goes again over TCP, and this call's bytes after it.
    if (smc_move_noticed(c)) [[unlikely]]
        return kSmcMoved;
    constexpr uint8_t kWeStopped =
        core::kPeerDoneWriting | core::kPeerConnClosed | core::kPeerConnAbort;
    if (c.conn_flags.load(std::memory_order_acquire) & kWeStopped)
        return smc_take_error(c) ? -ECONNRESET : -EPIPE;
    if (total == 0) return 0;
    // TCP takes the first write after the peer closed (the peer's kernel
    // answers it with a reset, which fails the next one); programs rely on
    // it (a server answering a client that gave up). Nobody will read it.
    if (core::send_gate(smc_close_state(c)) == core::SendGate::TakeOnce &&
        !c.sent_after_peer_close.exchange(true, std::memory_order_acq_rel))
        return ssize_t(total);
    timespec deadline{};
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    more = more && !urgent; // urgent data is pushed, as TCP pushes it
    size_t sent = 0;
    bool found_full = false; // counted once per call (Buffer full (remote))
    bool filled = false;     // this call filled `sig` (armed for space)
    while (sent < total) {
        if (c.closing.load(std::memory_order_acquire)) return sent ? ssize_t(sent) : -EBADF;
        if (c.moved.load(std::memory_order_relaxed)) [[unlikely]]
            return sent ? ssize_t(sent) : kSmcMoved;
        core::SendGate gate = core::send_gate(smc_close_state(c));
        if (gate == core::SendGate::Reset) {
            if (sent) return ssize_t(sent);
            // Reported once; a thread that lost the race to it sees EPIPE.
            if (smc_broken(c) || smc_take_error(c)) return -ECONNRESET;
            continue;
        }
        if (gate != core::SendGate::Go) {
            // We stopped, or the peer will never read again (it closed,
            // aborted or died). Writable from now on, as TCP after a reset
            // (our fill of `sig` may have come after the close's or the
            // peer watch's drain).
            smc_open_writable(c, filled);
            return sent ? ssize_t(sent) : -EPIPE;
        }
        auto free = peer_free(c);
        if (!free) {
            core::Cursor cons = smc_peer_cdc(c).cons;
            log::warn("fd {}: impossible consumer cursor {}:{} (ours {}:{}, ring {}): connection "
                      "broken",
                      c.tcp_fd, cons.wrap, cons.count, c.tx_prod.load().wrap,
                      c.tx_prod.load().count, c.transport.tx_ring_size());
            smc_break(c);
            continue;
        }
        if (*free == 0) {
            if (!found_full) {
                found_full = true;
                counters::count_traffic(counters::kTx, counters::kBufFullPeer);
            }
            flush_locked(c); // (held bytes never fill the ring; a reader must see them)
            // Bounded spin first, then arm: ask the peer to wake us when it
            // frees space, and look again (it may have freed some meanwhile).
            if (!nonblock && wait::spin(c.busy_poll_us, [&] {
                    auto f = peer_free(c);
                    return !f || *f > 0;
                }))
                continue;
            // Make `sig` unwritable before arming, so a wake-up after this
            // point leaves it writable. (A sleep needs `sig`: made now.)
            if (!nonblock && !smc_ensure_sig(c)) return sent ? ssize_t(sent) : kSmcNoSig;
            smc_block_writable(c);
            filled = true;
            c.transport.want_space();
            // Look again at all a drain of the far end can mean: space, and
            // the peer's close or death (its drain may have come before our
            // fill, and the peer watch's after the look at the top).
            // (The peer moves, then takes our request: one of us sees the other.)
            if (smc_move_noticed(c)) return sent ? ssize_t(sent) : kSmcMoved;
            free = peer_free(c);
            if (free && *free > 0) continue;
            if (!free || core::send_gate(smc_close_state(c)) != core::SendGate::Go ||
                c.closing.load(std::memory_order_acquire))
                continue;                       // reported at the top of the loop
            if (sent > 0) return ssize_t(sent); // partial write, as TCP does
            if (nonblock) return -EAGAIN;
            int left = timeout_ms >= 0 ? deadline_left(deadline) : -1;
            if (timeout_ms >= 0 && left == 0) return -EAGAIN;
            int w = wait::sleep(c, c.sig, POLLOUT, left);
            if (w == -EINTR) return -EINTR;
            if (w == -ETIMEDOUT) return -EAGAIN;
            continue;
        }
        uint32_t want = static_cast<uint32_t>(std::min<size_t>(*free, total - sent));
        ssize_t got = fill(sent, want);
        if (got < 0) return sent ? ssize_t(sent) : got;
        uint32_t n = uint32_t(got);
        if (n < want) total = sent + n; // the source ended: what it gave is the call's
        if (n == 0) break;
        core::produce(c, c.transport, n);
        sent += n;
        if (!c.shared_by_fork() &&
            cork_hold(c.tx_held, n, c.transport.tx_ring_size(), c.autocorking_size, more,
                      c.corked.load(std::memory_order_relaxed) & !urgent, *free - n)) {
            c.tx_held += n; // (holding implies it all fit: sent == total)
            cork_list(c);
            continue;
        }
        // MSG_OOB: each publication of the call marks its last byte urgent
        // (TCP marks what each push sends; the last mark is the call's end).
        if (urgent) [[unlikely]]
            core::mark_urgent(c, c.transport);
        publish_prod(c);
        // One wake-up per call at most: only after the last copy, or before
        // we would block with the reader still asleep.
        if (sent == total)
            wake_peer_reader(c);
        else if (auto f = peer_free(c); f && *f == 0)
            wake_peer_reader(c);
    }
    return ssize_t(sent);
}

} // namespace

ssize_t smc_send(SmcConn& c, const iovec* iov, int iovcnt, bool nonblock, int timeout_ms, bool more,
                 bool urgent) {
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i)
        total += iov[i].iov_len;
    auto fill = [&](size_t sent, uint32_t max) {
        return ssize_t(core::copy_in(c, c.transport, iov, iovcnt, sent, max));
    };
    return send_from(c, total, fill, nonblock, timeout_ms, more, urgent);
}

void smc_flush(SmcConn& c) {
    // A sender inside tx_mu publishes when it ends (or holds again, and the
    // backstop publishes): no waiting here behind a sender blocked for space.
    std::unique_lock lock(c.tx_mu, std::try_to_lock);
    if (lock.owns_lock()) flush_locked(c);
}

void smc_flush_locked(SmcConn& c) {
    flush_locked(c);
}

void smc_set_cork(SmcConn& c, bool on) {
    c.corked.store(on, std::memory_order_relaxed);
    if (!on) smc_flush(c);
}

void smc_cork_forget(SmcConn& c) {
    // Under tx_mu, as cork_list and the backstop change cork_listed: the
    // backstop clears it holding tx_mu and still touches the connection
    // until it lets go. Seen without the lock, a cleared flag let the
    // connection be freed under the backstop's unlock. (No thread of ours is
    // inside a call on the connection any more: nobody else holds tx_mu.)
    std::lock_guard tx(c.tx_mu);
    if (!c.cork_listed.load(std::memory_order_relaxed)) return;
    CorkState& st = cork_state();
    std::lock_guard lock(st.mu);
    if (auto it = st.corked.find(c.cork_key); it != st.corked.end() && it->second.c == &c) {
        loop::cancel(it->second.watch);
        st.corked.erase(it);
    }
    c.cork_listed.store(false, std::memory_order_relaxed);
}

void smc_cork_after_fork_child() {
    // The parent's timers and lock state do not exist here; what the parent
    // held is the parent's to publish.
    g_cork.store(nullptr, std::memory_order_release); // (the parent's copy is left alone)
}

uint32_t smc_tx_unconsumed(const SmcConn& c) {
    // (An observer's look: checked, not received.)
    auto free =
        core::cdc_space(c.transport.receive(), c.tx_prod.load(), c.transport.tx_ring_size());
    return free ? c.transport.tx_ring_size() - *free : 0;
}

} // namespace usmc
