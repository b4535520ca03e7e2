// SPDX-License-Identifier: MIT
#include "engine/base/fdtable.hpp"

namespace usmc {

FdTable g_fds;

// Word layout: kind[0..3] hints[4..7] family[8..15] role[16..19] mode[20..23]
// flags[24..31] reason[32..63]. One word, so readers always see a whole
// record.
uint64_t SockInfo::pack() const {
    return uint64_t(uint8_t(kind) & 0xf) | uint64_t(hints & 0xf) << 4 | uint64_t(family) << 8 |
           uint64_t(uint8_t(role) & 0xf) << 16 | uint64_t(uint8_t(mode) & 0xf) << 20 |
           uint64_t(flags) << 24 | uint64_t(reason) << 32;
}

SockInfo SockInfo::unpack(uint64_t w) {
    SockInfo s;
    s.kind = static_cast<SockKind>(w & 0xf);
    s.hints = static_cast<uint8_t>((w >> 4) & 0xf);
    s.family = static_cast<uint8_t>(w >> 8);
    s.role = static_cast<SockRole>((w >> 16) & 0xf);
    s.mode = static_cast<SockMode>((w >> 20) & 0xf);
    s.flags = static_cast<uint8_t>(w >> 24);
    s.reason = static_cast<uint32_t>(w >> 32);
    return s;
}

const char* role_name(SockRole role) {
    switch (role) {
    case SockRole::Client:
        return "client";
    case SockRole::Server:
        return "server";
    case SockRole::Listener:
        return "listen";
    default:
        return "-";
    }
}

const char* mode_name(SockMode mode) {
    switch (mode) {
    case SockMode::SmcD:
        return "SMCD";
    case SockMode::SmcR:
        return "SMCR";
    default:
        return "TCP";
    }
}

void FdTable::attach(std::atomic<uint64_t>* slots, uint32_t capacity, std::atomic<uint64_t>* mirror,
                     std::atomic<uint32_t>* mirror_high) {
    capacity_ = capacity;
    mirror_ = mirror;
    mirror_high_ = mirror_high;
    slots_.store(slots, std::memory_order_release);
}

void FdTable::remirror(std::atomic<uint64_t>* mirror, std::atomic<uint32_t>* mirror_high) {
    mirror_ = mirror;
    mirror_high_ = mirror_high;
    auto* slots = slots_.load(std::memory_order_acquire);
    if (!slots || !mirror) return;
    uint32_t high = high_.load(std::memory_order_relaxed);
    for (uint32_t fd = 0; fd < high; ++fd)
        mirror[fd].store(slots[fd].load(std::memory_order_relaxed), std::memory_order_relaxed);
    mirror_high->store(high, std::memory_order_relaxed);
}

void FdTable::store(int fd, uint64_t word) {
    auto* slots = slots_.load(std::memory_order_acquire);
    slots[fd].store(word, std::memory_order_relaxed);
    if (mirror_) mirror_[fd].store(word, std::memory_order_relaxed);
}

bool FdTable::set(int fd, const SockInfo& info) {
    if (!slots_.load(std::memory_order_acquire) || static_cast<unsigned>(fd) >= capacity_)
        return false;
    store(fd, info.pack());
    uint32_t want = static_cast<uint32_t>(fd) + 1;
    uint32_t cur = high_.load(std::memory_order_relaxed);
    while (cur < want && !high_.compare_exchange_weak(cur, want, std::memory_order_relaxed)) {
    }
    if (mirror_high_) {
        cur = mirror_high_->load(std::memory_order_relaxed);
        while (cur < want &&
               !mirror_high_->compare_exchange_weak(cur, want, std::memory_order_relaxed)) {
        }
    }
    return true;
}

void FdTable::set_hint(int fd, uint8_t hint, bool on) {
    auto* slots = slots_.load(std::memory_order_acquire);
    if (!slots || static_cast<unsigned>(fd) >= capacity_) return;
    uint64_t bits = uint64_t(hint & 0xf) << 4;
    uint64_t w = slots[fd].load(std::memory_order_relaxed);
    uint64_t want;
    do {
        if (!SockInfo::unpack(w).tracked()) return;
        want = on ? (w | bits) : (w & ~bits);
        if (want == w) return;
    } while (!slots[fd].compare_exchange_weak(w, want, std::memory_order_relaxed));
    if (mirror_) mirror_[fd].store(want, std::memory_order_relaxed);
}

void FdTable::clear(int fd) {
    auto* slots = slots_.load(std::memory_order_acquire);
    if (!slots || static_cast<unsigned>(fd) >= capacity_) return;
    // Most closes are of fds the shim never tracked: skip the stores (and the
    // pages they would dirty) when the slot is already empty.
    if (slots[fd].load(std::memory_order_relaxed) != 0) store(fd, 0);
}

void FdTable::copy(int from, int to) {
    SockInfo info = get(from);
    if (info.tracked())
        set(to, info);
    else
        clear(to);
}

void FdTable::clear_range(unsigned first, unsigned last) {
    uint32_t high = high_.load(std::memory_order_relaxed);
    if (high == 0) return;
    if (last >= high) last = high - 1;
    for (unsigned fd = first; fd <= last; ++fd)
        clear(static_cast<int>(fd));
}

} // namespace usmc
