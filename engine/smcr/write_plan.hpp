// SPDX-License-Identifier: MIT
#pragma once
// What an SMC-R sender WRITEs before its CDC: the bytes produced since the
// last post, from its send buffer into the peer's RMB at the same ring
// offsets, as at most two RDMA WRITEs (the second when the range wraps the
// ring's end: the kernel's smc_tx_rdma_writes, which is why a link's send
// queue holds three work requests per CDC slot). The ring starts at the
// RMB's first byte: usmc's CONFIRM LINK says "no RMBE eyecatcher".
// The same offsets in both rings: usmc sizes a connection's send buffer to
// the RMB its peer named in CLC (the kernel, whose send buffer is sized
// apart, splits each WRITE at either ring's end, up to 2 x 2 pieces).
#include "engine/core/cursor.hpp"

#include <array>
#include <cstdint>
#include <optional>

namespace usmc::smcr {

struct WriteSeg {
    uint32_t offset = 0; // in both rings
    uint32_t len = 0;
    uint64_t remote_addr = 0;
};
struct WritePlan {
    std::array<WriteSeg, 2> seg{};
    int count = 0;
    uint32_t bytes() const { return seg[0].len + (count > 1 ? seg[1].len : 0); }
};

// From cursor `sent` (posted before) to `prod` (produced now) on a ring of
// `ring` bytes at `rmb_vaddr` in the peer. nullopt if `prod` is behind
// `sent` or more than a ring ahead: a broken connection, never a WRITE.
std::optional<WritePlan> plan_writes(core::Cursor sent, core::Cursor prod, uint32_t ring,
                                     uint64_t rmb_vaddr);

} // namespace usmc::smcr
