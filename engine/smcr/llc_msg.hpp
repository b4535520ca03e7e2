// SPDX-License-Identifier: MIT
#pragma once
// SMC-R's link layer control: the version 1 LLC messages (44 bytes, network
// byte order) a link group's links exchange over SEND, as net/smc/smc_llc.c
// lays them out. Header: type, length 44, a byte whose low nibble is ADD
// LINK's reject reason, flags (kLlcResp marks a response).
//
// usmc speaks the messages of a single-link group: CONFIRM LINK (the first
// contact's link comes up), CONFIRM RKEY and DELETE RKEY (an RMB's key made
// known on the link, and withdrawn), TEST LINK (keepalive) and DELETE LINK
// (the group goes). ADD LINK and its continuation, and the client's request
// for one, decode to Unsupported: a second link and failover come later,
// and a peer that asks is answered as a kernel without a second device
// answers (or not at all).
//
// Every field is the peer's: a count beyond its array, a reserved type, a
// wrong length are a malformed message, which fails the peer's link group
// alone (never read past the 44 bytes, never trusted further).
#include "engine/smcr/msg.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <variant>

namespace usmc::smcr::llc {

enum Type : uint8_t {
    kConfirmLink = 0x01,
    kAddLink = 0x02,
    kAddLinkCont = 0x03,
    kDeleteLink = 0x04,
    kReqAddLink = 0x05,
    kConfirmRkey = 0x06,
    kTestLink = 0x07,
    kConfirmRkeyCont = 0x08,
    kDeleteRkey = 0x09,
};

// Header flags (byte 3).
inline constexpr uint8_t kResp = 0x80;
inline constexpr uint8_t kNoRmbeEyecatcher = 0x03; // CONFIRM LINK: required, else RMBE_EC
inline constexpr uint8_t kDeleteAll = 0x40;        // DELETE LINK: every link (the group)
inline constexpr uint8_t kDeleteOrderly = 0x20;    // DELETE LINK: orderly, not an error
inline constexpr uint8_t kRkeyNegative = 0x20;     // CONFIRM/DELETE RKEY response: refused
inline constexpr uint8_t kRkeyRetry = 0x10;        // CONFIRM RKEY response: try again

// DELETE LINK reasons (RFC 7609).
enum Reason : uint32_t {
    kLostPath = 0x00010000,
    kOpInit = 0x00020000,   // operator-initiated termination
    kProgInit = 0x00030000, // program-initiated termination
    kProtocolViolation = 0x00040000,
    kAsymNotNeeded = 0x00050000,
    kUnknownLink = 0x00100000,  // response
    kUnknownGroup = 0x00200000, // response
};

using Gid = std::array<uint8_t, 16>;
using Mac = std::array<uint8_t, 6>;
using LinkUid = std::array<uint8_t, 4>;

struct ConfirmLink {
    bool resp = false;
    uint8_t flags = kNoRmbeEyecatcher; // the header's flags, kResp aside
    Mac mac{};
    Gid gid{};
    uint32_t qpn = 0; // 24 bits
    uint8_t link_num = 0;
    LinkUid link_uid{};
    uint8_t max_links = 0;
    uint8_t max_conns = 0; // v2.1; 0 from older peers
    bool operator==(const ConfirmLink&) const = default;
};

struct DeleteLink {
    bool resp = false;
    bool all = false;
    bool orderly = false;
    uint8_t link_num = 0; // 0 with `all` (then not read)
    uint32_t reason = 0;
    bool operator==(const DeleteLink&) const = default;
};

// An RMB's key and address on one link.
struct Rtoken {
    uint8_t link_id = 0;
    uint32_t rkey = 0;
    uint64_t vaddr = 0;
    bool operator==(const Rtoken&) const = default;
};
// The sending link's token first (`rt[0]`; its link byte carries the count
// of the others), then one per other link of the group: at most 2.
struct ConfirmRkey {
    bool resp = false;
    bool negative = false;
    bool retry = false;
    uint8_t others = 0;
    std::array<Rtoken, 3> rt{};
    bool operator==(const ConfirmRkey&) const = default;
};

struct TestLink {
    bool resp = false;
    std::array<uint8_t, 16> user_data{}; // echoed in the response
    bool operator==(const TestLink&) const = default;
};

inline constexpr int kDeleteRkeyMax = 8;
struct DeleteRkey {
    bool resp = false;
    bool negative = false;
    uint8_t count = 0;    // 1..8
    uint8_t err_mask = 0; // response: bit 7 - i set when rkey i was unknown
    std::array<uint32_t, kDeleteRkeyMax> rkeys{};
    bool operator==(const DeleteRkey&) const = default;
};

// A well-formed message of a type usmc does not act on (ADD LINK and its
// kin): the caller answers it, or ignores it, by its type.
struct Unsupported {
    uint8_t type = 0;
    bool resp = false;
    bool operator==(const Unsupported&) const = default;
};

using Message =
    std::variant<ConfirmLink, DeleteLink, ConfirmRkey, TestLink, DeleteRkey, Unsupported>;

enum class Error : uint8_t {
    None,
    Short,     // fewer than 44 bytes
    NotLlc,    // a CDC message, version 2, or no type at all
    BadLength, // the length byte is not 44
    BadType,   // a version 1 type nobody defined
    BadField,  // a count beyond its array, a QP number of 0, a link number where none may be
};
struct Decoded {
    Message msg;
    Error error = Error::None;
};

Decoded decode(const uint8_t* p, size_t n);
Msg encode(const Message& m);
const char* error_name(Error e);

} // namespace usmc::smcr::llc
