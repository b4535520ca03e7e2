// SPDX-License-Identifier: MIT
#pragma once
// SMC-D's signal half, the asking side: what a side sleeps for, written by
// the sleeper into the control line of the DMB it produces into (word 32,
// cdc_line.hpp), and taken by the other side with one atomic
// read-modify-write, so exactly one wake-up answers each request. The wake-up
// itself (a datagram to the sleeper's `sig`, or its process's bell) is the
// caller's. SMC-R asks through its CDC message's flags instead (the kernel's
// cons_curs_upd_req and write_blocked), answered by the next message: the
// data path says what it waits for only through these calls.
//
// `peer_line`: the line of the DMB we produce into, where our requests go.
// `own_line`: the line of our DMB, where the peer's requests arrive. Both
// are shared with the peer: every word is a hint, never trusted for more.
#include "engine/smcd/cdc_line.hpp"

namespace usmc::smcd {

// Reader: wake me when data arrives / writer: when space frees.
inline void ask_for_data(Control& peer_line) {
    peer_line.waiting.fetch_or(kWaitData, std::memory_order_seq_cst);
}
inline void ask_for_space(Control& peer_line) {
    peer_line.waiting.fetch_or(kWaitSpace, std::memory_order_seq_cst);
}
// Reader, for its epoll set kept in user memory: wake my set's bell (id
// `bell`, at most kBellIdMax) when data arrives, through its gate line `gate`
// of the segment our DMB lies in (gate.hpp; -1: none, every take rings).
// Replaces a bell named before (one set of one process names bells for a
// connection side).
inline void ask_for_data_bell(Control& peer_line, uint64_t bell, int gate = -1) {
    auto& w = peer_line.waiting;
    uint64_t gated = gate >= 0 ? kWaitDataGate | (uint64_t(gate) << kGateShift & kGateBits) : 0;
    uint64_t cur = w.load(std::memory_order_relaxed);
    uint64_t want;
    do {
        want = (cur & ((uint64_t{1} << kBellShift) - 1) & ~(kWaitDataGate | kGateBits)) |
               kWaitDataBell | gated | bell << kBellShift;
    } while (cur != want && !w.compare_exchange_weak(cur, want, std::memory_order_seq_cst));
    // (Already standing: an RMW all the same, so the look after arming is
    // ordered after it as after a CAS; a fence would do, but TSan has none.)
    if (cur == want) w.fetch_or(0, std::memory_order_seq_cst);
}
// Reader: the bell request withdrawn (the set let go of the connection).
inline void withdraw_data_bell(Control& peer_line) {
    peer_line.waiting.fetch_and(((uint64_t{1} << kBellShift) - 1) &
                                    ~(kWaitDataBell | kWaitDataGate | kGateBits),
                                std::memory_order_seq_cst);
}
// Reader: our bell request still stands.
inline bool data_bell_asked(const Control& peer_line) {
    return peer_line.waiting.load(std::memory_order_seq_cst) & kWaitDataBell;
}
// Reader, at its end: our requests for data withdrawn (the peer must not
// wake the name or the bell any more). True if the `sig` one still stood:
// the peer never took it.
inline bool withdraw_data_request(Control& peer_line) {
    uint64_t was =
        peer_line.waiting.fetch_and(((uint64_t{1} << kBellShift) - 1) &
                                        ~(kWaitData | kWaitDataBell | kWaitDataGate | kGateBits),
                                    std::memory_order_seq_cst);
    return was & kWaitData;
}
// Reader: our request for data still stands (the peer has not taken it).
inline bool data_asked(const Control& peer_line) {
    return peer_line.waiting.load(std::memory_order_seq_cst) & kWaitData;
}
// Reader: the peer took our request and its wake-up has not landed yet.
inline bool data_wake_in_flight(const Control& peer_line) {
    return peer_line.waiting.load(std::memory_order_seq_cst) & kWakingData;
}

// What a writer took: the `sig` request, and the bell of a set (0: none)
// with its gate line (-1: none).
struct DataRequest {
    bool sig = false;
    uint64_t bell = 0;
    int gate = -1;
    explicit operator bool() const { return sig || bell; }
};
inline DataRequest data_request_of(uint64_t word) {
    DataRequest r{(word & kWaitData) != 0, (word & kWaitDataBell) ? word >> kBellShift : 0};
    if ((word & kWaitDataBell) && (word & kWaitDataGate))
        r.gate = int((word & kGateBits) >> kGateShift);
    return r;
}
// Writer: takes the reader's requests for data, marking a `sig` wake-up in
// flight (a bell's wake-up needs no such mark: a stale one is a look).
inline DataRequest take_data_request(Control& own_line) {
    auto& w = own_line.waiting;
    uint64_t cur = w.load(std::memory_order_seq_cst);
    while ((cur & (kWaitData | kWaitDataBell)) &&
           !w.compare_exchange_weak(cur,
                                    (cur & ((uint64_t{1} << kBellShift) - 1) &
                                     ~(kWaitData | kWaitDataBell | kWaitDataGate | kGateBits)) |
                                        ((cur & kWaitData) ? uint64_t{kWakingData} : 0),
                                    std::memory_order_seq_cst)) {
    }
    return data_request_of(cur);
}
// Writer, after take_data_request: nothing left to read after all; the
// requests stand for the next write and no wake-up goes out (a bell named
// meanwhile stays).
inline void keep_data_request(Control& own_line, DataRequest taken) {
    auto& w = own_line.waiting;
    uint64_t cur = w.load(std::memory_order_relaxed);
    uint64_t want;
    do {
        want = cur | (taken.sig ? uint64_t{kWaitData} : 0);
        if (taken.bell && !(cur & kWaitDataBell)) {
            want |= kWaitDataBell | (taken.bell << kBellShift);
            if (taken.gate >= 0)
                want |= kWaitDataGate | (uint64_t(taken.gate) << kGateShift & kGateBits);
        }
        if (taken.sig) want &= ~uint64_t{kWakingData};
    } while (!w.compare_exchange_weak(cur, want, std::memory_order_seq_cst));
}
// Writer, after take_data_request: the wake-up has landed.
inline void data_woken(Control& own_line) {
    own_line.waiting.fetch_and(~uint64_t{kWakingData}, std::memory_order_seq_cst);
}

// Reader: the writer asked for space (a look, nothing taken).
inline bool space_asked(const Control& own_line) {
    return own_line.waiting.load(std::memory_order_seq_cst) & kWaitSpace;
}
// Reader: takes the writer's request for space. False: nobody asked.
inline bool take_space_request(Control& own_line) {
    return own_line.waiting.fetch_and(~uint64_t{kWaitSpace}, std::memory_order_seq_cst) &
           kWaitSpace;
}

// At our close: every request of the peer's, taken at once.
inline core::Requests take_all_requests(Control& own_line) {
    uint64_t was = own_line.waiting.exchange(0, std::memory_order_seq_cst);
    return {(was & kWaitData) != 0, (was & kWaitSpace) != 0,
            (was & kWaitDataBell) ? was >> kBellShift : 0};
}

} // namespace usmc::smcd
