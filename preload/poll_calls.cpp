// SPDX-License-Identifier: MIT
// Readiness calls. Sets without SMC fds go straight to the kernel. For SMC
// fds the engine arms the peer's wake-ups and substitutes its wake-up socket
// (poll/select), or registers them in the epoll set with the application's
// own epoll_data (epoll_ctl), so epoll_wait itself needs no translation.
#include "preload/shim.hpp"

#include <cstddef>
#include <memory_resource>
#include <vector>

// glibc declares poll()'s array write-only (access attribute), though poll
// reads fd and events from it; GCC then warns when we read them too (clang
// has no such warning, and rejects the unknown name under -Werror).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

using namespace usmc;

extern "C" [[noreturn]] void __chk_fail(void);

namespace {

// select()/pselect() with SMC fds in their sets: done as a poll() over the
// same descriptors, results written back into the sets (exceptfds: POLLPRI,
// urgent data).
bool sets_hold_smc(int n, const fd_set* r, const fd_set* w, const fd_set* e) {
    if (!af_smc::g_conns.load(std::memory_order_acquire)) return false;
    for (int fd = 0; fd < n; ++fd)
        if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) &&
            (shim::smc_or_moved(fd) || af_smc::is_listener(fd)))
            return true;
    return false;
}

int select_via_poll(int n, fd_set* r, fd_set* w, fd_set* e, int timeout_ms, const sigset_t* mask) {
    // On the stack for the usual few descriptors: select() may be the only
    // place the application takes its signals, whose handlers may allocate
    // (af_smc::poll says why that must not find us inside malloc).
    alignas(std::max_align_t) std::byte arena[64 * sizeof(pollfd)];
    std::pmr::monotonic_buffer_resource mem(arena, sizeof arena);
    std::pmr::vector<pollfd> p(&mem);
    for (int fd = 0; fd < n; ++fd) {
        short ev =
            short(((r && FD_ISSET(fd, r)) ? POLLIN : 0) | ((w && FD_ISSET(fd, w)) ? POLLOUT : 0) |
                  ((e && FD_ISSET(fd, e)) ? POLLPRI : 0));
        if (ev) p.push_back({fd, ev, 0});
    }
    int rc = af_smc::poll(p.data(), p.size(), timeout_ms, mask);
    if (rc < 0) return rc;
    if (r) FD_ZERO(r);
    if (w) FD_ZERO(w);
    if (e) FD_ZERO(e);
    int count = 0;
    for (const auto& x : p) {
        if (x.revents & POLLNVAL) {
            errno = EBADF;
            return -1;
        }
        if (r && (x.events & POLLIN) && (x.revents & (POLLIN | POLLHUP | POLLERR))) {
            FD_SET(x.fd, r);
            ++count;
        }
        if (w && (x.events & POLLOUT) && (x.revents & (POLLOUT | POLLERR))) {
            FD_SET(x.fd, w);
            ++count;
        }
        if (e && (x.events & POLLPRI) && (x.revents & POLLPRI)) {
            FD_SET(x.fd, e);
            ++count;
        }
    }
    return count;
}

int to_ms(const timespec* ts) {
    return ts ? int(ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000) : -1;
}

// An epoll set kept in user memory that poll/select watches falls back to
// the kernel first (its readiness must then be the kernel's).
void polled_sets(const pollfd* fds, nfds_t n) {
    if (!af_smc::any_user_set()) return;
    for (nfds_t i = 0; i < n; ++i)
        if (af_smc::epoll_in_user_memory(fds[i].fd)) af_smc::epoll_set_watched(fds[i].fd);
}
void selected_sets(int n, const fd_set* r, const fd_set* w, const fd_set* e) {
    if (!af_smc::any_user_set()) return;
    for (int fd = 0; fd < n; ++fd)
        if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) &&
            af_smc::epoll_in_user_memory(fd))
            af_smc::epoll_set_watched(fd);
}

int64_t to_ns(int timeout_ms) {
    return timeout_ms < 0 ? -1 : int64_t(timeout_ms) * 1000000;
}

} // namespace

USMC_EXPORT int poll(pollfd* fds, nfds_t n, int timeout) {
    if (!shim::vfork_child()) polled_sets(fds, n);
    if (af_smc::any_smc(fds, n) && !shim::vfork_child())
        return af_smc::poll(fds, n, timeout, nullptr);
    return sys::real().poll(fds, n, timeout);
}

USMC_EXPORT int ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
    if (!shim::vfork_child()) polled_sets(fds, n);
    if (af_smc::any_smc(fds, n) && !shim::vfork_child())
        return af_smc::poll(fds, n, to_ms(timeout), mask);
    return sys::real().ppoll(fds, n, timeout, mask);
}

USMC_EXPORT int select(int n, fd_set* r, fd_set* w, fd_set* e, timeval* timeout) {
    if (!shim::vfork_child()) selected_sets(n, r, w, e);
    if (sets_hold_smc(n, r, w, e) && !shim::vfork_child()) {
        int ms = timeout ? int(timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000) : -1;
        return select_via_poll(n, r, w, e, ms, nullptr);
    }
    return sys::real().select(n, r, w, e, timeout);
}

USMC_EXPORT int pselect(int n, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout,
                        const sigset_t* mask) {
    if (!shim::vfork_child()) selected_sets(n, r, w, e);
    if (sets_hold_smc(n, r, w, e) && !shim::vfork_child())
        return select_via_poll(n, r, w, e, to_ms(timeout), mask);
    return sys::real().pselect(n, r, w, e, timeout, mask);
}

USMC_EXPORT int epoll_create(int size) noexcept {
    return sys::real().epoll_create(size);
}

USMC_EXPORT int epoll_create1(int flags) noexcept {
    return sys::real().epoll_create1(flags);
}

USMC_EXPORT int epoll_ctl(int epfd, int op, int fd, epoll_event* ev) noexcept {
    // A set kept in user memory put inside another set: the kernel's from here.
    if (af_smc::epoll_in_user_memory(fd) && !shim::vfork_child()) af_smc::epoll_set_watched(fd);
    if ((shim::smc_or_moved(fd) || af_smc::is_listener(fd)) && !shim::vfork_child())
        return af_smc::epoll_ctl(epfd, op, fd, ev);
    int rc = sys::real().epoll_ctl(epfd, op, fd, ev);
    if (rc == 0 && op == EPOLL_CTL_ADD && !shim::vfork_child()) af_smc::note_epoll_add(fd);
    return rc;
}

USMC_EXPORT int epoll_wait(int epfd, epoll_event* evs, int max, int timeout) {
    return epoll_pwait(epfd, evs, max, timeout, nullptr);
}

USMC_EXPORT int epoll_pwait(int epfd, epoll_event* evs, int max, int timeout,
                            const sigset_t* mask) {
    for (int round = 0; round < 2; ++round) {
        if (af_smc::epoll_in_user_memory(epfd) && !shim::vfork_child())
            if (int rc; af_smc::epoll_wait_user(epfd, evs, max, to_ns(timeout), mask, false, &rc))
                return rc;
        int rc = af_smc::epoll_spins(epfd) && !shim::vfork_child()
                     ? af_smc::epoll_wait_spin(epfd, evs, max, timeout, mask)
                 : mask ? sys::real().epoll_pwait(epfd, evs, max, timeout, mask)
                        : sys::real().epoll_wait(epfd, evs, max, timeout);
        // (The set got its user-memory part while this thread slept in the
        // kernel: its bell woke us, and the wait goes on there.)
        if (rc <= 0 || shim::vfork_child() || !af_smc::any_user_set()) return rc;
        if (int k = af_smc::epoll_kernel_returned(epfd, evs, rc); k != 0 || round == 1) return k;
    }
    return 0;
}

USMC_EXPORT int epoll_pwait2(int epfd, epoll_event* evs, int max, const timespec* timeout,
                             const sigset_t* mask) {
    auto fn = sys::real().epoll_pwait2;
    if (!fn) return shim::fail(ENOSYS);
    if (af_smc::epoll_in_user_memory(epfd) && !shim::vfork_child()) {
        if (timeout &&
            (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000))
            return shim::fail(EINVAL);
        int64_t ns = timeout ? int64_t(timeout->tv_sec) * 1000000000 + timeout->tv_nsec : -1;
        if (int rc; af_smc::epoll_wait_user(epfd, evs, max, ns, mask, true, &rc)) return rc;
    }
    int rc = fn(epfd, evs, max, timeout, mask);
    if (rc <= 0 || shim::vfork_child() || !af_smc::any_user_set()) return rc;
    if (int k = af_smc::epoll_kernel_returned(epfd, evs, rc); k != 0) return k;
    if (af_smc::epoll_in_user_memory(epfd))
        if (int again; af_smc::epoll_wait_user(epfd, evs, max, 0, mask, true, &again)) return again;
    return 0;
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
