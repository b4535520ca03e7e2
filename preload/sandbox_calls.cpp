// SPDX-License-Identifier: MIT
// Seccomp filters. A program that installs one (OpenSSH's preauth child,
// browsers' and services' sandboxes) forbids system calls usmc cannot
// foresee: OpenSSH's kills the process on sendto, which the SMC-D data
// path makes to wake a peer. So before a filter goes in, while the process
// may still make any call, its SMC connections move to TCP with their peers
// (af_smc::before_sandbox); the program then reads and writes plain sockets.
// A vfork child shares our memory and our connections: it passes through.
#include "engine/sock/engine.hpp"
#include "preload/shim.hpp"

#include <cstdarg>
#include <sys/prctl.h>

using namespace usmc;

void shim::before_sandbox() {
    if (!vfork_child()) af_smc::before_sandbox();
}

// prctl() takes up to four arguments after the option, register-sized, as
// glibc's own reads them.
USMC_EXPORT int prctl(int option, ...) noexcept {
    va_list ap;
    va_start(ap, option);
    unsigned long a = va_arg(ap, unsigned long), b = va_arg(ap, unsigned long);
    unsigned long c = va_arg(ap, unsigned long), d = va_arg(ap, unsigned long);
    va_end(ap);
    if (option == PR_SET_SECCOMP) shim::before_sandbox();
    if (!sys::real().prctl) {
        errno = ENOSYS;
        return -1;
    }
    return sys::real().prctl(option, a, b, c, d);
}
