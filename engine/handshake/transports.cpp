// SPDX-License-Identifier: MIT
// The socket layer's few transport branches (transports.hpp): SMC-D's today.
#include "engine/handshake/transports.hpp"

#include "engine/handshake/handshake_ism.hpp"
#include "engine/smcd/lgr.hpp"
#include "engine/smcd/link_group.hpp"

namespace usmc {

bool transports_ensure(HandshakeDevices& d, uint64_t max_memory, uint32_t dmb_size,
                       bool need_endpoint) {
    if (!d.smcd) d.smcd = new ism::Device(max_memory, true, dmb_size);
    if (need_endpoint && !d.smcd_endpoint) d.smcd_endpoint = ism::Endpoint::start(*d.smcd);
    return !need_endpoint || d.smcd_endpoint != nullptr;
}

void transports_after_fork_child(HandshakeDevices& d) {
    lgr::on_fork_child();
    ism::shares_after_fork();
    if (d.smcd_endpoint) d.smcd_endpoint->abandon_after_fork();
    if (d.smcd) d.smcd->groups().abandon_after_fork();
    d = HandshakeDevices{};
}

uint64_t transports_id(const HandshakeDevices& d) {
    return d.smcd ? d.smcd->gid() : 0;
}

uint64_t transports_random_token() {
    return ism::random64();
}

void transports_release(SmcConn& c, HandshakeDevices& d) {
    if (d.smcd) smc_conn_release(c, *d.smcd, c.peer_uid);
}

void transports_leave(SmcConn& c, HandshakeDevices& d) {
    if (d.smcd) c.transport.smcd().leave_device(*d.smcd);
}

ProposalNow transports_proposal_now(int tcp_fd, SmcConn& c, const HandshakeDevices& d,
                                    const HandshakeConfig& cfg, uint64_t server_gid) {
    ism::Device& dev = *d.smcd;
    if (!dev.has_room(dev.size_for(cfg.dmb_size, cfg.dmb_roomy))) return ProposalNow::NoRoom;
    auto named = smc_name_dmb(c, dev, cfg, server_gid);
    return smc_send_proposal(tcp_fd, d, cfg, named ? &*named : nullptr) ? ProposalNow::Sent
                                                                        : ProposalNow::Failed;
}

std::optional<ConnectResult> transports_reuse(int tcp_fd, SmcConn& c, const HandshakeDevices& d,
                                              const HandshakeConfig& cfg,
                                              const clc::AcceptConfirmD& accept) {
    return smc_connect_reuse(tcp_fd, c, *d.smcd, cfg, accept);
}

bool transports_attach_on_loop(int tcp_fd, SmcConn& c, const HandshakeDevices& d,
                               const HandshakeConfig& cfg, const clc::AcceptConfirmD& accept,
                               std::function<void(ConnectResult)> done) {
    ism::Device* dev = d.smcd;
    SmcConn* conn = &c;
    auto no_dmb = std::make_shared<uint32_t>(0);
    return ism::attach_async(
        accept.gid, smc_attach_key(accept), smc_connect_ours(c, *dev, cfg, no_dmb.get()),
        cfg.attach_timeout_ms, [=](std::optional<ism::PeerFds> peer) {
            done(smc_connect_confirm(tcp_fd, *conn, *dev, cfg, accept, peer, *no_dmb));
        });
}

ConnectResult transports_attach(int tcp_fd, SmcConn& c, const HandshakeDevices& d,
                                const HandshakeConfig& cfg, const clc::AcceptConfirmD& accept) {
    return smc_connect_attach(tcp_fd, c, *d.smcd, cfg, accept);
}

bool transports_withdraw_named(SmcConn& c) {
    return smc_withdraw_named_dmb(c);
}

void transports_abandon(SmcConn& c, const HandshakeDevices& d) {
    if (d.smcd) smc_connect_abandon(c, *d.smcd);
}

bool transports_attached(const HandshakeDevices& d, uint64_t token) {
    return d.smcd_endpoint && d.smcd_endpoint->attached(token);
}

} // namespace usmc
