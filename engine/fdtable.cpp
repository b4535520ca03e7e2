#include "engine/fdtable.hpp"

namespace usmc {

FdTable g_fds;

// Word layout: kind[0..7] family[8..15] role[16..19] mode[20..23]
// flags[24..31] reason[32..63]. One word, so readers always see a whole
// record.
uint64_t SockInfo::pack() const {
    return uint64_t(kind) | uint64_t(family) << 8 | uint64_t(uint8_t(role) & 0xf) << 16 |
           uint64_t(uint8_t(mode) & 0xf) << 20 | uint64_t(flags) << 24 | uint64_t(reason) << 32;
}

SockInfo SockInfo::unpack(uint64_t w) {
    SockInfo s;
    s.kind = static_cast<SockKind>(w & 0xff);
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

void FdTable::attach(std::atomic<uint64_t>* slots, uint32_t capacity, std::atomic<uint32_t>* high) {
    capacity_ = capacity;
    high_ = high;
    slots_.store(slots, std::memory_order_release);
}

bool FdTable::set(int fd, const SockInfo& info) {
    auto* slots = slots_.load(std::memory_order_acquire);
    if (!slots || static_cast<unsigned>(fd) >= capacity_) return false;
    slots[fd].store(info.pack(), std::memory_order_relaxed);
    uint32_t want = static_cast<uint32_t>(fd) + 1;
    uint32_t cur = high_->load(std::memory_order_relaxed);
    while (cur < want && !high_->compare_exchange_weak(cur, want, std::memory_order_relaxed)) {
    }
    return true;
}

void FdTable::clear(int fd) {
    auto* slots = slots_.load(std::memory_order_acquire);
    if (!slots || static_cast<unsigned>(fd) >= capacity_) return;
    // Most closes are of fds the shim never tracked: skip the store (and the
    // page it would dirty) when the slot is already empty.
    if (slots[fd].load(std::memory_order_relaxed) != 0)
        slots[fd].store(0, std::memory_order_relaxed);
}

void FdTable::copy(int from, int to) {
    SockInfo info = get(from);
    if (info.tracked())
        set(to, info);
    else
        clear(to);
}

void FdTable::clear_range(unsigned first, unsigned last) {
    auto* slots = slots_.load(std::memory_order_acquire);
    if (!slots) return;
    uint32_t high = high_->load(std::memory_order_relaxed);
    if (last >= high) last = high ? high - 1 : 0;
    for (unsigned fd = first; fd <= last && fd < capacity_; ++fd)
        clear(static_cast<int>(fd));
}

} // namespace usmc
