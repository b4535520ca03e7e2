// SPDX-License-Identifier: MIT
#include "engine/smcr/link_flow.hpp"

#include "engine/base/wire_be.hpp"

#include <cstdint>

namespace usmc::smcr {

FirstContact::FirstContact(bool server, const LinkSelf& self, uint32_t peer_qpn, uint64_t now_ms)
    : server_(server), self_(self), peer_qpn_(peer_qpn), deadline_(now_ms + kLlcWaitMs) {}

llc::ConfirmLink FirstContact::confirm(bool resp) const {
    llc::ConfirmLink c;
    c.resp = resp;
    c.flags = llc::kNoRmbeEyecatcher;
    c.mac = self_.mac;
    c.gid = self_.gid;
    c.qpn = self_.qpn;
    c.link_num = self_.link_num;
    c.link_uid = self_.link_uid;
    c.max_links = 1;
    c.max_conns = self_.max_conns;
    return c;
}

FirstContact::Step FirstContact::fail(uint32_t code) {
    verdict_ = Verdict::Failed;
    Step s;
    s.verdict = verdict_;
    s.decline = code;
    return s;
}

FirstContact::Step FirstContact::start() {
    Step s;
    if (server_ && verdict_ == Verdict::Waiting) s.send = confirm(false);
    s.verdict = verdict_;
    return s;
}

FirstContact::Step FirstContact::on_llc(const llc::Message& m) {
    if (verdict_ != Verdict::Waiting) return {std::nullopt, false, verdict_, 0};
    const auto* c = std::get_if<llc::ConfirmLink>(&m);
    // The one message awaited: the response (server) or the request
    // (client), from the QP the peer named in CLC. Anything else ends the
    // wait as the kernel's does, empty.
    if (!c || c->resp != server_ || c->qpn != peer_qpn_) return fail(fallback::TIMEOUT_CL);
    // (Either bit of the flag will do, as smc_llc_rx_confirm_link reads it.)
    if ((c->flags & llc::kNoRmbeEyecatcher) == 0) return fail(fallback::RMBE_EC);
    peer_ = *c;
    verdict_ = Verdict::Active;
    Step s;
    s.verdict = verdict_;
    if (!server_) {
        s.qp_to_rts = true;
        s.send = confirm(true);
    }
    return s;
}

FirstContact::Step FirstContact::on_tick(uint64_t now_ms) {
    if (verdict_ == Verdict::Waiting && now_ms >= deadline_) return fail(fallback::TIMEOUT_CL);
    return {std::nullopt, false, verdict_, 0};
}

Keepalive::Keepalive(uint32_t interval_s, uint64_t now_ms)
    : interval_ms_(uint64_t(interval_s) * 1000), last_heard_(now_ms) {}

void Keepalive::heard(uint64_t now_ms) {
    if (now_ms > last_heard_) last_heard_ = now_ms;
}

Keepalive::Step Keepalive::on_test_link(const llc::TestLink& m, uint64_t now_ms) {
    heard(now_ms);
    Step s;
    if (!m.resp) {
        llc::TestLink answer = m;
        answer.resp = true;
        s.send = answer;
    } else if (outstanding_ && m.user_data == data_) {
        outstanding_ = false;
    }
    return s;
}

Keepalive::Step Keepalive::on_tick(uint64_t now_ms) {
    Step s;
    if (interval_ms_ == 0) return s;
    if (outstanding_) {
        // The response, or any other message since the request, shows
        // the link works (the kernel's wait ends on its response alone; a
        // peer busy sending data is no less alive).
        if (last_heard_ > answer_by_ - kLlcWaitMs) {
            outstanding_ = false;
        } else if (now_ms >= answer_by_) {
            s.link_down = true;
            return s;
        } else {
            return s;
        }
    }
    if (now_ms - last_heard_ >= interval_ms_) {
        llc::TestLink t;
        be::put32(data_.data(), ++sent_);
        t.user_data = data_;
        s.send = t;
        outstanding_ = true;
        answer_by_ = now_ms + kLlcWaitMs;
    }
    return s;
}

uint64_t Keepalive::next_tick_ms() const {
    if (interval_ms_ == 0) return UINT64_MAX;
    if (outstanding_) return answer_by_;
    return last_heard_ + interval_ms_;
}

} // namespace usmc::smcr
