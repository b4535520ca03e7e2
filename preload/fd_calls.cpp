// SPDX-License-Identifier: MIT
// Calls that end or duplicate descriptors: they keep the fd table true to the
// kernel's, so a recycled fd number never inherits an old socket's record.
#include "preload/shim.hpp"

#include <cstdarg>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

using namespace usmc;

namespace usmc::shim {
int close_fd(int fd, bool nocancel) {
    // syscall(SYS_close) is how libuv closes (close() is a cancellation
    // point); it keeps that property here.
    auto real_close = [nocancel](int n) {
        return nocancel ? int(sys::real().syscall(SYS_close, n)) : sys::real().close(n);
    };
    if (vfork_child()) return real_close(fd);
    auto closed =
        af_smc::on_close(fd); // an SMC connection tells its peer before the TCP socket goes
    g_fds.clear(fd);
    int rc = real_close(fd);
    if (closed.listener) af_smc::after_close(closed);
    return rc;
}
} // namespace usmc::shim

USMC_EXPORT int close(int fd) {
    return shim::close_fd(fd, false);
}

USMC_EXPORT int close_range(unsigned first, unsigned last, int flags) noexcept {
    auto fn = sys::real().close_range;
    if (!fn) return shim::fail(ENOSYS);
    if (shim::vfork_child()) return fn(first, last, flags);
    if (!(flags & CLOSE_RANGE_CLOEXEC))
        for (unsigned fd = first; fd <= last && fd < g_fds.high(); ++fd)
            af_smc::after_close(af_smc::on_close(int(fd)));
    int rc = fn(first, last, flags);
    if (rc == 0 && !(flags & CLOSE_RANGE_CLOEXEC)) g_fds.clear_range(first, last);
    return rc;
}

USMC_EXPORT int dup(int fd) noexcept {
    int nfd = sys::real().dup(fd);
    if (nfd >= 0 && !shim::vfork_child()) {
        g_fds.copy(fd, nfd);
        af_smc::on_dup(fd, nfd);
    }
    return nfd;
}

USMC_EXPORT int dup2(int fd, int fd2) noexcept {
    int rc = sys::real().dup2(fd, fd2);
    if (rc >= 0 && fd != fd2 && !shim::vfork_child()) {
        g_fds.copy(fd, fd2);
        af_smc::on_dup(fd, fd2);
    }
    return rc;
}

USMC_EXPORT int dup3(int fd, int fd2, int flags) noexcept {
    int rc = sys::real().dup3(fd, fd2, flags);
    if (rc >= 0 && !shim::vfork_child()) {
        g_fds.copy(fd, fd2);
        af_smc::on_dup(fd, fd2);
    }
    return rc;
}

// fcntl's third argument is an int or a pointer depending on cmd; on the
// supported ABIs both travel in one register, so it is forwarded as a
// pointer-sized value.
USMC_EXPORT int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void* arg = va_arg(ap, void*);
    va_end(ap);
    int rc = sys::real().fcntl(fd, cmd, arg);
    if (rc < 0 || shim::vfork_child()) return rc;
    if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) {
        g_fds.copy(fd, rc);
        af_smc::on_dup(fd, rc);
    }
    if (cmd == F_SETFL) {
        bool nonblock = reinterpret_cast<uintptr_t>(arg) & O_NONBLOCK;
        if (SmcConn* c = shim::smc(fd))
            af_smc::set_nonblock(c, nonblock);
        else
            g_fds.set_hint(fd, kHintNonblock, nonblock);
    }
    return rc;
}

USMC_EXPORT int ioctl(int fd, unsigned long request, ...) noexcept {
    va_list ap;
    va_start(ap, request);
    void* arg = va_arg(ap, void*);
    va_end(ap);
    if (SmcConn* c = shim::smc(fd)) {
        // The bytes waiting are in shared memory, not in the TCP socket.
        if (request == FIONREAD || request == SIOCOUTQ || request == SIOCATMARK)
            return af_smc::ioctl_queue(c, fd, request, static_cast<int*>(arg));
        int rc = sys::real().ioctl(fd, request, arg);
        if (rc == 0 && request == FIONBIO && arg)
            af_smc::set_nonblock(c, *static_cast<int*>(arg) != 0);
        return rc;
    }
    int rc = sys::real().ioctl(fd, request, arg);
    if (rc == 0 && request == FIONBIO && arg && !shim::vfork_child())
        g_fds.set_hint(fd, kHintNonblock, *static_cast<int*>(arg) != 0);
    return rc;
}

USMC_EXPORT int fcntl64(int, int, ...) __attribute__((alias("fcntl")));
USMC_EXPORT int __fcntl(int, int, ...) __attribute__((alias("fcntl")));
USMC_EXPORT int __close(int) __attribute__((alias("close")));
USMC_EXPORT int __dup2(int, int) noexcept __attribute__((alias("dup2")));
