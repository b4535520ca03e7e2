// SPDX-License-Identifier: MIT
#pragma once
// The CLC handshake on an established TCP connection (net/smc/af_smc.c:
// __smc_connect, smc_listen_work), for every transport: the client's
// Proposal offers what this process has, the server chooses one
// (transport_choice.hpp) and answers with its Accept, the client confirms.
// The CLC around the transport is here (connect.cpp, listen.cpp); each
// transport's half is beside it: SMC-D's in connect_ism.cpp and
// listen_ism.cpp (handshake_ism.hpp), SMC-R's next.
//
// SMC-D:
//
//   client                               server
//   Proposal (ISM GID, CHID) ------->
//                             <------- Accept (GID, DMB token, DMB size)
//   attach to the server's endpoint with the token: DMB + wake-up sockets swapped
//   Confirm (GID, token, size) ------>
//
// On a link group the client may claim its DMB first and name it in the
// Proposal (clc::NamedDmb); a server that maps that DMB already takes it
// with its Accept (took_dmb), and both sides are up without a Confirm. The
// name is withdrawn (its owner token cleared) before the client declines
// anything; a server takes it only by swapping that token for its mark, so
// exactly one of the two wins, and a client whose DMB was taken never
// declines.
//
// Either side may answer with a Decline instead; both then go on with the
// same TCP connection, the reason recorded. A result is a working SMC
// connection, a fallback to TCP, or (timeouts, a vanished peer) an error for
// the connection, as the kernel reports it.
#include "engine/clc/clc.hpp"
#include "engine/clc/clc_io.hpp"
#include "engine/conn/conn.hpp"
#include "engine/handshake/transport_choice.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <variant>

namespace usmc::ism {
class Device;
class Endpoint;
} // namespace usmc::ism

namespace usmc {

struct HandshakeConfig {
    uint32_t dmb_size = 64 * 1024;
    // Autotuning: the DMB size to take instead while memory is plentiful
    // (ism::Device::size_for); 0 = always dmb_size.
    uint32_t dmb_roomy = 0;
    int clc_timeout_ms = 6000; // CLC_WAIT_TIME
    // Client: how long to wait for the Accept (-1: clc_timeout_ms). 0 when
    // the connect watch waited for it already and it did not come.
    int accept_wait_ms = -1;
    int attach_timeout_ms = 1000;
    uint32_t busy_poll_us = 0;
    uint32_t autocorking_size = 64 * 1024;
};

struct Fallback {
    uint32_t reason = 0;         // fallback::Code
    uint32_t peer_diagnosis = 0; // what a peer's Decline said
};

using HandshakeResult = std::variant<std::unique_ptr<SmcConn>, Fallback, int /* -errno */>;

// The devices a handshake may run on: SMC-D's (the process's device, and
// the endpoint a server's first contacts attach through). SMC-R's will sit
// beside them. A server offers what is here (local_transports).
struct HandshakeDevices {
    ism::Device* smcd = nullptr;
    ism::Endpoint* smcd_endpoint = nullptr;
};
LocalTransports local_transports(const HandshakeDevices& devs);

// Client: `tcp_fd` is connected to a listener the registry vouched for.
// `conn` has its wake-up pair (smc_conn_init_wakeups) and is filled in; on a
// fallback or an error it holds only those again.
using ConnectResult = std::variant<std::monostate /* SMC up */, Fallback, int /* -errno */>;
// `proposal_sent`: smc_send_proposal ran already (a nonblocking connect
// whose TCP connection was up at once sends it from connect() itself, so
// the server finds it at accept time instead of waiting for it on a worker).
// `server_gid`: the process expected to take the connection (0: unknown),
// for the DMB a Proposal sent here names (smc_name_dmb).
ConnectResult smc_connect_handshake(int tcp_fd, SmcConn& conn, const HandshakeDevices& devs,
                                    const HandshakeConfig& cfg, bool proposal_sent = false,
                                    uint64_t server_gid = 0);
// The same in steps, so that no thread waits for the server (the connect
// watch runs them: af_smc_connect.cpp). `smc_connect_accept` reads the
// server's answer to the Proposal: an Accept, for the transport's half
// (SMC-D: smc_connect_reuse, else the attach; handshake_ism.hpp), or the
// end of the handshake.
using ConnectStep = std::variant<clc::AcceptConfirmD, ConnectResult>;
// (`taken`: the answer, already read: clc::take_whole_message.)
ConnectStep smc_connect_accept(int tcp_fd, SmcConn& conn, const HandshakeDevices& devs,
                               const HandshakeConfig& cfg, bool proposal_sent,
                               clc::ReadResult* taken = nullptr, uint64_t server_gid = 0);
// Client: the CLC Proposal, offering every transport in `devs` (SMC-D: its
// DMB named if `named`), and its send (false: the write failed, the
// connection is broken).
clc::Proposal smc_make_proposal(const HandshakeDevices& devs, const clc::NamedDmb* named);
bool smc_send_proposal(int tcp_fd, const HandshakeDevices& devs, const HandshakeConfig& cfg,
                       const clc::NamedDmb* named = nullptr);

// Server: the first bytes of `tcp_fd` are a CLC Proposal (clc::classify).
HandshakeResult smc_listen_handshake(int tcp_fd, const HandshakeDevices& devs,
                                     const HandshakeConfig& cfg);
// The same in two steps, so that no thread waits while the client attaches
// and confirms (a client that stalls there must not hold a worker): `begin`
// reads the Proposal, chooses the transport and sends the Accept; a
// connection back from it (with `*token` set: the key of the endpoint's
// offer for the client's attach) is waiting for the client's Confirm. Once
// the connection is readable (or clc_timeout_ms passed: `timed_out`),
// `finish` completes it (`taken`, for either: the client's message,
// already read: clc::take_whole_message).
// `*complete`: the Accept took the DMB the client named, and the connection
// back from begin is up (no Confirm comes).
HandshakeResult smc_listen_begin(int tcp_fd, const HandshakeDevices& devs,
                                 const HandshakeConfig& cfg, uint64_t* token,
                                 clc::ReadResult* taken = nullptr, bool* complete = nullptr);
HandshakeResult smc_listen_finish(int tcp_fd, std::unique_ptr<SmcConn> conn, uint64_t token,
                                  const HandshakeDevices& devs, const HandshakeConfig& cfg,
                                  bool timed_out, clc::ReadResult* taken = nullptr);

// Server: a Proposal that gets no handshake (it arrived after the
// connection was handed to the application as TCP, or while handshakes are
// congested). Consume it and answer with a Decline, so the client falls
// back at once instead of waiting for an Accept.
// `wait_ms`: how long the rest of a Proposal whose header is there may take.
void smc_decline_late_proposal(int tcp_fd, uint32_t reason, int wait_ms = 0);

} // namespace usmc
