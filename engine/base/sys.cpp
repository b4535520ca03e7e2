// SPDX-License-Identifier: MIT
#include "engine/base/sys.hpp"

#include <pthread.h>

#include <cerrno>
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <time.h>

namespace usmc::sys {

Table g_table{};
std::atomic<int> g_state{0};

void resolve() {
    int expected = 0;
    if (g_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
#define USMC_SYS_RESOLVE(name, ret, params)                                                        \
    g_table.name = reinterpret_cast<ret(*) params>(dlsym(RTLD_NEXT, #name));
        USMC_SYS_FUNCTIONS(USMC_SYS_RESOLVE)
#undef USMC_SYS_RESOLVE
        g_state.store(2, std::memory_order_release);
        return;
    }
    // Another thread is resolving: dlsym is quick, wait for it.
    while (g_state.load(std::memory_order_acquire) != 2)
        sched_yield();
}

namespace {
std::atomic<int> g_base{0};
std::atomic<int64_t> g_checked_at{-1};

// F_DUPFD at `b` failed with EINVAL: the limit went down since we looked
// (nginx's worker_rlimit_nofile after fork). Look again now.
int refresh_after(int err) {
    if (err == EINVAL) g_checked_at.store(-1, std::memory_order_relaxed);
    return high_base();
}

int dup_high(int fd) {
    int b = high_base();
    if (fd >= b) return fd;
    int high = real().fcntl(fd, F_DUPFD_CLOEXEC, b);
    if (high < 0) {
        int b2 = refresh_after(errno);
        if (b2 != b && fd < b2)
            high = real().fcntl(fd, F_DUPFD_CLOEXEC, b2);
        else if (fd >= b2)
            return fd;
    }
    return high;
}
} // namespace

int high_base() {
    // The limit may change (nginx's worker_rlimit_nofile): look again at most
    // once a second.
    auto& base = g_base;
    auto& checked_at = g_checked_at;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    if (checked_at.load(std::memory_order_relaxed) != now.tv_sec) {
        rlimit rl{};
        rlim_t cur = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
        if (cur == RLIM_INFINITY || cur > (1u << 20)) cur = 1u << 20;
        base.store(static_cast<int>(cur - cur / 4), std::memory_order_relaxed);
        checked_at.store(now.tv_sec, std::memory_order_relaxed);
    }
    return base.load(std::memory_order_relaxed);
}

int place_high(int fd) {
    if (fd < 0) return fd;
    int high = dup_high(fd);
    if (high < 0) return fd;
    if (high != fd) real().close(fd);
    return high;
}

uint64_t netns_id() {
    // A process changes its network namespace (setns, unshare) rarely and
    // not while usmc is in the middle of a connect; read it once.
    static const uint64_t id = [] {
        struct stat st;
        return ::stat("/proc/self/ns/net", &st) == 0 ? uint64_t(st.st_ino) : uint64_t(0);
    }();
    return id;
}

int place_high_strict(int fd) {
    if (fd < 0) return fd;
    int high = dup_high(fd);
    if (high == fd) return fd;
    real().close(fd);
    if (high < 0) errno = EMFILE;
    return high;
}

void name_this_thread(const char* name) {
    pthread_setname_np(pthread_self(), name); // (a name too long is refused: unnamed, no harm)
}

bool start_thread(std::function<void()> body) {
    // A new thread inherits its creator's mask: block everything around
    // the creation, then give the caller its own mask back.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    bool started = true;
    try {
        std::thread(std::move(body)).detach();
    } catch (const std::system_error&) {
        started = false;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return started;
}

int start_epoll_thread(void (*loop)(int epfd), const char* name) {
    int epfd = place_high(real().epoll_create1(EPOLL_CLOEXEC));
    if (epfd < 0) return -1;
    if (!start_thread([loop, epfd, name] {
            name_this_thread(name);
            loop(epfd);
        })) {
        real().close(epfd);
        return -1;
    }
    return epfd;
}

} // namespace usmc::sys
