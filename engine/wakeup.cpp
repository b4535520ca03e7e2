#include "engine/wakeup.hpp"

#include "engine/sys.hpp"

#include <cerrno>
#include <sys/socket.h>

namespace usmc::wakeup {

namespace {
// Above the minimum send buffer (SOCK_MIN_SNDBUF, ~4.5 KiB with its
// overhead), so one send leaves the sender unwritable (the kernel reports
// writable only below a quarter of the buffer); a drain takes it in one read.
constexpr size_t kFillBytes = 4096;
constexpr int kMaxDrainReads = 4;
} // namespace

bool make_pair(int* near_end, int* far_end) {
    int sv[2];
    *near_end = *far_end = -1;
    if (sys::real().socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        return false;
    int a = sys::place_high_strict(sv[0]);
    int b = sys::place_high_strict(sv[1]);
    if (a < 0 || b < 0) {
        if (a >= 0) sys::real().close(a);
        if (b >= 0) sys::real().close(b);
        errno = EMFILE;
        return false;
    }
    *near_end = a;
    *far_end = b;
    return true;
}

void send(int fd) {
    char b = 1;
    ssize_t rc = sys::real().send(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)rc;
}

bool drain(int fd) {
    char buf[kFillBytes];
    for (int i = 0; i < kMaxDrainReads; ++i) {
        ssize_t n = sys::real().recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0) return false;
        if (n < static_cast<ssize_t>(sizeof buf)) return true; // empty now (or EAGAIN)
    }
    return true;
}

void fill(int fd, bool shrink) {
    if (shrink) {
        int smallest = 1; // the kernel rounds up to its minimum
        sys::real().setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &smallest, sizeof smallest);
    }
    static const char zeros[kFillBytes] = {};
    ssize_t rc = sys::real().send(fd, zeros, sizeof zeros, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)rc;
}

bool plausible(int fd) {
    // (Not a socket: ENOTSOCK. No fstat needed.)
    int type = 0, domain = 0;
    socklen_t len = sizeof type, dlen = sizeof domain;
    return sys::real().getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) == 0 &&
           domain == AF_UNIX && sys::real().getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
           type == SOCK_STREAM;
}

} // namespace usmc::wakeup
