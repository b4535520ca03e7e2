// SPDX-License-Identifier: MIT
#pragma once
// What the socket layer needs of the transports, in one place: the few
// points where a connection's life branches on the transport it runs on
// (the kernel branches on lgr->is_smcd at the same places). The process's
// devices, made on first need and again in a forked child; this process's
// identity in CLC; a connection's buffers given back; and the client's
// handshake steps the event loop runs between the Proposal and the
// Confirm. Today each branch is SMC-D's (handshake_ism.hpp); SMC-R's goes
// beside it. Nothing above this header names a transport.
#include "engine/handshake/handshake.hpp"

#include <functional>
#include <optional>

namespace usmc {

// --- devices (the caller holds the engine's lock) ---

// Makes what is missing: SMC-D's device, and its endpoint if
// `need_endpoint` (a server's first contacts attach through it). False if
// an endpoint was needed and could not be had.
bool transports_ensure(HandshakeDevices& d, uint64_t max_memory, uint32_t dmb_size,
                       bool need_endpoint);
// In a forked child: the parent's devices are its own (their threads run
// there, their locks may be held): let go of them, made again on need.
void transports_after_fork_child(HandshakeDevices& d);
// This process in CLC (SMC-D: its device's GID; 0 before it has one).
uint64_t transports_id(const HandshakeDevices& d);
// A random 64-bit token (a connection's wake-up name, before CLC tells it).
uint64_t transports_random_token();

// --- a connection's buffers (the caller holds the engine's lock) ---

// The last process holding the connection: its buffers go back (the peer
// was told its end already).
void transports_release(SmcConn& c, HandshakeDevices& d);
// Not the last: only this process's copies go (the peer and other
// processes may still use the buffers).
void transports_leave(SmcConn& c, HandshakeDevices& d);

// --- the client's handshake steps the event loop runs ---

enum class ProposalNow : uint8_t { Sent, Failed, NoRoom };
// The Proposal, if our memory has room for a buffer (NoRoom: a worker goes
// on and falls back). On a link group with the process expected to take
// it (`server_gid`), our buffer is claimed now and named in it.
ProposalNow transports_proposal_now(int tcp_fd, SmcConn& c, const HandshakeDevices& d,
                                    const HandshakeConfig& cfg, uint64_t server_gid);
// After the Accept: the connection up on a link group without an attach
// (or failed). nullopt: an attach is needed.
std::optional<ConnectResult> transports_reuse(int tcp_fd, SmcConn& c, const HandshakeDevices& d,
                                              const HandshakeConfig& cfg,
                                              const clc::AcceptConfirmD& accept);
// The attach on the event loop; `done` gets the outcome there. False: every
// link to that server is busy, and a worker attaches (transports_attach).
bool transports_attach_on_loop(int tcp_fd, SmcConn& c, const HandshakeDevices& d,
                               const HandshakeConfig& cfg, const clc::AcceptConfirmD& accept,
                               std::function<void(ConnectResult)> done);
// The attach and the Confirm, waiting (a worker's).
ConnectResult transports_attach(int tcp_fd, SmcConn& c, const HandshakeDevices& d,
                                const HandshakeConfig& cfg, const clc::AcceptConfirmD& accept);
// Before a Decline: the name of our buffer taken back. False if the server
// took it first (its Accept is on the way: SMC is up for it).
bool transports_withdraw_named(SmcConn& c);
// A handshake that did not come up gives back what it claimed or mapped.
void transports_abandon(SmcConn& c, const HandshakeDevices& d);

// --- the server's ---

// The client's attach for the Accept `token` came (its Confirm may follow).
bool transports_attached(const HandshakeDevices& d, uint64_t token);

} // namespace usmc
