#pragma once
// Nonblocking connects whose TCP connection was not up yet when connect()
// returned (on loopback: the SYN was dropped at a full listen queue). The
// CLC Proposal must leave the moment the connection is up: the server takes
// the connection, sees it announced and gives a worker of its own
// clc_detect_timeout_ms to find the Proposal. Left to the client's
// handshake queue, it waited behind handshakes that wait for Accepts, and
// the server's wait ran out (connections that should have been SMC-D ran
// TCP, and server workers sat idle). One thread per process watches such
// sockets in a private epoll set.
#include <cstdint>
#include <functional>

namespace usmc::connect_watch {

// Calls `done(connected)` on the watch thread once the TCP connect of `fd`
// completed (true) or failed, or `timeout_ms` passed (false). The caller
// keeps `fd` open until then. False if the socket could not be watched
// (`done` is not called; the caller goes on without the watch).
bool add(int fd, uint32_t timeout_ms, std::function<void(bool connected)> done);

// A forked child: the thread is gone; start again on first use.
void on_fork_child();

} // namespace usmc::connect_watch
