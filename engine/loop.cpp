#include "engine/loop.hpp"

#include "engine/log.hpp"
#include "engine/sys.hpp"

#include <map>
#include <mutex>
#include <new>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <vector>

namespace usmc::loop {

namespace {

struct Watch {
    int fd;
    uint64_t deadline_ms; // UINT64_MAX: none
    std::function<void(uint32_t)> on_event;
};

std::mutex g_mu;
int g_epfd = -1;
int g_wake = -1; // eventfd in the set (epoll data 0): an earlier deadline is news
uint64_t g_sleep_until = UINT64_MAX; // the deadline the thread sleeps to, under g_mu
uint64_t g_next_id = 1;
std::map<uint64_t, Watch>* g_watches = nullptr; // by id (the epoll data), under g_mu

uint64_t now_ms() {
    return sys::mono_ns() / 1000000;
}

// Takes the watch out of the set (and its fd out of the epoll set, before
// the caller can close it). Under g_mu.
std::function<void(uint32_t)> take(std::map<uint64_t, Watch>::iterator it) {
    if (it->second.fd >= 0) sys::real().epoll_ctl(g_epfd, EPOLL_CTL_DEL, it->second.fd, nullptr);
    auto h = std::move(it->second.on_event);
    g_watches->erase(it);
    return h;
}

void run(int epfd) {
    epoll_event ev[64];
    int timeout = -1;
    while (true) {
        int n = sys::real().epoll_wait(epfd, ev, 64, timeout);
        if (n < 0 && errno != EINTR) return;
        std::vector<std::pair<std::function<void(uint32_t)>, uint32_t>> ready;
        {
            std::lock_guard lock(g_mu);
            for (int i = 0; i < n; ++i) {
                if (ev[i].data.u64 == 0) {
                    uint64_t v;
                    ssize_t rc = sys::real().read(g_wake, &v, sizeof v);
                    (void)rc;
                    continue;
                }
                auto it = g_watches->find(ev[i].data.u64);
                if (it == g_watches->end()) continue; // cancelled meanwhile
                ready.emplace_back(take(it), uint32_t(ev[i].events));
            }
            uint64_t now = now_ms(), next = UINT64_MAX;
            for (auto it = g_watches->begin(); it != g_watches->end();) {
                if (it->second.deadline_ms <= now) {
                    ready.emplace_back(take(it++), 0);
                } else {
                    next = std::min(next, it->second.deadline_ms);
                    ++it;
                }
            }
            g_sleep_until = next;
            timeout = next == UINT64_MAX ? -1 : int(std::min<uint64_t>(next - now, 60000));
        }
        // Outside the lock: a handler may add (or cancel) watches.
        for (auto& [h, events] : ready)
            h(events);
    }
}

// Under g_mu.
bool start() {
    if (!g_watches) g_watches = new std::map<uint64_t, Watch>;
    if (g_epfd >= 0) return true;
    int wake = sys::place_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (wake < 0 || (g_epfd = sys::start_epoll_thread(run, "usmc-loop")) < 0) {
        if (wake >= 0) sys::real().close(wake);
        log::warn("cannot start the engine's event loop thread");
        return false;
    }
    g_wake = wake;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    sys::real().epoll_ctl(g_epfd, EPOLL_CTL_ADD, g_wake, &ev);
    return true;
}

} // namespace

uint64_t add(int fd, uint32_t events, int timeout_ms, std::function<void(uint32_t)> on_event) {
    std::lock_guard lock(g_mu);
    if (!start()) return 0;
    uint64_t id = g_next_id++;
    if (fd < 0 && timeout_ms < 0) return 0; // a timer that never fires
    if (fd >= 0) {
        epoll_event ev{};
        ev.events = events | EPOLLONESHOT;
        ev.data.u64 = id;
        if (sys::real().epoll_ctl(g_epfd, EPOLL_CTL_ADD, fd, &ev) != 0) return 0;
    }
    uint64_t deadline = timeout_ms >= 0 ? now_ms() + uint64_t(timeout_ms) : UINT64_MAX;
    g_watches->emplace(id, Watch{fd, deadline, std::move(on_event)});
    // The thread sleeps until the nearest deadline it knew of; only an
    // earlier one (a first watch, or a shorter timeout) needs a wake-up.
    if (deadline < g_sleep_until) {
        g_sleep_until = deadline; // one wake-up is enough until it recomputes
        uint64_t v = 1;
        ssize_t rc = sys::real().write(g_wake, &v, sizeof v);
        (void)rc;
    }
    return id;
}

bool cancel(uint64_t id) {
    std::lock_guard lock(g_mu);
    if (!g_watches) return false;
    auto it = g_watches->find(id);
    if (it == g_watches->end()) return false;
    take(it);
    return true;
}

size_t pending() {
    std::lock_guard lock(g_mu);
    return g_watches ? g_watches->size() : 0;
}

void on_fork_child() {
    new (&g_mu) std::mutex();
    if (g_epfd >= 0) sys::real().close(g_epfd);
    if (g_wake >= 0) sys::real().close(g_wake);
    g_epfd = g_wake = -1;
    g_sleep_until = UINT64_MAX;
    g_watches = nullptr; // the parent's (its memory is a copy here)
}

} // namespace usmc::loop
