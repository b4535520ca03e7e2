// SPDX-License-Identifier: MIT
// A link group's remote tokens and RMB slots (engine/smcr/rtokens), and the
// answers to CONFIRM RKEY and DELETE RKEY, through the codec.
#include "engine/smcr/rtokens.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

using namespace usmc::smcr;

TEST_CASE("smcr rtokens: added once, found by rkey, removed") {
    RtokenTable t;
    int a = t.add(0x100, 0x1000);
    int b = t.add(0x200, 0x2000);
    CHECK(a >= 0);
    CHECK(b >= 0);
    CHECK(a != b);
    CHECK(t.add(0x100, 0x1000) == a); // the same token again: the same index
    CHECK(t.size() == 2);
    CHECK(t.find(0x200) == b);
    CHECK(t.at(b)->vaddr == 0x2000);
    CHECK(t.add(0, 0x3000) == -1); // never a region's key
    CHECK(t.remove(0x100));
    CHECK_FALSE(t.remove(0x100));
    CHECK_FALSE(t.at(a));
    CHECK(t.at(-1) == std::nullopt);
    CHECK(t.at(kRmbsPerGroup) == std::nullopt);
    CHECK(t.find(0x100) == -1);
    CHECK(t.size() == 1);
}

TEST_CASE("smcr rtokens: a full table answers CONFIRM RKEY negative, with retry") {
    RtokenTable t;
    for (int i = 0; i < kRmbsPerGroup; ++i)
        REQUIRE(t.add(uint32_t(i + 1), uint64_t(i) << 12) == i);
    llc::ConfirmRkey req;
    req.rt[0] = {0, 0xFFFF, 0x1234};
    llc::Message out = t.answer(req);
    // Through the codec, as the peer reads it.
    Msg wire = llc::encode(out);
    llc::ConfirmRkey got = std::get<llc::ConfirmRkey>(llc::decode(wire.data(), wire.size()).msg);
    CHECK(got.resp);
    CHECK(got.negative);
    CHECK(got.retry);
    CHECK(t.remove(7));
    llc::ConfirmRkey ok = t.answer(req);
    CHECK_FALSE(ok.negative);
    CHECK(t.find(0xFFFF) >= 0);
}

TEST_CASE("smcr rtokens: tokens for links we do not have are not kept") {
    RtokenTable t;
    llc::ConfirmRkey req;
    req.others = 2;
    req.rt[0] = {0, 0x10, 0x100};
    req.rt[1] = {2, 0x20, 0x200};
    req.rt[2] = {3, 0x30, 0x300};
    CHECK_FALSE(t.answer(req).negative);
    CHECK(t.size() == 1);
    CHECK(t.find(0x10) >= 0);
    CHECK(t.find(0x20) == -1);
}

TEST_CASE("smcr rtokens: DELETE RKEY names what it did not find") {
    RtokenTable t;
    t.add(0xA, 1);
    t.add(0xC, 3);
    llc::DeleteRkey req;
    req.count = 3;
    req.rkeys[0] = 0xA;
    req.rkeys[1] = 0xB; // never added
    req.rkeys[2] = 0xC;
    req.rkeys[3] = 0xA; // beyond the count: not looked at
    llc::DeleteRkey resp = t.answer(req);
    CHECK(resp.resp);
    CHECK(resp.negative);
    CHECK(resp.err_mask == 0x40); // bit 7 - 1: the second key
    CHECK(t.size() == 0);
    Msg wire = llc::encode(resp);
    CHECK(wire[3] == (llc::kResp | llc::kRkeyNegative));
    CHECK(wire[5] == 0x40);

    t.add(0xD, 4);
    llc::DeleteRkey one;
    one.count = 1;
    one.rkeys[0] = 0xD;
    llc::DeleteRkey clean = t.answer(one);
    CHECK_FALSE(clean.negative);
    CHECK(clean.err_mask == 0);
}

TEST_CASE("smcr RMB slots: a group takes max_conns connections, and slots come back") {
    RmbSlots s(16);
    std::vector<int> got;
    for (int i = 0; i < 16; ++i)
        got.push_back(s.claim());
    CHECK(std::count(got.begin(), got.end(), -1) == 0);
    CHECK(s.full());
    CHECK(s.claim() == -1);
    s.release(got[3]);
    s.release(got[3]); // twice: once counted
    s.release(-5);
    s.release(999);
    CHECK(s.in_use() == 15);
    CHECK(s.claim() == got[3]);
    RmbSlots big(kRmbsPerGroup);
    for (int i = 0; i < kRmbsPerGroup; ++i)
        REQUIRE(big.claim() == i);
    CHECK(big.claim() == -1);
}
