#pragma once
// Shared helpers of the interposed functions. The rule of this layer: a call
// on an fd usmc does not own goes to the real libc after at most one fd-table
// lookup, with no allocation and no lock, so it is safe in signal handlers
// and after fork.
#include "engine/af_smc.hpp"
#include "engine/fdtable.hpp"
#include "engine/sys.hpp"

#include <cerrno>

#define USMC_EXPORT extern "C" __attribute__((visibility("default")))

namespace usmc::shim {

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
                   c->phase.load(std::memory_order_relaxed) != Phase::Tcp
               ? c
               : nullptr;
}
// For writes: notes that the application wrote before a late CLC Proposal
// was seen (1 -> 2), then as smc().
inline SmcConn* smc_for_write(int fd) {
    if (reinterpret_cast<uintptr_t>(af_smc::conn_of(fd)) == 1) af_smc::note_late_write(fd);
    return smc(fd);
}
// For reads: also the late-CLC marker, which af_smc::recv handles.
inline SmcConn* smc_or_late(int fd) {
    SmcConn* c = af_smc::conn_of(fd);
    if (reinterpret_cast<uintptr_t>(c) <= 2 && c) return c;
    if (c && c->late_clc.load(std::memory_order_relaxed)) return c;
    return smc(fd);
}

inline int fail(int err) {
    errno = err;
    return -1;
}

// A new TCP socket (socket(), AF_SMC, IPPROTO_SMC): start tracking it.
void track_new_socket(int fd, int family, uint8_t flags);

// The SMC connection behind fd, or nullptr: plain TCP and every other
// descriptor take the real call after this one lookup.
SmcConn* smc(int fd);

} // namespace usmc::shim
