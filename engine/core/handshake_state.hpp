// SPDX-License-Identifier: MIT
#pragma once
// The two CLC handshakes as state machines (net/smc runs them as
// smc_connect_work and smc_listen_work, one blocking work item each; here a
// handshake is handed between the application's thread, the engine's event
// loop and handshake workers, and its state says where it is and what it
// waits for). Transport-independent: SMC-R's handshake has the same
// waits, with the LLC confirm-link exchange where SMC-D attaches.
//
// Each state is one place the handshake waits; every event is what ended
// that wait. A state expects only some events: any other is Invalid, a bug
// of ours (a peer's bytes only choose between expected events), and the
// caller keeps the state it had. The ends (Smc, Tcp, Failed) expect nothing.
#include <cstdint>

namespace usmc::core {

enum class ClientHs : uint8_t {
    Start,       // connect() issued the TCP connect
    Connecting,  // the TCP connect is not up yet: the event loop waits for it
    AwaitAccept, // the Proposal is out: the event loop waits for the answer
    Attaching,   // an Accept that needs an attach: the event loop waits for the endpoint
    Blocking,    // a thread blocks for the rest: a client worker, or the caller of a
                 // blocking connect()
    Smc,         // confirmed: the connection runs SMC
    Tcp,         // it goes on as TCP (a Decline either way, a failed TCP connect)
    Failed,      // broken half way: the connection is shut down
    Invalid,     // not a state: an event the state does not expect
};
inline constexpr int kClientStates = 8;

enum class ClientEvent : uint8_t {
    TcpPending,     // connect() returned before the TCP connect was up
    ProposalSent,   // the TCP connect is up and the Proposal went out
    ProposalFailed, // writing the Proposal failed
    TcpFailed,      // the TCP connect failed or took too long
    NeedsAttach,    // the server's Accept names a buffer only an attach reaches
    NeedsThread,    // what comes next waits: a worker (or the caller) takes it
    Up,             // SMC is up (confirmed)
    FellBack,       // a Decline, sent or received: TCP
    Error,          // the connection broke
};
inline constexpr int kClientEvents = 9;

enum class ServerHs : uint8_t {
    Intake,        // accept() took the connection from the kernel; a client announced it
    AwaitProposal, // its first bytes are not there yet: the event loop waits for them
    Begin,         // a worker reads the Proposal and sends the Accept
    AwaitConfirm,  // the Accept is out: the event loop waits for the client's Confirm
    Blocking,      // a worker waits for the client's attach or the rest of its Confirm
    Smc,
    Tcp,
    Failed,
    Invalid,
};
inline constexpr int kServerStates = 8;

enum class ServerEvent : uint8_t {
    ProposalHere, // a Proposal's first bytes are there: a worker takes it
    NothingYet,   // no bytes yet: the event loop waits for them
    NotSmc,       // nothing came in time, or bytes that are not a Proposal: TCP, untouched
    AcceptSent,   // the Accept went out
    NeedsThread,  // the Confirm's rest or the attach must be waited for
    Up,
    FellBack, // a Decline, sent or received
    Error,
    // The Accept went out and took the DMB the client named in its
    // Proposal: both sides are up, no Confirm comes (clc.hpp, NamedDmb).
    AcceptTook,
};
inline constexpr int kServerEvents = 9;

ClientHs next(ClientHs s, ClientEvent e);
ServerHs next(ServerHs s, ServerEvent e);

// An end: the handshake is over.
bool is_end(ClientHs s);
bool is_end(ServerHs s);

const char* name(ClientHs s);
const char* name(ClientEvent e);
const char* name(ServerHs s);
const char* name(ServerEvent e);

} // namespace usmc::core
