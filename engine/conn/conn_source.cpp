// SPDX-License-Identifier: MIT
#include "engine/conn/conn_source.hpp"

#include "engine/conn/conn.hpp"

#include <bit>
#include <poll.h>

namespace usmc {

uint32_t epoll_bits(short p) {
    uint32_t e = 0;
    if (p & POLLIN) e |= EPOLLIN | EPOLLRDNORM;
    if (p & POLLPRI) e |= EPOLLPRI;
    if (p & POLLOUT) e |= EPOLLOUT | EPOLLWRNORM;
    if (p & POLLRDHUP) e |= EPOLLRDHUP;
    if (p & POLLHUP) e |= EPOLLHUP;
    if (p & POLLERR) e |= EPOLLERR;
    return e;
}

uint32_t ConnSource::bits() const {
    // Connecting (a set holds it from its epoll_ctl on): nothing yet; the
    // handshake's end counts an `out` wake-up and rings the set.
    if (c_->phase.load(std::memory_order_acquire) != Phase::Active) return 0;
    short p = smc_poll_events(*c_);
    // Unwritable: the next look that finds room counts an `out` wake-up.
    if (!(p & POLLOUT)) c_->nospace.store(true, std::memory_order_release);
    return epoll_bits(p);
}

readiness::Wakes ConnSource::wakes() const {
    SmcConn& c = *c_;
    readiness::Wakes w;
    if (c.phase.load(std::memory_order_acquire) != Phase::Active) {
        w.out = c.out_wakes.load(std::memory_order_acquire);
        w.all = c.end_wakes.load(std::memory_order_acquire);
        return w;
    }
    core::PeerCdc peer = smc_peer_cdc(c);
    w.in = uint64_t(peer.prod.wrap) << 48 ^ uint64_t(peer.prod.count) << 16 ^ peer.urg_count;
    if (c.nospace.load(std::memory_order_acquire) &&
        smc_tx_unconsumed(c) < c.transport.tx_ring_size() &&
        c.nospace.exchange(false, std::memory_order_acq_rel))
        c.out_wakes.fetch_add(1, std::memory_order_acq_rel);
    w.out = c.out_wakes.load(std::memory_order_acquire);
    w.all = uint64_t(std::popcount(peer.conn_flags)) + c.end_wakes.load(std::memory_order_acquire);
    return w;
}

} // namespace usmc
