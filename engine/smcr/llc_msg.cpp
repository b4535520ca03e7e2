// SPDX-License-Identifier: MIT
#include "engine/smcr/llc_msg.hpp"

#include "engine/base/wire_be.hpp"

#include <algorithm>

namespace usmc::smcr::llc {

namespace {

constexpr size_t kRtokenLen = 13; // link byte, rkey (32), vaddr (64), packed

Msg header(uint8_t type, bool resp, uint8_t flags) {
    Msg b{};
    b[0] = type;
    b[1] = uint8_t(kMsgLen);
    b[3] = uint8_t(flags | (resp ? kResp : 0));
    return b;
}

template <size_t N>
void put_bytes(uint8_t* p, const std::array<uint8_t, N>& a) {
    std::copy(a.begin(), a.end(), p);
}
template <size_t N>
void get_bytes(const uint8_t* p, std::array<uint8_t, N>& a) {
    std::copy(p, p + N, a.begin());
}

Msg encode_one(const ConfirmLink& m) {
    Msg b = header(kConfirmLink, m.resp, uint8_t(m.flags & ~kResp));
    put_bytes(&b[4], m.mac);
    put_bytes(&b[10], m.gid);
    be::put24(&b[26], m.qpn);
    b[29] = m.link_num;
    put_bytes(&b[30], m.link_uid);
    b[34] = m.max_links;
    b[35] = m.max_conns;
    return b;
}
Msg encode_one(const DeleteLink& m) {
    Msg b = header(kDeleteLink, m.resp,
                   uint8_t((m.all ? kDeleteAll : 0) | (m.orderly ? kDeleteOrderly : 0)));
    b[4] = m.all ? 0 : m.link_num;
    be::put32(&b[5], m.reason);
    return b;
}
Msg encode_one(const ConfirmRkey& m) {
    Msg b = header(kConfirmRkey, m.resp,
                   uint8_t((m.negative ? kRkeyNegative : 0) | (m.retry ? kRkeyRetry : 0)));
    for (size_t i = 0; i < m.rt.size(); ++i) {
        uint8_t* t = &b[4 + i * kRtokenLen];
        t[0] = i == 0 ? m.others : m.rt[i].link_id;
        be::put32(t + 1, m.rt[i].rkey);
        be::put64(t + 5, m.rt[i].vaddr);
    }
    return b;
}
Msg encode_one(const TestLink& m) {
    Msg b = header(kTestLink, m.resp, 0);
    put_bytes(&b[4], m.user_data);
    return b;
}
Msg encode_one(const DeleteRkey& m) {
    Msg b = header(kDeleteRkey, m.resp, m.negative ? kRkeyNegative : 0);
    b[4] = m.count;
    b[5] = m.err_mask;
    for (int i = 0; i < kDeleteRkeyMax; ++i)
        be::put32(&b[8 + 4 * i], m.rkeys[i]);
    return b;
}
Msg encode_one(const Unsupported& m) {
    return header(m.type, m.resp, 0);
}

Decoded bad(Error e) {
    return {Unsupported{}, e};
}

} // namespace

Msg encode(const Message& m) {
    return std::visit([](const auto& x) { return encode_one(x); }, m);
}

Decoded decode(const uint8_t* p, size_t n) {
    if (n < kMsgLen) return bad(Error::Short);
    if (kind_of(p, n) != MsgKind::Llc) return bad(Error::NotLlc);
    if (p[1] != kMsgLen) return bad(Error::BadLength);
    const bool resp = p[3] & kResp;
    const uint8_t flags = p[3];
    switch (p[0]) {
    case kConfirmLink: {
        ConfirmLink m;
        m.resp = resp;
        m.flags = uint8_t(flags & ~kResp);
        get_bytes(p + 4, m.mac);
        get_bytes(p + 10, m.gid);
        m.qpn = be::get24(p + 26);
        m.link_num = p[29];
        get_bytes(p + 30, m.link_uid);
        m.max_links = p[34];
        m.max_conns = p[35];
        if (m.qpn == 0) return bad(Error::BadField); // QP 0 is the management QP
        return {m};
    }
    case kDeleteLink: {
        DeleteLink m;
        m.resp = resp;
        m.all = flags & kDeleteAll;
        m.orderly = flags & kDeleteOrderly;
        m.link_num = m.all ? 0 : p[4]; // (all links: the number means nothing)
        m.reason = be::get32(p + 5);
        // (Link 0 without "all": no link of ours; the group answers it,
        // unknown link, as the kernel does. Not malformed.)
        return {m};
    }
    case kConfirmRkey: {
        ConfirmRkey m;
        m.resp = resp;
        m.negative = flags & kRkeyNegative;
        m.retry = flags & kRkeyRetry;
        for (size_t i = 0; i < m.rt.size(); ++i) {
            const uint8_t* t = p + 4 + i * kRtokenLen;
            m.rt[i] = {i == 0 ? uint8_t(0) : t[0], be::get32(t + 1), be::get64(t + 5)};
        }
        m.others = p[4];
        if (m.others > m.rt.size() - 1) return bad(Error::BadField);
        return {m};
    }
    case kTestLink: {
        TestLink m;
        m.resp = resp;
        get_bytes(p + 4, m.user_data);
        return {m};
    }
    case kDeleteRkey: {
        DeleteRkey m;
        m.resp = resp;
        m.negative = flags & kRkeyNegative;
        m.count = p[4];
        m.err_mask = p[5];
        for (int i = 0; i < kDeleteRkeyMax; ++i)
            m.rkeys[i] = be::get32(p + 8 + 4 * i);
        if (m.count == 0 || m.count > kDeleteRkeyMax) return bad(Error::BadField);
        return {m};
    }
    case kAddLink:
    case kAddLinkCont:
    case kReqAddLink:
    case kConfirmRkeyCont:
        return {Unsupported{p[0], resp}};
    default:
        return bad(Error::BadType);
    }
}

const char* error_name(Error e) {
    switch (e) {
    case Error::None:
        return "none";
    case Error::Short:
        return "shorter than 44 bytes";
    case Error::NotLlc:
        return "not an LLC v1 message";
    case Error::BadLength:
        return "length byte is not 44";
    case Error::BadType:
        return "undefined LLC type";
    case Error::BadField:
        return "field out of range";
    }
    return "?";
}

} // namespace usmc::smcr::llc
