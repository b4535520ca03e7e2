// SPDX-License-Identifier: MIT
#pragma once
// Counting into this process's stats segment, for every layer of the
// engine. The runtime makes, moves (fork) and retires the segment and tells
// us where it keeps the pointer to it; nothing is counted before it does,
// nor while it has no segment.
#include "engine/base/counters.hpp"

#include <cstdint>

namespace usmc::statseg {
struct Header;
}

namespace usmc::counters {

// The runtime's pointer to the segment, which it keeps current.
void count_into(statseg::Header* const* where);

// The segment as it is now (nullptr: none yet), for the writers of what
// is published beside the counters (the device, link groups).
statseg::Header* current_segment();

void count(Id id, uint64_t n = 1);
// A gauge (is_gauge) whose owner knows its value: stored, not added.
void set_gauge(Id id, uint64_t value);
void count_fallback(uint32_t reason);
// RX/TX counters (Traffic), one relaxed increment.
void count_traffic(Dir dir, unsigned slot, uint64_t n = 1);

} // namespace usmc::counters
