// SPDX-License-Identifier: MIT
#pragma once
// Corking on the send side (the kernel's smc_tx.c: MSG_MORE, TCP_CORK and
// autocorking): bytes copied into the peer's ring but not posted, so the
// reader neither sees nor wakes for a partial message.
#include <cstdint>

namespace usmc::core {

// Whether `n` more bytes (after `held` already held) stay unposted: corked
// (MSG_MORE or TCP_CORK), within min(ring / 2, autocorking_size) — the
// kernel's corking size —, and not filling the ring. `free_after`: space
// left in the peer's ring after copying them.
constexpr bool cork_hold(uint32_t held, uint32_t n, uint32_t ring, uint32_t autocorking_size,
                         bool more, bool corked, uint32_t free_after) {
    uint32_t limit = ring / 2 < autocorking_size ? ring / 2 : autocorking_size;
    return (more || corked) && limit > 0 && free_after > 0 && uint64_t{held} + n <= limit;
}

} // namespace usmc::core
