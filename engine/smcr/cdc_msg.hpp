// SPDX-License-Identifier: MIT
#pragma once
// SMC-R's connection data control: the 44-byte message a SEND on the link
// carries for every cursor update (net/smc/smc_cdc.h, struct smc_cdc_msg),
// in network byte order:
//
//   0  type 0xFE         1  length 44         2  sequence number (16)
//   4  token (32): the receiver's RMBE alert token, its CLC token
//   8  producer cursor: reserved (16), wrap (16), count (32)
//  16  consumer cursor: the same
//  24  producer flags    25  connection state flags    26  reserved (18)
//
// Unlike SMC-D's control line (smcd/cdc_line.hpp), every update is a
// message: the urgent flags hold for the producer cursor of the message
// they come with, and a late or replayed message is told by its sequence
// number. Decoding checks only that the bytes are a CDC message; what the
// cursors mean is the core's to check (core/cdc.hpp), as for SMC-D.
#include "engine/core/cdc.hpp"
#include "engine/core/cursor.hpp"
#include "engine/smcr/msg.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace usmc::smcr {

enum CdcProdFlags : uint8_t {
    kWriteBlocked = 0x80,       // the sender has more than the receiver has room for
    kUrgPending = 0x40,         // urgent data on its way
    kUrgPresent = 0x20,         // the byte before this message's producer cursor is urgent
    kConsUpdateReq = 0x10,      // send me your consumer cursor
    kFailoverValidation = 0x08, // replayed on another link after a failover
};
inline constexpr uint8_t kCdcProdFlagsKnown =
    kWriteBlocked | kUrgPending | kUrgPresent | kConsUpdateReq | kFailoverValidation;

// Connection state flags: the core's (core/close_state.hpp), bit for bit.
struct CdcMsg {
    uint16_t seqno = 0;
    uint32_t token = 0;
    core::Cursor prod; // how far the sender wrote into the receiver's RMBE
    core::Cursor cons; // how far the sender read its own RMBE
    uint8_t prod_flags = 0;
    uint8_t conn_flags = 0;
    bool operator==(const CdcMsg&) const = default;
};

Msg encode(const CdcMsg& m);

// The kernel's receive rule (smc_cdc_rx_handler): at least the bytes up to
// the reserved tail, type 0xFE and length 44; anything else is dropped.
std::optional<CdcMsg> decode_cdc(const uint8_t* p, size_t n);

// Whether sequence number `a` was sent before `b`: a 16-bit signed
// difference, so the numbers wrap (the kernel's smc_cdc_before).
inline bool seq_before(uint16_t a, uint16_t b) {
    return int16_t(uint16_t(a - b)) < 0;
}

// A message older than the last one taken is dropped, unless it is a
// replay after a failover (smc_cdc_msg_recv).
inline bool seq_takes(const CdcMsg& m, uint16_t last_taken) {
    return (m.prod_flags & kFailoverValidation) || !seq_before(m.seqno, last_taken);
}

// The core's view of it. `urg_count` is the connection's count of urgent
// marks taken so far (the core counts marks, SMC-R flags them per message:
// the caller adds one for a message with kUrgPresent it takes).
core::PeerCdc to_peer_cdc(const CdcMsg& m, uint16_t urg_count);

} // namespace usmc::smcr
