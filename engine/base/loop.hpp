// SPDX-License-Identifier: MIT
#pragma once
// The engine's event loop: one thread per process (started on first use)
// that waits, in one private epoll set, for what the engine waits for
// without the application: a TCP connect to complete, a peer's first CLC
// bytes or its answer (connect_watch), a listener the application has left
// waiting (the listen watcher, af_smc_accept.cpp), the end of an
// epoll-watched connection's TCP socket (peer_watch), and their deadlines.
// One thread rather than one per watcher: each was an epoll_wait of its
// own, a thread to wake and a stack per process.
//
// A watch is one-shot: `on_event` runs once on the loop thread, with the
// epoll events that came or 0 at its deadline, and the watch is gone. A
// handler must not wait on anything another process holds (it runs the
// other watchers' events too); it may add watches.
#include <cstdint>
#include <functional>

namespace usmc::loop {

// Watches `fd` for `events` (EPOLLIN, EPOLLOUT, EPOLLRDHUP...; one-shot),
// until `timeout_ms` has passed (-1: no deadline; 0: at the loop's next
// turn). fd -1 is a timer: `on_event(0)` after `timeout_ms`. The caller
// keeps `fd` open until the handler has run or the watch is cancelled.
// Returns the watch's id, 0 if it could not be made (`on_event` is then
// never called).
//
// `kind` says what waits on the watch, for how the thread is scheduled.
// While many handshakes are in flight (a storm of short connections) the
// thread runs as SCHED_BATCH: its wake-ups no longer preempt the
// application's threads, so it runs when they wait or their slice ends and
// then takes many handshakes' events in one turn, instead of a context
// switch each way per event. A Wakeup event (a writer's space bell: an
// application thread sleeps until the loop has run) puts it back to the
// normal policy at once and keeps it there for a while. Only a thread that
// started under the normal policy is ever changed.
enum class Kind : uint8_t { Plain, Handshake, Wakeup };
uint64_t add(int fd, uint32_t events, int timeout_ms, std::function<void(uint32_t)> on_event,
             Kind kind = Kind::Plain);

// Takes a watch out (its fd out of the epoll set, before the caller closes
// it). False if it had fired already: its handler runs or ran, and the
// caller's own state must tell it that its object is gone.
bool cancel(uint64_t id);
// The same for a watch whose fd the caller closes next: its registration
// is left to the kernel, which drops it with the file (an EPOLL_CTL_DEL
// less per connection). Should the file live on elsewhere (a forked child,
// a descriptor passed on), the stale one-shot registration can fire once,
// under an id no watch has: ignored, as a cancelled watch's event is.
bool cancel_closing(uint64_t id);

// Raw watches, for a caller that must not allocate or take a lock (poll()
// and select() add the peer watch: a signal handler may run them over a
// thread inside malloc or inside the engine). No table entry and no
// std::function: the epoll data is the caller's `key` (< 2^63), handed to
// the one raw handler (set once, before the first raw watch) on the loop
// thread, with the events that came; one-shot, no deadline. add_raw needs
// the thread running already (start_now), and fails otherwise.
using RawHandler = void (*)(uint64_t key, uint32_t events);
void set_raw_handler(RawHandler h);
bool start_now(); // starts the thread if it is not (allocates)
bool add_raw(int fd, uint32_t events, uint64_t key);
// Takes a raw watch's registration out (fired or not), before the caller
// closes nothing: the descriptor stays open. (When the caller closes it,
// the kernel drops the registration with the file.)
void cancel_raw(int fd);

// `fd` is about to be closed: a registration a fired watch left parked
// (disabled) goes with it, and a watch of a new file under the same number
// is added, not re-armed (a hint: saves the failing EPOLL_CTL_MOD).
void forget(int fd);

// Watches not yet fired (tests).
size_t pending();
// Whether the thread runs as SCHED_BATCH now (tests, stats).
bool batched();

// A forked child: the thread is gone; start again on first use.
void on_fork_child();

} // namespace usmc::loop
