// SPDX-License-Identifier: MIT
#pragma once
// Corking on the send side (the kernel's smc_tx.c: MSG_MORE, TCP_CORK and
// autocorking).
//
// Our notifications are already coalesced the way the kernel's autocorking
// coalesces CDC messages: the writer wakes the reader only when the reader
// asked (kWaitData) and at most once per call, so while a woken reader has not
// yet drained the ring every further write rides along with no system call.
// What remains is MSG_MORE / TCP_CORK: the application says more is coming,
// so the bytes are copied into the peer's ring but the producer cursor is not
// published (the reader neither sees nor wakes for a partial message) until
// the cork ends, the held bytes pass min(ring / 2, autocorking_size) — the
// kernel's corking size —, the ring fills, or 200 ms pass (TCP_CORK's
// ceiling, so a forgotten cork costs latency, never a hang).
#include "engine/conn/conn.hpp"
#include "engine/core/cork.hpp"

#include <cstdint>

namespace usmc {

using core::cork_hold;

constexpr int kCorkCeilingMs = 200;

// Publishes held bytes and wakes the reader (TCP_CORK cleared, TCP_NODELAY
// set, shutdown, close).
void smc_flush(SmcConn& c);
// The same, the caller holding tx_mu.
void smc_flush_locked(SmcConn& c);
// setsockopt(IPPROTO_TCP, TCP_CORK) on an SMC connection.
void smc_set_cork(SmcConn& c, bool on);
// The connection is going away: the backstop flusher forgets it.
void smc_cork_forget(SmcConn& c);
// In a forked child: the flusher thread is the parent's.
void smc_cork_after_fork_child();

// A writer waiting for space need wait no longer: the peer's ring has room,
// or the connection ended or broke (space_watch.hpp).
bool smc_tx_space_or_end(SmcConn& c);

} // namespace usmc
