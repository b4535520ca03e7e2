// SPDX-License-Identifier: MIT
#pragma once
// Which link group a new SMC-R connection joins: the kernel's first-contact
// and reuse rules (net/smc/smc_core.c, smc_conn_create and the match of a
// link group to a peer), over a view of this process's groups, so the
// decision is one pure function each way and testable without a device.
//
// Server, on a Proposal: a group of ours in the server role with the same
// peer system id and VLAN, not out of sync, with an active link to the
// Proposal's GID (and MAC, for SMC-Rv1), with room for one more connection
// (max_conns) and a free RMB slot. None: first contact, a new group.
//
// Client, on the server's Accept: first contact there means a new group
// here too. Otherwise a group in the client role with the same peer system
// id and VLAN, not out of sync, whose active link has the Accept's GID
// (and MAC for v1) and the Accept's QP number. None, though the server
// reuses one: SYNCERR (the Decline carries the out-of-sync bit, and the
// server tears its group down).
//
// Each usmc process has a system id of its own, so "same peer system id"
// means the same peer process.
#include "engine/smcr/llc_msg.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace usmc::smcr {

using SystemId = std::array<uint8_t, 8>;

enum class Role : uint8_t { Client, Server };

struct LinkView {
    bool active = false;
    llc::Gid peer_gid{};
    llc::Mac peer_mac{};
    uint32_t peer_qpn = 0;
};

struct GroupView {
    Role role = Role::Client;
    SystemId peer_system_id{};
    uint16_t vlan = 0;
    bool sync_err = false;    // a peer once disagreed about it: never reused
    bool terminating = false; // going away (DELETE LINK, idle free)
    uint32_t conns = 0;
    uint32_t max_conns = 255; // smcr_max_conns_per_lgr, or what v2.1 agreed
    bool rmb_slot_free = true;
    std::span<const LinkView> links;
};

// What the other side says about itself in CLC.
struct PeerSays {
    SystemId system_id{};
    llc::Gid gid{};
    llc::Mac mac{};
    uint32_t qpn = 0; // the Accept's (client side); unused by the server
    uint16_t vlan = 0;
    bool v2 = false; // SMC-Rv2: GIDs route, MACs are not compared
};

inline constexpr size_t kNoGroup = SIZE_MAX;

// The group a server puts the connection in, or kNoGroup: first contact.
size_t server_pick(std::span<const GroupView> groups, const PeerSays& client);

struct ClientPick {
    enum Kind : uint8_t { NewGroup, Reuse, SyncErr } kind = NewGroup;
    size_t group = kNoGroup;
    size_t link = 0; // the link whose peer QP the Accept named
};
ClientPick client_pick(std::span<const GroupView> groups, const PeerSays& server,
                       bool first_contact);

} // namespace usmc::smcr
