// SPDX-License-Identifier: MIT
#pragma once
// Writers waiting for the peer to free space (wakeup.hpp: their `sig` holds
// a fill, kept in a sink only this process can drain). The peer cannot
// drain it, so when it takes our kWaitSpace it rings our bell instead: one
// Unix datagram socket per process, bound to a name made from a random id
// that the writer puts into the peer's control line with the wait (smcd/cdc_line.hpp,
// `space_bell`). The engine loop watches the bell; when it rings, it looks
// at every waiting connection and drains the sink of each that has space
// (or has ended). A timer looks too while any waits, as a backstop for a
// bell that was not rung (a forked child and its parent waiting on one
// connection with bells of their own: the peer rings the last one named).
//
// The hop through the loop is paid only when a ring was full: connections
// whose rings never fill never come here.
#include "engine/conn/conn.hpp"

#include <cstdint>

namespace usmc::space_watch {

// How often the backstop looks while connections wait.
constexpr int kBackstopMs = 200;

// This process's bell id (made, bound and watched on first use); 0 if it
// cannot be had (the caller then leaves `sig` writable).
uint64_t bell();
// `c` filled `sig` and asks the peer for space. Idempotent.
void add(SmcConn* c);
// Before `c` goes.
void remove(SmcConn* c);
// Connections waiting (tests).
size_t waiting();
// The parent's bell, set and loop are not this process's.
void on_fork_child();

} // namespace usmc::space_watch
