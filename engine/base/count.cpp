// SPDX-License-Identifier: MIT
#include "engine/base/count.hpp"

#include "engine/base/fallback.hpp"
#include "engine/base/statseg.hpp"

#include <atomic>

namespace usmc::counters {

namespace {
std::atomic<statseg::Header* const*> g_where{nullptr};

statseg::Header* segment() {
    auto* where = g_where.load(std::memory_order_relaxed);
    return where ? *where : nullptr;
}
} // namespace

void count_into(statseg::Header* const* where) {
    g_where.store(where, std::memory_order_relaxed);
}

statseg::Header* current_segment() {
    return segment();
}

void count(Id id, uint64_t n) {
    if (auto* seg = segment()) seg->counters[id].fetch_add(n, std::memory_order_relaxed);
}

void set_gauge(Id id, uint64_t value) {
    if (auto* seg = segment()) seg->counters[id].store(value, std::memory_order_relaxed);
}

void count_traffic(Dir dir, unsigned slot, uint64_t n) {
    if (auto* seg = segment()) seg->traffic[dir][slot].fetch_add(n, std::memory_order_relaxed);
}

void count_fallback(uint32_t reason) {
    auto* seg = segment();
    if (!seg) return;
    seg->counters[fallbacks].fetch_add(1, std::memory_order_relaxed);
    if (auto i = fallback::index_of(reason))
        seg->fallbacks[*i].fetch_add(1, std::memory_order_relaxed);
}

} // namespace usmc::counters
