// SPDX-License-Identifier: MIT
#pragma once
// The core's data path, the same for every transport (the kernel's smc_tx.c
// and smc_rx.c without their waits): bytes copied into the ring the peer
// reads and out of the ring we read, the producer cursor posted through the
// transport's one exit — which may answer busy and finish later through the
// progress hook —, and when the consumer cursor is worth announcing.
//
// Templates over the transport (core/transport.hpp's concept), so a
// transport's calls compile inline: the core names no transport itself.
// Waiting, readiness and sockets are the callers'.
#include "engine/core/cdc_recv.hpp"
#include "engine/core/conn_state.hpp"
#include "engine/core/transport.hpp"

#include <algorithm>
#include <cstring>
#include <sys/uio.h>

namespace usmc::core {

// The peer's CDC checked against our cursors (cdc_recv.hpp).
template <ConnTransport T>
Received receive(ConnState& k, const T& t) {
    return cdc_recv(k, t.receive(), t.rx_ring_size(), t.tx_ring_size());
}

// Walks up to `max` bytes of the iovecs (from logical offset `skip`) against
// a ring of `ring` bytes from offset `pos`, wrapping at its end: `f(ring
// offset, iovec bytes, length)` for each piece. The bytes walked.
template <typename Byte, typename F>
uint32_t ring_walk(uint32_t ring, uint32_t pos, const iovec* iov, int iovcnt, size_t skip,
                   uint32_t max, F f) {
    uint32_t done = 0;
    for (int i = 0; i < iovcnt && done < max; ++i) {
        size_t len = iov[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        Byte* at = static_cast<Byte*>(iov[i].iov_base) + skip;
        size_t n = std::min<size_t>(len - skip, max - done);
        skip = 0;
        while (n > 0) {
            uint32_t chunk = static_cast<uint32_t>(std::min<size_t>(n, ring - pos));
            f(pos, at, chunk);
            at += chunk;
            n -= chunk;
            done += chunk;
            pos = pos + chunk == ring ? 0 : pos + chunk;
        }
    }
    return done;
}

// Copies up to `max` bytes of the iovecs (from logical offset `skip`) into
// the peer's ring at our producer cursor. The cursor is not moved
// (produce() does).
template <ConnTransport T>
uint32_t copy_in(const ConnState& k, T& t, const iovec* iov, int iovcnt, size_t skip,
                 uint32_t max) {
    uint8_t* base = t.tx_ring();
    return ring_walk<const uint8_t>(
        t.tx_ring_size(), k.tx_prod.load().count, iov, iovcnt, skip, max,
        [base](uint32_t at, const uint8_t* src, uint32_t n) { std::memcpy(base + at, src, n); });
}

// Copies up to `max` bytes from `from` bytes after our consumer cursor into
// the iovecs, starting `skip` bytes into them. The cursor is not moved
// (consume() does).
template <ConnTransport T>
uint32_t copy_out(const ConnState& k, const T& t, const iovec* iov, int iovcnt, size_t skip,
                  uint32_t from, uint32_t max) {
    const uint8_t* base = t.rx_ring();
    uint32_t ring = t.rx_ring_size();
    return ring_walk<uint8_t>(
        ring, advance(k.rx_cons.load(), from, ring).count, iov, iovcnt, skip, max,
        [base](uint32_t at, uint8_t* dst, uint32_t n) { std::memcpy(dst, base + at, n); });
}

// `n` bytes copied in (under tx_mu) / read out (under rx_mu).
template <ConnTransport T>
void produce(ConnState& k, const T& t, uint32_t n) {
    k.tx_prod.store(advance(k.tx_prod.load(), n, t.tx_ring_size()));
}
template <ConnTransport T>
void consume(ConnState& k, const T& t, uint32_t n) {
    k.rx_cons.store(advance(k.rx_cons.load(), n, t.rx_ring_size()));
}

// Under tx_mu: the last byte produced is urgent. The mark goes out before
// the producer cursor that carries its count (the transport keeps that
// order).
template <ConnTransport T>
void mark_urgent(ConnState& k, T& t) {
    ++k.tx_urg_count;
    t.send_urgent_mark(k.tx_prod.load(), k.tx_urg_count);
}

// Under tx_mu: everything produced so far goes to the peer — the one exit.
// Busy: the transport has no room for it now; progress() posts it later
// (the bytes stay in the ring, unposted, and the writer may go on producing
// behind them).
template <ConnTransport T>
Posted post(ConnState& k, T& t) {
    Posted p = t.post_prod(k.tx_prod.load(), k.tx_urg_count);
    k.tx_held = 0;
    k.post_pending.store(p == Posted::Busy, std::memory_order_release);
    return p;
}

// The progress hook (under tx_mu): the transport finishes what it can
// (completions), then a post it answered busy goes again with the newest
// cursors. Whether that post went out.
template <ConnTransport T>
bool progress(ConnState& k, T& t) {
    t.progress();
    if (!k.post_pending.load(std::memory_order_acquire)) return false;
    return post(k, t) == Posted::Done;
}

// After consuming: whether our consumer cursor is worth announcing now —
// the window update limit reached, the ring read empty, a writer waiting for
// space, or every move announced at once (a connection shared across fork,
// whose processes read each other's cursors back).
inline bool cons_update_due(uint32_t unannounced, uint32_t ring, bool ring_empty, bool writer_waits,
                            bool announce_all) {
    if (unannounced == 0) return false;
    return unannounced >= update_limit(ring) || ring_empty || writer_waits || announce_all;
}

} // namespace usmc::core
