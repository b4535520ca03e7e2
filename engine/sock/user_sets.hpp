// SPDX-License-Identifier: MIT
#pragma once
// Epoll sets kept in user memory (issue 44; docs/DESIGN-NOTES.md "Issue 44:
// readiness in user memory"). An application's epoll set that holds an
// Active SMC connection gets a user-memory part (readiness::UserEpoll) for
// those connections, and a bell in its kernel part: one datagram socket
// that the peers of its connections ring, with a connection's token, when
// they take a request its set armed. While the set's thread is awake, a
// message costs no system call on either side; before it sleeps, it arms
// every connection it holds and looks once more.
//
// Where user memory cannot be exact, the set falls back for good, each
// registration becoming today's `sig` in the kernel part: a set added to
// another set or watched by poll/select, a set duplicated (dup, fcntl), a
// fork (either process may use it next), an exec that keeps it. A
// connection is in user memory in one set of a process at most; its other
// registrations, and those of a connection shared across fork, stay the
// kernel's. A connection that moves to TCP leaves the set as a `sig`
// registration first (af_smc_move.cpp then moves it to the socket).
#include "engine/conn/conn.hpp"
#include "engine/sock/af_smc.hpp"

#include <atomic>
#include <mutex>
#include <signal.h>
#include <sys/epoll.h>
#include <time.h>

namespace usmc::af_smc {

struct UserSet;
// Per epoll descriptor: its user-memory part (fallen sets stay, so their
// calls go straight to the kernel), made at the first SMC registration.
extern std::atomic<UserSet*>* g_user_sets;
extern std::atomic<uint32_t> g_user_set_count; // ever made (0: nothing to check)

inline bool has_user_set(int epfd) {
    auto* s = g_user_sets;
    return s && static_cast<unsigned>(epfd) < g_conns_capacity &&
           s[epfd].load(std::memory_order_acquire) != nullptr;
}

void user_sets_init(uint32_t capacity);

// epoll_ctl of connection `c` (Active) on descriptor `fd`: true if done in
// user memory (`*rc` is the call's result, errno set), false if the kernel
// path (`sig`) takes it. Takes the sets' lock, then c->epoll_mu.
bool user_ctl(SmcConn* c, int epfd, int op, int fd, epoll_event* ev, int* rc);
// epoll_wait/epoll_pwait/epoll_pwait2 on a set with a user-memory part
// (timeout in ns, -1: none; `pwait2`: the caller gave a timespec). False if
// the set fell back: the caller asks the kernel.
bool user_wait(int epfd, epoll_event* evs, int max, int64_t timeout_ns, const sigset_t* mask,
               bool pwait2, int* rc);
// A Connecting connection joins `epfd` (as `sig`): the set gets its
// user-memory part and bell now, so the descriptors a set holds do not change
// when its first connection comes up (nothing if `epfd` is no epoll set).
void user_set_prepare(int epfd);
// The connection closes (its last descriptor): out of its set.
void user_leave(SmcConn* c);
// The connection moves to TCP: its registrations become `sig` ones first.
void user_move_out(SmcConn* c);
// The lock every change of a set's holdings takes (before any connection's
// epoll_mu): a client handshake's end takes it too, so that an epoll_ctl
// of the application sees the connection connecting or done, never between.
std::mutex& user_sets_mutex();
// In a forked child: the sets' lock, which a parent's thread may have held.
void user_sets_after_fork_child();
// Under user_sets_mutex() and c->epoll_mu: the handshake of `c`, held by a
// set since it was connecting, went TCP: the set lets go of it and the
// kernel part holds its socket instead, with the application's events.
void user_connect_ended_locked(SmcConn* c);
// The set of `epfd` falls back to the kernel for good (nested, polled,
// duplicated); nothing if it has no user-memory part.
void user_set_fallback(int epfd);
// `epfd` is closed: its user-memory part goes.
void user_set_closed(int epfd);
// Before fork (every set falls back) and exec (those the image keeps).
void user_sets_before_fork();
void user_sets_before_exec();

} // namespace usmc::af_smc
