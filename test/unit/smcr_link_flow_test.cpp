// SPDX-License-Identifier: MIT
// A link's LLC flows (engine/smcr/link_flow): the first contact's CONFIRM
// LINK exchange between a server and a client machine, its failures, and
// TEST LINK keepalive, all on a clock the test moves.
#include "engine/smcr/link_flow.hpp"

#include <catch2/catch.hpp>

using namespace usmc;
using namespace usmc::smcr;

namespace {
LinkSelf self(uint8_t n) {
    LinkSelf s;
    s.mac = {2, 0, 0, 0, 0, n};
    s.gid[15] = n;
    s.qpn = 0x100u + n;
    s.link_uid = {n, n, n, n};
    return s;
}
} // namespace

TEST_CASE("smcr first contact: request, RTS, response; both sides active") {
    FirstContact server(true, self(1), self(2).qpn, 0);
    FirstContact client(false, self(2), self(1).qpn, 0);
    FirstContact::Step s = server.start();
    REQUIRE(s.send);
    CHECK_FALSE(s.send->resp);
    CHECK(s.send->max_links == 1); // single-link groups: no ADD LINK follows
    CHECK(s.send->flags == llc::kNoRmbeEyecatcher);
    CHECK_FALSE(client.start().send); // the client waits for the request

    // Through the codec, as on the link.
    smcr::Msg wire = llc::encode(*s.send);
    llc::Decoded d = llc::decode(wire.data(), wire.size());
    REQUIRE(d.error == llc::Error::None);
    FirstContact::Step c = client.on_llc(d.msg);
    CHECK(c.verdict == FirstContact::Verdict::Active);
    CHECK(c.qp_to_rts);
    REQUIRE(c.send);
    CHECK(c.send->resp);
    CHECK(client.peer().link_uid == self(1).link_uid);

    FirstContact::Step done = server.on_llc(*c.send);
    CHECK(done.verdict == FirstContact::Verdict::Active);
    CHECK_FALSE(done.send);
    CHECK(server.peer().gid == self(2).gid);
}

TEST_CASE("smcr first contact: silence is TIMEOUT_CL, at the deadline and not before") {
    FirstContact client(false, self(2), self(1).qpn, 1000);
    CHECK(client.on_tick(1000 + kLlcWaitMs - 1).verdict == FirstContact::Verdict::Waiting);
    FirstContact::Step s = client.on_tick(1000 + kLlcWaitMs);
    CHECK(s.verdict == FirstContact::Verdict::Failed);
    CHECK(s.decline == fallback::TIMEOUT_CL);
    // Late now: ignored.
    FirstContact server(true, self(1), self(2).qpn, 0);
    llc::ConfirmLink late = *server.start().send;
    CHECK(client.on_llc(late).verdict == FirstContact::Verdict::Failed);
}

TEST_CASE("smcr first contact: the wrong message, the wrong QP, no eyecatcher flag") {
    FirstContact server(true, self(1), self(2).qpn, 0);
    llc::ConfirmLink req = *server.start().send;
    {
        FirstContact client(false, self(2), self(1).qpn, 0);
        CHECK(client.on_llc(llc::TestLink{}).decline == fallback::TIMEOUT_CL);
    }
    {
        FirstContact client(false, self(2), self(1).qpn, 0);
        llc::ConfirmLink resp_not_req = req;
        resp_not_req.resp = true;
        CHECK(client.on_llc(resp_not_req).decline == fallback::TIMEOUT_CL);
    }
    {
        FirstContact client(false, self(2), 0x999, 0); // CLC named another QP
        CHECK(client.on_llc(req).decline == fallback::TIMEOUT_CL);
    }
    {
        FirstContact client(false, self(2), self(1).qpn, 0);
        llc::ConfirmLink part = req;
        part.flags = 0x01; // either bit will do, as the kernel reads it
        CHECK(client.on_llc(part).verdict == FirstContact::Verdict::Active);
    }
    {
        FirstContact client(false, self(2), self(1).qpn, 0);
        llc::ConfirmLink eyec = req;
        eyec.flags = 0; // the peer wants RMBE eyecatchers
        FirstContact::Step s = client.on_llc(eyec);
        CHECK(s.verdict == FirstContact::Verdict::Failed);
        CHECK(s.decline == fallback::RMBE_EC);
        CHECK_FALSE(s.qp_to_rts);
        CHECK_FALSE(s.send);
    }
}

TEST_CASE("smcr keepalive: TEST LINK after the idle time, link down without an answer") {
    Keepalive k(30, 0);
    CHECK(k.next_tick_ms() == 30000);
    CHECK_FALSE(k.on_tick(29999).send);
    Keepalive::Step s = k.on_tick(30000);
    REQUIRE(s.send);
    CHECK_FALSE(s.send->resp);
    CHECK(k.next_tick_ms() == 30000 + kLlcWaitMs);
    CHECK_FALSE(k.on_tick(31000).link_down);
    CHECK(k.on_tick(32000).link_down);
}

TEST_CASE(
    "smcr keepalive: the echo, or any message, keeps the link; the peer's request is answered") {
    Keepalive k(30, 0);
    Keepalive::Step s = k.on_tick(30000);
    REQUIRE(s.send);
    llc::TestLink echo = *s.send;
    echo.resp = true;
    CHECK_FALSE(k.on_test_link(echo, 30500).send);
    CHECK_FALSE(k.on_tick(32000).link_down);
    CHECK(k.next_tick_ms() == 30500 + 30000);

    // A second request; the peer sends data instead of the echo.
    s = k.on_tick(60500);
    REQUIRE(s.send);
    k.heard(61000);
    CHECK_FALSE(k.on_tick(62500).link_down);

    // An echo with other user data is not the answer.
    s = k.on_tick(91000);
    REQUIRE(s.send);
    llc::TestLink wrong = *s.send;
    wrong.resp = true;
    wrong.user_data[0] ^= 1;
    k.on_test_link(wrong, 91000); // (heard at the request's own instant: no proof)
    CHECK(k.on_tick(93000).link_down);

    Keepalive peer(30, 0);
    llc::TestLink req;
    req.user_data[3] = 42;
    Keepalive::Step a = peer.on_test_link(req, 5);
    REQUIRE(a.send);
    CHECK(a.send->resp);
    CHECK(a.send->user_data == req.user_data);
}

TEST_CASE("smcr keepalive: smcr_testlink_time 0 turns it off") {
    Keepalive k(0, 0);
    CHECK(k.next_tick_ms() == UINT64_MAX);
    CHECK_FALSE(k.on_tick(UINT64_MAX / 2).send);
    CHECK_FALSE(k.on_tick(UINT64_MAX / 2).link_down);
}
