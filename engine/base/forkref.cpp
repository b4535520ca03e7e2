// SPDX-License-Identifier: MIT
#include "engine/base/forkref.hpp"

#include <cstddef>
#include <new>
#include <sys/mman.h>

namespace usmc::forkref {

namespace {

constexpr size_t kSlots = size_t{1} << 20; // more than the descriptors of any process
constexpr size_t kWords = kSlots / 64;

// Pages are touched only as slots are used (MAP_NORESERVE).
struct Region {
    std::atomic<uint64_t> hint; // a word that had a free slot
    std::atomic<uint64_t> used[kWords];
    Count counts[kSlots];
};

std::atomic<Region*> g_region{nullptr};

Region* region() {
    Region* r = g_region.load(std::memory_order_acquire);
    if (r) return r;
    void* m = mmap(nullptr, sizeof(Region), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    auto* fresh = static_cast<Region*>(m); // zero pages: all slots free
    if (!g_region.compare_exchange_strong(r, fresh, std::memory_order_acq_rel)) {
        munmap(m, sizeof(Region));
        return r;
    }
    return fresh;
}

} // namespace

Count* alloc() {
    Region* r = region();
    if (!r) return nullptr;
    uint64_t start = r->hint.load(std::memory_order_relaxed) % kWords;
    for (size_t i = 0; i < kWords; ++i) {
        size_t w = (start + i) % kWords;
        uint64_t bits = r->used[w].load(std::memory_order_relaxed);
        while (~bits) {
            int b = __builtin_ctzll(~bits);
            if (r->used[w].compare_exchange_weak(bits, bits | (uint64_t{1} << b),
                                                 std::memory_order_acq_rel)) {
                r->hint.store(w, std::memory_order_relaxed);
                Count* c = &r->counts[w * 64 + size_t(b)];
                uint64_t gen = (c->load(std::memory_order_relaxed) >> 32) + 1;
                c->store(gen << 32 | 1, std::memory_order_release);
                return c;
            }
        }
    }
    return nullptr;
}

void free(Count* c) {
    Region* r = g_region.load(std::memory_order_acquire);
    if (!r || c < r->counts || c >= r->counts + kSlots) return; // a private count
    size_t i = size_t(c - r->counts);
    r->used[i / 64].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_acq_rel);
}

bool leave_unless_last(Count& c) {
    uint64_t v = c.load(std::memory_order_acquire);
    while (uint32_t(v) > 1)
        if (c.compare_exchange_weak(v, v - 1, std::memory_order_acq_rel)) return true;
    return false;
}

namespace {
std::atomic<uint32_t> g_forks{0};
} // namespace

uint32_t forks_so_far() {
    return g_forks.load(std::memory_order_acquire);
}

void note_fork() {
    g_forks.fetch_add(1, std::memory_order_acq_rel);
}

bool rehold(Count& c, uint32_t gen) {
    uint64_t v = c.load(std::memory_order_acquire);
    while (uint32_t(v >> 32) == gen && uint32_t(v) > 0)
        if (c.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) return true;
    return false;
}

} // namespace usmc::forkref
