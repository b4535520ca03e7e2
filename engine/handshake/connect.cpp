// SPDX-License-Identifier: MIT
// The client side of the handshake (see handshake.hpp): the CLC around the
// transport's part. The Proposal offers what this process has (SMC-D; SMC-R
// will join it), the server's answer is read and checked, and an Accept
// goes on to that transport's half: SMC-D's in connect_ism.cpp.
#include "engine/base/fallback.hpp"
#include "engine/base/sys.hpp"
#include "engine/clc/clc.hpp"
#include "engine/clc/clc_io.hpp"
#include "engine/handshake/handshake.hpp"
#include "engine/handshake/handshake_ism.hpp"

#include <cerrno>
#include <cstring>

namespace usmc {

namespace {

std::array<uint8_t, 8> peer_id_of(uint64_t gid) {
    std::array<uint8_t, 8> id;
    for (int i = 0; i < 8; ++i)
        id[i] = uint8_t(gid >> (56 - 8 * i));
    return id;
}

// What our CLC messages carry as the sender's id (the kernel's
// local_systemid): the SMC-D device's GID, unique per process.
uint64_t system_id(const HandshakeDevices& devs) {
    return devs.smcd ? devs.smcd->gid() : 0;
}

// The transports and versions a Proposal of ours offers: SMC-Dv2 where
// there is an SMC-D device (SMC-R will add its own), nothing in v1.
clc::Proposal offered_types(const HandshakeDevices& devs) {
    clc::Proposal p;
    p.typev1 = clc::kTypeN;
    p.typev2 = devs.smcd ? clc::kTypeD : clc::kTypeN;
    return p;
}

} // namespace

clc::Proposal smc_make_proposal(const HandshakeDevices& devs, const clc::NamedDmb* named) {
    clc::Proposal p = offered_types(devs);
    p.peer_id = peer_id_of(system_id(devs));
    if (p.typev2 == clc::kTypeD) { // SMC-Dv2 through the emulated ISM (the SMC-D area names it too)
        const uint64_t gid = devs.smcd->gid();
        p.ism_gid_v1 = gid;
        p.ism_chid = clc::kChidEmulated;
        p.ism_v2 = {{gid, clc::kChidEmulated}};
        if (named) p.named_dmb = *named;
    }
    return p;
}

bool smc_send_proposal(int fd, const HandshakeDevices& devs, const HandshakeConfig& cfg,
                       const clc::NamedDmb* named) {
    return clc::write_message(fd, clc::encode(smc_make_proposal(devs, named)), cfg.clc_timeout_ms);
}

ConnectStep smc_connect_accept(int fd, SmcConn& c, const HandshakeDevices& devs,
                               const HandshakeConfig& cfg, bool proposal_sent,
                               clc::ReadResult* taken, uint64_t server_gid) {
    ism::Device& dev = *devs.smcd; // the one transport offered (smc_make_proposal)
    auto fail = [&](ConnectResult r) {
        smc_connect_abandon(c, dev); // what the transport's half claimed goes back
        return r;
    };
    // Our DMB is made (or reused) at attach time, when the server's user is
    // known; whether it would fit is asked now, while nothing is sent yet
    // and plain TCP costs nothing. (After an early Proposal, a DMB that does
    // not fit ends the attach with a Decline instead.)
    if (!proposal_sent && !dev.has_room(dev.size_for(cfg.dmb_size, cfg.dmb_roomy)))
        return Fallback{fallback::MEM, 0};
    c.tcp_fd = fd;
    c.busy_poll_us = cfg.busy_poll_us;
    c.autocorking_size = cfg.autocorking_size;
    if (!proposal_sent) {
        auto named = smc_name_dmb(c, dev, cfg, server_gid);
        if (!smc_send_proposal(fd, devs, cfg, named ? &*named : nullptr)) return fail(-ECONNRESET);
    }

    auto r = taken ? std::move(*taken)
                   : clc::read_message(fd, cfg.accept_wait_ms >= 0 ? cfg.accept_wait_ms
                                                                   : cfg.clc_timeout_ms);
    // The server took the DMB our Proposal named just as we gave up: its
    // Accept is on the way (it believes SMC is up), so wait for it.
    if (r.status == clc::ReadStatus::Timeout && !smc_withdraw_named_dmb(c))
        r = clc::read_message(fd, cfg.clc_timeout_ms);
    switch (r.status) {
    case clc::ReadStatus::Timeout:
        if (c.named_dmb) return fail(-ETIMEDOUT); // taken, and still no Accept
        // The server has not taken the connection yet (an application that
        // does not accept). Give up on SMC and say so; its Accept, if it
        // comes, is skipped before our application reads (late_clc).
        clc::send_decline(fd, system_id(devs), fallback::CLCWAIT, cfg.clc_timeout_ms);
        return fail(Fallback{fallback::CLCWAIT, 0});
    case clc::ReadStatus::Closed:
        return fail(-ECONNRESET);
    case clc::ReadStatus::Error:
        return fail(-(r.err ? r.err : EIO));
    case clc::ReadStatus::NotClc: // the server had already chosen TCP: its bytes are the
                                  // application's
        return fail(Fallback{fallback::PEERNOSMC, 0});
    case clc::ReadStatus::Message:
        break;
    }
    auto hdr = std::get<clc::Header>(clc::parse_header(r.bytes));
    if (hdr.type == clc::Type::Decline) {
        auto d = clc::decode_decline(r.bytes);
        uint32_t diag =
            std::holds_alternative<clc::Decline>(d) ? std::get<clc::Decline>(d).diagnosis : 0;
        return fail(Fallback{fallback::PEERDECL, diag}); // never decline a Decline
    }
    // An Accept for a transport and version we offered (else MODEUNSUPP, as
    // a malformed one), on to that transport's half.
    auto decoded = clc::decode_accept_confirm(r.bytes);
    uint32_t reason = hdr.type == clc::Type::Accept ? check_accept_offered(offered_types(devs), hdr)
                                                    : uint32_t{fallback::MODEUNSUPP};
    const clc::AcceptConfirmD* accept = nullptr;
    if (!reason) {
        switch (accepted_transport(hdr)) {
        case TransportKind::SmcdV2:
            accept = std::get_if<clc::AcceptConfirmD>(&decoded);
            break;
        default: // (SMC-R's half comes with SMC-R, and its offer)
            break;
        }
        if (!accept) reason = fallback::MODEUNSUPP;
    }
    // An Accept without the secret that names the server's DMB and offer
    // (a server that names them by its `sig`'s token instead, which any
    // local user reads in /proc/net/unix): not one to attach or confirm to.
    if (!reason && accept->dmb_secret == 0) reason = fallback::VERSMISMAT;
    if (reason) {
        // (A server that took our DMB believes SMC is up: only an error is honest.)
        if (!smc_withdraw_named_dmb(c)) return fail(-ECONNRESET);
        clc::send_decline(fd, system_id(devs), reason, cfg.clc_timeout_ms);
        return fail(Fallback{reason, 0});
    }
    return *accept;
}

ConnectResult smc_connect_handshake(int fd, SmcConn& c, const HandshakeDevices& devs,
                                    const HandshakeConfig& cfg, bool proposal_sent,
                                    uint64_t server_gid) {
    auto step = smc_connect_accept(fd, c, devs, cfg, proposal_sent, nullptr, server_gid);
    if (auto* done = std::get_if<ConnectResult>(&step)) return *done;
    return smc_connect_attach(fd, c, *devs.smcd, cfg, std::get<clc::AcceptConfirmD>(step));
}

} // namespace usmc
