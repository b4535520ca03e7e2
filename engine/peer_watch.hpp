#pragma once
// Notices a vanished peer for connections the application watches through
// epoll. In SMC mode nothing arrives on the TCP socket but its end (FIN or
// RST when the peer process dies), so a thread of ours watches the TCP
// sockets of those connections in a private epoll set and wakes the
// connection's `sig`; the application's epoll sets hold only `sig`, so it
// never gets two events for one descriptor in one
// epoll_wait (programs such as Python's selectors would handle a closed
// descriptor twice).
#include "engine/conn.hpp"

#include <cstdint>

namespace usmc::peer_watch {

void add(SmcConn* c);    // once per connection; the thread starts on first use
void remove(SmcConn* c); // before the connection's memory goes
void on_fork_child();    // the thread is gone: start again on first use

// The thread's work for one event of the connection registered under `key`
// (SmcConn::peer_watch_id); a key removed meanwhile is ignored. Public for
// tests.
void deliver(uint64_t key);

} // namespace usmc::peer_watch
