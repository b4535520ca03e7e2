// SPDX-License-Identifier: MIT
#pragma once
// Whether SMC-D pays for a listener's (server) or a destination's (client)
// connections, learned from the connections seen: streams of one-request
// connections run as plain TCP, long-lived ones keep SMC-D. (The kernel's
// nearest thing is a BPF program deciding per connection whether to offer
// SMC, smc_hs_ctrl; this decides from what the connections did.)
//
// A connection pays once it has made kPaysTurns turns (a send after a
// receive: one per request/response round trip) or moved kPaysBytes. It
// reports "paid" once, when it crosses that line, and "unpaid" when the
// last process holding it releases it without having crossed it. Every
// kWindow reports a learner decides: TCP for kHoldNs if fewer than
// 1/kPaidShare of them paid, else SMC-D; then both counts are halved, so
// older windows weigh less. While a learner says TCP, a connect it turns to
// TCP runs SMC-D instead (a probe) once kProbeEvery were turned since the
// last probe and kProbeGapNs have passed, and a probe that pays ends the
// hold: the next connections re-measure.
//
// The learners live in one shared anonymous mapping made by this process at
// first need: forked children inherit it (a pre-fork server's child closing
// an accepted connection reports to the listener's learner), an exec'd
// program and a peer never see it (forkref.hpp has the same idea). Nobody
// else can write it, so nothing in it needs checking against a peer.
#include "engine/conn/conn.hpp"

#include <atomic>
#include <cstdint>
#include <sys/socket.h>

namespace usmc::learn {

// An SMC-D set-up costs more CPU than a TCP connection's, and every round
// trip and every megabyte over SMC-D saves some of it back (the figures:
// DESIGN-NOTES.md, "Learning whether SMC-D pays"): a connection pays back
// its set-up after a few dozen round trips or about a megabyte.
inline constexpr uint32_t kPaysTurns = 64;
inline constexpr uint64_t kPaysBytes = uint64_t{1} << 20;
// Reports per decision: few enough to notice a change within a second of a
// busy server, enough that one odd connection does not flip it.
inline constexpr uint32_t kWindow = 16;
// SMC-D stays if at least a quarter of a window paid: a paying connection
// saves more than a non-paying one costs once it runs a few hundred turns.
inline constexpr uint32_t kPaidShare = 4;
// While a learner says TCP, at most one connect in this many is an SMC-D
// probe, and at most one in kProbeGapNs: a proxy's 10 000 one-request
// connections a second would otherwise probe 150 times a second, each at
// several times a TCP connection's cost. Four a second still renew the hold
// (kHoldNs) many times over, and notice a change within a second.
inline constexpr uint32_t kProbeEvery = 64;
inline constexpr uint64_t kProbeGapNs = 250'000'000;
// How long a TCP decision holds without being renewed by another window:
// when nobody probes (many one-connection clients) new connections become
// SMC-D again after it and re-learn.
inline constexpr uint64_t kHoldNs = 2'000'000'000;

// A learner, in the shared mapping.
struct Slot {
    std::atomic<uint64_t> key{0}; // 0: free
    // generation << 32 | unpaid << 16 | paid: one word, so a report of an
    // older generation (the slot was given to another key) never lands.
    std::atomic<uint64_t> counts{0};
    std::atomic<uint64_t> tcp_until_ns{0}; // CLOCK_MONOTONIC; TCP while it lies ahead
    std::atomic<uint64_t> held{0};         // connects turned to TCP since the last probe
    std::atomic<uint64_t> probed_ns{0};    // the last probe
    std::atomic<uint64_t> used_ns{0};      // last looked up: the oldest is given away first
};

// A connection's learner: slot index + 1 << 32 | generation; 0: none.
using Ticket = uint64_t;

// A fixed pool of learners over caller-provided slots (the shared mapping,
// or an array in tests). Times are passed in, so tests choose them.
class Table {
  public:
    // `hold_ns`: how long a TCP decision holds (kHoldNs but in tests).
    Table(Slot* slots, uint32_t n, uint64_t hold_ns = kHoldNs, uint64_t probe_gap_ns = kProbeGapNs)
        : slots_(slots), n_(n), hold_ns_(hold_ns), probe_gap_ns_(probe_gap_ns) {}
    // The learner of `key` (never 0), claiming a slot for it if it has none:
    // a free one near its hash, else the least recently used there (whose
    // connections' reports are then ignored). 0 if key is 0.
    Ticket ticket(uint64_t key, uint64_t now_ns);
    // A connection of `t` paid (or ended unpaid).
    void report(Ticket t, bool paid, uint64_t now_ns);
    // When the TCP decision of `t` ends (0: SMC-D, or a stale ticket).
    uint64_t tcp_until(Ticket t) const;
    // A connect that `t` (or the listener's flag) turns to TCP: true when it
    // should run SMC-D instead, as a probe (not the first; kProbeEvery and
    // kProbeGapNs after the last).
    bool probe(Ticket t, uint64_t now_ns);
    // Counts as they stand (tests, diagnostics): paid, unpaid; false if stale.
    bool counts(Ticket t, uint32_t* paid, uint32_t* unpaid) const;

  private:
    Slot* slot_of(Ticket t) const;
    Slot* slots_;
    uint32_t n_;
    uint64_t hold_ns_;
    uint64_t probe_gap_ns_;
};

// The process's learners (the shared mapping, made at first need).
// Listeners by their bound address, destinations by address:port.
Ticket listener_ticket(const sockaddr* addr, socklen_t len);
Ticket destination_ticket(const sockaddr* addr, socklen_t len);
uint64_t listener_tcp_until(Ticket t);
uint64_t destination_tcp_until(Ticket t);
bool destination_probe(Ticket t);

// A connection's learning (its ticket in c.learn_ticket): begin when it is
// up (Active), end when the last process holding it releases it.
void begin(SmcConn& c);
void end(SmcConn& c);
// The connection crossed the line (note_io): reports it once, for all
// processes holding it.
void paid(SmcConn& c);

// On the data path, after a call moved `n` bytes in direction `now`
// (SmcConn::kLearnIn / kLearnOut): relaxed loads and stores only (threads
// racing may lose a count; the line is approximate anyway). Once the
// connection paid, or when it has no learner, one load.
inline void note_io(SmcConn& c, uint8_t now, uint64_t n) {
    uint8_t last = c.learn_dir.load(std::memory_order_relaxed);
    if (last == SmcConn::kLearnDone) return;
    uint32_t t = c.learn_turns.load(std::memory_order_relaxed);
    if (last != now) {
        c.learn_dir.store(now, std::memory_order_relaxed);
        if (now == SmcConn::kLearnOut && last == SmcConn::kLearnIn)
            c.learn_turns.store(++t, std::memory_order_relaxed);
    }
    uint64_t b = c.learn_bytes.load(std::memory_order_relaxed) + n;
    c.learn_bytes.store(b, std::memory_order_relaxed);
    if (t >= kPaysTurns || b >= kPaysBytes) [[unlikely]]
        paid(c);
}

} // namespace usmc::learn
