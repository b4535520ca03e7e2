// SPDX-License-Identifier: MIT
#pragma once
// What a SEND on an SMC-R link's queue pair carries: a CDC message
// (cdc_msg.hpp) or an LLC message (llc_msg.hpp), told apart by the first
// byte (net/smc/smc_wr.c demultiplexes its receive ring the same way).
// Version 1 messages are 44 bytes, and so are the receive slots usmc posts;
// the peer chooses every byte, so each decoder checks the length it was
// given before it reads a field.
#include <array>
#include <cstddef>
#include <cstdint>

namespace usmc::smcr {

inline constexpr size_t kMsgLen = 44;
using Msg = std::array<uint8_t, kMsgLen>;

inline constexpr uint8_t kCdcType = 0xFE;

enum class MsgKind : uint8_t {
    Cdc,
    Llc,     // version 1 (the high nibble of the type is 0)
    LlcV2,   // version 2: up to 8 192 bytes, not spoken by usmc yet
    Unknown, // empty, or a type nobody defined
};

inline MsgKind kind_of(const uint8_t* p, size_t n) {
    if (n == 0) return MsgKind::Unknown;
    if (p[0] == kCdcType) return MsgKind::Cdc;
    uint8_t version = p[0] >> 4, type = p[0] & 0x0f;
    if (type == 0) return MsgKind::Unknown;
    if (version == 0) return MsgKind::Llc;
    if (version == 2) return MsgKind::LlcV2;
    return MsgKind::Unknown;
}

} // namespace usmc::smcr
