// SPDX-License-Identifier: MIT
// The server side of the handshake (see handshake.hpp): the CLC around the
// transport's part. The Proposal read and checked, the transport chosen
// for it (transport_choice.hpp), then that transport's half: SMC-D's in
// listen_ism.cpp (SMC-R's will sit beside it); the Confirm read and handed
// to the same half.
#include "engine/base/fallback.hpp"
#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"
#include "engine/clc/clc.hpp"
#include "engine/clc/clc_io.hpp"
#include "engine/handshake/handshake.hpp"
#include "engine/handshake/handshake_ism.hpp"
#include "engine/handshake/transport_choice.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <poll.h>

namespace usmc {

namespace {

// The Confirm is one small write: once its first byte is here, the rest is.
constexpr int kConfirmRestMs = 200;

} // namespace

LocalTransports local_transports(const HandshakeDevices& devs) {
    LocalTransports t;
    t.smcd_v2 = devs.smcd && devs.smcd_endpoint;
    return t;
}

HandshakeResult smc_listen_begin(int fd, const HandshakeDevices& devs, const HandshakeConfig& cfg,
                                 uint64_t* token_out, clc::ReadResult* taken, bool* complete) {
    if (complete) *complete = false;
    auto r = taken ? std::move(*taken) : clc::read_message(fd, cfg.clc_timeout_ms);
    // Not a whole CLC frame: nothing was taken or sent, the connection is
    // the client's plain TCP stream, untouched.
    if (r.status == clc::ReadStatus::Timeout || r.status == clc::ReadStatus::NotClc)
        return Fallback{fallback::PEERNOSMC, 0};
    if (r.status != clc::ReadStatus::Message) return -ECONNRESET;
    auto decoded = clc::decode_proposal(r.bytes);
    if (auto* e = std::get_if<clc::Error>(&decoded)) {
        uint32_t reason = *e == clc::Error::BadVersion ? fallback::VERSMISMAT : fallback::CNFERR;
        clc::send_decline(fd, 0, reason, cfg.clc_timeout_ms);
        return Fallback{reason, 0};
    }
    const auto& p = std::get<clc::Proposal>(decoded);
    auto choice = choose_transport(p, local_transports(devs));
    switch (choice.kind) {
    case TransportKind::SmcdV2:
        return smcd_listen_begin(fd, p, choice.peer_gid, *devs.smcd, *devs.smcd_endpoint, cfg,
                                 token_out, complete);
    case TransportKind::None:
        break;
    default: // (never chosen: local_transports offers none of the others)
        choice.decline = fallback::NOSMCDEV;
        break;
    }
    clc::send_decline(fd, 0, choice.decline, cfg.clc_timeout_ms);
    return Fallback{choice.decline, 0};
}

HandshakeResult smc_listen_finish(int fd, std::unique_ptr<SmcConn> conn, uint64_t key,
                                  const HandshakeDevices& devs, const HandshakeConfig& cfg,
                                  bool timed_out, clc::ReadResult* taken) {
    ism::Device& dev = *devs.smcd;
    ism::Endpoint& ep = *devs.smcd_endpoint;
    auto fail = [&](HandshakeResult res) {
        return smcd_listen_abandon(*conn, key, dev, ep, std::move(res));
    };
    if (timed_out && !taken) return fail(-ETIMEDOUT);
    // (Called once the socket is readable: no wait before the first look.)
    auto c = taken ? std::move(*taken)
                   : clc::read_message(fd, std::min(cfg.clc_timeout_ms, kConfirmRestMs));
    if (c.status == clc::ReadStatus::Timeout) return fail(-ETIMEDOUT);
    if (c.status != clc::ReadStatus::Message) {
        log::warn("fd {}: no Confirm ({})", fd,
                  c.status == clc::ReadStatus::Closed   ? "the client closed"
                  : c.status == clc::ReadStatus::NotClc ? "not a CLC message"
                                                        : std::strerror(c.err ? c.err : EIO));
        return fail(-ECONNRESET);
    }
    auto hdr = std::get<clc::Header>(clc::parse_header(c.bytes));
    if (hdr.type == clc::Type::Decline) {
        auto d = clc::decode_decline(c.bytes);
        uint32_t diag =
            std::holds_alternative<clc::Decline>(d) ? std::get<clc::Decline>(d).diagnosis : 0;
        return fail(Fallback{fallback::PEERDECL, diag});
    }
    auto decoded = clc::decode_accept_confirm_d(c.bytes);
    auto* cf = std::get_if<clc::AcceptConfirmD>(&decoded);
    // The client believes SMC is up: from here on only an error is honest.
    if (!cf || cf->type != clc::Type::Confirm || cf->token == 0) {
        log::warn("fd {}: the client's answer to our Accept is not a Confirm", fd);
        return fail(-ECONNRESET);
    }
    return smcd_listen_confirmed(fd, std::move(conn), key, dev, ep, cfg, *cf);
}

HandshakeResult smc_listen_handshake(int fd, const HandshakeDevices& devs,
                                     const HandshakeConfig& cfg) {
    uint64_t token = 0;
    bool complete = false;
    auto begun = smc_listen_begin(fd, devs, cfg, &token, nullptr, &complete);
    auto* conn = std::get_if<std::unique_ptr<SmcConn>>(&begun);
    if (!conn || complete) return begun;
    pollfd p{fd, POLLIN, 0};
    bool readable = sys::real().poll(&p, 1, cfg.clc_timeout_ms) == 1;
    return smc_listen_finish(fd, std::move(*conn), token, devs, cfg, !readable);
}

void smc_decline_late_proposal(int fd, uint32_t reason, int wait_ms) {
    auto r = clc::read_message(fd, wait_ms);
    if (r.status == clc::ReadStatus::Message) clc::send_decline(fd, 0, reason, 1000);
}

} // namespace usmc
