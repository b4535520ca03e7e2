// SPDX-License-Identifier: MIT
#pragma once
// CLC: the SMC connection layer control messages that run in band on the TCP
// connection before SMC takes over (Proposal, Accept, Confirm, Decline).
// Real wire formats (net/smc/smc_clc.h): EBCDIC
// eyecatchers, big-endian fields, byte-7 version/type bits, trailers.
//
// Decoders take a byte span and nothing else, so each can be fuzzed on its
// own. Every field from the peer is validated: lengths against the layout
// the message claims, offsets against the message, counts against their
// maxima, reserved values left unread. A bad message yields an error, never
// a crash or an out-of-bounds read.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>
#include <vector>

namespace usmc::clc {

constexpr std::array<uint8_t, 4> kEyeR = {0xE2, 0xD4, 0xC3, 0xD9}; // "SMCR" in EBCDIC
constexpr std::array<uint8_t, 4> kEyeD = {0xE2, 0xD4, 0xC3, 0xC4}; // "SMCD" in EBCDIC

enum class Type : uint8_t { Proposal = 1, Accept = 2, Confirm = 3, Decline = 4 };

// SMC types in the 2-bit typev1 / typev2 fields.
enum SmcType : uint8_t { kTypeR = 0, kTypeD = 1, kTypeN = 2, kTypeB = 3 };

constexpr size_t kHeaderLen = 8;
constexpr size_t kTrailerLen = 4;
constexpr size_t kMaxLen = 1024;           // larger than any valid message
constexpr unsigned kMaxV6Prefixes = 8;     // SMC_CLC_MAX_V6_PREFIX
constexpr unsigned kMaxUeids = 8;          // SMC_CLC_MAX_UEID
constexpr unsigned kMaxIsmV2 = 8;          // SMCD_CLC_MAX_V2_GID_ENTRIES
constexpr uint16_t kChidEmulated = 0xFFFF; // the CHID loopback-ism uses
constexpr unsigned kMaxDmbeSizeCode = 6;   // SMC-D DMBs: 16 KiB << 6 = 1 MiB
constexpr unsigned kMaxRmbeSizeCode = 15;  // SMCR_RMBE_SIZES (Linux 6.11): 16 KiB << 15 = 512 MiB
constexpr unsigned kMaxGidList = 8;        // SMC_GIDLIST_LEN_MAX: a v2 Confirm's alternate GIDs

enum class Error : uint8_t {
    Truncated,     // fewer bytes than the header or the claimed length
    BadEyecatcher, // header eyecatcher is neither SMCR nor SMCD
    BadType,       // unknown message type
    BadVersion,    // version 0
    BadLength,     // claimed length does not fit the message's layout
    BadTrailer,    // trailer eyecatcher missing
    BadOffset,     // an internal offset points outside the message
    BadCount,      // a count beyond its maximum
    BadValue,      // a field with a value the protocol forbids
};
const char* error_name(Error e);

struct Header {
    Type type = Type::Proposal;
    uint16_t length = 0;
    uint8_t version = 0;
    uint8_t typev2 =
        0; // bits 3-2 of byte 7 (in Accept/Confirm/Decline: bit 1 = first contact / out of sync)
    uint8_t typev1 = 0; // bits 1-0 of byte 7
    bool smcd_eyecatcher = false;
};

// Peeks the 8-byte header: whether these bytes start a CLC message, and how
// long it claims to be. Does not need the rest of the message.
std::variant<Header, Error> parse_header(std::span<const uint8_t> bytes);

struct IsmEntry {
    uint64_t gid = 0;
    uint16_t chid = 0;
    bool operator==(const IsmEntry&) const = default;
};

// usmc's own use of the SMC-Dv2 extension's 16 reserved bytes (a kernel
// peer writes zeros there: nothing named): the client's DMB, claimed before
// the Proposal in a segment the server it expects already maps. A server
// that takes it says so in its Accept (took_dmb) and needs no Confirm.
struct NamedDmb {
    uint32_t serial = 0; // the segment (the link_id a Confirm would carry)
    uint8_t slot = 0;    // dmbe_idx
    uint8_t size_code = 0;
    uint64_t secret = 0; // nonzero: the DMB's owner token (cdc_line.hpp, offset 56)
    bool operator==(const NamedDmb&) const = default;
};

struct Proposal {
    uint8_t version = 2;
    uint8_t typev1 = kTypeN; // v1 offer (N: none)
    uint8_t typev2 = kTypeD; // v2 offer
    std::array<uint8_t, 8> peer_id{};
    // SMC-Rv1: the client's RoCE device (zero when it offers none)
    std::array<uint8_t, 16> smcr_gid{};
    std::array<uint8_t, 6> smcr_mac{};
    uint64_t ism_gid_v1 = 0; // native ISMv1 GID, 0 if none
    uint16_t ism_chid = 0;
    // IP prefix area, present when typev1 != N
    uint32_t ipv4_prefix = 0; // network byte order as on the wire
    uint8_t ipv4_prefix_len = 0;
    struct V6Prefix {
        std::array<uint8_t, 16> prefix{};
        uint8_t len = 0;
        bool operator==(const V6Prefix&) const = default;
    };
    std::vector<V6Prefix> v6_prefixes;
    // v2 extension, present when typev2 != N
    uint8_t release = 1; // SMC v2.1
    bool seid_enabled = false;
    std::vector<std::array<uint8_t, 32>> ueids;
    std::array<uint8_t, 16> roce_v2_gid{}; // SMC-Rv2: IPv4-mapped, the RoCE device's address
    uint8_t max_conns = 0;                 // SMC-R v2.1: connections per link group (16-255)
    uint8_t max_links = 0;                 // SMC-R v2.1: links per link group (1-2)
    uint16_t feature_mask = 1;             // bit 0: Emulated-ISM supported
    // SMC-Dv2 extension, present when typev2 includes D
    std::array<uint8_t, 32> seid{};
    std::vector<IsmEntry>
        ism_v2; // proposed ISMv2 devices (an Emulated-ISM takes two: GID, then GID extension)
    std::optional<NamedDmb> named_dmb; // in the SMC-Dv2 extension's reserved bytes
};

// First-contact extension of v2 Accept/Confirm: 36 bytes for release 0,
// 52 from release 1 (v2.1) on, whose fields follow the hostname.
struct FirstContact {
    bool v2_direct = false; // SMC-Rv2: the peer is reached without an IP gateway
    uint8_t os_type = 2;    // Linux
    uint8_t release = 1;
    std::array<uint8_t, 32> hostname{};
    // release >= 1
    uint8_t max_conns = 0; // SMC-R
    uint8_t max_links = 0; // SMC-R
    uint16_t feature_mask = 0;
};

// SMC-D Accept (server) and Confirm (client) share one layout.
struct AcceptConfirmD {
    Type type = Type::Accept;
    uint8_t version = 2;
    bool first_contact = false;
    uint64_t gid = 0;   // sender's ISM GID
    uint64_t token = 0; // sender's DMB token
    uint8_t dmbe_idx = 0;
    uint8_t dmbe_size_code = 0; // DMB size = 16 KiB << code
    uint32_t link_id = 0;
    // Accept only (usmc, a reserved byte): the server took the client's
    // Proposal-named DMB. The connection is up on both sides: no Confirm.
    bool took_dmb = false;
    // usmc, v2: the owner token of the DMB this message names (link_id and
    // dmbe_idx), in the first 8 bytes of the EID; 0: none named.
    uint64_t dmb_secret = 0;
    // v2
    uint16_t chid = 0;
    std::array<uint8_t, 32> eid{};
    uint64_t gid_ext = 0;
    std::optional<FirstContact> fce; // present iff first_contact (v2)
};

// SMC-R Accept (server) and Confirm (client): the sender's RoCE device, its
// queue pair and the RMB the peer writes into by RDMA WRITE.
struct AcceptConfirmR {
    Type type = Type::Accept;
    uint8_t version = 2;
    bool first_contact = false;
    std::array<uint8_t, 8> peer_id{};
    std::array<uint8_t, 16> gid{}; // the sender's RoCE GID
    std::array<uint8_t, 6> mac{};
    uint32_t qpn = 0; // 24 bits
    uint32_t rmb_rkey = 0;
    uint8_t rmbe_idx = 1;          // from 1: the element's offset is size * (idx - 1)
    uint32_t rmbe_alert_token = 0; // the connection, in every CDC message to the sender
    uint8_t rmbe_size_code = 0;    // RMBE size = 16 KiB << code
    uint8_t qp_mtu = 3;            // IB MTU enum: 1 = 256 ... 5 = 4096
    uint64_t rmb_dma_addr = 0;
    uint32_t psn = 0; // initial packet sequence number, 24 bits
    // v2
    std::array<uint8_t, 32> eid{};
    std::optional<FirstContact> fce; // only with first_contact
    // A v2 Confirm with an FCE: the client's alternate RoCEv2 GIDs (second link).
    std::vector<std::array<uint8_t, 16>> gid_list;
};

struct Decline {
    uint8_t version = 2;
    std::array<uint8_t, 8> peer_id{};
    uint32_t diagnosis = 0; // a fallback reason code
    uint8_t os_type = 2;
    bool out_of_sync = false;
};

std::vector<uint8_t> encode(const Proposal& m);
std::vector<uint8_t> encode(const AcceptConfirmD& m);
std::vector<uint8_t> encode(const AcceptConfirmR& m);
std::vector<uint8_t> encode(const Decline& m);

// Each decoder takes exactly one whole message (header.length bytes).
std::variant<Proposal, Error> decode_proposal(std::span<const uint8_t> bytes);
std::variant<AcceptConfirmD, Error> decode_accept_confirm_d(std::span<const uint8_t> bytes);
std::variant<AcceptConfirmR, Error> decode_accept_confirm_r(std::span<const uint8_t> bytes);
// An Accept or Confirm of either transport, by its header's typev1 (as the
// kernel's smc_clc_msg_acc_conf_valid tells them apart).
std::variant<AcceptConfirmD, AcceptConfirmR, Error>
decode_accept_confirm(std::span<const uint8_t> bytes);
std::variant<Decline, Error> decode_decline(std::span<const uint8_t> bytes);

// Compressed buffer size (net/smc/smc_core.c, smc_compress_bufsize): 16 KiB << code, rounding up.
uint8_t size_to_code(uint64_t bytes, uint8_t max_code);
uint64_t code_to_size(uint8_t code);

} // namespace usmc::clc
