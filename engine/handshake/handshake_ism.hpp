// SPDX-License-Identifier: MIT
#pragma once
// SMC-D's half of the handshake (handshake.hpp has the CLC around it): the
// client's in connect_ism.cpp, the server's in listen_ism.cpp. SMC-R's half
// will sit beside it, with the same shape: what the client claims before
// its Proposal, what the server claims and names in its Accept once the
// Proposal chose it, and the Confirm's check.
#include "engine/handshake/handshake.hpp"
#include "engine/smcd/ism.hpp"
#include "engine/smcd/ism_endpoint.hpp"

namespace usmc {

// --- client ---

// `smc_connect_ours` gives the attach our descriptors (the DMB taken for
// the server's user; why none could be had in `*no_dmb`, which must outlive
// the attach). `smc_connect_confirm` takes what the attach brought (nullopt:
// it failed, errno says why), maps the server's DMB and sends the Confirm.
// `smc_connect_attach` is the reuse, or the attach and the Confirm, waiting.
std::function<std::optional<ism::Fds>(uid_t)>
smc_connect_ours(SmcConn& conn, ism::Device& dev, const HandshakeConfig& cfg, uint32_t* no_dmb);
ConnectResult smc_connect_confirm(int tcp_fd, SmcConn& conn, ism::Device& dev,
                                  const HandshakeConfig& cfg, const clc::AcceptConfirmD& accept,
                                  std::optional<ism::PeerFds> peer, uint32_t no_dmb);
ConnectResult smc_connect_attach(int tcp_fd, SmcConn& conn, ism::Device& dev,
                                 const HandshakeConfig& cfg, const clc::AcceptConfirmD& accept);
// On a link group (link_group.hpp): when the Accept names a DMB in a
// segment we hold and ours lies in one the server holds, map, confirm, done
// (the connection is up, or failed). nullopt: an attach is needed (our DMB,
// if claimed here, is kept for it).
std::optional<ConnectResult> smc_connect_reuse(int tcp_fd, SmcConn& conn, ism::Device& dev,
                                               const HandshakeConfig& cfg,
                                               const clc::AcceptConfirmD& accept);
// Before the Proposal: our DMB claimed for the user of the server process
// `server_gid` (a link group with it), named if it lies in a segment that
// process maps. nullopt: nothing named (a DMB claimed anyway stays for the
// rest of the handshake).
std::optional<clc::NamedDmb> smc_name_dmb(SmcConn& conn, ism::Device& dev,
                                          const HandshakeConfig& cfg, uint64_t server_gid);
// Before any Decline: takes back the name of our DMB. False if the server
// took it first: its Accept is on the way, and SMC is up for it.
bool smc_withdraw_named_dmb(SmcConn& conn);
// What the attach names the server's offer by: the Accept's secret.
uint64_t smc_attach_key(const clc::AcceptConfirmD& accept);
// A handshake that did not come up gives back the DMBs it claimed or mapped
// (one the server took is reused only after its close flags).
void smc_connect_abandon(SmcConn& conn, ism::Device& dev);

// --- server ---

// After the Proposal chose SMC-Dv2 (with the client's device `client_gid`):
// the connection, its DMB claimed on a link group (and the client's named
// one taken, when `complete` is given: then `*complete` on success), the
// endpoint's offer made under the secret (`*key`), the Accept sent.
HandshakeResult smcd_listen_begin(int tcp_fd, const clc::Proposal& p, uint64_t client_gid,
                                  ism::Device& dev, ism::Endpoint& ep, const HandshakeConfig& cfg,
                                  uint64_t* key, bool* complete);
// The client's Confirm, read and decoded: its DMB checked and mapped (named
// on a link group, or brought by its attach).
HandshakeResult smcd_listen_confirmed(int tcp_fd, std::unique_ptr<SmcConn> conn, uint64_t key,
                                      ism::Device& dev, ism::Endpoint& ep,
                                      const HandshakeConfig& cfg, const clc::AcceptConfirmD& cf);
// A server handshake that ends early: the offer withdrawn, the DMBs given back.
HandshakeResult smcd_listen_abandon(SmcConn& conn, uint64_t key, ism::Device& dev,
                                    ism::Endpoint& ep, HandshakeResult res);

// Notes where the peer's `sig` is (its token in CLC) and how to reach its
// process. False if no waker can be had.
bool smc_conn_peer_wakeups(SmcConn& c, uint64_t peer_gid, uint64_t peer_token);

// Frees what a connection holds (after close or a failed handshake).
void smc_conn_release(SmcConn& c, ism::Device& dev, uid_t peer_uid);

} // namespace usmc
