// SPDX-License-Identifier: MIT
#pragma once
// Notices a vanished peer for connections the application watches through
// epoll. In SMC mode nothing arrives on the TCP socket but its end (FIN or
// RST when the peer process dies), so the engine's event loop (loop.hpp)
// watches the TCP sockets of those connections and wakes the
// connection's `sig`; the application's epoll sets hold only `sig`, so it
// never gets two events for one descriptor in one
// epoll_wait (programs such as Python's selectors would handle a closed
// descriptor twice).
#include "engine/conn/conn.hpp"

#include <cstdint>

namespace usmc::peer_watch {

// Once per connection (repeats are ignored). `from_poll`: called inside
// poll() or select(), which a signal handler may run over a thread inside
// malloc or inside this module: no allocation, no lock waited for, no
// thread started; it gives up instead (false), and the caller looks at the
// TCP socket itself. True if the connection is watched now.
bool add(SmcConn* c, bool from_poll = false);
void remove(SmcConn* c); // before the connection's memory goes
// remove, when the TCP socket's descriptor is closed next (release()):
// its registration goes with the file (loop::cancel_closing).
void remove_closing(SmcConn* c);
void on_fork_child(); // the parent's registrations are not ours

// Watched now, in this process, and not fired: a FIN or reset that came
// (or comes) reaches `sig` through the watch, so no look of our own at the
// TCP socket is needed (smc_check_peer). Lock-free.
bool armed(const SmcConn& c);

// The loop's work for one event of the connection registered under `key`
// (SmcConn::peer_watch_id), with the epoll events that came; a key removed
// meanwhile is ignored. Public for tests.
void deliver(uint64_t key, uint32_t events);

} // namespace usmc::peer_watch
