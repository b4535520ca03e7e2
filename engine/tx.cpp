// Sending on an SMC-D connection: copy straight into the peer's DMB ring
// (there is no send buffer: the peer's ring is it), publish the producer
// cursor, wake the peer only if it sleeps waiting for data.
#include "engine/conn.hpp"
#include "engine/sys.hpp"
#include "engine/wait.hpp"

#include <cerrno>
#include <cstring>
#include <sys/eventfd.h>
#include <time.h>

namespace usmc {

namespace {

// Free space in the peer's ring, from its consumer cursor (which it writes
// into our control line). nullopt: the peer's cursor is impossible.
std::optional<uint32_t> peer_free(const SmcConn& c) {
    cdc::Cursor peer_cons = cdc::unpack_cons(c.rx.control()->cons.load(std::memory_order_seq_cst));
    auto used = cdc::distance(peer_cons, c.tx_prod, c.tx.ring_size());
    if (!used) return std::nullopt;
    return c.tx.ring_size() - *used;
}

uint8_t peer_conn_flags(const SmcConn& c) {
    return cdc::conn_flags_of(c.rx.control()->cons.load(std::memory_order_acquire));
}

// Copies up to `max` bytes of the iovecs (from logical offset `skip`) into the
// peer's ring at our producer cursor, wrapping at the ring's end.
uint32_t copy_in(SmcConn& c, const iovec* iov, int iovcnt, size_t skip, uint32_t max) {
    uint32_t ring = c.tx.ring_size();
    uint32_t pos = c.tx_prod.count;
    uint32_t done = 0;
    for (int i = 0; i < iovcnt && done < max; ++i) {
        size_t len = iov[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        const uint8_t* src = static_cast<const uint8_t*>(iov[i].iov_base) + skip;
        size_t n = std::min<size_t>(len - skip, max - done);
        skip = 0;
        while (n > 0) {
            uint32_t chunk = static_cast<uint32_t>(std::min<size_t>(n, ring - pos));
            std::memcpy(c.tx.ring() + pos, src, chunk);
            src += chunk;
            n -= chunk;
            done += chunk;
            pos = pos + chunk == ring ? 0 : pos + chunk;
        }
    }
    return done;
}

void wake_peer_reader(SmcConn& c) {
    auto& w = c.rx.control()->waiting; // the peer's wait flags live in our control line
    uint64_t cur = w.load(std::memory_order_seq_cst);
    // Take the reader's request, marking a wake-up in flight (kWakingData).
    while ((cur & cdc::kWaitData) &&
           !w.compare_exchange_weak(cur, (cur & ~uint64_t{cdc::kWaitData}) | cdc::kWakingData,
                                    std::memory_order_seq_cst)) {
    }
    if (!(cur & cdc::kWaitData)) {
        c.notifications_suppressed.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    // Already read all of it? Then the request stands for the next write,
    // and no wake-up is sent that would find nothing to read.
    auto free = peer_free(c);
    if (free && *free == c.tx.ring_size()) {
        w.fetch_or(cdc::kWaitData, std::memory_order_seq_cst);
        w.fetch_and(~uint64_t{cdc::kWakingData}, std::memory_order_seq_cst);
        c.notifications_suppressed.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    uint64_t one = 1;
    ssize_t rc = sys::real().write(c.peer_rx_event, &one, sizeof one);
    (void)rc;
    w.fetch_and(~uint64_t{cdc::kWakingData}, std::memory_order_seq_cst);
    c.notifications.fetch_add(1, std::memory_order_relaxed);
}

int deadline_left(const timespec& deadline) {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (deadline.tv_sec - now.tv_sec) * 1000 + (deadline.tv_nsec - now.tv_nsec) / 1000000;
    return ms < 0 ? 0 : static_cast<int>(ms);
}

} // namespace

ssize_t smc_send(SmcConn& c, const iovec* iov, int iovcnt, bool nonblock, int timeout_ms) {
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i)
        total += iov[i].iov_len;
    std::lock_guard lock(c.tx_mu);
    constexpr uint8_t kWeStopped =
        cdc::kPeerDoneWriting | cdc::kPeerConnClosed | cdc::kPeerConnAbort;
    if (c.conn_flags.load(std::memory_order_acquire) & kWeStopped) return -EPIPE;
    if (total == 0) return 0;
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
    size_t sent = 0;
    while (sent < total) {
        if (c.closing.load(std::memory_order_acquire)) return sent ? ssize_t(sent) : -EBADF;
        if (c.broken.load(std::memory_order_acquire)) return sent ? ssize_t(sent) : -ECONNRESET;
        if (c.conn_flags.load(std::memory_order_acquire) & kWeStopped)
            return sent ? ssize_t(sent) : -EPIPE;
        if (peer_conn_flags(c) & (cdc::kPeerConnClosed | cdc::kPeerConnAbort) ||
            c.peer_gone.load(std::memory_order_acquire))
            return sent ? ssize_t(sent) : -EPIPE;
        auto free = peer_free(c);
        if (!free) {
            c.broken.store(true, std::memory_order_release);
            continue;
        }
        if (*free == 0) {
            // Bounded spin first, then arm: ask the peer to wake us when it
            // frees space, and look again (it may have freed some meanwhile).
            if (!nonblock && wait::spin(c.busy_poll_us, [&] {
                    auto f = peer_free(c);
                    return !f || *f > 0;
                }))
                continue;
            // Make tx_event unwritable before arming, so a wake-up after this
            // point leaves it writable.
            smc_block_tx_event(c);
            c.tx.control()->waiting.fetch_or(cdc::kWaitSpace, std::memory_order_seq_cst);
            free = peer_free(c);
            if (free && *free > 0) continue;
            if (!free) continue;                // broken: reported at the top of the loop
            if (sent > 0) return ssize_t(sent); // partial write, as TCP does
            if (nonblock) return -EAGAIN;
            int left = timeout_ms >= 0 ? deadline_left(deadline) : -1;
            if (timeout_ms >= 0 && left == 0) return -EAGAIN;
            int w = wait::sleep(c, c.tx_event, POLLOUT, left);
            if (w == -EINTR) return -EINTR;
            if (w == -ETIMEDOUT) return -EAGAIN;
            continue;
        }
        uint32_t n = copy_in(c, iov, iovcnt, sent,
                             static_cast<uint32_t>(std::min<size_t>(*free, total - sent)));
        c.tx_prod = cdc::advance(c.tx_prod, n, c.tx.ring_size());
        c.tx.control()->prod.store(cdc::pack_prod(c.tx_prod), std::memory_order_seq_cst);
        sent += n;
        c.cursor_updates.fetch_add(1, std::memory_order_relaxed);
        // One wake-up per call at most: only after the last copy, or before
        // we would block with the reader still asleep.
        if (sent == total)
            wake_peer_reader(c);
        else if (auto f = peer_free(c); f && *f == 0)
            wake_peer_reader(c);
    }
    return ssize_t(sent);
}

uint32_t smc_tx_unconsumed(const SmcConn& c) {
    auto free = peer_free(c);
    return free ? c.tx.ring_size() - *free : 0;
}

} // namespace usmc
