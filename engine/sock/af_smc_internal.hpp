// SPDX-License-Identifier: MIT
#pragma once
// What the pieces of the socket layer share (af_smc.cpp: descriptors and
// data calls; af_smc_connect.cpp; af_smc_accept.cpp; af_smc_poll.cpp).
// Not for the preload.
#include "engine/base/fdtable.hpp"
#include "engine/handshake/handshake.hpp"
#include "engine/handshake/handshake_queue.hpp"
#include "engine/handshake/transports.hpp"
#include "engine/sock/af_smc.hpp"
#include "engine/sock/listener.hpp"

#include <mutex>

namespace usmc::af_smc::detail {

// A connection handed to the application as TCP by a listener that expected
// SMC clients: its first bytes may still be a late CLC Proposal, which the
// shim must swallow (and decline) before the application reads. Marked in
// the connection table itself, so reads still cost one lookup.
inline SmcConn* const kLateClc = reinterpret_cast<SmcConn*>(uintptr_t{1});
// The same, after the application wrote to it: a late Proposal is then only
// swallowed, never answered (the client saw those bytes and went TCP).
inline SmcConn* const kLateClcWrote = reinterpret_cast<SmcConn*>(uintptr_t{2});
inline bool is_late(const SmcConn* c) {
    return c == kLateClc || c == kLateClcWrote;
}

// Listeners by fd. Loads that keep the pointer beyond the call take
// g_listen_mu and a reference; deletion happens under it too.
extern std::atomic<SmcListener*>* g_listeners;
extern std::mutex g_listen_mu;
// The listen watcher (af_smc_accept.cpp): a closing listener leaves it
// before its descriptor goes; a forked child starts without it.
void listen_watch_remove(SmcListener* l);
void listen_watch_fork_child();
// The listener behind fd with a reference taken (unref() when done), or nullptr.
SmcListener* acquire_listener(int fd);

inline std::atomic<SmcConn*>& slot(int fd) {
    return g_conns.load(std::memory_order_acquire)[fd];
}
inline bool in_table(int fd) {
    return g_conns.load() && static_cast<unsigned>(fd) < g_conns_capacity;
}
// An SMC connection in Active or Connecting phase (not the late-CLC marker,
// not a finished fallback).
inline bool is_smc(const SmcConn* c) {
    return reinterpret_cast<uintptr_t>(c) > 2 &&
           c->phase.load(std::memory_order_acquire) != Phase::Tcp;
}

// The process's transport devices, made on first need (and again in a
// forked child, which gets its own identity: transports.hpp).
struct Engine {
    HandshakeDevices devs;
    HandshakeQueue* server_q = nullptr;
    std::atomic<HandshakeQueue*> client_q{nullptr}; // (connect() reads it without the lock)
};
extern std::mutex g_engine_mu;
extern Engine g_engine;
bool ensure_engine(bool need_endpoint);
HandshakeQueue* server_queue();
HandshakeQueue* client_queue();
HandshakeConfig handshake_config();
// The devices the handshakes run on (g_engine's, made by ensure_engine).
inline HandshakeDevices devices() {
    return g_engine.devs;
}

void set_mode(int fd, SockMode mode, uint32_t reason);
void count_result(uint32_t reason, bool smc);
// Puts an Active connection into the table for `fd`.
void install(int fd, std::unique_ptr<SmcConn> c, bool nonblock);
// A connection became active on `fd` (install, or a background connect's
// end): counted by its buffers' sizes and recorded for observers (diag.hpp).
void activated(int fd, SmcConn& c);
// Frees a connection nobody else in this process uses any more; the peer is
// told if this was the last process holding it.
void release(SmcConn* c);
// Around an exec (not a vfork child's): counts this process out of the
// connections that close with it and that another process still holds, and
// back in if the exec failed.
void conns_before_exec();
void conns_exec_failed();

// Moving a connection to TCP with its peer (af_smc_move.cpp). take_move:
// the peer moved (smc_move_noticed): this side follows; false if it did not
// after all, or its cursors were impossible (the connection is broken).
// move_out: this process stops using the rings (an exec the descriptor
// survives, `exec`; a seccomp filter; the descriptor passed to another
// process, `passed`: as at an exec, the locks are only tried, for a
// sendmsg from a signal handler over a thread inside a call on it).
// `wait` false: only if no thread holds the connection's locks (exit and
// exec, which a signal handler may call over a thread inside a recv).
bool take_move(int fd, SmcConn* c, bool wait = true);
void move_out(int fd, SmcConn* c, bool exec, bool passed = false);
// A listener passed to another process: its registry entry withdrawn
// (clients stop sending Proposals the other process would read as data).
void listener_passed(int fd);
// TCP_NODELAY and TCP_CORK kept in usmc that the kernel's socket lacks go
// to it, on every way the socket takes the data over (a move to TCP, a
// fallback), after the phase left Active: a setsockopt that kept a value
// meanwhile sees the phase then, and calls this itself. Also before a
// fork, after which the kernel's socket is where both processes look.
void sync_tcp_options(int fd, SmcConn& c);
// A connecting client's connection became Active: its send path corks if
// TCP_CORK was set while it connected.
void tcp_options_active(SmcConn& c);
// A moved connection with bytes left (SmcConn::moved_left): a read served
// from the stash (kPassThrough when none is left), a write's resend pushed
// first (0, or -errno), whether the stash waits (poll), an epoll_ctl on
// the socket followed on `sig` while it does, and the resend pushed (for a
// while) before an exec or exit.
ssize_t moved_recv(SmcConn* c, const iovec* iov, int iovcnt, int flags);
int moved_push(SmcConn* c, int fd, bool nonblock);
bool moved_stash_waiting(const SmcConn* c);
void moved_ctl(SmcConn* c, int epfd, int op, const epoll_event* ev);
void moved_at_exit(int fd, SmcConn* c, bool exec);
// An exec that failed after its moves: the connection runs as TCP here.
void moved_exec_failed(int fd, SmcConn* c);
// Frees a connection whose handshake failed or that never reached the
// application (its wake-up pair, DMBs, the object).
void discard(SmcConn* c);
// The handshake moved the connection away from SMC: close a connection that
// never reached the application.
void discard_accepted(Accepted& a);

// Descriptor budget: false when `fd` (the lowest free number the kernel just
// gave) plus what an SMC connection adds would come near RLIMIT_NOFILE.
bool fd_budget_ok(int fd);

bool fd_nonblocking(int fd);

// An SMC connection joined (+1) or left (-1) epoll set `epfd` (busy polling
// looks at the count; it never goes below 0).
void note_epoll_member(int epfd, int delta);
// What the kernel holds in an epoll set for the application's `ev` on a
// connection: its events on `sig`, with its own data.
epoll_event sig_registration(const epoll_event& ev);
// epoll_ctl of an Active connection through its `sig` (under c->epoll_mu).
int kernel_ctl(SmcConn* c, int epfd, int op, epoll_event* ev);
inline int fail(int err) {
    errno = err;
    return -1;
}

} // namespace usmc::af_smc::detail
