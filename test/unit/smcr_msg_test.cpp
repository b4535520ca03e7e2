// SPDX-License-Identifier: MIT
// SMC-R's CDC and LLC messages against bytes written out by hand from the
// kernel's layouts (net/smc/smc_cdc.h struct smc_cdc_msg, net/smc/smc_llc.c
// struct smc_llc_msg_*), and every way a peer's message can be malformed.
#include "engine/smcr/cdc_msg.hpp"
#include "engine/smcr/llc_msg.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace usmc;
using namespace usmc::smcr;

namespace {
std::vector<uint8_t> bytes(const Msg& m) {
    return {m.begin(), m.end()};
}
Msg msg_of(std::vector<uint8_t> v) {
    Msg m{};
    std::copy(v.begin(), v.end(), m.begin());
    return m;
}
} // namespace

TEST_CASE("smcr CDC: the kernel's 44 bytes, both ways") {
    CdcMsg m;
    m.seqno = 0x1234;
    m.token = 0xA1B2C3D4;
    m.prod = {7, 0x00010203};
    m.cons = {0xFFFE, 65535};
    m.prod_flags = kUrgPresent | kUrgPending;
    m.conn_flags = core::kPeerDoneWriting;
    const std::vector<uint8_t> want = {
        0xFE, 44,   0x12, 0x34,                         // type, length, seqno
        0xA1, 0xB2, 0xC3, 0xD4,                         // token
        0,    0,    0x00, 0x07, 0x00, 0x01, 0x02, 0x03, // prod: reserved, wrap, count
        0,    0,    0xFF, 0xFE, 0x00, 0x00, 0xFF, 0xFF, // cons
        0x60, 0x80,                                     // urg pending|present; done writing
        0,    0,    0,    0,    0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    CHECK(bytes(encode(m)) == want);
    auto back = decode_cdc(want.data(), want.size());
    REQUIRE(back);
    CHECK(*back == m);
    core::PeerCdc peer = to_peer_cdc(*back, 3);
    CHECK(peer.prod == m.prod);
    CHECK(peer.cons == m.cons);
    CHECK(peer.urg_count == 3);
    CHECK(core::cdc_ending_flags(peer) == core::kPeerDoneWriting);
}

TEST_CASE("smcr CDC: what the kernel drops is dropped") {
    Msg b = encode(CdcMsg{});
    CHECK(decode_cdc(b.data(), 26)); // up to the reserved tail is enough
    CHECK_FALSE(decode_cdc(b.data(), 25));
    CHECK_FALSE(decode_cdc(b.data(), 0));
    Msg wrong_len = b;
    wrong_len[1] = 43;
    CHECK_FALSE(decode_cdc(wrong_len.data(), wrong_len.size()));
    Msg llc = b;
    llc[0] = llc::kTestLink;
    CHECK_FALSE(decode_cdc(llc.data(), llc.size()));
    // The cursors' reserved halves are not the peer's to set, and not read.
    Msg reserved = b;
    reserved[8] = 0xFF;
    reserved[16] = 0xFF;
    auto m = decode_cdc(reserved.data(), reserved.size());
    REQUIRE(m);
    CHECK(m->prod == core::Cursor{});
}

TEST_CASE("smcr CDC: sequence numbers wrap; old ones are dropped unless replayed") {
    CHECK(seq_before(1, 2));
    CHECK_FALSE(seq_before(2, 1));
    CHECK_FALSE(seq_before(5, 5));
    CHECK(seq_before(0xFFFF, 0)); // across the wrap
    CHECK_FALSE(seq_before(0, 0xFFFF));
    CHECK(seq_before(10, 10 + 0x7FFF)); // up to half the range ahead is newer
    CHECK_FALSE(seq_before(10 + 0x7FFF, 10));
    CdcMsg old;
    old.seqno = 9;
    CHECK_FALSE(seq_takes(old, 10));
    CHECK(seq_takes(old, 9)); // the same number again: taken (a repeat of cursors is harmless)
    old.prod_flags = kFailoverValidation;
    CHECK(seq_takes(old, 10));
}

TEST_CASE("smcr messages: the first byte tells CDC from LLC") {
    uint8_t b[1];
    b[0] = 0xFE;
    CHECK(kind_of(b, 1) == MsgKind::Cdc);
    b[0] = 0x01;
    CHECK(kind_of(b, 1) == MsgKind::Llc);
    b[0] = 0x21;
    CHECK(kind_of(b, 1) == MsgKind::LlcV2);
    b[0] = 0x00;
    CHECK(kind_of(b, 1) == MsgKind::Unknown);
    b[0] = 0x31;
    CHECK(kind_of(b, 1) == MsgKind::Unknown);
    CHECK(kind_of(b, 0) == MsgKind::Unknown);
}

TEST_CASE("smcr LLC: CONFIRM LINK, the kernel's bytes") {
    llc::ConfirmLink m;
    m.resp = true;
    m.mac = {0x02, 0x00, 0x00, 0xAA, 0xBB, 0xCC};
    for (int i = 0; i < 16; ++i)
        m.gid[i] = uint8_t(0xF0 + i);
    m.qpn = 0x000123;
    m.link_num = 1;
    m.link_uid = {0xDE, 0xAD, 0xBE, 0xEF};
    m.max_links = 2;
    m.max_conns = 255;
    std::vector<uint8_t> want(44, 0);
    want[0] = 0x01;
    want[1] = 44;
    want[3] = 0x80 | 0x03; // response, no RMBE eyecatcher
    std::vector<uint8_t> mac = {0x02, 0x00, 0x00, 0xAA, 0xBB, 0xCC};
    std::copy(mac.begin(), mac.end(), want.begin() + 4);
    for (int i = 0; i < 16; ++i)
        want[10 + i] = uint8_t(0xF0 + i);
    want[26] = 0x00;
    want[27] = 0x01;
    want[28] = 0x23; // QPN, 24 bits
    want[29] = 1;
    want[30] = 0xDE;
    want[31] = 0xAD;
    want[32] = 0xBE;
    want[33] = 0xEF;
    want[34] = 2;
    want[35] = 255;
    CHECK(bytes(llc::encode(m)) == want);
    llc::Decoded d = llc::decode(want.data(), want.size());
    REQUIRE(d.error == llc::Error::None);
    REQUIRE(std::holds_alternative<llc::ConfirmLink>(d.msg));
    CHECK(std::get<llc::ConfirmLink>(d.msg) == m);
    want[26] = want[27] = want[28] = 0; // QP 0: the management QP, never a link's
    CHECK(llc::decode(want.data(), want.size()).error == llc::Error::BadField);
}

TEST_CASE("smcr LLC: CONFIRM RKEY carries at most two other links' tokens") {
    llc::ConfirmRkey m;
    m.others = 1;
    m.rt[0] = {0, 0x11223344, 0x0102030405060708};
    m.rt[1] = {2, 0x55667788, 0x1112131415161718};
    Msg b = llc::encode(m);
    std::vector<uint8_t> want(44, 0);
    want[0] = 0x06;
    want[1] = 44;
    std::vector<uint8_t> t0 = {1, 0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<uint8_t> t1 = {2,    0x55, 0x66, 0x77, 0x88, 0x11, 0x12,
                               0x13, 0x14, 0x15, 0x16, 0x17, 0x18};
    std::copy(t0.begin(), t0.end(), want.begin() + 4);
    std::copy(t1.begin(), t1.end(), want.begin() + 17);
    CHECK(bytes(b) == want);
    llc::Decoded d = llc::decode(b.data(), b.size());
    REQUIRE(d.error == llc::Error::None);
    CHECK(std::get<llc::ConfirmRkey>(d.msg) == m);
    b[4] = 3; // a fourth token would lie past the message
    CHECK(llc::decode(b.data(), b.size()).error == llc::Error::BadField);
    llc::ConfirmRkey neg;
    neg.resp = neg.negative = neg.retry = true;
    Msg nb = llc::encode(neg);
    CHECK(nb[3] == (0x80 | 0x20 | 0x10));
    CHECK(std::get<llc::ConfirmRkey>(llc::decode(nb.data(), nb.size()).msg) == neg);
}

TEST_CASE("smcr LLC: DELETE RKEY, DELETE LINK, TEST LINK") {
    llc::DeleteRkey dr;
    dr.count = 2;
    dr.rkeys[0] = 0xCAFEBABE;
    dr.rkeys[1] = 7;
    Msg b = llc::encode(dr);
    CHECK(b[0] == 0x09);
    CHECK(b[4] == 2);
    CHECK(std::vector<uint8_t>(b.begin() + 8, b.begin() + 16) ==
          std::vector<uint8_t>{0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 7});
    CHECK(std::get<llc::DeleteRkey>(llc::decode(b.data(), b.size()).msg) == dr);
    b[4] = 0;
    CHECK(llc::decode(b.data(), b.size()).error == llc::Error::BadField);
    b[4] = 9;
    CHECK(llc::decode(b.data(), b.size()).error == llc::Error::BadField);

    llc::DeleteLink dl;
    dl.all = dl.orderly = true;
    dl.reason = llc::kProgInit;
    Msg l = llc::encode(dl);
    CHECK(l[3] == (0x40 | 0x20));
    CHECK(l[4] == 0);
    CHECK(std::vector<uint8_t>(l.begin() + 5, l.begin() + 9) ==
          std::vector<uint8_t>{0x00, 0x03, 0x00, 0x00});
    CHECK(std::get<llc::DeleteLink>(llc::decode(l.data(), l.size()).msg) == dl);
    l[4] = 5; // with "all links" a number means nothing, and is not kept
    CHECK(std::get<llc::DeleteLink>(llc::decode(l.data(), l.size()).msg).link_num == 0);
    l[4] = 0;
    l[3] = 0; // link 0 without "all": no link of anyone's, answered, not malformed
    llc::Decoded none = llc::decode(l.data(), l.size());
    REQUIRE(none.error == llc::Error::None);
    CHECK(std::get<llc::DeleteLink>(none.msg).link_num == 0);
    CHECK_FALSE(std::get<llc::DeleteLink>(none.msg).all);

    llc::TestLink t;
    for (int i = 0; i < 16; ++i)
        t.user_data[i] = uint8_t(i * 7);
    Msg tb = llc::encode(t);
    CHECK(tb[0] == 0x07);
    CHECK(tb[4 + 15] == 105);
    llc::TestLink answer = std::get<llc::TestLink>(llc::decode(tb.data(), tb.size()).msg);
    answer.resp = true;
    Msg ab = llc::encode(answer);
    CHECK(ab[3] == 0x80);
    CHECK(std::equal(ab.begin() + 4, ab.begin() + 20, tb.begin() + 4)); // echoed
}

TEST_CASE("smcr LLC: malformed messages say why; ADD LINK and kin are not acted on") {
    Msg ok = llc::encode(llc::TestLink{});
    CHECK(llc::decode(ok.data(), 43).error == llc::Error::Short);
    Msg len = ok;
    len[1] = 40;
    CHECK(llc::decode(len.data(), len.size()).error == llc::Error::BadLength);
    Msg cdc = encode(CdcMsg{});
    CHECK(llc::decode(cdc.data(), cdc.size()).error == llc::Error::NotLlc);
    Msg v2 = ok;
    v2[0] = 0x27;
    CHECK(llc::decode(v2.data(), v2.size()).error == llc::Error::NotLlc);
    for (uint8_t type : {uint8_t(0x0A), uint8_t(0x0F)}) {
        Msg u = ok;
        u[0] = type;
        CHECK(llc::decode(u.data(), u.size()).error == llc::Error::BadType);
    }
    for (uint8_t type :
         {llc::kAddLink, llc::kAddLinkCont, llc::kReqAddLink, llc::kConfirmRkeyCont}) {
        Msg a = msg_of({type, 44, 0, 0x80});
        llc::Decoded d = llc::decode(a.data(), a.size());
        REQUIRE(d.error == llc::Error::None);
        CHECK(std::get<llc::Unsupported>(d.msg) == llc::Unsupported{type, true});
    }
    CHECK(std::string(llc::error_name(llc::Error::BadField)) == "field out of range");
}
