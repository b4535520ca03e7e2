// The server side of the SMC-D handshake (see handshake.hpp).
#include "engine/clc.hpp"
#include "engine/clc_io.hpp"
#include "engine/fallback.hpp"
#include "engine/handshake.hpp"
#include "engine/sys.hpp"

#include <algorithm>
#include <cerrno>
#include <poll.h>

namespace usmc {

namespace {

// The Confirm is one small write: once its first byte is here, the rest is.
constexpr int kConfirmRestMs = 200;

HandshakeResult abandon(SmcConn& conn, uint64_t token, ism::Device& dev, ism::Endpoint& ep,
                        HandshakeResult res) {
    ep.withdraw(token);
    smc_conn_release(conn, dev, ism::kUnknownPeer); // it may have been attached: never reused
    return res;
}

} // namespace

HandshakeResult smc_listen_begin(int fd, ism::Device& dev, ism::Endpoint& ep,
                                 const HandshakeConfig& cfg, uint64_t* token_out) {
    auto r = clc::read_message(fd, cfg.clc_timeout_ms);
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
    if (!(p.typev2 == clc::kTypeD || p.typev2 == clc::kTypeB) || p.ism_v2.empty()) {
        clc::send_decline(fd, 0, fallback::NOSMCDDEV, cfg.clc_timeout_ms);
        return Fallback{fallback::NOSMCDDEV, 0};
    }

    auto conn = std::make_unique<SmcConn>();
    // Our DMB is taken when the client attaches and its user is known (see
    // ism_endpoint.hpp); whether it would fit is asked now, while a Decline
    // still costs nothing.
    uint32_t dmb_size = dev.size_for(cfg.dmb_size, cfg.dmb_roomy);
    if (!dev.has_room(dmb_size)) {
        clc::send_decline(fd, 0, fallback::MAX_DMB, cfg.clc_timeout_ms);
        return Fallback{fallback::MAX_DMB, 0};
    }
    uint64_t token = ism::random64();
    conn->tcp_fd = fd;
    conn->busy_poll_us = cfg.busy_poll_us;
    conn->autocorking_size = cfg.autocorking_size;
    auto fail = [&](HandshakeResult res) { return abandon(*conn, token, dev, ep, std::move(res)); };
    if (!smc_conn_init_wakeups(*conn, false, token)) {
        uint32_t reason = errno == EMFILE ? fallback::FDLIMIT : fallback::MEM;
        clc::send_decline(fd, 0, reason, cfg.clc_timeout_ms);
        return fail(Fallback{reason, 0});
    }
    ep.offer(token, {dmb_size});

    clc::AcceptConfirmD accept;
    accept.type = clc::Type::Accept;
    accept.first_contact = false;
    accept.gid = dev.gid();
    accept.token = token;
    accept.dmbe_size_code = clc::size_to_code(dmb_size, clc::kMaxDmbeSizeCode);
    accept.chid = clc::kChidEmulated;
    if (!clc::write_message(fd, clc::encode(accept), cfg.clc_timeout_ms)) return fail(-ECONNRESET);
    *token_out = token;
    return conn;
}

HandshakeResult smc_listen_finish(int fd, std::unique_ptr<SmcConn> conn, uint64_t token,
                                  ism::Device& dev, ism::Endpoint& ep, const HandshakeConfig& cfg,
                                  bool timed_out) {
    auto fail = [&](HandshakeResult res) { return abandon(*conn, token, dev, ep, std::move(res)); };
    if (timed_out) return fail(-ETIMEDOUT);
    auto c = clc::read_message(fd, std::min(cfg.clc_timeout_ms, kConfirmRestMs), true);
    if (c.status == clc::ReadStatus::Timeout) return fail(-ETIMEDOUT);
    if (c.status != clc::ReadStatus::Message) return fail(-ECONNRESET);
    auto hdr = std::get<clc::Header>(clc::parse_header(c.bytes));
    if (hdr.type == clc::Type::Decline) {
        auto d = clc::decode_decline(c.bytes);
        uint32_t diag =
            std::holds_alternative<clc::Decline>(d) ? std::get<clc::Decline>(d).diagnosis : 0;
        return fail(Fallback{fallback::PEERDECL, diag});
    }
    auto confirm = clc::decode_accept_confirm_d(c.bytes);
    // The client attached before sending Confirm, so its descriptors are here.
    auto attached = ep.wait_attached(token, cfg.attach_timeout_ms);
    std::optional<ism::PeerFds> peer;
    if (attached) {
        conn->rx = attached->ours;
        peer = attached->peer;
    }
    std::optional<ism::Dmb> peer_dmb;
    if (peer && std::holds_alternative<clc::AcceptConfirmD>(confirm)) {
        const auto& cf = std::get<clc::AcceptConfirmD>(confirm);
        uint32_t size = static_cast<uint32_t>(clc::code_to_size(cf.dmbe_size_code));
        if (cf.type == clc::Type::Confirm && cf.token != 0 && peer->fds.dmb_size == size)
            peer_dmb = dev.map_peer(peer->fds.dmb, size, peer->fds.dmb_offset, peer->fds.file_size);
        conn->peer_gid = cf.gid;
        conn->peer_token = cf.token;
    }
    if (!peer_dmb) {
        if (peer) ism::close_fds(peer->fds);
        // The client believes SMC is up: only an error is honest now.
        return fail(-ECONNRESET);
    }
    conn->tx = *peer_dmb;
    conn->peer_uid = peer->uid; // our DMB, once released, is reused only for this user
    conn->gid = dev.gid();
    conn->token = token; // the Accept's: the client attached with it to reach our DMB
    if (!smc_conn_peer_wakeups(*conn, conn->peer_gid, conn->peer_token))
        return fail(-ECONNRESET); // the client believes SMC is up: only an error is honest
    return conn;
}

HandshakeResult smc_listen_handshake(int fd, ism::Device& dev, ism::Endpoint& ep,
                                     const HandshakeConfig& cfg) {
    uint64_t token = 0;
    auto begun = smc_listen_begin(fd, dev, ep, cfg, &token);
    auto* conn = std::get_if<std::unique_ptr<SmcConn>>(&begun);
    if (!conn) return begun;
    pollfd p{fd, POLLIN, 0};
    bool readable = sys::real().poll(&p, 1, cfg.clc_timeout_ms) == 1;
    return smc_listen_finish(fd, std::move(*conn), token, dev, ep, cfg, !readable);
}

void smc_decline_late_proposal(int fd, uint32_t reason, int wait_ms) {
    auto r = clc::read_message(fd, wait_ms);
    if (r.status == clc::ReadStatus::Message) clc::send_decline(fd, 0, reason, 1000);
}

} // namespace usmc
