// SPDX-License-Identifier: MIT
#pragma once
// The receive side of connection data control (CDC), as every transport
// feeds it: the kernel's struct smc_host_cdc_msg and smc_cdc_msg_recv.
//
// A transport turns whatever carries the peer's CDC into a PeerCdc — SMC-D
// copies the words the peer writes into our buffer's control line at each
// look (as smcd_cdc_rx_tsklet copies them at each interrupt); SMC-R will
// hand over the CDC message a receive completion delivered — and the
// connection reads the peer only through the functions below: nothing the
// peer wrote counts until it fits our own cursors. The peer can write every field, so
// each is checked here, once, for every transport.
#include "engine/core/close_state.hpp"
#include "engine/core/cursor.hpp"

#include <cstdint>
#include <optional>

namespace usmc::core {

// A peer's CDC, in host order (smc_host_cdc_msg).
struct PeerCdc {
    Cursor prod;            // its producer cursor: how far it wrote into our ring
    uint16_t urg_count = 0; // its urgent sends so far (usmc: marks are counted, not flagged)
    Cursor cons;            // its consumer cursor: how far it read the ring we write into
    uint8_t prod_flags = 0;
    uint8_t conn_flags = 0; // as sent, reserved bits included
};

// What a CDC means for the connection (smc_cdc_msg_recv_action's
// bytes_to_rcv and peer_rmbe_space, computed rather than accumulated: SMC-D
// sees the same words many times, SMC-R may see a newer CDC before an
// older one's completion). The producer cursor must lie at most one ring
// ahead of our consumer cursor and the consumer cursor at most one ring
// behind our producer cursor, neither behind the other: anything else is
// a lie or a scribble, and nullopt (the caller breaks the connection).
// Each direction alone: a receive that does not send checks the one it
// uses, and a lie in the other is found by the path that uses that one.
//
// Bytes produced into our ring that we have not consumed.
inline std::optional<uint32_t> cdc_readable(const PeerCdc& m, Cursor rx_cons, uint32_t rx_ring) {
    return distance(rx_cons, m.prod, rx_ring);
}
// Free bytes in the peer's ring.
inline std::optional<uint32_t> cdc_space(const PeerCdc& m, Cursor tx_prod, uint32_t tx_ring) {
    auto unconsumed = distance(m.cons, tx_prod, tx_ring);
    if (!unconsumed) return std::nullopt;
    return tx_ring - *unconsumed;
}
// Only the connection flags that end something: a peer that sets a
// reserved one must not make a waiting reader look again (nothing would
// end its call, and it would spin).
inline uint8_t cdc_ending_flags(const PeerCdc& m) {
    return m.conn_flags & kConnFlagsKnown;
}

} // namespace usmc::core
