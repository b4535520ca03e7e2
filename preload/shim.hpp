// SPDX-License-Identifier: MIT
#pragma once
// Shared helpers of the interposed functions. The rule of this layer: a call
// on an fd usmc does not own goes to the real libc after at most one fd-table
// lookup, with no allocation and no lock, so it is safe in signal handlers
// and after fork.
#include "engine/sock/engine.hpp"

#include <cerrno>

#define USMC_EXPORT extern "C" __attribute__((visibility("default")))

namespace usmc::shim {

// A child made by vfork() (or any clone sharing our memory on the calling
// thread's stack and TLS: posix_spawn) runs on our memory until it execs or
// exits: whatever it does to usmc's state happens to the parent's
// connections (Python's subprocess closes every descriptor with close_range
// there, which told the parent's peers their connections had closed). Such a
// child must leave usmc untouched: every interposed call passes straight to
// libc. The interposed vfork (vfork.cpp) marks the calling thread's TLS,
// which the child shares, with the parent's pid; a call that finds the mark
// compares pids once (the parent, back from vfork, clears it).
struct VforkMark {
    bool active;
    pid_t parent;
};
extern thread_local VforkMark t_vfork __attribute__((tls_model("initial-exec")));
bool vfork_child_slow();
// Before a seccomp filter (sandbox_calls.cpp).
void before_sandbox();
inline bool vfork_child() {
    return __builtin_expect(t_vfork.active, 0) && vfork_child_slow();
}

// Keeps errno across bookkeeping that runs after the real call.
class ErrnoGuard {
  public:
    ErrnoGuard() : saved_(errno) {}
    ~ErrnoGuard() { errno = saved_; }

  private:
    int saved_;
};

// An SMC connection, up or still handshaking. (1 and 2 mark a late-CLC
// check, for reads only; a connection whose handshake fell back passes
// through.)
inline SmcConn* smc(int fd) {
    SmcConn* c = af_smc::conn_of(fd);
    return reinterpret_cast<uintptr_t>(c) > 2 &&
                   c->phase.load(std::memory_order_relaxed) != Phase::Tcp && !vfork_child()
               ? c
               : nullptr;
}
// Also a connection moved to TCP with bytes of its rings left to hand over.
inline SmcConn* smc_or_moved(int fd) {
    SmcConn* c = af_smc::conn_of(fd);
    return reinterpret_cast<uintptr_t>(c) > 2 &&
                   (c->phase.load(std::memory_order_relaxed) != Phase::Tcp ||
                    c->moved_left.load(std::memory_order_relaxed)) &&
                   !vfork_child()
               ? c
               : nullptr;
}
// For writes: notes that the application wrote before a late CLC Proposal
// was seen (1 -> 2), then as smc_or_moved() (a resend goes before the write).
inline SmcConn* smc_for_write(int fd) {
    if (reinterpret_cast<uintptr_t>(af_smc::conn_of(fd)) == 1 && !vfork_child())
        af_smc::note_late_write(fd);
    return smc_or_moved(fd);
}
// For reads: also the late-CLC marker, which af_smc::recv handles.
inline SmcConn* smc_or_late(int fd) {
    SmcConn* c = af_smc::conn_of(fd);
    if (c && vfork_child()) return nullptr;
    if (reinterpret_cast<uintptr_t>(c) <= 2 && c) return c;
    if (c && (c->late_clc.load(std::memory_order_relaxed) ||
              c->moved_left.load(std::memory_order_relaxed)))
        return c;
    return smc(fd);
}

inline int fail(int err) {
    errno = err;
    return -1;
}

// close(): an SMC connection tells its peer, the fd table forgets the
// number, then the descriptor goes (with the raw system call if `nocancel`,
// for syscall(SYS_close)).
int close_fd(int fd, bool nocancel);

// A new TCP socket (socket(), AF_SMC, IPPROTO_SMC): start tracking it.
void track_new_socket(int fd, int family, uint8_t flags, int type);

// The SMC connection behind fd, or nullptr: plain TCP and every other
// descriptor take the real call after this one lookup.
SmcConn* smc(int fd);

} // namespace usmc::shim
