// SPDX-License-Identifier: MIT
#pragma once
// Ring cursors, as every SMC transport counts them (struct smc_host_cursor:
// a wrap count and an offset), and the arithmetic a connection does with
// them. Pure: where a transport keeps its cursors (SMC-D: words in the
// DMB's control line; SMC-R: fields of a CDC message) is its own affair.
#include <atomic>
#include <cstdint>
#include <optional>

namespace usmc::core {

struct Cursor {
    uint16_t wrap = 0;
    uint32_t count = 0; // offset in the ring, < ring size
    bool operator==(const Cursor&) const = default;
};

// Cursor arithmetic on a ring of `size` bytes.
Cursor advance(Cursor c, uint32_t n, uint32_t size); // n <= size
// Bytes from `older` to `newer`, or nullopt when `newer` is behind `older` or
// more than one ring ahead: what a bounds check on a peer's cursor needs.
std::optional<uint32_t> distance(Cursor older, Cursor newer, uint32_t size);
bool valid(Cursor c, uint32_t size); // count inside the ring

// max(ring_size / 10, SOCK_MIN_SNDBUF / 2): consumer-cursor announcements
// wait for this much consumption (seed: RMB window update fix).
uint32_t update_limit(uint32_t ring_size);

// A cursor in the low 48 bits of a word (wrap, then count), for words that
// carry more beside it.
inline uint64_t pack48(Cursor c) {
    return uint64_t(c.wrap) | uint64_t(c.count) << 16;
}
inline Cursor unpack48(uint64_t w) {
    return {uint16_t(w), uint32_t((w >> 16) & 0xffffffffu)};
}

// A cursor one thread advances (under its lock) while others read it without
// one (poll, FIONREAD): one atomic word, so a reader never pairs the wrap of
// one value with the count of another (a torn cursor looks impossible, and
// poll then reported an error it took back a moment later).
class SharedCursor {
  public:
    Cursor load() const { return unpack48(word_.load(std::memory_order_acquire)); }
    void store(Cursor c) { word_.store(pack48(c), std::memory_order_release); }

  private:
    std::atomic<uint64_t> word_{0};
};

} // namespace usmc::core
