// The data path. Every connection is plain TCP until the SMC-D engine lands,
// so these go straight to the kernel; they are interposed now so that the
// whole socket surface already passes through the shim (and its cost is
// measured by scripts/bench/passthrough.sh).
#include "preload/shim.hpp"

#include <sys/sendfile.h>

using namespace usmc;

extern "C" [[noreturn]] void __chk_fail(void);

USMC_EXPORT ssize_t read(int fd, void* buf, size_t n) {
    return sys::real().read(fd, buf, n);
}

USMC_EXPORT ssize_t readv(int fd, const iovec* iov, int cnt) {
    return sys::real().readv(fd, iov, cnt);
}

USMC_EXPORT ssize_t write(int fd, const void* buf, size_t n) {
    return sys::real().write(fd, buf, n);
}

USMC_EXPORT ssize_t writev(int fd, const iovec* iov, int cnt) {
    return sys::real().writev(fd, iov, cnt);
}

USMC_EXPORT ssize_t recv(int fd, void* buf, size_t n, int flags) {
    return sys::real().recv(fd, buf, n, flags);
}

USMC_EXPORT ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* addr,
                             socklen_t* len) {
    return sys::real().recvfrom(fd, buf, n, flags, addr, len);
}

USMC_EXPORT ssize_t recvmsg(int fd, msghdr* msg, int flags) {
    return sys::real().recvmsg(fd, msg, flags);
}

USMC_EXPORT int recvmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags, timespec* timeout) {
    return sys::real().recvmmsg(fd, vec, vlen, flags, timeout);
}

USMC_EXPORT ssize_t send(int fd, const void* buf, size_t n, int flags) {
    return sys::real().send(fd, buf, n, flags);
}

USMC_EXPORT ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* addr,
                           socklen_t len) {
    return sys::real().sendto(fd, buf, n, flags, addr, len);
}

USMC_EXPORT ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
    return sys::real().sendmsg(fd, msg, flags);
}

USMC_EXPORT int sendmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags) {
    return sys::real().sendmmsg(fd, vec, vlen, flags);
}

USMC_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept {
    return sys::real().sendfile(out_fd, in_fd, offset, count);
}

// glibc's other names for the same calls: off_t is 64-bit on LP64, and
// the double-underscore names are public aliases some libraries bind to.
USMC_EXPORT ssize_t sendfile64(int, int, off_t*, size_t) noexcept
    __attribute__((alias("sendfile")));
USMC_EXPORT ssize_t __read(int, void*, size_t) __attribute__((alias("read")));
USMC_EXPORT ssize_t __write(int, const void*, size_t) __attribute__((alias("write")));
USMC_EXPORT ssize_t __send(int, const void*, size_t, int) __attribute__((alias("send")));

// _FORTIFY_SOURCE variants (nginx and redis in Debian are built with them):
// check the buffer as glibc does, then take the normal path.
USMC_EXPORT ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
    if (n > buflen) __chk_fail();
    return read(fd, buf, n);
}

USMC_EXPORT ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
    if (n > buflen) __chk_fail();
    return recv(fd, buf, n, flags);
}

USMC_EXPORT ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags,
                                   sockaddr* addr, socklen_t* len) {
    if (n > buflen) __chk_fail();
    return recvfrom(fd, buf, n, flags, addr, len);
}
