// SPDX-License-Identifier: MIT
// The data path: a connection in SMC-D mode reads and writes through shared
// memory (engine/conn/tx.cpp, engine/conn/rx.cpp); everything else goes to the kernel
// after one fd-table lookup.
#include "preload/shim.hpp"

#include <algorithm>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <unistd.h>

using namespace usmc;

extern "C" [[noreturn]] void __chk_fail(void);

namespace {

ssize_t smc_read(SmcConn* c, int fd, const iovec* iov, int cnt, int flags) {
    return af_smc::recv(c, fd, iov, cnt, flags);
}

} // namespace

USMC_EXPORT ssize_t read(int fd, void* buf, size_t n) {
    if (SmcConn* c = shim::smc_or_late(fd)) {
        iovec iov{buf, n};
        ssize_t r = smc_read(c, fd, &iov, 1, 0);
        if (r != af_smc::kPassThrough) return r;
    }
    return sys::real().read(fd, buf, n);
}

USMC_EXPORT ssize_t readv(int fd, const iovec* iov, int cnt) {
    if (SmcConn* c = shim::smc_or_late(fd)) {
        ssize_t r = smc_read(c, fd, iov, cnt, 0);
        if (r != af_smc::kPassThrough) return r;
    }
    return sys::real().readv(fd, iov, cnt);
}

USMC_EXPORT ssize_t recv(int fd, void* buf, size_t n, int flags) {
    if (SmcConn* c = shim::smc_or_late(fd)) {
        iovec iov{buf, n};
        ssize_t r = smc_read(c, fd, &iov, 1, flags);
        if (r != af_smc::kPassThrough) return r;
    }
    return sys::real().recv(fd, buf, n, flags);
}

USMC_EXPORT ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* addr,
                             socklen_t* len) {
    if (SmcConn* c = shim::smc_or_late(fd)) {
        iovec iov{buf, n};
        ssize_t r = smc_read(c, fd, &iov, 1, flags);
        if (r != af_smc::kPassThrough) {
            if (r >= 0 && addr && len) *len = 0; // a connected stream reports no address
            return r;
        }
    }
    return sys::real().recvfrom(fd, buf, n, flags, addr, len);
}

USMC_EXPORT ssize_t recvmsg(int fd, msghdr* msg, int flags) {
    if (SmcConn* c = shim::smc_or_late(fd)) {
        ssize_t r = smc_read(c, fd, msg->msg_iov, int(msg->msg_iovlen), flags);
        if (r != af_smc::kPassThrough) {
            if (r >= 0) {
                msg->msg_namelen = 0;
                msg->msg_controllen = 0;
                msg->msg_flags = flags & MSG_OOB; // an urgent byte is flagged, as TCP flags it
            }
            return r;
        }
    }
    return sys::real().recvmsg(fd, msg, flags);
}

USMC_EXPORT int recvmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags, timespec* timeout) {
    if (SmcConn* c = shim::smc(fd)) {
        // One message per call on a stream, as TCP behaves.
        if (vlen == 0) return 0;
        ssize_t r = recvmsg(fd, &vec[0].msg_hdr, flags & ~MSG_WAITFORONE);
        (void)c;
        if (r < 0) return -1;
        vec[0].msg_len = unsigned(r);
        return 1;
    }
    return sys::real().recvmmsg(fd, vec, vlen, flags, timeout);
}

USMC_EXPORT ssize_t write(int fd, const void* buf, size_t n) {
    if (SmcConn* c = shim::smc_for_write(fd)) {
        iovec iov{const_cast<void*>(buf), n};
        return af_smc::send(c, fd, &iov, 1, 0);
    }
    return sys::real().write(fd, buf, n);
}

USMC_EXPORT ssize_t writev(int fd, const iovec* iov, int cnt) {
    if (SmcConn* c = shim::smc_for_write(fd)) return af_smc::send(c, fd, iov, cnt, 0);
    return sys::real().writev(fd, iov, cnt);
}

USMC_EXPORT ssize_t send(int fd, const void* buf, size_t n, int flags) {
    if (SmcConn* c = shim::smc_for_write(fd)) {
        iovec iov{const_cast<void*>(buf), n};
        return af_smc::send(c, fd, &iov, 1, flags);
    }
    return sys::real().send(fd, buf, n, flags);
}

USMC_EXPORT ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* addr,
                           socklen_t len) {
    if (SmcConn* c =
            shim::smc_for_write(fd)) { // a connected stream ignores the address, as TCP does
        iovec iov{const_cast<void*>(buf), n};
        return af_smc::send(c, fd, &iov, 1, flags);
    }
    return sys::real().sendto(fd, buf, n, flags, addr, len);
}

USMC_EXPORT ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
    if (SmcConn* c = shim::smc_for_write(fd))
        return af_smc::send(c, fd, msg->msg_iov, int(msg->msg_iovlen), flags);
    // Descriptors passed to another process (SCM_RIGHTS; any socket that
    // carries them is a Unix one, never an SMC connection).
    if (msg && msg->msg_controllen && !shim::vfork_child()) af_smc::before_pass(msg);
    return sys::real().sendmsg(fd, msg, flags);
}

USMC_EXPORT int sendmmsg(int fd, mmsghdr* vec, unsigned vlen, int flags) {
    if (SmcConn* c = shim::smc_for_write(fd)) {
        unsigned i = 0;
        for (; i < vlen; ++i) {
            ssize_t r =
                af_smc::send(c, fd, vec[i].msg_hdr.msg_iov, int(vec[i].msg_hdr.msg_iovlen), flags);
            if (r < 0) return i ? int(i) : -1;
            vec[i].msg_len = unsigned(r);
        }
        return int(i);
    }
    if (!shim::vfork_child())
        for (unsigned i = 0; i < vlen; ++i)
            if (vec[i].msg_hdr.msg_controllen) af_smc::before_pass(&vec[i].msg_hdr);
    return sys::real().sendmmsg(fd, vec, vlen, flags);
}

USMC_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept {
    if (SmcConn* c = shim::smc_for_write(out_fd))
        return af_smc::sendfile(c, out_fd, in_fd, offset, count);
    return sys::real().sendfile(out_fd, in_fd, offset, count);
}

// splice() to or from an SMC connection moves the bytes through a buffer:
// the kernel's splice would put them on the TCP connection, which the peer
// no longer reads in SMC mode.
USMC_EXPORT ssize_t splice(int in_fd, loff_t* in_off, int out_fd, loff_t* out_off, size_t len,
                           unsigned flags) {
    SmcConn* in = shim::smc(in_fd);
    SmcConn* out = shim::smc_for_write(out_fd);
    if (!in && !out) return sys::real().splice(in_fd, in_off, out_fd, out_off, len, flags);
    char buf[65536];
    size_t want = std::min(len, sizeof buf);
    ssize_t n;
    if (in) {
        iovec iov{buf, want};
        n = af_smc::recv(in, in_fd, &iov, 1, (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0);
    } else {
        n = in_off ? pread(in_fd, buf, want, *in_off) : sys::real().read(in_fd, buf, want);
        if (n > 0 && in_off) *in_off += n;
    }
    if (n <= 0) return n;
    size_t done = 0;
    while (done < size_t(n)) {
        ssize_t w;
        if (out) {
            iovec iov{buf + done, size_t(n) - done};
            w = af_smc::send(out, out_fd, &iov, 1, 0);
        } else {
            w = out_off ? pwrite(out_fd, buf + done, size_t(n) - done, *out_off)
                        : sys::real().write(out_fd, buf + done, size_t(n) - done);
            if (w > 0 && out_off) *out_off += w;
        }
        if (w < 0) return done ? ssize_t(done) : w;
        done += size_t(w);
    }
    return ssize_t(done);
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
