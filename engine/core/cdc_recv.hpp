// SPDX-License-Identifier: MIT
#pragma once
// The core's one receive action (the kernel's smc_cdc_msg_recv and
// smc_cdc_msg_recv_action), fed by every transport: SMC-D with the words
// its peer wrote into our control line, at each look; SMC-R with the CDC
// message a receive completion delivered. It checks the CDC against our own
// cursors, folds the peer's ending flags into the close state, and says
// what the change wakes: the reader (data, urgent data, the peer's end),
// the writer (space, or the end that makes its send fail), the closer (a
// close that waits for the peer's).
#include "engine/core/cdc.hpp"
#include "engine/core/conn_state.hpp"

#include <optional>

namespace usmc::core {

struct Wake {
    bool reader = false;
    bool writer = false;
    bool closer = false;
    bool any() const { return reader || writer || closer; }
};

struct Received {
    // Checked against our cursors, each direction alone (cdc.hpp): nullopt
    // is a lie or a scribble, and the caller that uses it breaks the
    // connection.
    std::optional<uint32_t> readable; // bytes past our consumer cursor
    std::optional<uint32_t> space;    // free bytes in the peer's ring
    uint8_t ending = 0;               // the peer's flags that end something
    Wake wake;                        // what changed since the last receive
};

// `rx_ring`, `tx_ring`: the sizes of our ring and the peer's. Any thread;
// a receive that races another may report a change twice (a spurious wake),
// never miss one: what it saw is stored only where it differs.
Received cdc_recv(ConnState& k, const PeerCdc& m, uint32_t rx_ring, uint32_t tx_ring);

// The close state moved on by `e` (any thread): the new state.
CloseState close_event(ConnState& k, CloseEvent e);
// A reset's error reported (CloseEvent::ErrorTaken): true for the one
// caller that took it, as TCP's sock_error clears sk_err with an exchange.
bool take_error(ConnState& k);
// The close state with the peer's ending flags folded in.
CloseState fold_peer_flags(ConnState& k, uint8_t ending);

} // namespace usmc::core
