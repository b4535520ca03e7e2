// SPDX-License-Identifier: MIT
#pragma once
// A link's LLC flows that usmc runs, as pure state machines driven by the
// caller's clock: the first contact's CONFIRM LINK exchange, and TEST LINK
// keepalive. The caller sends what they ask for and acts on their verdicts;
// nothing here sleeps or touches a device, so every timing is a test input.
//
// First contact (net/smc/af_smc.c, smcr_serv_conf_first_link and
// smcr_clnt_conf_first_link): the server, its QP at RTS after the CLC
// Confirm, sends CONFIRM LINK and waits up to 2 s for the response; the
// client, its QP at RTR, waits up to 2 s for the request, moves its QP to
// RTS and answers. A message without the "no RMBE eyecatcher" flag is
// RMBE_EC; silence, or another message in its place, is TIMEOUT_CL (the
// kernel drops an unexpected message and its wait ends empty). usmc runs
// single-link groups: its CONFIRM LINK says max_links 1, and as with a
// kernel that negotiated one link (SMC-Rv2.1), no ADD LINK follows and the
// client waits for none.
//
// Keepalive (smc_llc_testlink_work): after smcr_testlink_time seconds
// without a message from the peer, a TEST LINK request; no response
// within 2 s and the link is down. A peer's request is answered with its
// user data.
#include "engine/base/fallback.hpp"
#include "engine/smcr/llc_msg.hpp"

#include <array>
#include <cstdint>
#include <optional>

namespace usmc::smcr {

inline constexpr uint64_t kLlcWaitMs = 2000; // SMC_LLC_WAIT_TIME

// What this side says about its link in CONFIRM LINK.
struct LinkSelf {
    llc::Mac mac{};
    llc::Gid gid{};
    uint32_t qpn = 0;
    uint8_t link_num = 1;
    llc::LinkUid link_uid{};
    uint8_t max_conns = 255;
};

class FirstContact {
  public:
    enum class Verdict : uint8_t { Waiting, Active, Failed };
    struct Step {
        std::optional<llc::ConfirmLink> send; // to send on the link now
        bool qp_to_rts = false;               // the client's QP, before it answers
        Verdict verdict = Verdict::Waiting;
        uint32_t decline = 0; // fallback code when Failed
    };

    // `peer_qpn`: the QP the peer named in CLC (its Accept or Confirm); its
    // CONFIRM LINK must come from that QP.
    FirstContact(bool server, const LinkSelf& self, uint32_t peer_qpn, uint64_t now_ms);

    Step start(); // the server's request (the client sends nothing yet)
    Step on_llc(const llc::Message& m);
    Step on_tick(uint64_t now_ms);

    Verdict verdict() const { return verdict_; }
    uint64_t deadline_ms() const { return deadline_; }
    // What the peer said in its CONFIRM LINK (once Active).
    const llc::ConfirmLink& peer() const { return peer_; }

  private:
    llc::ConfirmLink confirm(bool resp) const;
    Step fail(uint32_t code);

    bool server_;
    LinkSelf self_;
    uint32_t peer_qpn_;
    uint64_t deadline_;
    Verdict verdict_ = Verdict::Waiting;
    llc::ConfirmLink peer_;
};

class Keepalive {
  public:
    struct Step {
        std::optional<llc::TestLink> send;
        bool link_down = false;
    };
    // `interval_s`: smcr_testlink_time (0: no keepalive).
    Keepalive(uint32_t interval_s, uint64_t now_ms);

    // Any message from the peer (CDC or LLC): the link is alive.
    void heard(uint64_t now_ms);
    Step on_test_link(const llc::TestLink& m, uint64_t now_ms);
    Step on_tick(uint64_t now_ms);
    // When the caller should tick next (UINT64_MAX: never).
    uint64_t next_tick_ms() const;

  private:
    uint64_t interval_ms_;
    uint64_t last_heard_;
    bool outstanding_ = false;
    uint64_t answer_by_ = 0;
    uint32_t sent_ = 0;
    std::array<uint8_t, 16> data_{};
};

} // namespace usmc::smcr
