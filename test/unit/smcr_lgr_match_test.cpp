// SPDX-License-Identifier: MIT
// The SMC-R link-group choice (engine/smcr/lgr_match): first contact and
// reuse as net/smc decides them, on both sides.
#include "engine/smcr/lgr_match.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace usmc::smcr;

namespace {

SystemId sys(uint8_t n) {
    return {0, n, 2, 0, 0, 0, 0, n};
}
llc::Gid gid(uint8_t n) {
    llc::Gid g{};
    g[15] = n;
    return g;
}
llc::Mac mac(uint8_t n) {
    return {2, 0, 0, 0, 0, n};
}

struct World {
    std::vector<std::vector<LinkView>> links;
    std::vector<GroupView> groups;
    // A group with one active link to peer n (GID, MAC, QP 100 + n).
    GroupView& add(Role role, uint8_t n) {
        links.push_back({LinkView{true, gid(n), mac(n), 100u + n}});
        GroupView g;
        g.role = role;
        g.peer_system_id = sys(n);
        groups.push_back(g);
        for (size_t i = 0; i < groups.size(); ++i)
            groups[i].links = links[i];
        return groups.back();
    }
};

PeerSays peer(uint8_t n) {
    PeerSays p;
    p.system_id = sys(n);
    p.gid = gid(n);
    p.mac = mac(n);
    p.qpn = 100u + n;
    return p;
}

} // namespace

TEST_CASE("smcr link groups, server: reuse the peer's group while it has room") {
    World w;
    w.add(Role::Server, 1);
    w.add(Role::Server, 2);
    w.add(Role::Client, 3); // ours as a client: never a server's
    CHECK(server_pick(w.groups, peer(2)) == 1);
    CHECK(server_pick(w.groups, peer(3)) == kNoGroup);
    CHECK(server_pick(w.groups, peer(9)) == kNoGroup); // a new peer: first contact

    PeerSays other_process = peer(2);
    other_process.system_id = sys(7); // same host and device, another process
    CHECK(server_pick(w.groups, other_process) == kNoGroup);

    w.groups[1].conns = 255; // full (smcr_max_conns_per_lgr)
    CHECK(server_pick(w.groups, peer(2)) == kNoGroup);
    w.groups[1].conns = 15;
    w.groups[1].max_conns = 16;
    CHECK(server_pick(w.groups, peer(2)) == 1);
    w.groups[1].rmb_slot_free = false;
    CHECK(server_pick(w.groups, peer(2)) == kNoGroup);
}

TEST_CASE("smcr link groups, server: only an active link to the Proposal's GID and MAC") {
    World w;
    w.add(Role::Server, 1);
    PeerSays p = peer(1);
    p.mac = mac(9);
    CHECK(server_pick(w.groups, p) == kNoGroup); // v1 compares MACs
    p.v2 = true;
    CHECK(server_pick(w.groups, p) == 0); // v2 does not
    p = peer(1);
    p.gid = gid(9);
    CHECK(server_pick(w.groups, p) == kNoGroup);
    p = peer(1);
    p.qpn = 4242; // the server matches no QP: it has not chosen one yet
    CHECK(server_pick(w.groups, p) == 0);
    w.links[0][0].active = false;
    CHECK(server_pick(w.groups, peer(1)) == kNoGroup);
    w.links[0][0].active = true;
    p = peer(1);
    p.vlan = 5;
    CHECK(server_pick(w.groups, p) == kNoGroup);
    w.groups[0].sync_err = true;
    CHECK(server_pick(w.groups, peer(1)) == kNoGroup);
    w.groups[0].sync_err = false;
    w.groups[0].terminating = true;
    CHECK(server_pick(w.groups, peer(1)) == kNoGroup);
}

TEST_CASE("smcr link groups, client: the server's first contact is ours too") {
    World w;
    w.add(Role::Client, 1);
    ClientPick c = client_pick(w.groups, peer(1), true);
    CHECK(c.kind == ClientPick::NewGroup);
    CHECK(c.group == kNoGroup);
}

TEST_CASE("smcr link groups, client: reuse where the Accept's QP is, else SYNCERR") {
    World w;
    w.add(Role::Client, 1);
    w.add(Role::Client, 2);
    w.links[1].push_back(LinkView{true, gid(2), mac(2), 555});
    w.groups[1].links = w.links[1];
    ClientPick c = client_pick(w.groups, peer(2), false);
    CHECK(c.kind == ClientPick::Reuse);
    CHECK(c.group == 1);
    CHECK(c.link == 0);
    PeerSays second = peer(2);
    second.qpn = 555;
    c = client_pick(w.groups, second, false);
    CHECK(c.kind == ClientPick::Reuse);
    CHECK(c.link == 1);
    // The server says "reuse", we have nothing that matches: out of sync.
    second.qpn = 556;
    CHECK(client_pick(w.groups, second, false).kind == ClientPick::SyncErr);
    CHECK(client_pick(w.groups, peer(9), false).kind == ClientPick::SyncErr);
    // A group marked out of sync is never taken again.
    w.groups[0].sync_err = true;
    CHECK(client_pick(w.groups, peer(1), false).kind == ClientPick::SyncErr);
    // Nor one of ours as a server.
    World s;
    s.add(Role::Server, 1);
    CHECK(client_pick(s.groups, peer(1), false).kind == ClientPick::SyncErr);
}

TEST_CASE("smcr link groups, client: a full group is still the server's to judge") {
    // The server counts connections; a client takes the group it names.
    World w;
    w.add(Role::Client, 1);
    w.groups[0].conns = 255;
    w.groups[0].rmb_slot_free = false;
    CHECK(client_pick(w.groups, peer(1), false).kind == ClientPick::Reuse);
}
