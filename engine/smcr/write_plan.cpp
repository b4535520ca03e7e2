// SPDX-License-Identifier: MIT
#include "engine/smcr/write_plan.hpp"

#include <algorithm>

namespace usmc::smcr {

std::optional<WritePlan> plan_writes(core::Cursor sent, core::Cursor prod, uint32_t ring,
                                     uint64_t rmb_vaddr) {
    if (ring == 0 || !core::valid(sent, ring) || !core::valid(prod, ring)) return std::nullopt;
    auto n = core::distance(sent, prod, ring);
    if (!n) return std::nullopt;
    WritePlan p;
    if (*n == 0) return p;
    uint32_t first = std::min(*n, ring - sent.count);
    p.seg[0] = {sent.count, first, rmb_vaddr + sent.count};
    p.count = 1;
    if (first < *n) {
        p.seg[1] = {0, *n - first, rmb_vaddr};
        p.count = 2;
    }
    return p;
}

} // namespace usmc::smcr
