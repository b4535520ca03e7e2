// SPDX-License-Identifier: MIT
// syscall(): a program that makes a socket call through libc's syscall()
// instead of its wrapper must meet the same socket as one that calls the
// wrapper. libuv (Node.js) closes every descriptor with syscall(SYS_close)
// to stay clear of close()'s cancellation point; older libuv made accept4,
// epoll_ctl, epoll_pwait, dup3, recvmmsg and sendmmsg the same way. A close
// that passes usmc by leaves the connection behind: its peer is never told,
// its wake-up socket stays in the program's epoll set under the old number, and
// its descriptors and DMBs pile up until the top quarter of RLIMIT_NOFILE
// is full and every later connection falls back to TCP (FDLIMIT).
//
// So each system call the shim interposes as a libc function is routed to
// that function here, with the kernel's argument order (which, for these,
// is the wrapper's, except where noted); every other number goes to libc.
// Programs that issue system calls without libc (Go, inline assembly,
// io_uring) stay out of reach, as for any LD_PRELOAD interposer.
#include "preload/shim.hpp"

#include <csignal>
#include <cstdarg>
#include <linux/seccomp.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

using namespace usmc;

namespace {
// The kernel's sigset size, what glibc passes as sigsetsize.
constexpr unsigned long kSigsetBytes = _NSIG / 8;

template <class T>
T* ptr(long v) {
    return reinterpret_cast<T*>(v);
}
} // namespace

// syscall() takes up to six register-sized arguments after the number; like
// glibc's own (which loads all six registers whatever the caller passed),
// this reads six: the ones a call did not pass are never used.
USMC_EXPORT long syscall(long n, ...) {
    va_list ap;
    va_start(ap, n);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    int fd = int(a);
    switch (n) {
    // Descriptors ending or being copied: the fd table follows.
    case SYS_close:
        return shim::close_fd(fd, true);
    case SYS_close_range:
        return close_range(unsigned(a), unsigned(b), int(c));
    case SYS_dup:
        return dup(fd);
#ifdef SYS_dup2
    case SYS_dup2:
        return dup2(fd, int(b));
#endif
    case SYS_dup3:
        return dup3(fd, int(b), int(c));
    case SYS_fcntl:
        return fcntl(fd, int(b), c);
    case SYS_ioctl:
        return ioctl(fd, static_cast<unsigned long>(b), c);
    // Sockets.
    case SYS_socket:
        return socket(fd, int(b), int(c));
    case SYS_socketpair:
        return socketpair(fd, int(b), int(c), ptr<int>(d));
    case SYS_bind:
        return bind(fd, ptr<const sockaddr>(b), socklen_t(c));
    case SYS_listen:
        return listen(fd, int(b));
    case SYS_accept:
        return accept(fd, ptr<sockaddr>(b), ptr<socklen_t>(c));
    case SYS_accept4:
        return accept4(fd, ptr<sockaddr>(b), ptr<socklen_t>(c), int(d));
    case SYS_connect:
        return connect(fd, ptr<const sockaddr>(b), socklen_t(c));
    case SYS_shutdown:
        return shutdown(fd, int(b));
    case SYS_getsockname:
        return getsockname(fd, ptr<sockaddr>(b), ptr<socklen_t>(c));
    case SYS_getpeername:
        return getpeername(fd, ptr<sockaddr>(b), ptr<socklen_t>(c));
    case SYS_getsockopt:
        return getsockopt(fd, int(b), int(c), ptr<void>(d), ptr<socklen_t>(e));
    case SYS_setsockopt:
        return setsockopt(fd, int(b), int(c), ptr<const void>(d), socklen_t(e));
    // Data.
    case SYS_read:
        return read(fd, ptr<void>(b), size_t(c));
    case SYS_write:
        return write(fd, ptr<const void>(b), size_t(c));
    case SYS_readv:
        return readv(fd, ptr<const iovec>(b), int(c));
    case SYS_writev:
        return writev(fd, ptr<const iovec>(b), int(c));
    case SYS_recvfrom:
        return recvfrom(fd, ptr<void>(b), size_t(c), int(d), ptr<sockaddr>(e), ptr<socklen_t>(f));
    case SYS_sendto:
        return sendto(fd, ptr<const void>(b), size_t(c), int(d), ptr<const sockaddr>(e),
                      socklen_t(f));
    case SYS_recvmsg:
        return recvmsg(fd, ptr<msghdr>(b), int(c));
    case SYS_sendmsg:
        return sendmsg(fd, ptr<const msghdr>(b), int(c));
    case SYS_recvmmsg:
        return recvmmsg(fd, ptr<mmsghdr>(b), unsigned(c), int(d), ptr<timespec>(e));
    case SYS_sendmmsg:
        return sendmmsg(fd, ptr<mmsghdr>(b), unsigned(c), int(d));
    case SYS_sendfile:
        return sendfile(fd, int(b), ptr<off_t>(c), size_t(d));
    case SYS_splice:
        return splice(fd, ptr<loff_t>(b), int(c), ptr<loff_t>(d), size_t(e), unsigned(f));
        // Readiness. The kernel's calls with a signal mask take its size too;
        // another size than glibc's goes to the kernel, which refuses it.
#ifdef SYS_poll
    case SYS_poll:
        return poll(ptr<pollfd>(a), nfds_t(b), int(c));
#endif
    case SYS_ppoll:
        if (e != long(kSigsetBytes)) break;
        return ppoll(ptr<pollfd>(a), nfds_t(b), ptr<const timespec>(c), ptr<const sigset_t>(d));
#ifdef SYS_select
    case SYS_select:
        return select(fd, ptr<fd_set>(b), ptr<fd_set>(c), ptr<fd_set>(d), ptr<timeval>(e));
#endif
    case SYS_pselect6: {
        // The sixth argument is {const sigset_t* mask; size_t size}, or null.
        struct MaskArg {
            const sigset_t* mask;
            size_t size;
        };
        auto* m = ptr<const MaskArg>(f);
        if (m && m->mask && m->size != kSigsetBytes) break;
        return pselect(fd, ptr<fd_set>(b), ptr<fd_set>(c), ptr<fd_set>(d), ptr<const timespec>(e),
                       m ? m->mask : nullptr);
    }
#ifdef SYS_epoll_create
    case SYS_epoll_create:
        return epoll_create(fd);
#endif
    case SYS_epoll_create1:
        return epoll_create1(fd);
    case SYS_epoll_ctl:
        return epoll_ctl(fd, int(b), int(c), ptr<epoll_event>(d));
#ifdef SYS_epoll_wait
    case SYS_epoll_wait:
        return epoll_wait(fd, ptr<epoll_event>(b), int(c), int(d));
#endif
    case SYS_epoll_pwait:
        if (e && f != long(kSigsetBytes)) break;
        return epoll_pwait(fd, ptr<epoll_event>(b), int(c), int(d), ptr<const sigset_t>(e));
#ifdef SYS_epoll_pwait2
    case SYS_epoll_pwait2:
        if (e && f != long(kSigsetBytes)) break;
        return epoll_pwait2(fd, ptr<epoll_event>(b), int(c), ptr<const timespec>(d),
                            ptr<const sigset_t>(e));
#endif
    // The program is replaced: its listeners leave the registry first.
    case SYS_execve:
        return execve(ptr<const char>(a), ptr<char* const>(b), ptr<char* const>(c));
    case SYS_execveat:
        return execveat(fd, ptr<const char>(b), ptr<char* const>(c), ptr<char* const>(d), int(e));
    // A seccomp filter about to be installed (sandbox_calls.cpp).
    case SYS_prctl:
        return prctl(int(a), b, c, d, e);
    case SYS_seccomp:
        if (a == SECCOMP_SET_MODE_STRICT || a == SECCOMP_SET_MODE_FILTER) shim::before_sandbox();
        break;
    // io_uring bypasses the interposed calls (libuv sets one up through
    // syscall(); liburing's own system calls are out of reach).
    case SYS_io_uring_setup:
        if (!shim::vfork_child()) af_smc::before_io_uring();
        break;
    default:
        break;
    }
    return sys::real().syscall(n, a, b, c, d, e, f);
}
