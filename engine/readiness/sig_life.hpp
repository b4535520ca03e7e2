// SPDX-License-Identifier: MIT
#pragma once
// The life of a connection side's `sig` (wakeup.hpp), in one word: its
// phase and the count of poll() calls of ours inside a call on it
// ("pollers"), changed together by one atomic read-modify-write. Every
// change is a step of one table (kSigTable), which also says what the
// caller must then do; engine/conn/close.cpp does it.
//
//   None            no `sig` yet (or it could not be made)
//   Blocked         connecting: `sig` connected to the process's blocker,
//                   unwritable and unreachable by name (wakeup::block)
//   Open            unconnected: reachable by name, writable unless filled
//   RetiredBlocked  the connection went TCP (or is being discarded) while
//                   `sig` was blocked and pollers were inside: the last to
//                   leave closes it; an unblock still reaches the kernel
//                   (the OUT edge wakes pollers waiting for POLLOUT)
//   Retired         the same, not blocked
//   Closed          `sig`, its sink and the peer's wakers let go, once
//
// "Blocked" and "retired" are two facts, but only one phase needs both:
// RetiredBlocked. A retired phase always has a poller inside (retired with
// none inside is Closed), and a closed `sig` is neither blocked nor a
// candidate for anything. Closed does not remember whether the pair was
// retired first or closed outright: nothing that can still see the
// connection after an outright close asks (the close is its last act).
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace usmc::readiness {

enum class SigPhase : uint8_t { None, Blocked, Open, RetiredBlocked, Retired, Closed };
inline constexpr size_t kSigPhases = 6;

enum class SigEvent : uint8_t {
    MadeBlocked, // `sig` made (or a spare taken) connected to the blocker
    MadeOpen,    // `sig` made (or a spare taken) unconnected
    Unblock,     // the handshake is done, or whatever waits on `sig` is woken
    Enter,       // a poll() of ours is about to wait on `sig`: +1 poller
    Leave,       // that poll() is done with it: -1 poller
    Retire,      // the connection went TCP: `sig` goes once no poller is inside
    Close,       // the connection ends: `sig` goes now
};
inline constexpr size_t kSigEvents = 7;

// What the caller must do after an event.
enum class SigAct : uint8_t {
    Nothing, // taken; nothing more to do
    Unblock, // taken; disconnect `sig` from the blocker (wakeup::unblock)
    Close,   // taken; close the pair now (one caller ever gets it)
    Refused, // not taken, the word unchanged: the event has no place in this
             // phase (Enter: the caller must not use `sig`)
};

struct SigStep {
    SigPhase next; // (Refused: the phase it stays in)
    SigAct act;
    friend constexpr bool operator==(const SigStep&, const SigStep&) = default;
};

// A table entry: the step taken when pollers are still inside after the
// event's own change of their count (`some`), and when none is (`none`).
struct SigRule {
    SigStep some;
    SigStep none;
};

// THE table, [phase][event]; nothing else changes the phase. Enter always
// leaves a poller inside, so its `none` is never read; nor is `none` on
// a retired phase for an event that leaves the count alone (nobody inside
// a retired `sig` means it was closed). Both are filled in as `some`.
namespace sig_rules {
using P = SigPhase;
using A = SigAct;
constexpr SigRule same(P next, A act) {
    return {{next, act}, {next, act}};
}
// The last one out closes.
constexpr SigRule last(P some, P none) {
    return {{some, A::Nothing}, {none, A::Close}};
}
constexpr SigRule refused(P stays) {
    return {{stays, A::Refused}, {stays, A::Refused}};
}
// clang-format off
inline constexpr SigRule kSigTable[kSigPhases][kSigEvents] = {
    // None: no `sig` yet
    {/* MadeBlocked */ same(P::Blocked, A::Nothing),
     /* MadeOpen    */ same(P::Open, A::Nothing),
     /* Unblock     */ same(P::None, A::Nothing),
     /* Enter       */ same(P::None, A::Nothing),
     /* Leave       */ same(P::None, A::Nothing),
     /* Retire      */ last(P::Retired, P::Closed),
     /* Close       */ same(P::Closed, A::Close)},
    // Blocked
    {/* MadeBlocked */ refused(P::Blocked),
     /* MadeOpen    */ refused(P::Blocked),
     /* Unblock     */ same(P::Open, A::Unblock),
     /* Enter       */ same(P::Blocked, A::Nothing),
     /* Leave       */ same(P::Blocked, A::Nothing),
     /* Retire      */ last(P::RetiredBlocked, P::Closed),
     /* Close       */ same(P::Closed, A::Close)},
    // Open
    {/* MadeBlocked */ refused(P::Open),
     /* MadeOpen    */ refused(P::Open),
     /* Unblock     */ same(P::Open, A::Nothing),
     /* Enter       */ same(P::Open, A::Nothing),
     /* Leave       */ same(P::Open, A::Nothing),
     /* Retire      */ last(P::Retired, P::Closed),
     /* Close       */ same(P::Closed, A::Close)},
    // RetiredBlocked
    {/* MadeBlocked */ refused(P::RetiredBlocked),
     /* MadeOpen    */ refused(P::RetiredBlocked),
     /* Unblock     */ same(P::Retired, A::Unblock),
     /* Enter       */ refused(P::RetiredBlocked),
     /* Leave       */ last(P::RetiredBlocked, P::Closed),
     /* Retire      */ same(P::RetiredBlocked, A::Nothing),
     /* Close       */ same(P::Closed, A::Close)},
    // Retired
    {/* MadeBlocked */ refused(P::Retired),
     /* MadeOpen    */ refused(P::Retired),
     /* Unblock     */ same(P::Retired, A::Nothing),
     /* Enter       */ refused(P::Retired),
     /* Leave       */ last(P::Retired, P::Closed),
     /* Retire      */ same(P::Retired, A::Nothing),
     /* Close       */ same(P::Closed, A::Close)},
    // Closed: only pollers still inside may leave
    {/* MadeBlocked */ refused(P::Closed),
     /* MadeOpen    */ refused(P::Closed),
     /* Unblock     */ refused(P::Closed),
     /* Enter       */ refused(P::Closed),
     /* Leave       */ same(P::Closed, A::Nothing),
     /* Retire      */ refused(P::Closed),
     /* Close       */ refused(P::Closed)},
};
// clang-format on
} // namespace sig_rules
using sig_rules::kSigTable;

static_assert(size_t(SigPhase::Closed) + 1 == kSigPhases);
static_assert(size_t(SigEvent::Close) + 1 == kSigEvents);

// The step the table gives: `nobody_inside`, no poller inside after the
// event's own change of the count.
constexpr SigStep sig_step(SigPhase p, SigEvent e, bool nobody_inside) {
    const SigRule& r = kSigTable[size_t(p)][size_t(e)];
    return nobody_inside ? r.none : r.some;
}

// The word: the phase in the low byte, the pollers above it.
inline constexpr uint32_t kSigPollerUnit = 1u << 8;
inline constexpr uint32_t kSigMaxPollers = UINT32_MAX / kSigPollerUnit;
constexpr SigPhase sig_phase(uint32_t word) {
    return SigPhase(word & (kSigPollerUnit - 1));
}
constexpr uint32_t sig_pollers(uint32_t word) {
    return word / kSigPollerUnit;
}
constexpr uint32_t sig_word(SigPhase p, uint32_t pollers) {
    return uint32_t(p) | pollers * kSigPollerUnit;
}

// Connected to the blocker.
constexpr bool sig_blocked(uint32_t word) {
    return sig_phase(word) == SigPhase::Blocked || sig_phase(word) == SigPhase::RetiredBlocked;
}
// Retired, or closed: `sig` shows this connection no more.
constexpr bool sig_retired(uint32_t word) {
    SigPhase p = sig_phase(word);
    return p == SigPhase::RetiredBlocked || p == SigPhase::Retired || p == SigPhase::Closed;
}

struct SigOutcome {
    SigAct act;
    uint32_t word; // after the event (Refused: as it was)
};

// A connection side's lifecycle word. apply() is the one way to change it.
class SigLife {
  public:
    // Applies `e` atomically (a CAS loop on the word, seq_cst). An event
    // that changes nothing writes nothing, but for Unblock with no `sig`
    // yet (a read-modify-write that orders it with a make, close.cpp). A Leave with no poller
    // counted (a leave without its enter) and an Enter past kSigMaxPollers are refused.
    SigOutcome apply(SigEvent e);

    uint32_t word() const { return word_.load(); }
    SigPhase phase() const { return sig_phase(word()); }
    uint32_t pollers() const { return sig_pollers(word()); }
    bool blocked() const { return sig_blocked(word()); }
    bool retired() const { return sig_retired(word()); }

  private:
    std::atomic<uint32_t> word_{sig_word(SigPhase::None, 0)};
};

} // namespace usmc::readiness
