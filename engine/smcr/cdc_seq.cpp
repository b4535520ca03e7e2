// SPDX-License-Identifier: MIT
#include "engine/smcr/cdc_seq.hpp"

namespace usmc::smcr {

CdcRx::Took CdcRx::take(const CdcMsg& m) {
    if (m.prod_flags & kFailoverValidation) return Took::Replay;
    // (The first message is taken whatever its number: the count starts
    // where the peer's does.)
    if (any_ && seq_before(m.seqno, last_.seqno)) return Took::Old;
    // A message flags the urgent byte it ends with once: the sender clears
    // the flag after the message that carried it. A repeat of the same
    // number (a duplicate delivery) is not a second mark.
    // And only a message that produced something marks a byte (the kernel
    // looks at the flags only when the producer cursor moved).
    bool repeat = any_ && m.seqno == last_.seqno;
    bool produced = any_ ? !(m.prod == last_.prod) : !(m.prod == core::Cursor{});
    if ((m.prod_flags & kUrgPresent) && !repeat && produced) {
        ++urg_count_;
        urg_mark_ = m.prod;
    }
    last_ = m;
    any_ = true;
    return Took::Taken;
}

} // namespace usmc::smcr
