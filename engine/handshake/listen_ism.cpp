// SPDX-License-Identifier: MIT
// The server's SMC-D half of the handshake (see handshake.hpp): what it
// claims, names and takes once the Proposal chose SMC-D
// (transport_choice.hpp), and what the client's Confirm must check out
// against. listen.cpp reads and writes the CLC around it.
#include "engine/base/count.hpp"
#include "engine/base/fallback.hpp"
#include "engine/base/log.hpp"
#include "engine/clc/clc.hpp"
#include "engine/clc/clc_io.hpp"
#include "engine/handshake/handshake_ism.hpp"
#include "engine/smcd/cdc_line.hpp"
#include "engine/smcd/link_group.hpp"

#include <cerrno>
#include <cstring>

namespace usmc {

HandshakeResult smcd_listen_abandon(SmcConn& conn, uint64_t key, ism::Device& dev,
                                    ism::Endpoint& ep, HandshakeResult res) {
    ep.withdraw(key);
    // A DMB claimed for the link group's user goes back for that user (a
    // slot of its segment, which that user's processes map anyway); one
    // the endpoint took for an attach that failed is never reused.
    smc_conn_release(conn, dev, conn.peer_uid);
    return res;
}

namespace {

// Our DMB for a client with a link group (its user known from the group):
// claimed now, its owner token (the connection's secret) written, so that
// the Accept can name it.
// Whether the client has its segment decides whether it must attach.
void claim_for_group(SmcConn& conn, ism::Device& dev, uint64_t client_gid, uint32_t size,
                     uint32_t up_to, uint64_t token, clc::AcceptConfirmD& accept) {
    auto uid = dev.groups().peer_user(client_gid);
    if (!uid) return;
    auto ours = dev.allocate(size, *uid, up_to);
    if (!ours) return; // the endpoint tries again at attach time
    // (A free slot of a larger size may serve: the Accept says which.)
    accept.dmbe_size_code = clc::size_to_code(ours->size, clc::kMaxDmbeSizeCode);
    smcd::stamp_owner(*ours->control(), conn.dmb_secret, token);
    conn.transport.smcd().rx = *ours;
    conn.peer_uid = *uid;
    if (!dev.groups().peer_has(client_gid, ours->serial)) return; // a new segment: attach
    accept.first_contact = false;
    accept.link_id = ours->serial;
    accept.dmbe_idx = uint8_t(ours->slot);
}

// The DMB the client's Proposal named, when our DMB lies in a segment the
// client has (no attach either way): taken with the Accept, so the
// connection is up without a Confirm. It must check out as a Confirm's
// would (a slot of the client's link group whose owner token is the one
// named), and the take is the swap of that token (cdc_line.hpp), which the
// client's withdrawal races. False: the usual Confirm follows.
bool take_named(SmcConn& conn, ism::Device& dev, const clc::NamedDmb& named) {
    uint32_t size = static_cast<uint32_t>(clc::code_to_size(named.size_code));
    auto theirs =
        dev.groups().their_slot(conn.peer_gid, named.serial, named.slot, size, named.secret);
    if (!theirs) return false;
    // The client's `sig`, as it wrote it with the secret: whom to wake.
    uint64_t sig_token = theirs->control()->owner_sig.load(std::memory_order_relaxed);
    if (!sig_token || !smcd::take_named(*theirs->control(), named.secret)) {
        dev.unmap_peer(*theirs);
        return false;
    }
    conn.transport.smcd().tx = *theirs;
    conn.peer_token = sig_token;
    if (!smc_conn_peer_wakeups(conn, conn.peer_gid, sig_token)) {
        smcd::untake_named(*theirs->control(), named.secret);
        dev.unmap_peer(conn.transport.smcd().tx);
        return false;
    }
    return true;
}

} // namespace

HandshakeResult smcd_listen_begin(int fd, const clc::Proposal& p, uint64_t client_gid,
                                  ism::Device& dev, ism::Endpoint& ep, const HandshakeConfig& cfg,
                                  uint64_t* token_out, bool* complete) {
    auto conn = std::make_unique<SmcConn>();
    // Our DMB is taken when the client's user is known: from its link group,
    // or when it attaches (ism_endpoint.hpp); whether it would fit is asked
    // now, while a Decline still costs nothing.
    uint32_t dmb_size = dev.size_for(cfg.dmb_size, cfg.dmb_roomy);
    if (!dev.has_room(dmb_size)) {
        clc::send_decline(fd, 0, fallback::MAX_DMB, cfg.clc_timeout_ms);
        return Fallback{fallback::MAX_DMB, 0};
    }
    uint64_t token = ism::random64();
    // What reaches our DMB, told only in the Accept: the owner token of a
    // DMB it names, and the key of the endpoint's offer for an attach (the
    // `sig`'s token, `token`, is a name any local process can read).
    const uint64_t key = conn->dmb_secret = ism::random64();
    conn->tcp_fd = fd;
    conn->busy_poll_us = cfg.busy_poll_us;
    conn->autocorking_size = cfg.autocorking_size;
    auto fail = [&](HandshakeResult res) {
        return smcd_listen_abandon(*conn, key, dev, ep, std::move(res));
    };
    if (!smc_conn_init_wakeups(*conn, false, token)) {
        uint32_t reason = errno == EMFILE ? fallback::FDLIMIT : fallback::MEM;
        clc::send_decline(fd, 0, reason, cfg.clc_timeout_ms);
        return fail(Fallback{reason, 0});
    }
    token = conn->token; // a spare `sig` comes with its own
    clc::AcceptConfirmD accept;
    accept.type = clc::Type::Accept;
    accept.first_contact = true; // the client attaches, unless the group has it all
    accept.gid = dev.gid();
    accept.token = token;
    accept.dmbe_size_code = clc::size_to_code(dmb_size, clc::kMaxDmbeSizeCode);
    accept.chid = clc::kChidEmulated;
    accept.dmb_secret = key;
    conn->peer_gid = client_gid;
    claim_for_group(*conn, dev, conn->peer_gid, dmb_size, cfg.dmb_size, token, accept);
    accept.took_dmb =
        complete && !accept.first_contact && p.named_dmb && take_named(*conn, dev, *p.named_dmb);
    if (accept.took_dmb) {
        conn->gid = dev.gid();
        conn->token = token;
    } else {
        ism::OfferSpec offer{dmb_size, std::nullopt, client_gid};
        if (conn->transport.smcd().rx.valid()) offer.claimed = conn->transport.smcd().rx;
        ep.offer(key, offer);
    }
    if (!clc::write_message(fd, clc::encode(accept), cfg.clc_timeout_ms)) {
        // The client's DMB is ours to write since the take: our abort in
        // its line frees it for reuse when the client gives up.
        if (accept.took_dmb) conn->transport.send_cons(core::Cursor{}, core::kPeerConnAbort);
        log::warn("fd {}: the Accept could not be written: {}", fd, std::strerror(errno));
        return fail(-ECONNRESET);
    }
    *token_out = key;
    if (accept.took_dmb) {
        counters::count(counters::lgr_reused);
        counters::count(counters::lgr_no_confirm);
        *complete = true;
    }
    return conn;
}

HandshakeResult smcd_listen_confirmed(int fd, std::unique_ptr<SmcConn> conn, uint64_t key,
                                      ism::Device& dev, ism::Endpoint& ep,
                                      const HandshakeConfig& cfg, const clc::AcceptConfirmD& cf) {
    auto fail = [&](HandshakeResult res) {
        return smcd_listen_abandon(*conn, key, dev, ep, std::move(res));
    };
    uint32_t size = static_cast<uint32_t>(clc::code_to_size(cf.dmbe_size_code));
    uint64_t proposed_gid = conn->peer_gid;
    conn->peer_gid = cf.gid;
    conn->peer_token = cf.token;
    std::optional<ism::Dmb> peer_dmb;
    if (!cf.first_contact) {
        // No attach: both DMBs lie in segments the other side has (our
        // Accept said so of ours). The client's name must check out.
        if (conn->transport.smcd().rx.valid() && cf.gid == proposed_gid)
            peer_dmb =
                dev.groups().their_slot(cf.gid, cf.link_id, cf.dmbe_idx, size, cf.dmb_secret);
        ep.withdraw(key); // (an attach that comes now is refused)
        if (!peer_dmb) {
            log::warn("fd {}: the client's DMB (segment {}, slot {}) is not one of its link "
                      "group's{}",
                      fd, cf.link_id, cf.dmbe_idx,
                      cf.gid == proposed_gid ? "" : " (its Confirm names another GID)");
            return fail(-ECONNRESET);
        }
        counters::count(counters::lgr_reused);
    } else {
        // The client attached before sending Confirm, so its descriptors are here.
        auto attached = ep.wait_attached(key, cfg.attach_timeout_ms);
        if (!attached) {
            log::warn("fd {}: the client confirmed a first contact it did not attach", fd);
            return fail(-ECONNRESET);
        }
        conn->transport.smcd().rx = attached->ours;
        ism::PeerFds& peer = attached->peer;
        ism::close_fds(peer.fds); // (the DMB's is the mapping's: the endpoint mapped it)
        if (attached->theirs.size != size) {
            log::warn("fd {}: the client attached a DMB of {} bytes, its Confirm says {}", fd,
                      attached->theirs.size, size);
            dev.unmap_peer(attached->theirs);
            return fail(-ECONNRESET);
        }
        peer_dmb = attached->theirs;
        conn->peer_uid = peer.uid; // our DMB, once released, is reused only for this user
        counters::count(counters::lgr_first_contacts);
        if (cf.gid == proposed_gid)
            dev.groups().note_attach(cf.gid, peer.pid, peer.uid, conn->transport.smcd().rx.serial,
                                     peer.fds.serial, *peer_dmb);
    }
    conn->transport.smcd().tx = *peer_dmb;
    conn->gid = dev.gid();
    if (!smc_conn_peer_wakeups(*conn, conn->peer_gid, conn->peer_token)) {
        log::warn("fd {}: no waker for the client's process: {}", fd, std::strerror(errno));
        return fail(-ECONNRESET); // the client believes SMC is up: only an error is honest
    }
    return conn;
}

} // namespace usmc
