#pragma once
// The SMC-D handshake on an established TCP connection (net/smc/af_smc.c: smc_connect_ism,
// smc_listen_work), client side in connect.cpp, server side in listen.cpp:
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
#include "engine/clc.hpp"
#include "engine/clc_io.hpp"
#include "engine/conn.hpp"
#include "engine/smcd/ism.hpp"
#include "engine/smcd/ism_endpoint.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <variant>

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

// Client: `tcp_fd` is connected to a listener the registry vouched for.
// `conn` has its wake-up pair (smc_conn_init_wakeups) and is filled in; on a
// fallback or an error it holds only those again.
using ConnectResult = std::variant<std::monostate /* SMC-D up */, Fallback, int /* -errno */>;
// `proposal_sent`: smc_send_proposal ran already (a nonblocking connect
// whose TCP connection was up at once sends it from connect() itself, so
// the server finds it at accept time instead of waiting for it on a worker).
// `server_gid`: the process expected to take the connection (0: unknown),
// for the DMB a Proposal sent here names (smc_name_dmb).
ConnectResult smc_connect_handshake(int tcp_fd, SmcConn& conn, ism::Device& dev,
                                    const HandshakeConfig& cfg, bool proposal_sent = false,
                                    uint64_t server_gid = 0);
// The same in steps, so that no thread waits for the server's endpoint (the
// connect watch runs them: af_smc_connect.cpp). `smc_connect_accept` reads
// the server's answer to the Proposal: an Accept, for the attach, or the
// end of the handshake. `smc_connect_ours` gives the attach our
// descriptors (the DMB taken for the server's user; why none could be had
// in `*no_dmb`, which must outlive the attach). `smc_connect_confirm` takes
// what the attach brought (nullopt: it failed, errno says why), maps the
// server's DMB and sends the Confirm. `smc_connect_attach` is the attach
// and the Confirm, waiting.
using ConnectStep = std::variant<clc::AcceptConfirmD, ConnectResult>;
// (`taken`: the answer, already read: clc::take_whole_message.)
ConnectStep smc_connect_accept(int tcp_fd, SmcConn& conn, ism::Device& dev,
                               const HandshakeConfig& cfg, bool proposal_sent,
                               clc::ReadResult* taken = nullptr, uint64_t server_gid = 0);
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
// Client: the CLC Proposal (false: the write failed, the connection is broken),
// naming our DMB if `named`.
bool smc_send_proposal(int tcp_fd, const ism::Device& dev, const HandshakeConfig& cfg,
                       const clc::NamedDmb* named = nullptr);
// Client, before the Proposal: our DMB claimed for the user of the server
// process `server_gid` (a link group with it), named if it lies in a
// segment that process maps. nullopt: nothing named (a DMB claimed anyway
// stays for the rest of the handshake).
std::optional<clc::NamedDmb> smc_name_dmb(SmcConn& conn, ism::Device& dev,
                                          const HandshakeConfig& cfg, uint64_t server_gid);
// Client, before any Decline: takes back the name of our DMB. False if the
// server took it first: its Accept is on the way, and SMC is up for it.
bool smc_withdraw_named_dmb(SmcConn& conn);
// Client: what the attach names the server's offer by: the Accept's secret
// (a server before it offered under its `sig`'s token).
uint64_t smc_attach_key(const clc::AcceptConfirmD& accept);
// Client: a handshake that did not come up gives back the DMBs it claimed
// or mapped (one the server took is reused only after its close flags).
void smc_connect_abandon(SmcConn& conn, ism::Device& dev);

// Server: the first bytes of `tcp_fd` are a CLC Proposal (clc::classify).
HandshakeResult smc_listen_handshake(int tcp_fd, ism::Device& dev, ism::Endpoint& ep,
                                     const HandshakeConfig& cfg);
// The same in two steps, so that no thread waits while the client attaches
// and confirms (a client that stalls there must not hold a worker): `begin`
// reads the Proposal and sends the Accept; a connection back from it (with
// `*token` set: the key of the endpoint's offer for the client's attach)
// is waiting for the client's Confirm. Once the connection is
// readable (or clc_timeout_ms passed: `timed_out`), `finish` completes it
// (`taken`, for either: the client's message, already read:
// clc::take_whole_message).
// `*complete`: the Accept took the DMB the client named, and the connection
// back from begin is up (no Confirm comes).
HandshakeResult smc_listen_begin(int tcp_fd, ism::Device& dev, ism::Endpoint& ep,
                                 const HandshakeConfig& cfg, uint64_t* token,
                                 clc::ReadResult* taken = nullptr, bool* complete = nullptr);
HandshakeResult smc_listen_finish(int tcp_fd, std::unique_ptr<SmcConn> conn, uint64_t token,
                                  ism::Device& dev, ism::Endpoint& ep, const HandshakeConfig& cfg,
                                  bool timed_out, clc::ReadResult* taken = nullptr);

// Server: a Proposal that gets no handshake (it arrived after the
// connection was handed to the application as TCP, or while handshakes are
// congested). Consume it and answer with a Decline, so the client falls
// back at once instead of waiting for an Accept.
// `wait_ms`: how long the rest of a Proposal whose header is there may take.
void smc_decline_late_proposal(int tcp_fd, uint32_t reason, int wait_ms = 0);

// Frees what a connection holds (after close or a failed handshake).
void smc_conn_release(SmcConn& c, ism::Device& dev, uid_t peer_uid);

} // namespace usmc
