// SPDX-License-Identifier: MIT
#pragma once
// One SMC-R connection's CDC messages in sequence. SMC-D's peer rewrites
// the same words in place, so the newest is always what a look finds; an
// SMC-R peer sends a message per update, and a receive completion may
// deliver an older one after a newer (reaped by another thread, or replayed
// on another link). The receiving side keeps the newest it took, counts the
// urgent marks the messages flag (the core counts marks, cdc_line.hpp), and
// drops what is older, as smc_cdc_msg_recv does. The sending side numbers
// its messages from 1.
#include "engine/core/cdc.hpp"
#include "engine/core/cursor.hpp"
#include "engine/smcr/cdc_msg.hpp"

#include <cstdint>

namespace usmc::smcr {

class CdcRx {
  public:
    enum class Took : uint8_t {
        Taken,
        Old,    // sent before the newest taken: dropped
        Replay, // flagged as replayed after a failover: not acted on here (no
                // second link yet), the caller fails the link group
    };
    // Under the connection's receive lock (one taker at a time).
    Took take(const CdcMsg& m);

    bool any() const { return any_; }
    // The newest message taken, as the core's receive action reads it.
    core::PeerCdc peer() const { return to_peer_cdc(last_, urg_count_); }
    // The producer cursor just after the last urgent byte flagged, and how
    // many were flagged so far.
    core::Cursor urg_mark() const { return urg_mark_; }
    uint16_t urg_count() const { return urg_count_; }
    uint16_t last_seqno() const { return last_.seqno; }

  private:
    bool any_ = false;
    CdcMsg last_;
    uint16_t urg_count_ = 0;
    core::Cursor urg_mark_;
};

class CdcTx {
  public:
    // Under the connection's send lock: the number of the next message.
    uint16_t next() { return ++seq_; }

  private:
    uint16_t seq_ = 0;
};

} // namespace usmc::smcr
