// SPDX-License-Identifier: MIT
#include "engine/core/cdc_recv.hpp"

namespace usmc::core {

namespace {
template <class F>
CloseState move_on(ConnState& k, F f) {
    CloseState s = k.close_state.load(std::memory_order_acquire);
    while (true) {
        CloseState n = f(s);
        if (n == s) return s;
        if (k.close_state.compare_exchange_weak(s, n, std::memory_order_acq_rel)) return n;
    }
}

// Stores `now` where it differs from what is stored: whether it did.
bool note(SharedCursor& seen, Cursor now) {
    Cursor was = seen.load();
    if (was.wrap == now.wrap && was.count == now.count) return false;
    seen.store(now);
    return true;
}
template <class T>
bool note(std::atomic<T>& seen, T now) {
    if (seen.load(std::memory_order_relaxed) == now) return false;
    seen.store(now, std::memory_order_relaxed);
    return true;
}
} // namespace

Received cdc_recv(ConnState& k, const PeerCdc& m, uint32_t rx_ring, uint32_t tx_ring) {
    Received r;
    r.readable = cdc_readable(m, k.rx_cons.load(), rx_ring);
    r.space = cdc_space(m, k.tx_prod.load(), tx_ring);
    r.ending = cdc_ending_flags(m);
    // (Both noted, whichever changed.)
    bool data = note(k.seen_prod, m.prod);
    data = note(k.seen_urg, m.urg_count) || data;
    bool space = note(k.seen_cons, m.cons);
    bool ended = note(k.seen_flags, r.ending);
    if (ended) fold_peer_flags(k, r.ending);
    if (!r.readable || !r.space) {
        // Whoever waits must look, and find the connection broken.
        r.wake = {true, true, true};
        return r;
    }
    r.wake.reader = data || ended;
    r.wake.writer = space || ended;
    r.wake.closer = ended;
    return r;
}

CloseState close_event(ConnState& k, CloseEvent e) {
    return move_on(k, [e](CloseState s) { return next(s, e); });
}

bool take_error(ConnState& k) {
    CloseState s = CloseState::Reset;
    return k.close_state.compare_exchange_strong(s, next(s, CloseEvent::ErrorTaken),
                                                 std::memory_order_acq_rel);
}

CloseState fold_peer_flags(ConnState& k, uint8_t ending) {
    if (!ending) return k.close_state.load(std::memory_order_acquire);
    return move_on(k, [ending](CloseState s) { return with_peer_flags(s, ending); });
}

} // namespace usmc::core
