// Readiness calls. With every connection on TCP the kernel answers them
// directly; the SMC-D engine will substitute its eventfds here.
#include "preload/shim.hpp"

using namespace usmc;

extern "C" [[noreturn]] void __chk_fail(void);

USMC_EXPORT int poll(pollfd* fds, nfds_t n, int timeout) {
    return sys::real().poll(fds, n, timeout);
}

USMC_EXPORT int ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
    return sys::real().ppoll(fds, n, timeout, mask);
}

USMC_EXPORT int select(int n, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) {
    return sys::real().select(n, r, w, e, timeout);
}

USMC_EXPORT int pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout,
                        const sigset_t* mask) {
    return sys::real().pselect(n, r, w, e, timeout, mask);
}

USMC_EXPORT int epoll_create(int size) noexcept {
    return sys::real().epoll_create(size);
}

USMC_EXPORT int epoll_create1(int flags) noexcept {
    return sys::real().epoll_create1(flags);
}

USMC_EXPORT int epoll_ctl(int epfd, int op, int fd, epoll_event* ev) noexcept {
    return sys::real().epoll_ctl(epfd, op, fd, ev);
}

USMC_EXPORT int epoll_wait(int epfd, epoll_event* evs, int max, int timeout) {
    return sys::real().epoll_wait(epfd, evs, max, timeout);
}

USMC_EXPORT int epoll_pwait(int epfd, epoll_event* evs, int max, int timeout,
                            const sigset_t* mask) {
    return sys::real().epoll_pwait(epfd, evs, max, timeout, mask);
}

USMC_EXPORT int epoll_pwait2(int epfd, epoll_event* evs, int max, const timespec* timeout,
                             const sigset_t* mask) {
    auto fn = sys::real().epoll_pwait2;
    if (!fn) return shim::fail(ENOSYS);
    return fn(epfd, evs, max, timeout, mask);
}

USMC_EXPORT int __poll(pollfd*, nfds_t, int) __attribute__((alias("poll")));
USMC_EXPORT int __select(int, fd_set*, fd_set*, fd_set*, timeval*) __attribute__((alias("select")));

USMC_EXPORT int __poll_chk(pollfd* fds, nfds_t n, int timeout, size_t fdslen) {
    if (fdslen / sizeof(*fds) < n) __chk_fail();
    return poll(fds, n, timeout);
}

USMC_EXPORT int __ppoll_chk(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask,
                            size_t fdslen) {
    if (fdslen / sizeof(*fds) < n) __chk_fail();
    return ppoll(fds, n, timeout, mask);
}
