// SPDX-License-Identifier: MIT
#include "engine/clc/clc.hpp"

#include "engine/base/wire_be.hpp"

#include <algorithm>
#include <cstring>

namespace usmc::clc {

namespace {

using be::get16;
using be::get24;
using be::get32;
using be::get64;
using be::put16;
using be::put24;
using be::put32;
using be::put64;

bool is_eyecatcher(const uint8_t* p) {
    return std::equal(kEyeR.begin(), kEyeR.end(), p) || std::equal(kEyeD.begin(), kEyeD.end(), p);
}

void put_header(std::vector<uint8_t>& out, const std::array<uint8_t, 4>& eye, Type type,
                uint8_t version, uint8_t typev2, uint8_t typev1) {
    std::copy(eye.begin(), eye.end(), out.begin());
    out[4] = static_cast<uint8_t>(type);
    put16(&out[5], static_cast<uint16_t>(out.size()));
    out[7] = uint8_t(version << 4 | (typev2 & 3) << 2 | (typev1 & 3));
    std::copy(eye.begin(), eye.end(), out.end() - kTrailerLen);
}

// Header checks shared by the decoders: the span must be exactly the message.
std::optional<Error> check_frame(std::span<const uint8_t> b, Type want, bool need_trailer) {
    auto h = parse_header(b);
    if (auto* e = std::get_if<Error>(&h)) return *e;
    const Header& hdr = std::get<Header>(h);
    if (hdr.type != want) return Error::BadType;
    if (hdr.length != b.size()) return hdr.length > b.size() ? Error::Truncated : Error::BadLength;
    if (need_trailer && !is_eyecatcher(&b[b.size() - kTrailerLen])) return Error::BadTrailer;
    return std::nullopt;
}

constexpr size_t kProposalBase = 40;   // header, peer id, SMC-R GID/MAC, iparea_offset
constexpr size_t kSmcdArea = 40;       // ISM GID, CHID, v2_ext_offset, vendor, reserved
constexpr size_t kV2ExtFixed = 40;     // before the UEIDs
constexpr size_t kSmcdV2ExtFixed = 48; // SEID + reserved, before the GID/CHID list
constexpr size_t kAcceptDV1 = 48;
constexpr size_t kAcceptDV2 = 78;
// An Accept or Confirm of transport `typev1`, whole (header, length,
// trailer): its type, version and first-contact bit into `m`.
template <typename M>
std::optional<Error> check_accept_confirm(std::span<const uint8_t> b, uint8_t typev1, M& m) {
    auto h = parse_header(b);
    if (auto* e = std::get_if<Error>(&h)) return *e;
    const Header& hdr = std::get<Header>(h);
    if (hdr.type != Type::Accept && hdr.type != Type::Confirm) return Error::BadType;
    if (auto e = check_frame(b, hdr.type, true)) return *e;
    if (hdr.typev1 != typev1) return Error::BadValue; // the other transport's
    m.type = hdr.type;
    m.version = hdr.version;
    m.first_contact = (hdr.typev2 & 0b10) != 0;
    return std::nullopt;
}

constexpr size_t kAcceptRV1 = 68;
constexpr size_t kAcceptRV2 = 108;
constexpr size_t kFceRelease0 = 36;
constexpr size_t kFceRelease1 = 52;
constexpr size_t kGidListFixed = 4; // count, reserved; then 16 bytes per GID

// SMC-D's FCE is 36 bytes in release 0, 52 from release 1 on; SMC-R's is
// always 52, the v2.1 fields reserved in release 0 (smc_clc_fill_fce_v2x).
size_t fce_len(const FirstContact& f, bool smcd) {
    return f.release >= 1 || !smcd ? kFceRelease1 : kFceRelease0;
}

void put_fce(uint8_t* f, const FirstContact& fce) {
    f[0] = fce.v2_direct ? 0x80 : 0;
    f[1] = uint8_t((fce.os_type & 0xf) << 4 | (fce.release & 0xf));
    std::copy(fce.hostname.begin(), fce.hostname.end(), f + 4);
    if (fce.release >= 1) {
        f[36] = fce.max_conns;
        f[37] = fce.max_links;
        put16(f + 38, fce.feature_mask);
    }
}

// The FCE at `f`, `room` bytes before the trailer: its release (and the
// transport) says its length, which must fit.
std::optional<FirstContact> get_fce(const uint8_t* f, size_t room, bool smcd) {
    if (room < kFceRelease0) return std::nullopt;
    FirstContact fce;
    fce.v2_direct = (f[0] & 0x80) != 0;
    fce.os_type = f[1] >> 4;
    fce.release = f[1] & 0xf;
    if (fce_len(fce, smcd) > room) return std::nullopt;
    std::copy(f + 4, f + 36, fce.hostname.begin());
    if (fce.release >= 1) {
        fce.max_conns = f[36];
        fce.max_links = f[37];
        fce.feature_mask = get16(f + 38);
    }
    return fce;
}

} // namespace

const char* error_name(Error e) {
    switch (e) {
    case Error::Truncated:
        return "truncated";
    case Error::BadEyecatcher:
        return "bad eyecatcher";
    case Error::BadType:
        return "bad type";
    case Error::BadVersion:
        return "bad version";
    case Error::BadLength:
        return "bad length";
    case Error::BadTrailer:
        return "bad trailer";
    case Error::BadOffset:
        return "bad offset";
    case Error::BadCount:
        return "bad count";
    default:
        return "bad value";
    }
}

std::variant<Header, Error> parse_header(std::span<const uint8_t> b) {
    if (b.size() < kHeaderLen) return Error::Truncated;
    if (!is_eyecatcher(b.data())) return Error::BadEyecatcher;
    Header h;
    if (b[4] < 1 || b[4] > 4) return Error::BadType;
    h.type = static_cast<Type>(b[4]);
    h.length = get16(&b[5]);
    h.version = b[7] >> 4;
    h.typev2 = (b[7] >> 2) & 3;
    h.typev1 = b[7] & 3;
    h.smcd_eyecatcher = std::equal(kEyeD.begin(), kEyeD.end(), b.data());
    if (h.version < 1) return Error::BadVersion;
    if (h.length < kHeaderLen + kTrailerLen || h.length > kMaxLen) return Error::BadLength;
    return h;
}

// ---------------------------------------------------------------- Proposal

std::vector<uint8_t> encode(const Proposal& m) {
    size_t prefix_len = m.typev1 != kTypeN ? 8 + 17 * m.v6_prefixes.size() : 0;
    size_t v2_len = m.typev2 != kTypeN ? kV2ExtFixed + 32 * m.ueids.size() : 0;
    size_t smcd_v2_len =
        (m.typev2 == kTypeD || m.typev2 == kTypeB) ? kSmcdV2ExtFixed + 10 * m.ism_v2.size() : 0;
    std::vector<uint8_t> out(
        kProposalBase + kSmcdArea + prefix_len + v2_len + smcd_v2_len + kTrailerLen, 0);
    uint8_t* p = out.data();
    std::copy(m.peer_id.begin(), m.peer_id.end(), p + 8);
    std::copy(m.smcr_gid.begin(), m.smcr_gid.end(), p + 16);
    std::copy(m.smcr_mac.begin(), m.smcr_mac.end(), p + 32);
    put16(p + 38, kSmcdArea); // iparea_offset: the prefix area follows the SMC-D area
    put64(p + 40, m.ism_gid_v1);
    put16(p + 48, m.ism_chid);
    if (v2_len)
        put16(p + 50, static_cast<uint16_t>(28 + prefix_len)); // from byte 52 to the v2 extension
    size_t off = kProposalBase + kSmcdArea;
    if (prefix_len) {
        std::memcpy(p + off, &m.ipv4_prefix, 4);
        p[off + 4] = m.ipv4_prefix_len;
        p[off + 7] = static_cast<uint8_t>(m.v6_prefixes.size());
        for (size_t i = 0; i < m.v6_prefixes.size(); ++i) {
            std::copy(m.v6_prefixes[i].prefix.begin(), m.v6_prefixes[i].prefix.end(),
                      p + off + 8 + 17 * i);
            p[off + 8 + 17 * i + 16] = m.v6_prefixes[i].len;
        }
        off += prefix_len;
    }
    if (v2_len) {
        p[off] = static_cast<uint8_t>(m.ueids.size());
        p[off + 1] = static_cast<uint8_t>(m.ism_v2.size());
        p[off + 3] = uint8_t((m.release & 0xf) << 4 | (m.seid_enabled ? 1 : 0));
        if (smcd_v2_len) put16(p + off + 6, static_cast<uint16_t>(32 + 32 * m.ueids.size()));
        std::copy(m.roce_v2_gid.begin(), m.roce_v2_gid.end(), p + off + 8);
        p[off + 24] = m.max_conns;
        p[off + 25] = m.max_links;
        put16(p + off + 26, m.feature_mask);
        for (size_t i = 0; i < m.ueids.size(); ++i)
            std::copy(m.ueids[i].begin(), m.ueids[i].end(), p + off + kV2ExtFixed + 32 * i);
        off += v2_len;
    }
    if (smcd_v2_len) {
        std::copy(m.seid.begin(), m.seid.end(), p + off);
        if (m.named_dmb && m.named_dmb->secret) {
            put32(p + off + 32, m.named_dmb->serial);
            p[off + 36] = m.named_dmb->slot;
            p[off + 37] = m.named_dmb->size_code;
            put64(p + off + 40, m.named_dmb->secret);
        }
        for (size_t i = 0; i < m.ism_v2.size(); ++i) {
            put64(p + off + kSmcdV2ExtFixed + 10 * i, m.ism_v2[i].gid);
            put16(p + off + kSmcdV2ExtFixed + 10 * i + 8, m.ism_v2[i].chid);
        }
    }
    put_header(out, kEyeR, Type::Proposal, m.version, m.typev2, m.typev1);
    return out;
}

std::variant<Proposal, Error> decode_proposal(std::span<const uint8_t> b) {
    if (auto e = check_frame(b, Type::Proposal, true)) return *e;
    const uint8_t* p = b.data();
    const size_t end = b.size() - kTrailerLen; // fields must end before the trailer
    Proposal m;
    m.version = p[7] >> 4;
    m.typev2 = (p[7] >> 2) & 3;
    m.typev1 = p[7] & 3;
    // usmc speaks SMCv2: a v1-only peer gets a Decline (VERSMISMAT).
    if (m.version < 2) return Error::BadVersion;
    if (end < kProposalBase + kSmcdArea) return Error::BadLength;
    std::copy(p + 8, p + 16, m.peer_id.begin());
    std::copy(p + 16, p + 32, m.smcr_gid.begin());
    std::copy(p + 32, p + 38, m.smcr_mac.begin());
    m.ism_gid_v1 = get64(p + 40);
    m.ism_chid = get16(p + 48);
    size_t cursor = kProposalBase + kSmcdArea; // where the next area may start
    if (m.typev1 != kTypeN) {
        size_t start = kProposalBase + size_t{get16(p + 38)};
        if (start < cursor || start + 8 > end) return Error::BadOffset;
        std::memcpy(&m.ipv4_prefix, p + start, 4);
        m.ipv4_prefix_len = p[start + 4];
        if (m.ipv4_prefix_len > 32) return Error::BadValue;
        unsigned n = p[start + 7];
        if (n > kMaxV6Prefixes) return Error::BadCount;
        if (start + 8 + 17 * n > end) return Error::BadLength;
        for (unsigned i = 0; i < n; ++i) {
            Proposal::V6Prefix v6;
            std::copy(p + start + 8 + 17 * i, p + start + 8 + 17 * i + 16, v6.prefix.begin());
            v6.len = p[start + 8 + 17 * i + 16];
            if (v6.len > 128) return Error::BadValue;
            m.v6_prefixes.push_back(v6);
        }
        cursor = start + 8 + 17 * n;
    }
    if (m.typev2 == kTypeN) {
        if (cursor != end) return Error::BadLength;
        return m;
    }
    uint16_t v2_off = get16(p + 50);
    if (v2_off == 0) return Error::BadOffset;
    size_t v2 = 52 + size_t{v2_off};
    if (v2 < cursor || v2 + kV2ExtFixed > end) return Error::BadOffset;
    unsigned e = p[v2], g = p[v2 + 1];
    if (e > kMaxUeids || g > kMaxIsmV2) return Error::BadCount;
    m.release = p[v2 + 3] >> 4;
    m.seid_enabled = p[v2 + 3] & 1;
    std::copy(p + v2 + 8, p + v2 + 24, m.roce_v2_gid.begin());
    m.max_conns = p[v2 + 24];
    m.max_links = p[v2 + 25];
    m.feature_mask = get16(p + v2 + 26);
    if (v2 + kV2ExtFixed + 32 * e > end) return Error::BadLength;
    for (unsigned i = 0; i < e; ++i) {
        std::array<uint8_t, 32> ueid;
        std::copy(p + v2 + kV2ExtFixed + 32 * i, p + v2 + kV2ExtFixed + 32 * (i + 1), ueid.begin());
        m.ueids.push_back(ueid);
    }
    cursor = v2 + kV2ExtFixed + 32 * e;
    if (m.typev2 == kTypeD || m.typev2 == kTypeB) {
        size_t d = v2 + 8 + size_t{get16(p + v2 + 6)};
        if (d < cursor || d + kSmcdV2ExtFixed > end) return Error::BadOffset;
        std::copy(p + d, p + d + 32, m.seid.begin());
        if (uint64_t secret = get64(p + d + 40)) {
            NamedDmb named{get32(p + d + 32), p[d + 36], p[d + 37], secret};
            if (named.size_code > kMaxDmbeSizeCode || named.serial == 0) return Error::BadValue;
            m.named_dmb = named;
        }
        if (d + kSmcdV2ExtFixed + 10 * g > end) return Error::BadLength;
        for (unsigned i = 0; i < g; ++i)
            m.ism_v2.push_back({get64(p + d + kSmcdV2ExtFixed + 10 * i),
                                get16(p + d + kSmcdV2ExtFixed + 10 * i + 8)});
        cursor = d + kSmcdV2ExtFixed + 10 * g;
    }
    if (cursor != end) return Error::BadLength;
    return m;
}

// ---------------------------------------------------- SMC-D Accept/Confirm

std::vector<uint8_t> encode(const AcceptConfirmD& m) {
    size_t fce_len = 0;
    if (m.version >= 2 && m.first_contact && m.fce) fce_len = clc::fce_len(*m.fce, true);
    std::vector<uint8_t> out((m.version >= 2 ? kAcceptDV2 : kAcceptDV1) + fce_len, 0);
    uint8_t* p = out.data();
    put64(p + 8, m.gid);
    put64(p + 16, m.token);
    p[24] = m.dmbe_idx;
    p[25] = uint8_t(m.dmbe_size_code << 4);
    p[26] = m.type == Type::Accept && m.took_dmb ? 1 : 0;
    put32(p + 28, m.link_id);
    if (m.version >= 2) {
        put16(p + 32, m.chid);
        std::copy(m.eid.begin(), m.eid.end(), p + 34);
        if (m.dmb_secret) put64(p + 34, m.dmb_secret);
        put64(p + 66, m.gid_ext);
        if (fce_len) put_fce(p + kAcceptDV2 - kTrailerLen, *m.fce);
    }
    put_header(out, kEyeD, m.type, m.version, m.first_contact ? 0b10 : 0, kTypeD);
    return out;
}

std::variant<AcceptConfirmD, Error> decode_accept_confirm_d(std::span<const uint8_t> b) {
    AcceptConfirmD m;
    if (auto e = check_accept_confirm(b, kTypeD, m)) return *e;
    const uint8_t* p = b.data();
    const Type type = m.type;
    size_t len = b.size();
    if (m.version == 1) {
        if (len != kAcceptDV1) return Error::BadLength;
    } else if (!(len == kAcceptDV2 || (m.first_contact && (len == kAcceptDV2 + kFceRelease0 ||
                                                           len == kAcceptDV2 + kFceRelease1)))) {
        return Error::BadLength;
    }
    m.gid = get64(p + 8);
    m.token = get64(p + 16);
    m.dmbe_idx = p[24];
    m.dmbe_size_code = p[25] >> 4;
    if (m.dmbe_size_code > kMaxDmbeSizeCode) return Error::BadValue;
    m.link_id = get32(p + 28);
    m.took_dmb = type == Type::Accept && (p[26] & 1);
    if (m.took_dmb && m.first_contact) return Error::BadValue; // a DMB named in a segment it lacks
    if (m.version >= 2) {
        m.chid = get16(p + 32);
        std::copy(p + 34, p + 66, m.eid.begin());
        m.dmb_secret = get64(p + 34);
        m.gid_ext = get64(p + 66);
        if (len > kAcceptDV2) {
            m.fce = get_fce(p + kAcceptDV2 - kTrailerLen, len - kAcceptDV2, true);
            if (!m.fce || kAcceptDV2 + fce_len(*m.fce, true) != len) return Error::BadValue;
        }
    }
    return m;
}

// ---------------------------------------------------- SMC-R Accept/Confirm

std::vector<uint8_t> encode(const AcceptConfirmR& m) {
    size_t fce_len = 0, gle_len = 0;
    if (m.version >= 2 && m.first_contact && m.fce) {
        fce_len = clc::fce_len(*m.fce, false);
        if (m.type == Type::Confirm) gle_len = kGidListFixed + 16 * m.gid_list.size();
    }
    std::vector<uint8_t> out((m.version >= 2 ? kAcceptRV2 : kAcceptRV1) + fce_len + gle_len, 0);
    uint8_t* p = out.data();
    std::copy(m.peer_id.begin(), m.peer_id.end(), p + 8);
    std::copy(m.gid.begin(), m.gid.end(), p + 16);
    std::copy(m.mac.begin(), m.mac.end(), p + 32);
    put24(p + 38, m.qpn);
    put32(p + 41, m.rmb_rkey);
    p[45] = m.rmbe_idx;
    put32(p + 46, m.rmbe_alert_token);
    p[50] = uint8_t((m.rmbe_size_code & 0xf) << 4 | (m.qp_mtu & 0xf));
    put64(p + 52, m.rmb_dma_addr);
    put24(p + 61, m.psn);
    if (m.version >= 2) {
        std::copy(m.eid.begin(), m.eid.end(), p + 64);
        uint8_t* f = p + kAcceptRV2 - kTrailerLen;
        if (fce_len) put_fce(f, *m.fce);
        if (gle_len) {
            uint8_t* g = f + fce_len;
            g[0] = static_cast<uint8_t>(m.gid_list.size());
            for (size_t i = 0; i < m.gid_list.size(); ++i)
                std::copy(m.gid_list[i].begin(), m.gid_list[i].end(), g + kGidListFixed + 16 * i);
        }
    }
    put_header(out, kEyeR, m.type, m.version, m.first_contact ? 0b10 : 0, kTypeR);
    return out;
}

std::variant<AcceptConfirmR, Error> decode_accept_confirm_r(std::span<const uint8_t> b) {
    AcceptConfirmR m;
    if (auto e = check_accept_confirm(b, kTypeR, m)) return *e;
    const uint8_t* p = b.data();
    const Type type = m.type;
    const size_t len = b.size();
    if (m.version == 1 ? len != kAcceptRV1 : len < kAcceptRV2) return Error::BadLength;
    std::copy(p + 8, p + 16, m.peer_id.begin());
    std::copy(p + 16, p + 32, m.gid.begin());
    std::copy(p + 32, p + 38, m.mac.begin());
    m.qpn = get24(p + 38);
    m.rmb_rkey = get32(p + 41);
    m.rmbe_idx = p[45];
    m.rmbe_alert_token = get32(p + 46);
    m.rmbe_size_code = p[50] >> 4;
    m.qp_mtu = p[50] & 0xf;
    m.rmb_dma_addr = get64(p + 52);
    m.psn = get24(p + 61);
    // (The kernel takes an index of 0 as an offset before the RMB.)
    if (m.rmbe_idx == 0 || m.qp_mtu < 1 || m.qp_mtu > 5) return Error::BadValue;
    if (m.version == 1) return m;
    std::copy(p + 64, p + 96, m.eid.begin());
    if (len == kAcceptRV2) return m;
    // Beyond the base: an FCE (first contact only), then in a Confirm the
    // client's GID list, each exactly as long as it says.
    if (!m.first_contact) return Error::BadLength;
    const size_t room = len - kAcceptRV2;
    m.fce = get_fce(p + kAcceptRV2 - kTrailerLen, room, false);
    if (!m.fce) return Error::BadLength;
    const size_t after = fce_len(*m.fce, false);
    if (type == Type::Accept) {
        if (after != room) return Error::BadLength;
        return m;
    }
    if (after + kGidListFixed > room) return Error::BadLength;
    const uint8_t* g = p + kAcceptRV2 - kTrailerLen + after;
    unsigned n = g[0];
    if (n > kMaxGidList) return Error::BadCount;
    if (after + kGidListFixed + 16 * n != room) return Error::BadLength;
    for (unsigned i = 0; i < n; ++i) {
        std::array<uint8_t, 16> gid;
        std::copy(g + kGidListFixed + 16 * i, g + kGidListFixed + 16 * (i + 1), gid.begin());
        m.gid_list.push_back(gid);
    }
    return m;
}

std::variant<AcceptConfirmD, AcceptConfirmR, Error>
decode_accept_confirm(std::span<const uint8_t> b) {
    auto h = parse_header(b);
    if (auto* e = std::get_if<Error>(&h)) return *e;
    switch (std::get<Header>(h).typev1) {
    case kTypeD: {
        auto d = decode_accept_confirm_d(b);
        if (auto* e = std::get_if<Error>(&d)) return *e;
        return std::get<AcceptConfirmD>(d);
    }
    case kTypeR: {
        auto r = decode_accept_confirm_r(b);
        if (auto* e = std::get_if<Error>(&r)) return *e;
        return std::get<AcceptConfirmR>(r);
    }
    default:
        return Error::BadValue; // an Accept/Confirm is for exactly one transport
    }
}

// ------------------------------------------------------------------ Decline

std::vector<uint8_t> encode(const Decline& m) {
    std::vector<uint8_t> out(m.version >= 2 ? 44 : 28, 0);
    uint8_t* p = out.data();
    std::copy(m.peer_id.begin(), m.peer_id.end(), p + 8);
    put32(p + 16, m.diagnosis);
    p[20] = uint8_t((m.version >= 2 ? m.os_type : 0) << 4);
    put_header(out, kEyeR, Type::Decline, m.version, m.out_of_sync ? 0b10 : 0, 0);
    return out;
}

std::variant<Decline, Error> decode_decline(std::span<const uint8_t> b) {
    // The kernel does not check a Decline's trailer; neither do we.
    if (auto e = check_frame(b, Type::Decline, false)) return *e;
    if (b.size() != 28 && b.size() != 44) return Error::BadLength;
    const uint8_t* p = b.data();
    Decline m;
    m.version = p[7] >> 4;
    m.out_of_sync = ((p[7] >> 2) & 0b10) != 0;
    std::copy(p + 8, p + 16, m.peer_id.begin());
    m.diagnosis = get32(p + 16);
    m.os_type = p[20] >> 4;
    return m;
}

// -------------------------------------------------------- buffer size codes

uint8_t size_to_code(uint64_t bytes, uint8_t max_code) {
    uint8_t code = 0;
    while (code < max_code && code_to_size(code) < bytes)
        ++code;
    return code;
}

uint64_t code_to_size(uint8_t code) {
    return uint64_t{16384} << (code & 0xf);
}

} // namespace usmc::clc
