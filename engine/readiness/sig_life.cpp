// SPDX-License-Identifier: MIT
#include "engine/readiness/sig_life.hpp"

namespace usmc::readiness {

// The race this word closes: a poll() of a Connecting connection counts
// itself in, then looks whether `sig` was retired; the retirement marks
// `sig` retired, then looks whether anyone is counted in. With the count
// and the mark in two words, each side needed seq_cst both ways so that a
// poll() counted in before the retirement is seen by it (which then leaves
// the close to it), or sees it (and leaves). Here both are one
// read-modify-write of one word, so the modification order of that word
// alone decides: an Enter before the Retire is counted when the Retire is
// applied (no close; the last Leave closes), an Enter after it is refused.
// The operations stay seq_cst (one locked instruction either way on x86),
// so nothing weaker than before orders the caller's work around them.
SigOutcome SigLife::apply(SigEvent e) {
    uint32_t w = word_.load();
    while (true) {
        uint32_t n = sig_pollers(w);
        if ((e == SigEvent::Leave && n == 0) || (e == SigEvent::Enter && n == kSigMaxPollers))
            return {SigAct::Refused, w};
        uint32_t after = e == SigEvent::Enter ? n + 1 : e == SigEvent::Leave ? n - 1 : n;
        SigStep s = sig_step(sig_phase(w), e, after == 0);
        if (s.act == SigAct::Refused) return {s.act, w};
        uint32_t next = sig_word(s.next, after);
        // (Unblock on Open: no write. Unblock on None still writes the word
        // it read: a `sig` made meanwhile, blocked, then either comes first
        // in the word's order and is unblocked here, or comes after and its
        // maker's look at the phase sees what the handshake stored before.)
        if (next == w && !(e == SigEvent::Unblock && sig_phase(w) == SigPhase::None))
            return {s.act, w};
        if (word_.compare_exchange_weak(w, next)) return {s.act, next};
    }
}

} // namespace usmc::readiness
