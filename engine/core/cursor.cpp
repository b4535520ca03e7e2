// SPDX-License-Identifier: MIT
#include "engine/core/cursor.hpp"

#include <algorithm>

namespace usmc::core {

Cursor advance(Cursor c, uint32_t n, uint32_t size) {
    uint64_t next = uint64_t{c.count} + n;
    if (next >= size) return {uint16_t(c.wrap + 1), uint32_t(next - size)};
    return {c.wrap, uint32_t(next)};
}

std::optional<uint32_t> distance(Cursor older, Cursor newer, uint32_t size) {
    if (older.count >= size || newer.count >= size) return std::nullopt;
    if (newer.wrap == older.wrap) {
        if (newer.count < older.count) return std::nullopt;
        return newer.count - older.count;
    }
    if (newer.wrap == uint16_t(older.wrap + 1)) {
        // At most one ring ahead: newer.count may not pass older.count.
        if (newer.count > older.count) return std::nullopt;
        return size - older.count + newer.count;
    }
    return std::nullopt;
}

bool valid(Cursor c, uint32_t size) {
    return c.count < size;
}

uint32_t update_limit(uint32_t ring_size) {
    constexpr uint32_t kSockMinSndbufHalf = 2304;
    return std::max(ring_size / 10, kSockMinSndbufHalf);
}

} // namespace usmc::core
