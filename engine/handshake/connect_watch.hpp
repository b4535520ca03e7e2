// SPDX-License-Identifier: MIT
#pragma once
// Nonblocking connects whose TCP connection was not up yet when connect()
// returned (on loopback: the SYN was dropped at a full listen queue). The
// CLC Proposal must leave the moment the connection is up: the server takes
// the connection, sees it announced and waits (in its own connect watch)
// clc_detect_timeout_ms for the Proposal. Left to the client's
// handshake queue, it waited behind handshakes that wait for Accepts, and
// the server's wait ran out (connections that should have been SMC-D ran
// TCP, and server workers sat idle). The engine's event loop watches such
// sockets (loop.hpp).
//
// The same thread waits for the server's Accept after a Proposal went out,
// so a client worker never blocks on the server's handshake queue: with
// workers waiting for Accepts (6 s each at most), a server whose own
// workers waited for those clients' attaches deadlocked until timeouts
// (seconds with both processes idle, in a storm of connections).
#include <cstdint>
#include <functional>

namespace usmc::connect_watch {

// What a watch waits for: the TCP connect to complete (EPOLLOUT), or the
// peer's first answer (EPOLLIN: a CLC Accept or Decline, or a hang-up).
enum class Want : uint8_t { Connected, Readable };

// Calls `done(ok)` on the watch thread once `want` happened (true; for
// Connected: the connect completed, false if it failed) or `timeout_ms`
// passed (false). The caller keeps `fd` open until then. False if the
// socket could not be watched (`done` is not called; the caller goes on
// without the watch).
bool add(int fd, Want want, uint32_t timeout_ms, std::function<void(bool ok)> done);

// A forked child: the loop's thread is gone; it starts again on first use.
void on_fork_child();

} // namespace usmc::connect_watch
