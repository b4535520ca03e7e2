// SPDX-License-Identifier: MIT
// The client's SMC-D half of the handshake (see handshake.hpp): its DMB
// claimed and named before the Proposal, and after the server's Accept the
// reuse of a link group, the attach of a first contact, the Confirm.
// connect.cpp sends the Proposal and reads the answer around it.
#include "engine/base/count.hpp"
#include "engine/base/fallback.hpp"
#include "engine/base/sys.hpp"
#include "engine/clc/clc.hpp"
#include "engine/clc/clc_io.hpp"
#include "engine/handshake/handshake_ism.hpp"
#include "engine/smcd/cdc_line.hpp"
#include "engine/smcd/link_group.hpp"

#include <cerrno>

namespace usmc {

namespace {
// Our DMB for a peer of `uid` (false: none, errno says why): its owner
// token, a fresh secret, and our `sig` written before anything names it.
// `size` (Device::size_for), or a free slot up to `up_to` (the configured
// size): the CLC message or the attach tells the server the size after.
bool claim_own(SmcConn& c, ism::Device& dev, uint32_t size, uint32_t up_to, uid_t uid) {
    errno = 0;
    auto own = dev.allocate(size, uid, up_to);
    if (!own) return false;
    c.dmb_secret = ism::random64();
    smcd::stamp_owner(*own->control(), c.dmb_secret, c.token);
    c.transport.smcd().rx = *own;
    c.peer_uid = uid;
    return true;
}
} // namespace

std::optional<clc::NamedDmb> smc_name_dmb(SmcConn& c, ism::Device& dev, const HandshakeConfig& cfg,
                                          uint64_t server_gid) {
    auto uid = dev.groups().peer_user(server_gid);
    if (!uid || c.transport.smcd().rx.valid()) return std::nullopt;
    // (None: claimed again, and declined if need be, after the Accept.)
    if (!claim_own(c, dev, dev.size_for(cfg.dmb_size, cfg.dmb_roomy), cfg.dmb_size, *uid))
        return std::nullopt;
    const ism::Dmb& own = c.transport.smcd().rx;
    // A slot in a segment the server lacks needs the attach anyway: kept for
    // it, not named.
    if (!dev.groups().peer_has(server_gid, own.serial)) return std::nullopt;
    c.named_dmb = true;
    return clc::NamedDmb{own.serial, uint8_t(own.slot),
                         clc::size_to_code(own.size, clc::kMaxDmbeSizeCode), c.dmb_secret};
}

bool smc_withdraw_named_dmb(SmcConn& c) {
    if (!c.named_dmb) return true;
    if (!smcd::withdraw_named(*c.transport.smcd().rx.control(), c.dmb_secret)) return false;
    c.named_dmb = false;
    return true;
}

uint64_t smc_attach_key(const clc::AcceptConfirmD& accept) {
    return accept.dmb_secret; // never 0: smc_connect_accept declines an Accept without it
}

void smc_connect_abandon(SmcConn& c, ism::Device& dev) {
    // A DMB the server took is written by it until its close flags say
    // otherwise; one whose name is withdrawn (or never given) is ours alone.
    bool reusable = smc_withdraw_named_dmb(c);
    dev.release(c.transport.smcd().rx, c.peer_uid, reusable);
    c.named_dmb = false;
    c.transport.smcd().rx = ism::Dmb{};
    dev.unmap_peer(c.transport.smcd().tx);
}

namespace {
// On failure the connection gives back what the handshake took; its own
// wake-up pair stays (the caller may have `sig` in epoll sets).
ConnectResult fail(SmcConn& c, ism::Device& dev, ConnectResult r) {
    smc_connect_abandon(c, dev);
    return r;
}

// The server's DMB is ours to write (`theirs`): the Confirm names ours, its
// first-contact bit saying whether we attached (else the link_id and slot
// name our DMB in a segment the server has).
ConnectResult confirm_with(int fd, SmcConn& c, ism::Device& dev, const HandshakeConfig& cfg,
                           const clc::AcceptConfirmD& accept, const ism::Dmb& theirs,
                           bool attached) {
    c.transport.smcd().tx = theirs;
    if (!smc_conn_peer_wakeups(c, accept.gid, accept.token)) {
        clc::send_decline(fd, dev.gid(), fallback::FDLIMIT, cfg.clc_timeout_ms);
        return fail(c, dev, Fallback{fallback::FDLIMIT, 0});
    }
    c.gid = dev.gid();
    c.peer_gid = accept.gid;
    c.peer_token = accept.token;

    clc::AcceptConfirmD confirm;
    confirm.type = clc::Type::Confirm;
    confirm.first_contact = attached;
    confirm.gid = dev.gid();
    confirm.token = c.token;                          // our `sig`'s name
    confirm.dmb_secret = attached ? 0 : c.dmb_secret; // our DMB's owner token
    confirm.dmbe_size_code = clc::size_to_code(c.transport.smcd().rx.size, clc::kMaxDmbeSizeCode);
    confirm.link_id = attached ? 0 : c.transport.smcd().rx.serial;
    confirm.dmbe_idx = attached ? 0 : uint8_t(c.transport.smcd().rx.slot);
    confirm.chid = clc::kChidEmulated;
    if (!clc::write_message(fd, clc::encode(confirm), cfg.clc_timeout_ms))
        return fail(c, dev, -ECONNRESET);
    return std::monostate{};
}
} // namespace

std::function<std::optional<ism::Fds>(uid_t)>
smc_connect_ours(SmcConn& c, ism::Device& dev, const HandshakeConfig& cfg, uint32_t* no_dmb) {
    SmcConn* conn = &c;
    ism::Device* d = &dev;
    uint32_t size = cfg.dmb_size, roomy = cfg.dmb_roomy;
    return [conn, d, size, roomy, no_dmb](uid_t server_uid) -> std::optional<ism::Fds> {
        // Claimed already for this user (smc_connect_reuse: the server lacks
        // its segment), or now.
        if (conn->transport.smcd().rx.valid() && conn->peer_uid != server_uid) {
            d->release(conn->transport.smcd().rx, conn->peer_uid);
            conn->transport.smcd().rx = ism::Dmb{};
        }
        if (!conn->transport.smcd().rx.valid() &&
            !claim_own(*conn, *d, d->size_for(size, roomy), size, server_uid)) {
            *no_dmb = errno == EMFILE ? fallback::FDLIMIT : fallback::MAX_DMB;
            return std::nullopt;
        }
        return ism::Fds{conn->transport.smcd().rx.fd, conn->transport.smcd().rx.size,
                        conn->transport.smcd().rx.offset, conn->transport.smcd().rx.file_size,
                        conn->transport.smcd().rx.serial};
    };
}

ConnectResult smc_connect_confirm(int fd, SmcConn& c, ism::Device& dev, const HandshakeConfig& cfg,
                                  const clc::AcceptConfirmD& accept,
                                  std::optional<ism::PeerFds> peer, uint32_t no_dmb) {
    uint32_t peer_size = static_cast<uint32_t>(clc::code_to_size(accept.dmbe_size_code));
    std::optional<ism::Dmb> peer_dmb;
    if (peer && peer->fds.dmb_size == peer_size)
        peer_dmb =
            dev.map_peer(peer->fds.dmb, peer_size, peer->fds.dmb_offset, peer->fds.file_size);
    if (!peer_dmb) {
        // (The server's endpoint refused for want of DMB memory or
        // descriptors: attach says so in errno.)
        uint32_t reason = no_dmb            ? no_dmb
                          : errno == EMFILE ? uint32_t{fallback::FDLIMIT}
                          : errno == ENOMEM ? uint32_t{fallback::MAX_DMB}
                                            : uint32_t{fallback::INTERR};
        if (peer) ism::close_fds(peer->fds);
        clc::send_decline(fd, dev.gid(), reason, cfg.clc_timeout_ms);
        return fail(c, dev, Fallback{reason, 0});
    }
    dev.groups().note_attach(accept.gid, peer->pid, peer->uid, c.transport.smcd().rx.serial,
                             peer->fds.serial, *peer_dmb);
    counters::count(counters::lgr_first_contacts);
    return confirm_with(fd, c, dev, cfg, accept, *peer_dmb, true);
}

namespace {
// The server's Accept took the DMB our Proposal named: both sides are up
// once its own DMB checks out; no Confirm. The server believes SMC is up,
// so whatever does not check out is an error, never a Decline.
ConnectResult up_without_confirm(SmcConn& c, ism::Device& dev, const clc::AcceptConfirmD& accept) {
    if (!c.named_dmb) return fail(c, dev, -ECONNRESET); // we named none: not ours to take
    uint32_t peer_size = static_cast<uint32_t>(clc::code_to_size(accept.dmbe_size_code));
    auto theirs = dev.groups().their_slot(accept.gid, accept.link_id, accept.dmbe_idx, peer_size,
                                          accept.dmb_secret);
    if (!theirs) return fail(c, dev, -ECONNRESET);
    c.transport.smcd().tx = *theirs;
    if (!smc_conn_peer_wakeups(c, accept.gid, accept.token)) {
        // The server's connection is up: it learns of the end from its line,
        // and its DMB is free for reuse once it closes.
        c.transport.send_cons(core::Cursor{}, core::kPeerConnAbort);
        return fail(c, dev, -ECONNRESET);
    }
    c.named_dmb = false; // the handshake's: the connection owns the DMB now
    c.gid = dev.gid();
    c.peer_gid = accept.gid;
    c.peer_token = accept.token;
    counters::count(counters::lgr_reused);
    counters::count(counters::lgr_no_confirm);
    return std::monostate{};
}
} // namespace

std::optional<ConnectResult> smc_connect_reuse(int fd, SmcConn& c, ism::Device& dev,
                                               const HandshakeConfig& cfg,
                                               const clc::AcceptConfirmD& accept) {
    if (accept.took_dmb) return up_without_confirm(c, dev, accept);
    // Not taken by the server that answered, yet the name is not ours any
    // more: that server lied, or another process that maps this segment
    // (a server of the same user in a link group of ours) wrote the word.
    // Whoever holds it may write our DMB now: it is never reused before
    // the close flags, and this connection fails.
    if (c.named_dmb && c.transport.smcd().rx.control()->owner_token.load(
                           std::memory_order_acquire) != c.dmb_secret)
        return fail(c, dev, -ECONNRESET);
    c.named_dmb = false; // not taken: the name no longer matters
    if (accept.first_contact) return std::nullopt;
    auto uid = dev.groups().peer_user(accept.gid);
    if (!uid) return std::nullopt;
    uint32_t peer_size = static_cast<uint32_t>(clc::code_to_size(accept.dmbe_size_code));
    // (A name that does not check out: the attach, where the endpoint of
    // that GID answers only for its own token.)
    auto theirs = dev.groups().their_slot(accept.gid, accept.link_id, accept.dmbe_idx, peer_size,
                                          accept.dmb_secret);
    if (!theirs) return std::nullopt;
    if (!c.transport.smcd().rx.valid() &&
        !claim_own(c, dev, dev.size_for(cfg.dmb_size, cfg.dmb_roomy), cfg.dmb_size, *uid)) {
        dev.unmap_peer(*theirs);
        uint32_t reason = errno == EMFILE ? fallback::FDLIMIT : fallback::MAX_DMB;
        clc::send_decline(fd, dev.gid(), reason, cfg.clc_timeout_ms);
        return fail(c, dev, Fallback{reason, 0});
    }
    if (!dev.groups().peer_has(accept.gid, c.transport.smcd().rx.serial)) {
        dev.unmap_peer(*theirs); // the attach brings it again, with ours
        return std::nullopt;
    }
    counters::count(counters::lgr_reused);
    return confirm_with(fd, c, dev, cfg, accept, *theirs, false);
}

ConnectResult smc_connect_attach(int fd, SmcConn& c, ism::Device& dev, const HandshakeConfig& cfg,
                                 const clc::AcceptConfirmD& accept) {
    if (auto done = smc_connect_reuse(fd, c, dev, cfg, accept)) return *done;
    uint32_t no_dmb = 0; // why our DMB could not be had, if that ended the attach
    auto peer = ism::attach(accept.gid, smc_attach_key(accept),
                            smc_connect_ours(c, dev, cfg, &no_dmb), cfg.attach_timeout_ms);
    return smc_connect_confirm(fd, c, dev, cfg, accept, peer, no_dmb);
}

bool smc_conn_peer_wakeups(SmcConn& c, uint64_t peer_gid, uint64_t peer_token) {
    bool reached = c.transport.smcd().signals.reach(peer_gid, peer_token);
    // Our own pool too, now rather than at the first self-wake-up (which
    // may come at any later connection): a process's descriptors then stay
    // what its first SMC-D connection made them.
    return reached && wakeup::wakers_for_self() != nullptr;
}

void smc_conn_release(SmcConn& c, ism::Device& dev, uid_t peer_uid) {
    smc_close_wakeups(c);
    c.transport.smcd().release(dev, peer_uid);
}

} // namespace usmc
