// SPDX-License-Identifier: MIT
#include "engine/smcr/cdc_msg.hpp"

#include "engine/base/wire_be.hpp"

namespace usmc::smcr {

namespace {

// The wire's cursor: reserved (16), wrap (16), count (32).
void put_cursor(uint8_t* p, core::Cursor c) {
    be::put16(p, 0);
    be::put16(p + 2, c.wrap);
    be::put32(p + 4, c.count);
}
core::Cursor get_cursor(const uint8_t* p) {
    return {be::get16(p + 2), be::get32(p + 4)};
}

constexpr size_t kFieldsEnd = 26; // offsetof(struct smc_cdc_msg, reserved)

} // namespace

Msg encode(const CdcMsg& m) {
    Msg b{};
    b[0] = kCdcType;
    b[1] = uint8_t(kMsgLen);
    be::put16(&b[2], m.seqno);
    be::put32(&b[4], m.token);
    put_cursor(&b[8], m.prod);
    put_cursor(&b[16], m.cons);
    b[24] = m.prod_flags;
    b[25] = m.conn_flags;
    return b;
}

std::optional<CdcMsg> decode_cdc(const uint8_t* p, size_t n) {
    if (n < kFieldsEnd || p[0] != kCdcType || p[1] != kMsgLen) return std::nullopt;
    CdcMsg m;
    m.seqno = be::get16(p + 2);
    m.token = be::get32(p + 4);
    m.prod = get_cursor(p + 8);
    m.cons = get_cursor(p + 16);
    m.prod_flags = p[24];
    m.conn_flags = p[25];
    return m;
}

core::PeerCdc to_peer_cdc(const CdcMsg& m, uint16_t urg_count) {
    core::PeerCdc c;
    c.prod = m.prod;
    c.urg_count = urg_count;
    c.cons = m.cons;
    c.prod_flags = m.prod_flags;
    c.conn_flags = m.conn_flags;
    return c;
}

} // namespace usmc::smcr
