// SPDX-License-Identifier: MIT
#include "engine/base/fallback.hpp"
#include "engine/handshake/transport_choice.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace usmc;
using TK = TransportKind;

namespace {

constexpr uint64_t kGid = 0x1122334455667788ull;

// A Proposal offering `v1` and `v2` (clc::SmcType), its SMC-D parts as
// usmc's client fills them.
clc::Proposal offer(uint8_t v1, uint8_t v2, uint8_t version = 2) {
    clc::Proposal p;
    p.version = version;
    p.typev1 = v1;
    p.typev2 = v2;
    bool d1 = v1 == clc::kTypeD || v1 == clc::kTypeB, d2 = v2 == clc::kTypeD || v2 == clc::kTypeB;
    if (d1 || d2) {
        p.ism_gid_v1 = kGid;
        p.ism_chid = clc::kChidEmulated;
    }
    if (d2) p.ism_v2 = {{kGid, clc::kChidEmulated}};
    if (v2 == clc::kTypeR || v2 == clc::kTypeB) p.ueids.push_back({});
    return p;
}

constexpr LocalTransports kUsmc{.smcd_v2 = true};
constexpr LocalTransports kNothing{};
constexpr LocalTransports kAll{.smcd_v2 = true, .smcd_v1 = true, .smcr_v2 = true, .smcr_v1 = true};
constexpr LocalTransports kRdma{.smcr_v2 = true, .smcr_v1 = true};

} // namespace

TEST_CASE("transport choice: offers against what this process has, the kernel's order") {
    using clc::kTypeB, clc::kTypeD, clc::kTypeN, clc::kTypeR;
    struct Row {
        uint8_t v1, v2;
        LocalTransports local;
        TK kind;
        uint32_t decline;
    };
    const Row rows[] = {
        // usmc today: SMC-Dv2 whenever it is offered.
        {kTypeN, kTypeD, kUsmc, TK::SmcdV2, 0},
        {kTypeN, kTypeB, kUsmc, TK::SmcdV2, 0},
        {kTypeB, kTypeB, kUsmc, TK::SmcdV2, 0},
        {kTypeD, kTypeD, kUsmc, TK::SmcdV2, 0},
        // SMC-D offered only as v1: no native ISM here.
        {kTypeD, kTypeN, kUsmc, TK::None, fallback::NOSMCDDEV},
        // SMC-R only: not built, the kernel's reasons for a host without it.
        {kTypeR, kTypeN, kUsmc, TK::None, fallback::NOSMCDEV},
        {kTypeN, kTypeR, kUsmc, TK::None, fallback::NOSMCRDEV},
        {kTypeR, kTypeR, kUsmc, TK::None, fallback::NOSMCRDEV},
        // Nothing offered at all.
        {kTypeN, kTypeN, kUsmc, TK::None, fallback::PEERNOSMC},
        // A server without SMC-Dv2: the first reason found is the one told.
        {kTypeN, kTypeD, kNothing, TK::None, fallback::NOISM2SUPP},
        {kTypeB, kTypeB, kNothing, TK::None, fallback::NOSMCDDEV},
        // Every transport here: D before R, v2 before v1.
        {kTypeB, kTypeB, kAll, TK::SmcdV2, 0},
        {kTypeD, kTypeN, kAll, TK::SmcdV1, 0},
        {kTypeR, kTypeR, kAll, TK::SmcrV2, 0},
        {kTypeR, kTypeN, kAll, TK::SmcrV1, 0},
        {kTypeB, kTypeR, kAll, TK::SmcdV1, 0},
        // RDMA only: D offered and not found is remembered, R taken.
        {kTypeB, kTypeB, kRdma, TK::SmcrV2, 0},
        {kTypeB, kTypeN, kRdma, TK::SmcrV1, 0},
        {kTypeD, kTypeD, kRdma, TK::None, fallback::NOSMCDDEV},
    };
    for (const Row& r : rows) {
        auto c = choose_transport(offer(r.v1, r.v2), r.local);
        INFO("typev1 " << int(r.v1) << " typev2 " << int(r.v2) << ": " << transport_name(c.kind)
                       << ", " << fallback::name_of(c.decline));
        CHECK(c.kind == r.kind);
        CHECK(c.decline == r.decline);
        CHECK((c.kind == TK::None) == (c.decline != 0));
        if (c.kind == TK::SmcdV2 || c.kind == TK::SmcdV1) CHECK(c.peer_gid == kGid);
    }
}

TEST_CASE("transport choice: SMC-Dv2 needs a device this one can reach") {
    clc::Proposal p = offer(clc::kTypeN, clc::kTypeD);
    SECTION("another CHID (a native ISM elsewhere): no SMC-Dv2 device") {
        p.ism_chid = 0x1234;
        p.ism_v2 = {{kGid, 0x1234}};
        auto c = choose_transport(p, kUsmc);
        CHECK(c.kind == TK::None);
        CHECK(c.decline == fallback::NOSMCD2DEV);
    }
    SECTION("the extension's list may name it after others") {
        p.ism_chid = 0x1234;
        p.ism_v2 = {{7, 0x1234}, {0, clc::kChidEmulated}, {kGid + 1, clc::kChidEmulated}};
        auto c = choose_transport(p, kUsmc);
        CHECK(c.kind == TK::SmcdV2);
        CHECK(c.peer_gid == kGid + 1);
    }
    SECTION("no device at all in the offer") {
        p.ism_chid = 0;
        p.ism_gid_v1 = 0;
        p.ism_v2.clear();
        auto c = choose_transport(p, kUsmc);
        CHECK(c.kind == TK::None);
        CHECK(c.decline == fallback::NOV2DEXT);
    }
    SECTION("a v1 header offers nothing of v2") {
        auto c = choose_transport(offer(clc::kTypeN, clc::kTypeD, 1), kUsmc);
        CHECK(c.kind == TK::None);
        CHECK(c.decline == fallback::PEERNOSMC);
    }
    SECTION("SMC-Rv2 without a UEID is not offered") {
        clc::Proposal r = offer(clc::kTypeN, clc::kTypeR);
        r.ueids.clear();
        auto c = choose_transport(r, kAll);
        CHECK(c.kind == TK::None);
        CHECK(c.decline == fallback::NOUEID);
    }
}

TEST_CASE("the client's check of an Accept: only a transport and version it offered") {
    using clc::kTypeB, clc::kTypeD, clc::kTypeN, clc::kTypeR;
    auto accept = [](uint8_t version, uint8_t typev1) {
        clc::Header h;
        h.type = clc::Type::Accept;
        h.version = version;
        h.typev1 = typev1;
        return h;
    };
    constexpr uint32_t kBad = fallback::MODEUNSUPP;
    struct Row {
        uint8_t offer_v1, offer_v2, accept_version, accept_type;
        uint32_t rc;
        TK kind;
    };
    const Row rows[] = {
        // What usmc's client offers today: SMC-Dv2 only.
        {kTypeN, kTypeD, 2, kTypeD, 0, TK::SmcdV2},
        {kTypeN, kTypeD, 2, kTypeR, kBad, TK::SmcrV2}, // SMC-R not offered
        {kTypeN, kTypeD, 1, kTypeD, kBad, TK::SmcdV1}, // v1 not offered
        {kTypeN, kTypeD, 2, kTypeN, kBad, TK::None},   // names no transport
        {kTypeN, kTypeD, 2, kTypeB, kBad, TK::None},   // names two
        // Both transports, both versions offered: each Accept fits.
        {kTypeB, kTypeB, 2, kTypeR, 0, TK::SmcrV2},
        {kTypeB, kTypeB, 1, kTypeR, 0, TK::SmcrV1},
        {kTypeB, kTypeB, 1, kTypeD, 0, TK::SmcdV1},
        // The version decides which offer counts.
        {kTypeR, kTypeD, 1, kTypeR, 0, TK::SmcrV1},
        {kTypeR, kTypeD, 2, kTypeR, kBad, TK::SmcrV2},
        {kTypeR, kTypeD, 1, kTypeD, kBad, TK::SmcdV1},
        {kTypeD, kTypeR, 2, kTypeR, 0, TK::SmcrV2},
        {kTypeN, kTypeN, 2, kTypeD, kBad, TK::SmcdV2},
    };
    for (const Row& r : rows) {
        auto h = accept(r.accept_version, r.accept_type);
        INFO("offer v1 " << int(r.offer_v1) << " v2 " << int(r.offer_v2) << ", Accept v"
                         << int(r.accept_version) << " type " << int(r.accept_type));
        CHECK(check_accept_offered(offer(r.offer_v1, r.offer_v2), h) == r.rc);
        CHECK(accepted_transport(h) == r.kind);
    }
}
