// SPDX-License-Identifier: MIT
#include "engine/smcr/lgr_match.hpp"

namespace usmc::smcr {

namespace {

// A group that may take a connection from or to this peer at all.
bool group_open_to(const GroupView& g, Role role, const PeerSays& peer) {
    return g.role == role && !g.sync_err && !g.terminating && g.peer_system_id == peer.system_id &&
           g.vlan == peer.vlan;
}

// The active link reaching the peer's GID (and MAC for v1); the client also
// needs the QP number the server chose. kNoGroup if none.
size_t link_to(const GroupView& g, const PeerSays& peer, bool match_qpn) {
    for (size_t i = 0; i < g.links.size(); ++i) {
        const LinkView& l = g.links[i];
        if (!l.active || l.peer_gid != peer.gid) continue;
        if (!peer.v2 && l.peer_mac != peer.mac) continue;
        if (match_qpn && l.peer_qpn != peer.qpn) continue;
        return i;
    }
    return kNoGroup;
}

} // namespace

size_t server_pick(std::span<const GroupView> groups, const PeerSays& client) {
    for (size_t i = 0; i < groups.size(); ++i) {
        const GroupView& g = groups[i];
        if (!group_open_to(g, Role::Server, client)) continue;
        if (g.conns >= g.max_conns || !g.rmb_slot_free) continue;
        if (link_to(g, client, false) != kNoGroup) return i;
    }
    return kNoGroup;
}

ClientPick client_pick(std::span<const GroupView> groups, const PeerSays& server,
                       bool first_contact) {
    if (first_contact) return {};
    for (size_t i = 0; i < groups.size(); ++i) {
        const GroupView& g = groups[i];
        if (!group_open_to(g, Role::Client, server)) continue;
        if (size_t l = link_to(g, server, true); l != kNoGroup) return {ClientPick::Reuse, i, l};
    }
    return {ClientPick::SyncErr, kNoGroup, 0};
}

} // namespace usmc::smcr
