// SPDX-License-Identifier: MIT
#pragma once
// Moves a handshake through its state machine (engine/core/handshake_state)
// and shows where handshakes wait: one gauge per waiting state in the stats
// segment (`usmc stats`: hs_client_*, hs_server_*), so a stuck handshake is
// seen by where it is stuck, and threads that block for a peer are counted.
#include "engine/core/handshake_state.hpp"

namespace usmc::hs_track {

// `s` moves to next(s, e). An event `s` does not expect leaves it as it was
// (false): logged with `fd` and counted (hs_unexpected_events).
bool advance(core::ClientHs& s, core::ClientEvent e, int fd);
bool advance(core::ServerHs& s, core::ServerEvent e, int fd);

} // namespace usmc::hs_track
