// SPDX-License-Identifier: MIT
#pragma once
// SMC-D's doorbell gate (issue 44; docs/DESIGN-NOTES.md "Issue 44"): how a
// sleeping epoll set kept in user memory is woken by one datagram per sleep
// and segment, not one per connection.
//
// A segment's file (ism.hpp) ends in one page of gate lines, after its
// slots: line `g` belongs to the owner's epoll set number `g`. A set that
// arms a connection whose DMB is a slot of the segment names `g` in its
// request (wait_flags.hpp). The writer that takes such a request sets the
// slot's bit in the line's `ready` word and rings the set's bell only if it
// is the one that clears `sleeping`: the owner sets `sleeping` before it
// arms and sleeps, so the first writer after that rings once and the others
// only leave their bits, which the woken set takes.
//
// Every word here is written by the segment's peers, who are of one user
// (ism.hpp): a bit is a hint (a look), `sleeping` at worst a datagram more
// or a wake-up fewer for connections of that user only.
#include "engine/smcd/ism.hpp"

#include <atomic>
#include <cstdint>

namespace usmc::smcd {

constexpr uint32_t kGatePageBytes = ism::kGatePage;
constexpr unsigned kGates = 64;

struct alignas(64) GateLine {
    std::atomic<uint64_t> sleeping; // 1: the set sleeps (or is about to)
    std::atomic<uint64_t> ready;    // slot i's request was taken: bit i
    // The bell of the set that holds the line now (0: none). A request the
    // writer took may name a line its set has given up since, and a newer
    // set of the process may hold it: such a request rings its own bell
    // and leaves the newer set's words alone.
    std::atomic<uint64_t> bell;
    uint64_t reserved[5];
};
static_assert(sizeof(GateLine) * kGates == kGatePageBytes);
static_assert(ism::kMaxSegmentSlots <= 64);

// The owner's line `g` of its segment `seg`.
inline GateLine& own_gate(const ism::Segment& seg, unsigned g) {
    return reinterpret_cast<GateLine*>(seg.base + seg.slot_bytes())[g];
}

// The writer's view of line `g` of the segment its peer's DMB `dmb` lies
// in, and the DMB's slot; nullptr if `dmb` is no slot of a segment with a
// gate page, or `g` is out of range (the peer's word: then the bell rings
// as for a request without a gate).
inline GateLine* peer_gate(const ism::Dmb& dmb, unsigned g, unsigned* slot) {
    if (g >= kGates || dmb.size <= kGatePageBytes || dmb.file_size <= dmb.size ||
        dmb.file_size % dmb.size != kGatePageBytes || dmb.offset % dmb.size != 0)
        return nullptr;
    *slot = dmb.offset / dmb.size;
    if (*slot >= 64) return nullptr;
    uint8_t* page = dmb.base - dmb.offset + (dmb.file_size - kGatePageBytes);
    return reinterpret_cast<GateLine*>(page) + g;
}

// Writer, having taken a request naming the gate and the bell `bell`:
// leaves the slot's bit and says whether to ring the bell (this writer found
// the set asleep first, or the line is another set's now).
inline bool knock(GateLine& l, unsigned slot, uint64_t bell) {
    if (l.bell.load(std::memory_order_seq_cst) != bell) return true;
    l.ready.fetch_or(uint64_t{1} << slot, std::memory_order_seq_cst);
    uint64_t s = l.sleeping.load(std::memory_order_seq_cst);
    return s != 0 && l.sleeping.compare_exchange_strong(s, 0, std::memory_order_seq_cst);
}

// Owner: its set sleeps (before arming), or not (after waking, no other
// thread of it asleep).
// Owner: the line is its set's (bell id), or nobody's (0).
inline void gate_own(GateLine& l, uint64_t bell) {
    l.bell.store(bell, std::memory_order_seq_cst);
}
inline void gate_sleep(GateLine& l) {
    l.sleeping.store(1, std::memory_order_seq_cst);
}
inline void gate_wake(GateLine& l) {
    l.sleeping.store(0, std::memory_order_seq_cst);
}
// Owner: the slots whose requests were taken since the last call.
inline uint64_t take_ready(GateLine& l) {
    if (l.ready.load(std::memory_order_seq_cst) == 0) return 0;
    return l.ready.exchange(0, std::memory_order_seq_cst);
}

} // namespace usmc::smcd
