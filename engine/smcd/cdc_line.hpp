// SPDX-License-Identifier: MIT
#pragma once
// SMC-D's connection data control: the CDC as usmc lays it out in shared
// memory, and SMC-D's receive of it (core/cdc.hpp reads what it means).
// Every DMB starts with one 64-byte control line, written only by the peer
// (the side that produces into this DMB) and read by the owner:
//
//   0   type 0xFE, 7 reserved            the SMC-D CDC (net/smc/smc_cdc.h, struct smcd_cdc_msg),
//   8   producer cursor  wrap:16 count:32     host byte order, each 8-byte
//       + urgent count:16                     word read and written atomically
//   16  consumer cursor  wrap:16 count:32
//       + producer flags:8 + connection flags:8
//   24  usmc: the owner's `sig` token (its CLC token), written with the
//       owner token: whom a server that took a DMB named in a Proposal
//       wakes (the peer's word, checked like any: a wrong one wakes nobody
//       of ours)
//   32  usmc: what the peer is waiting for (kWaitData, kWaitSpace,
//       kWaitDataBell with its waiter's bell id in the top 48 bits and
//       perhaps its gate line, kWaitDataGate in bits 8..13), set by
//       the waiter, taken by the notifier with one atomic RMW: exactly one
//       wake-up per wait
//   40  usmc: the urgent mark  wrap:16 count:32 + urgent count:16
//   48  usmc: the bell of the peer's process (space_watch.hpp), set before
//       it asks for kWaitSpace: rung when that wait is taken
//   56  usmc: the owner token: a random secret the owner writes when it
//       claims the DMB, before it names the DMB in CLC, and tells only in
//       CLC (never the `sig`'s token: a bound abstract name, which any local
//       process reads in /proc/net/unix). A connection on an existing link
//       group maps the DMB its peer names without an attach (link_group.hpp)
//       and believes the name only if this matches the token of the message:
//       nobody who cannot write the owner's segment can make it match.
//       (Nothing here is trusted afterwards: the peer maps this line
//       read-write.) A client that names its DMB in its Proposal
//       (clc::NamedDmb) lets the server take it by swapping this token for
//       the token with kTakenBit flipped, and withdraws the name by swapping
//       it for 0: exactly one of the two wins (take_named, withdraw_named).
//
// Urgent data (TCP's MSG_OOB). The kernel's CDC message carries the
// producer flags urg_data_pending / urg_data_present with the cursor of the
// message; usmc's cursors are words in shared memory, not messages, so a
// reader may never see the producer cursor that ended an urgent send. The
// producer counts its urgent sends instead (the producer word's top 16
// bits) and, before publishing a count, writes the mark of that send (the
// producer cursor just after its urgent byte) with the same count at 40.
// A reader whose count differs from the word's looks at the mark (one
// branch on the word it loaded anyway); a mark whose count differs from the
// producer word's is still being written (TCP's "urgent data not yet
// arrived"). The mark is the peer's word: it must lie inside the data the
// peer produced and we have not consumed, or the connection is broken.
//   64  the data ring (DMB size - 64 bytes)
//
// The kernel's SMC-D ring starts at 32; usmc keeps the cursors in a cache
// line of their own so data writes never invalidate them.
#include "engine/core/cdc.hpp"
#include "engine/core/close_state.hpp"
#include "engine/core/cursor.hpp"
#include "engine/core/transport.hpp"

#include <atomic>
#include <cstdint>

namespace usmc::smcd {

using core::Cursor;

enum ProdFlags : uint8_t {
    kWriteBlocked = 0x80,
    kUrgPending = 0x40,
    kUrgPresent = 0x20,
    kConsUpdateReq = 0x10,
};
enum WaitFlags : uint64_t {
    kWaitData = 1,  // the peer sleeps until data arrives in its DMB
    kWaitSpace = 2, // the peer sleeps until space frees in this DMB
    // Set by the writer that took kWaitData until its wake-up has been
    // written: the reader re-arms (and drains) only after it has landed, so
    // no wake-up for data already read is left behind as a stale "readable".
    kWakingData = 4,
    // The peer's epoll set, kept in user memory, waits for data (or the end)
    // here: its bell's id is in the word's top 48 bits (kBellShift), and the
    // wake-up is a datagram to that bell carrying the peer's token (issue
    // 44's readiness; docs/DESIGN-NOTES.md). Independent of kWaitData: a
    // blocked call of the same side waits on `sig` beside it.
    kWaitDataBell = 8,
    // With kWaitDataBell: the set's gate line (gate.hpp) is named in the
    // word's bits 8..13 (kGateShift); the writer knocks there and rings
    // only a sleeping set.
    kWaitDataGate = 16,
};
constexpr unsigned kGateShift = 8;
constexpr uint64_t kGateBits = uint64_t{63} << kGateShift;
constexpr unsigned kBellShift = 16;
constexpr uint64_t kBellIdMax = (uint64_t{1} << (64 - kBellShift)) - 1;

constexpr uint8_t kCdcType = 0xFE;
constexpr uint32_t kControlBytes = 64;

struct alignas(64) Control {
    uint8_t type;
    uint8_t reserved0[7];
    std::atomic<uint64_t> prod;
    std::atomic<uint64_t> cons;
    std::atomic<uint64_t> owner_sig;
    std::atomic<uint64_t> waiting;
    std::atomic<uint64_t> urg;
    std::atomic<uint64_t> space_bell;
    std::atomic<uint64_t> owner_token;
};
static_assert(sizeof(Control) == kControlBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// The owner claims its DMB: the secret it will tell in CLC, and its `sig`'s
// token, the secret last.
inline void stamp_owner(Control& line, uint64_t secret, uint64_t sig_token) {
    line.owner_sig.store(sig_token, std::memory_order_relaxed);
    line.owner_token.store(secret, std::memory_order_release);
}

// A Proposal's named DMB, taken by the server or withdrawn by its owner
// (see offset 56 above).
constexpr uint64_t kTakenBit = 1ull << 63;
inline bool take_named(Control& line, uint64_t token) {
    return line.owner_token.compare_exchange_strong(token, token ^ kTakenBit,
                                                    std::memory_order_acq_rel);
}
// The server took it but cannot use it after all: the name is the owner's again.
inline void untake_named(Control& line, uint64_t token) {
    uint64_t taken = token ^ kTakenBit;
    line.owner_token.compare_exchange_strong(taken, token, std::memory_order_acq_rel);
}
inline bool withdraw_named(Control& line, uint64_t token) {
    return line.owner_token.compare_exchange_strong(token, 0, std::memory_order_acq_rel);
}

inline uint64_t pack_prod(Cursor c) {
    return uint64_t(c.wrap) | uint64_t(c.count) << 16;
}
inline Cursor unpack_prod(uint64_t w) {
    return {uint16_t(w), uint32_t(w >> 16)};
}
// The producer word and the urgent mark: a cursor and an urgent-send count.
inline uint64_t pack_prod(Cursor c, uint16_t urg_count) {
    return pack_prod(c) | uint64_t(urg_count) << 48;
}
inline uint16_t urg_count_of(uint64_t prod_word) {
    return uint16_t(prod_word >> 48);
}
inline uint64_t pack_cons(Cursor c, uint8_t prod_flags, uint8_t conn_flags) {
    return pack_prod(c) | uint64_t(prod_flags) << 48 | uint64_t(conn_flags) << 56;
}
inline Cursor unpack_cons(uint64_t w) {
    return unpack_prod(w & 0xffffffffffffull);
}
inline uint8_t prod_flags_of(uint64_t cons_word) {
    return uint8_t(cons_word >> 48);
}
inline uint8_t conn_flags_of(uint64_t cons_word) {
    return uint8_t(cons_word >> 56);
}

// SMC-D's CDC receive: the peer's words in our control line, copied (what
// smcd_cdc_rx_tsklet does at each interrupt, done here at each look). The
// consumer word, which carries the connection flags, first: the peer
// publishes its last producer cursor before its flags, so a copy with its
// flags has its last bytes. Every field is the peer's and checked by the
// core before it counts.
inline core::PeerCdc receive(const Control& line) {
    uint64_t cons = line.cons.load(std::memory_order_seq_cst);
    uint64_t prod = line.prod.load(std::memory_order_seq_cst);
    return {unpack_prod(prod), urg_count_of(prod), unpack_cons(cons), prod_flags_of(cons),
            conn_flags_of(cons)};
}
// SMC-D's CDC send: our words in the peer's control line (the line of the
// DMB we produce into), each one store the peer sees whole. Producer word
// after the data it covers; an urgent send's mark before the producer word
// that carries its count; the consumer word carries our connection flags.
inline void send_prod(Control& peer_line, Cursor prod, uint16_t urg_count) {
    peer_line.prod.store(pack_prod(prod, urg_count), std::memory_order_seq_cst);
}
inline void send_urgent_mark(Control& peer_line, Cursor after, uint16_t urg_count) {
    peer_line.urg.store(pack_prod(after, urg_count), std::memory_order_seq_cst);
}
inline void send_cons(Control& peer_line, Cursor cons, uint8_t conn_flags) {
    peer_line.cons.store(pack_cons(cons, 0, conn_flags), std::memory_order_seq_cst);
}
// A move to TCP (core::kMovedFlags): our consumer cursor and flags with
// `move` added, stored only if no process holding our side (fork) set a move
// flag first. False: one did (the move is its).
inline bool send_move(Control& peer_line, Cursor cons, uint8_t conn_flags, uint8_t move) {
    uint64_t w = peer_line.cons.load(std::memory_order_seq_cst);
    do {
        if (conn_flags_of(w) & core::kMovedFlags) return false;
    } while (!peer_line.cons.compare_exchange_weak(w, pack_cons(cons, 0, conn_flags | move),
                                                   std::memory_order_seq_cst));
    return true;
}
// The connection flags alone, one load: the peer's in our line, ours in its.
inline uint8_t conn_flags(const Control& line) {
    return conn_flags_of(line.cons.load(std::memory_order_seq_cst));
}
// What this side has sent, as the peer receives it: the line is shared by
// every process that holds the connection (fork), so it is the one record
// of what all of them sent. The peer can write there too: checked before use.
inline core::PeerCdc sent(const Control& peer_line) {
    return receive(peer_line);
}

// The mark of the peer's latest urgent send (core::UrgentMark).
inline core::UrgentMark receive_urgent_mark(const Control& line) {
    uint64_t w = line.urg.load(std::memory_order_seq_cst);
    return {unpack_prod(w), urg_count_of(w)};
}

} // namespace usmc::smcd
