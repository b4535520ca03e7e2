#pragma once
// Shared helpers of the interposed functions. The rule of this layer: a call
// on an fd usmc does not own goes to the real libc after at most one fd-table
// lookup, with no allocation and no lock, so it is safe in signal handlers
// and after fork.
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

inline int fail(int err) {
    errno = err;
    return -1;
}

// A new TCP socket (socket(), AF_SMC, IPPROTO_SMC): start tracking it.
void track_new_socket(int fd, int family, uint8_t flags);
// A connection accepted from `listener`.
void track_accepted(int listener, int fd);

} // namespace usmc::shim
