// SPDX-License-Identifier: MIT
#include "engine/clc/clc.hpp"

#include <catch2/catch.hpp>

#include <cstring>

using namespace usmc::clc;

namespace {

Proposal sample_proposal() {
    Proposal m;
    m.peer_id = {1, 2, 3, 4, 5, 6, 7, 8};
    m.ism_gid_v1 = 0x1122334455667788ull;
    m.ism_chid = kChidEmulated;
    m.ism_v2 = {{0xAABBCCDDEEFF0011ull, kChidEmulated}, {0x0102030405060708ull, kChidEmulated}};
    m.seid[0] = 0x42;
    return m;
}

template <typename T>
T ok(const std::variant<T, Error>& r) {
    if (auto* e = std::get_if<Error>(&r)) FAIL("decode failed: " << error_name(*e));
    return std::get<T>(r);
}

template <typename T>
Error err(const std::variant<T, Error>& r) {
    REQUIRE(std::holds_alternative<Error>(r));
    return std::get<Error>(r);
}

} // namespace

TEST_CASE("CLC header: eyecatchers, type, length, version bits") {
    auto bytes = encode(sample_proposal());
    auto h = std::get<Header>(parse_header(bytes));
    CHECK(h.type == Type::Proposal);
    CHECK(h.length == bytes.size());
    CHECK(h.version == 2);
    CHECK(h.typev2 == kTypeD);
    CHECK(h.typev1 == kTypeN);
    CHECK(std::memcmp(bytes.data(), kEyeR.data(), 4) == 0);
    CHECK(std::memcmp(bytes.data() + bytes.size() - 4, kEyeR.data(), 4) == 0);
    CHECK(bytes[7] == 0x26); // version 2, typev2 D, typev1 N

    CHECK(err(parse_header(std::span(bytes).first(7))) == Error::Truncated);
    auto bad = bytes;
    bad[0] = 'S';
    CHECK(err(parse_header(bad)) == Error::BadEyecatcher);
    bad = bytes;
    bad[4] = 5;
    CHECK(err(parse_header(bad)) == Error::BadType);
    bad[4] = 0;
    CHECK(err(parse_header(bad)) == Error::BadType);
    bad = bytes;
    bad[7] = 0x06;
    CHECK(err(parse_header(bad)) == Error::BadVersion);
    bad = bytes;
    bad[5] = 0x40; // 16 KiB: longer than any CLC message
    CHECK(err(parse_header(bad)) == Error::BadLength);
    bad[5] = 0;
    bad[6] = 11; // shorter than header + trailer
    CHECK(err(parse_header(bad)) == Error::BadLength);
    // An application's HTTP request is not a CLC message.
    const char* http = "GET / HTTP/1.1\r\n";
    CHECK(err(parse_header(std::span(reinterpret_cast<const uint8_t*>(http), 16))) ==
          Error::BadEyecatcher);
}

TEST_CASE("Proposal round trips: SMC-D v2 only, with UEIDs, with a v1 prefix area") {
    Proposal m = sample_proposal();
    auto bytes = encode(m);
    CHECK(bytes.size() == 80 + 40 + 48 + 20 + 4);
    Proposal d = ok(decode_proposal(bytes));
    CHECK(d.peer_id == m.peer_id);
    CHECK(d.ism_gid_v1 == m.ism_gid_v1);
    CHECK(d.ism_chid == kChidEmulated);
    CHECK(d.ism_v2 == m.ism_v2);
    CHECK(d.seid == m.seid);
    CHECK(d.release == 1);
    CHECK(d.feature_mask == 1);

    m.ueids.resize(2);
    m.ueids[0].fill('A');
    m.ueids[1].fill('B');
    m.typev1 = kTypeD;
    m.ipv4_prefix = 0x0000007f;
    m.ipv4_prefix_len = 8;
    Proposal::V6Prefix v6;
    v6.prefix[15] = 1;
    v6.len = 128;
    m.v6_prefixes = {v6};
    bytes = encode(m);
    CHECK(bytes.size() == 80 + (8 + 17) + (40 + 64) + (48 + 20) + 4);
    d = ok(decode_proposal(bytes));
    CHECK(d.typev1 == kTypeD);
    CHECK(d.ipv4_prefix == m.ipv4_prefix);
    CHECK(d.ipv4_prefix_len == 8);
    CHECK(d.v6_prefixes == m.v6_prefixes);
    CHECK(d.ueids == m.ueids);
    CHECK(d.ism_v2 == m.ism_v2);

    Proposal none; // typev2 N, typev1 N: just the base and SMC-D area
    none.typev2 = kTypeN;
    bytes = encode(none);
    CHECK(bytes.size() == 84);
    CHECK(ok(decode_proposal(bytes)).typev2 == kTypeN);
}

TEST_CASE("Proposal: every malformed variant is rejected") {
    auto good = encode(sample_proposal());
    auto with = [&](auto&& mutate) {
        auto b = good;
        mutate(b);
        return decode_proposal(b);
    };
    CHECK(err(decode_proposal(std::span(good).first(good.size() - 1))) == Error::Truncated);
    auto longer = good;
    longer.push_back(0);
    CHECK(err(decode_proposal(longer)) == Error::BadLength); // span longer than the header says
    CHECK(err(with([](auto& b) { b[b.size() - 1] = 0; })) == Error::BadTrailer);
    CHECK(err(with([](auto& b) { b[4] = 2; })) == Error::BadType);
    CHECK(err(with([](auto& b) { b[7] = 0x16; })) == Error::BadVersion); // SMCv1 only
    // v2_ext_offset (bytes 50-51): zero, backwards into the SMC-D area, past the end
    CHECK(err(with([](auto& b) { b[50] = b[51] = 0; })) == Error::BadOffset);
    CHECK(err(with([](auto& b) { b[51] = 10; })) == Error::BadOffset);
    CHECK(err(with([](auto& b) { b[50] = 0xff; })) == Error::BadOffset);
    // counts beyond the maxima
    CHECK(err(with([](auto& b) { b[80] = 9; })) == Error::BadCount); // UEIDs
    CHECK(err(with([](auto& b) { b[81] = 9; })) == Error::BadCount); // ISMv2 GIDs
    CHECK(err(with([](auto& b) { b[80] = 1; })) ==
          Error::BadOffset); // a UEID the SMC-Dv2 offset overlaps
    CHECK(err(with([](auto& b) { b[81] = 3; })) ==
          Error::BadLength); // GID list runs past the trailer
    CHECK(err(with([](auto& b) { b[81] = 1; })) == Error::BadLength);    // bytes left over
    CHECK(err(with([](auto& b) { b[86] = 0xff; })) == Error::BadOffset); // SMC-Dv2 extension offset
    CHECK(err(with([](auto& b) { b[87] = 0; })) ==
          Error::BadOffset); // SMC-Dv2 extension overlaps the v2 ext

    // A prefix area that is announced (typev1 D) but points outside.
    Proposal m = sample_proposal();
    m.typev1 = kTypeD;
    auto withv1 = encode(m);
    auto b = withv1;
    b[38] = 0xff;
    CHECK(err(decode_proposal(b)) == Error::BadOffset);
    b = withv1;
    b[87] = 9; // 9 IPv6 prefixes
    CHECK(err(decode_proposal(b)) == Error::BadCount);
    b = withv1;
    b[84] = 33; // IPv4 prefix length
    CHECK(err(decode_proposal(b)) == Error::BadValue);
}

TEST_CASE("Proposal: usmc's named DMB in the SMC-Dv2 extension's reserved bytes") {
    Proposal m = sample_proposal();
    auto plain = encode(m);
    CHECK_FALSE(ok(decode_proposal(plain)).named_dmb); // zeros (a kernel peer): nothing named
    m.named_dmb = NamedDmb{0x01020304, 7, 2, 0xfeedfacecafebeefull};
    auto bytes = encode(m);
    CHECK(bytes.size() == plain.size()); // reserved bytes, no new ones
    Proposal d = ok(decode_proposal(bytes));
    REQUIRE(d.named_dmb);
    CHECK(*d.named_dmb == *m.named_dmb);
    CHECK(d.ism_v2 == m.ism_v2);
    // Where it lies: the 16 bytes after the SEID.
    size_t at = bytes.size() - 4 - 10 * m.ism_v2.size() - 16;
    CHECK(bytes[at + 4] == 7);
    CHECK(bytes[at + 5] == 2);
    auto b = bytes;
    b[at + 5] = 7; // a DMB larger than SMC-D allows
    CHECK(err(decode_proposal(b)) == Error::BadValue);
    b = bytes;
    std::memset(&b[at], 0, 4); // segment 0 names nothing
    CHECK(err(decode_proposal(b)) == Error::BadValue);
    b = bytes;
    std::memset(&b[at + 8], 0, 8); // no token: nothing named, whatever else is there
    CHECK_FALSE(ok(decode_proposal(b)).named_dmb);
}

TEST_CASE("SMC-D Accept/Confirm round trips, v2 with and without first contact") {
    AcceptConfirmD m;
    m.gid = 0x1111222233334444ull;
    m.token = 0xdeadbeefcafef00dull;
    m.dmbe_idx = 0;
    m.dmbe_size_code = 2;
    m.link_id = 77;
    m.chid = kChidEmulated;
    m.gid_ext = 0x5555666677778888ull;
    m.eid[0] = 'E';
    auto bytes = encode(m);
    CHECK(bytes.size() == 78);
    CHECK(std::memcmp(bytes.data(), kEyeD.data(), 4) == 0);
    auto d = ok(decode_accept_confirm_d(bytes));
    CHECK(d.type == Type::Accept);
    CHECK(d.gid == m.gid);
    CHECK(d.token == m.token);
    CHECK(d.dmbe_size_code == 2);
    CHECK(d.link_id == 77);
    CHECK(d.chid == kChidEmulated);
    CHECK(d.gid_ext == m.gid_ext);
    CHECK(d.eid == m.eid);
    CHECK_FALSE(d.first_contact);
    CHECK_FALSE(d.fce);

    m.type = Type::Confirm;
    m.first_contact = true;
    m.fce = FirstContact{};
    m.fce->hostname[0] = 'h';
    bytes = encode(m);
    CHECK(bytes.size() == 78 + 52);
    d = ok(decode_accept_confirm_d(bytes));
    CHECK(d.type == Type::Confirm);
    CHECK(d.first_contact);
    REQUIRE(d.fce);
    CHECK(d.fce->release == 1);
    CHECK(d.fce->os_type == 2);
    CHECK(d.fce->hostname == m.fce->hostname);

    m.fce->release = 0;
    CHECK(encode(m).size() == 78 + 36);
    CHECK(ok(decode_accept_confirm_d(encode(m))).fce->release == 0);

    m.version = 1;
    m.first_contact = false;
    bytes = encode(m);
    CHECK(bytes.size() == 48);
    CHECK_FALSE(ok(decode_accept_confirm_d(bytes)).took_dmb);
    CHECK(ok(decode_accept_confirm_d(bytes)).token == m.token);
}

TEST_CASE("SMC-D Accept/Confirm: malformed variants") {
    AcceptConfirmD m;
    m.dmbe_size_code = 1;
    auto good = encode(m);
    auto b = good;
    b[25] = 7 << 4; // DMB larger than SMC-D allows
    CHECK(err(decode_accept_confirm_d(b)) == Error::BadValue);
    b = good;
    b[7] = (b[7] & 0xfc) | kTypeR; // an SMC-R Accept
    CHECK(err(decode_accept_confirm_d(b)) == Error::BadValue);
    b = good;
    b[4] = 1;
    CHECK(err(decode_accept_confirm_d(b)) == Error::BadType);
    b = good;
    b.insert(b.end() - 4, 36, 0); // an FCE without the first-contact bit
    b[6] = static_cast<uint8_t>(b.size());
    CHECK(err(decode_accept_confirm_d(b)) == Error::BadLength);
    b = good;
    b[good.size() - 2] = 0;
    CHECK(err(decode_accept_confirm_d(b)) == Error::BadTrailer);
    CHECK(err(decode_accept_confirm_d(std::span(good).first(40))) == Error::Truncated);
    m.first_contact = true;
    m.fce = FirstContact{};
    b = encode(m);
    b[74 + 1] = 0x20; // says release 0 in a 52-byte FCE
    CHECK(err(decode_accept_confirm_d(b)) == Error::BadValue);
}

TEST_CASE("SMC-D Accept: the took-your-DMB bit, only in an Accept, never with first contact") {
    AcceptConfirmD m;
    m.took_dmb = true;
    auto bytes = encode(m);
    CHECK(bytes[26] == 1);
    CHECK(ok(decode_accept_confirm_d(bytes)).took_dmb);
    m.type = Type::Confirm; // a Confirm has no such bit: never encoded, never read
    bytes = encode(m);
    CHECK(bytes[26] == 0);
    bytes[26] = 1;
    CHECK_FALSE(ok(decode_accept_confirm_d(bytes)).took_dmb);
    m.dmb_secret = 0x5ec7e7; // the named DMB's owner token, in the EID's first bytes
    CHECK(ok(decode_accept_confirm_d(encode(m))).dmb_secret == 0x5ec7e7);
    m.type = Type::Accept;
    m.first_contact = true; // the client's DMB cannot lie in a segment the server lacks
    m.fce = FirstContact{};
    CHECK(err(decode_accept_confirm_d(encode(m))) == Error::BadValue);
}

TEST_CASE("Proposal: SMC-R fields at the kernel's offsets, v1 area and v2 extension") {
    Proposal m = sample_proposal();
    m.typev1 = kTypeR;
    m.typev2 = kTypeB;
    for (int i = 0; i < 16; ++i) {
        m.smcr_gid[i] = uint8_t(0xA0 + i);
        m.roce_v2_gid[i] = uint8_t(0xC0 + i);
    }
    m.smcr_mac = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
    m.max_conns = 255;
    m.max_links = 2;
    auto bytes = encode(m);
    CHECK(bytes[16] == 0xA0);
    CHECK(bytes[31] == 0xAF);
    CHECK(bytes[32] == 0x02);
    CHECK(bytes[37] == 0x55);
    // The v2 extension: 52 + v2_ext_offset; RoCEv2 GID at +8, max_conns/links at +24/+25.
    size_t v2 = 52 + size_t(bytes[50] << 8 | bytes[51]);
    CHECK(bytes[v2 + 8] == 0xC0);
    CHECK(bytes[v2 + 23] == 0xCF);
    CHECK(bytes[v2 + 24] == 255);
    CHECK(bytes[v2 + 25] == 2);
    auto d = ok(decode_proposal(bytes));
    CHECK(d.smcr_gid == m.smcr_gid);
    CHECK(d.smcr_mac == m.smcr_mac);
    CHECK(d.roce_v2_gid == m.roce_v2_gid);
    CHECK(d.max_conns == 255);
    CHECK(d.max_links == 2);
    CHECK(d.ism_v2 == m.ism_v2);
}

namespace {
AcceptConfirmR sample_accept_r() {
    AcceptConfirmR m;
    m.peer_id = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int i = 0; i < 16; ++i)
        m.gid[i] = uint8_t(0x10 + i);
    m.mac = {0x98, 0x03, 0x9b, 0xab, 0xcd, 0xef};
    m.qpn = 0x0a0b0c;
    m.rmb_rkey = 0x11223344;
    m.rmbe_idx = 1;
    m.rmbe_alert_token = 0x55667788;
    m.rmbe_size_code = 2;
    m.qp_mtu = 3;
    m.rmb_dma_addr = 0x0102030405060708ull;
    m.psn = 0x0d0e0f;
    return m;
}
} // namespace

TEST_CASE("SMC-R Accept/Confirm: v1 at the kernel's offsets (smc_clc_msg_accept_confirm)") {
    AcceptConfirmR m = sample_accept_r();
    m.version = 1;
    m.first_contact = true;
    auto b = encode(m);
    REQUIRE(b.size() == 68);
    CHECK(std::memcmp(b.data(), kEyeR.data(), 4) == 0);
    CHECK(std::memcmp(b.data() + 64, kEyeR.data(), 4) == 0);
    CHECK(b[4] == 2);
    CHECK(b[7] == 0x18); // version 1, first contact, typev1 R (the hwipl dumps' byte)
    CHECK(b[8] == 0);
    CHECK(b[15] == 7);
    CHECK(b[16] == 0x10);
    CHECK(b[31] == 0x1f);
    CHECK(b[32] == 0x98);
    CHECK(b[37] == 0xef);
    CHECK((b[38] == 0x0a && b[39] == 0x0b && b[40] == 0x0c)); // QP number, 24 bits
    CHECK((b[41] == 0x11 && b[44] == 0x44));                  // rkey
    CHECK(b[45] == 1);                                        // RMBE index
    CHECK((b[46] == 0x55 && b[49] == 0x88));                  // alert token
    CHECK(b[50] == 0x23);                                     // 64 KiB, MTU 1024
    CHECK((b[52] == 0x01 && b[59] == 0x08));                  // RMB address
    CHECK(b[60] == 0);
    CHECK((b[61] == 0x0d && b[62] == 0x0e && b[63] == 0x0f)); // initial PSN
    auto d = ok(decode_accept_confirm_r(b));
    CHECK(d.version == 1);
    CHECK(d.first_contact);
    CHECK(d.gid == m.gid);
    CHECK(d.mac == m.mac);
    CHECK(d.qpn == m.qpn);
    CHECK(d.rmb_rkey == m.rmb_rkey);
    CHECK(d.rmbe_alert_token == m.rmbe_alert_token);
    CHECK(d.rmbe_size_code == 2);
    CHECK(d.qp_mtu == 3);
    CHECK(d.rmb_dma_addr == m.rmb_dma_addr);
    CHECK(d.psn == m.psn);
    CHECK_FALSE(d.fce);
    // Told apart from SMC-D by typev1, each decoder refusing the other's.
    CHECK(err(decode_accept_confirm_d(b)) == Error::BadValue);
    CHECK(std::holds_alternative<AcceptConfirmR>(decode_accept_confirm(b)));
    CHECK(std::holds_alternative<AcceptConfirmD>(decode_accept_confirm(encode(AcceptConfirmD{}))));
    CHECK(err(decode_accept_confirm_r(encode(AcceptConfirmD{}))) == Error::BadValue);
}

TEST_CASE("SMC-R Accept/Confirm v2: base, FCE of both releases, the Confirm's GID list") {
    AcceptConfirmR m = sample_accept_r();
    m.eid[0] = 'E';
    m.eid[31] = 'Z';
    auto b = encode(m);
    CHECK(b.size() == 108);
    CHECK(b[64] == 'E');
    auto d = ok(decode_accept_confirm_r(b));
    CHECK(d.eid == m.eid);

    m.first_contact = true;
    m.fce = FirstContact{};
    m.fce->v2_direct = true;
    m.fce->max_conns = 255;
    m.fce->max_links = 2;
    m.fce->feature_mask = 1;
    m.fce->hostname[0] = 'h';
    b = encode(m);
    CHECK(b.size() == 108 + 52);
    CHECK(b[104] == 0x80); // v2_direct
    CHECK(b[105] == 0x21); // Linux, release 1
    CHECK(b[140] == 255);
    CHECK(b[141] == 2);
    d = ok(decode_accept_confirm_r(b));
    REQUIRE(d.fce);
    CHECK(d.fce->v2_direct);
    CHECK(d.fce->max_conns == 255);
    CHECK(d.fce->max_links == 2);
    CHECK(d.fce->feature_mask == 1);
    CHECK(d.fce->hostname == m.fce->hostname);
    CHECK(d.gid_list.empty()); // an Accept has none

    m.type = Type::Confirm;
    m.gid_list.resize(2);
    m.gid_list[1][15] = 9;
    b = encode(m);
    CHECK(b.size() == 108 + 52 + 4 + 32);
    CHECK(b[156] == 2);
    d = ok(decode_accept_confirm_r(b));
    CHECK(d.gid_list == m.gid_list);

    // SMC-R's FCE is 52 bytes in release 0 too, its v2.1 fields reserved
    // (smc_clc_fill_fce_v2x), so the GID list starts at the same place.
    m.fce->release = 0;
    b = encode(m);
    CHECK(b.size() == 108 + 52 + 4 + 32);
    CHECK(b[140] == 0); // max_conns: reserved in release 0
    CHECK(b[156] == 2);
    d = ok(decode_accept_confirm_r(b));
    CHECK(d.fce->release == 0);
    CHECK(d.fce->max_conns == 0); // not in a release 0 FCE
    CHECK(d.gid_list == m.gid_list);
}

TEST_CASE("SMC-R Accept/Confirm: malformed variants") {
    AcceptConfirmR m = sample_accept_r();
    auto good = encode(m);
    auto b = good;
    b[45] = 0; // RMBE index 0
    CHECK(err(decode_accept_confirm_r(b)) == Error::BadValue);
    b = good;
    b[50] = 0x26; // MTU code 6
    CHECK(err(decode_accept_confirm_r(b)) == Error::BadValue);
    b = good;
    b[50] = 0x20; // MTU code 0
    CHECK(err(decode_accept_confirm_r(b)) == Error::BadValue);
    b = good;
    b.insert(b.end() - 4, 36, 0); // an FCE without the first-contact bit
    b[6] = static_cast<uint8_t>(b.size());
    CHECK(err(decode_accept_confirm_r(b)) == Error::BadLength);
    b = good;
    b[6] = 100; // shorter than a v2 base
    b.resize(100);
    std::copy(kEyeR.begin(), kEyeR.end(), b.end() - 4);
    CHECK(err(decode_accept_confirm_r(b)) == Error::BadLength);

    m.version = 1;
    b = encode(m);
    b.insert(b.end() - 4, 4, 0); // a v1 message is exactly 68 bytes
    b[6] = static_cast<uint8_t>(b.size());
    CHECK(err(decode_accept_confirm_r(b)) == Error::BadLength);

    m = sample_accept_r();
    m.first_contact = true;
    m.fce = FirstContact{};
    b = encode(m);
    b[105] = 0x20; // release 0: still a 52-byte FCE for SMC-R
    CHECK(ok(decode_accept_confirm_r(b)).fce->release == 0);
    b.erase(b.end() - 4 - 16, b.end() - 4); // an FCE of SMC-D's release 0 size
    b[6] = static_cast<uint8_t>(b.size());
    CHECK(err(decode_accept_confirm_r(b)) == Error::BadLength);

    m.type = Type::Confirm;
    m.gid_list.resize(1);
    good = encode(m);
    b = good;
    b[156] = 2; // counts more GIDs than it carries
    CHECK(err(decode_accept_confirm_r(b)) == Error::BadLength);
    b = good;
    b[156] = kMaxGidList + 1;
    CHECK(err(decode_accept_confirm_r(b)) == Error::BadCount);
    b = good;
    b.erase(b.end() - 4 - 16 - 4, b.end() - 4); // an FCE but no GID list
    b[6] = static_cast<uint8_t>(b.size());
    CHECK(err(decode_accept_confirm_r(b)) == Error::BadLength);
    CHECK(err(decode_accept_confirm_r(std::span(good).first(60))) == Error::Truncated);
}

TEST_CASE("Decline round trips, v1 and v2, out-of-sync bit") {
    Decline m;
    m.diagnosis = 0x03030000;
    m.peer_id[7] = 9;
    auto bytes = encode(m);
    CHECK(bytes.size() == 44);
    auto d = ok(decode_decline(bytes));
    CHECK(d.diagnosis == 0x03030000);
    CHECK(d.peer_id == m.peer_id);
    CHECK(d.os_type == 2);
    CHECK_FALSE(d.out_of_sync);
    m.version = 1;
    m.out_of_sync = true;
    m.diagnosis = 0x04000000;
    bytes = encode(m);
    CHECK(bytes.size() == 28);
    d = ok(decode_decline(bytes));
    CHECK(d.out_of_sync);
    CHECK(d.diagnosis == 0x04000000);
    bytes[27] = 0; // trailer not checked for Decline, as the kernel does
    CHECK(ok(decode_decline(bytes)).diagnosis == 0x04000000);
    bytes[6] = 30;
    bytes.resize(30);
    CHECK(err(decode_decline(bytes)) == Error::BadLength);
}

TEST_CASE("every single-byte corruption of every message decodes or fails cleanly") {
    // A bounded fuzz in the unit tests (under ASan): no decoder may read out
    // of bounds whatever byte is changed to whatever value.
    AcceptConfirmD a;
    a.first_contact = true;
    a.fce = FirstContact{};
    Proposal p = sample_proposal();
    p.typev1 = kTypeB;
    p.v6_prefixes.resize(2);
    p.ueids.resize(1);
    AcceptConfirmR r = sample_accept_r();
    r.type = Type::Confirm;
    r.first_contact = true;
    r.fce = FirstContact{};
    r.gid_list.resize(2);
    std::vector<std::vector<uint8_t>> messages = {encode(p), encode(a), encode(r),
                                                  encode(Decline{})};
    size_t decoded = 0, rejected = 0;
    for (const auto& msg : messages) {
        for (size_t i = 0; i < msg.size(); ++i) {
            for (int v : {0x00, 0x01, 0x7f, 0x80, 0xff, msg[i] ^ 0x10}) {
                auto b = msg;
                b[i] = static_cast<uint8_t>(v);
                for (size_t cut : {b.size(), b.size() - 1, size_t{8}}) {
                    std::span<const uint8_t> s(b.data(), cut);
                    bool ok1 = std::holds_alternative<Proposal>(decode_proposal(s));
                    bool ok2 = std::holds_alternative<AcceptConfirmD>(decode_accept_confirm_d(s));
                    bool ok3 = std::holds_alternative<Decline>(decode_decline(s));
                    bool ok4 = std::holds_alternative<AcceptConfirmR>(decode_accept_confirm_r(s));
                    (ok1 || ok2 || ok3 || ok4) ? ++decoded : ++rejected;
                }
            }
        }
    }
    CHECK(decoded > 0);
    CHECK(rejected > 0);
}

TEST_CASE("compressed buffer sizes round up and clamp") {
    CHECK(size_to_code(1, 6) == 0);
    CHECK(size_to_code(16384, 6) == 0);
    CHECK(size_to_code(16385, 6) == 1);
    CHECK(size_to_code(65536, 6) == 2);
    CHECK(size_to_code(1 << 20, 6) == 6);
    CHECK(size_to_code(1 << 24, 6) == 6);
    CHECK(code_to_size(0) == 16384);
    CHECK(code_to_size(6) == (1u << 20));
}
