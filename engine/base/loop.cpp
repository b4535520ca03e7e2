// SPDX-License-Identifier: MIT
#include "engine/base/loop.hpp"

#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <new>
#include <sched.h>
#include <set>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unordered_set>
#include <vector>

namespace usmc::loop {

namespace {

// The loop sleeps at most this long while deadlines are pending, so a new
// watch's deadline (a handshake's, seconds away) needs no wake-up of the
// thread: only one sooner than the thread's own next look does.
constexpr uint64_t kTickMs = 100;
// ... and keeps that tick for this long after the last deadline went, so
// a process that handshakes now and then (a client with a few connections
// at a time: each handshake's watch goes before the next one's comes)
// adds its next watch to a thread that wakes by itself anyway: no
// wake-up write, no extra turn of the loop per connection. A process idle
// that long sleeps until an event or a new deadline.
constexpr uint64_t kLingerMs = 1000;
// Handshake events per window from which the thread runs as SCHED_BATCH
// for the next window (a storm of short connections: wrk -c 1000 brings
// thousands a second; a program making a connection now and then, or a
// curl per request, stays far below) ...
constexpr uint64_t kStormWindowMs = 100;
constexpr uint32_t kStormEvents = 50;
// ... unless a Wakeup event fired this recently: someone sleeps until the
// loop runs, and the next one should not wait for another thread's slice.
constexpr uint64_t kWakeupHoldMs = 100;

struct Watch {
    int fd;
    uint64_t deadline_ms; // UINT64_MAX: none
    std::function<void(uint32_t)> on_event;
    Kind kind;
};

std::mutex g_mu;
// Written under g_mu (start, fork); read without it by raw watches.
std::atomic<int> g_epfd_atomic{-1};
int g_epfd = -1;
// Raw watches' epoll data carry this bit (ids of the table never reach it).
constexpr uint64_t kRawBit = uint64_t{1} << 63;
std::atomic<RawHandler> g_raw_handler{nullptr};
int g_wake = -1; // eventfd in the set (epoll data 0): an earlier deadline is news
uint64_t g_sleep_until = UINT64_MAX; // the deadline the thread sleeps to, under g_mu
uint64_t g_tick_until = 0;           // it ticks until then (kLingerMs), under g_mu
uint64_t g_next_id = 1;
std::map<uint64_t, Watch>* g_watches = nullptr; // by id (the epoll data), under g_mu
std::set<std::pair<uint64_t, uint64_t>>* g_deadlines = nullptr; // (deadline, id), under g_mu
// Descriptors whose one-shot registration fired: still in the set, disabled
// (no events until re-armed), so the next watch of the same descriptor is an
// EPOLL_CTL_MOD and the firing needed no EPOLL_CTL_DEL. A number closed
// meanwhile (the kernel dropped its registration) or reused fails the
// MOD with ENOENT and is added. Under g_mu.
std::unordered_set<int>* g_parked = nullptr;
// Loop thread only: the storm window, and when a Kind::Wakeup watch last fired.
uint64_t g_window_start_ms = 0;
uint32_t g_window_events = 0;
bool g_storm = false;
uint64_t g_last_wakeup_ms = 0;
std::atomic<bool> g_batched{false};

uint64_t now_ms() {
    return sys::mono_ns() / 1000000;
}

// Takes the watch out of the set. `fired`: its one-shot registration
// fired and is disabled already (parked); otherwise its fd leaves the
// epoll set before the caller can close it, unless `closing` (the caller
// closes it now: cancel_closing). Under g_mu.
std::function<void(uint32_t)> take(std::map<uint64_t, Watch>::iterator it, bool fired,
                                   bool closing = false) {
    if (it->second.fd >= 0) {
        if (fired)
            g_parked->insert(it->second.fd);
        else if (!closing)
            sys::real().epoll_ctl(g_epfd, EPOLL_CTL_DEL, it->second.fd, nullptr);
    }
    if (it->second.deadline_ms != UINT64_MAX)
        g_deadlines->erase({it->second.deadline_ms, it->first});
    auto h = std::move(it->second.on_event);
    g_watches->erase(it);
    return h;
}

// The loop thread's policy: SCHED_BATCH while `batch` (see Kind), else
// the normal one. Nothing is changed for a thread that started under
// another policy (a real-time application's, or one run with chrt -b).
void schedule_as(bool batch, bool may) {
    if (!may || batch == g_batched.load(std::memory_order_relaxed)) return;
    sched_param none{};
    if (sched_setscheduler(0, batch ? SCHED_BATCH : SCHED_OTHER, &none) == 0)
        g_batched.store(batch, std::memory_order_relaxed);
}

// Whether the thread should run as SCHED_BATCH after a turn that fired
// `handshakes` handshake events, and a Wakeup one if `wakeup`.
bool storm_after(uint64_t now, uint32_t handshakes, bool wakeup) {
    if (wakeup) g_last_wakeup_ms = now;
    g_window_events += handshakes;
    if (now - g_window_start_ms >= kStormWindowMs) {
        g_storm = g_window_events >= kStormEvents;
        g_window_start_ms = now;
        g_window_events = 0;
    } else if (g_window_events >= kStormEvents) {
        g_storm = true;
    }
    return g_storm && now - g_last_wakeup_ms >= kWakeupHoldMs;
}

void run(int epfd) {
    epoll_event ev[64];
    int timeout = -1;
    const bool may_batch = sched_getscheduler(0) == SCHED_OTHER;
    while (true) {
        int n = sys::real().epoll_wait(epfd, ev, 64, timeout);
        if (n < 0 && errno != EINTR) return;
        std::vector<std::pair<std::function<void(uint32_t)>, uint32_t>> ready;
        std::vector<std::pair<uint64_t, uint32_t>> raw;
        bool wakeup = false, batch = false;
        uint32_t handshakes = 0;
        {
            std::lock_guard lock(g_mu);
            for (int i = 0; i < n; ++i) {
                if (ev[i].data.u64 == 0) {
                    uint64_t v;
                    ssize_t rc = sys::real().read(g_wake, &v, sizeof v);
                    (void)rc;
                    continue;
                }
                if (ev[i].data.u64 & kRawBit) {
                    raw.emplace_back(ev[i].data.u64 & ~kRawBit, uint32_t(ev[i].events));
                    continue;
                }
                auto it = g_watches->find(ev[i].data.u64);
                if (it == g_watches->end()) continue; // cancelled meanwhile
                wakeup |= it->second.kind == Kind::Wakeup;
                handshakes += it->second.kind == Kind::Handshake;
                ready.emplace_back(take(it, true), uint32_t(ev[i].events));
            }
            uint64_t now = now_ms();
            batch = storm_after(now, handshakes, wakeup);
            while (!g_deadlines->empty() && g_deadlines->begin()->first <= now) {
                auto it = g_watches->find(g_deadlines->begin()->second);
                ready.emplace_back(take(it, false), 0);
            }
            uint64_t next = UINT64_MAX;
            if (!g_deadlines->empty()) {
                next = std::min(g_deadlines->begin()->first, now + kTickMs);
                g_tick_until = now + kLingerMs;
            } else if (now < g_tick_until) {
                next = now + kTickMs;
            }
            // Asleep as SCHED_BATCH, a lone event after the storm (a
            // writer's bell) would wait for another thread's slice: look
            // again when the window ends, and leave the policy if it did.
            if (batch) next = std::min(next, std::max(g_window_start_ms + kStormWindowMs, now + 1));
            g_sleep_until = next;
            timeout = next == UINT64_MAX ? -1 : int(next - now);
        }
        schedule_as(batch, may_batch);
        // Outside the lock: a handler may add (or cancel) watches.
        for (auto& [h, events] : ready)
            h(events);
        if (RawHandler h = g_raw_handler.load(std::memory_order_acquire))
            for (auto [key, events] : raw)
                h(key, events);
    }
}

// Under g_mu.
bool start() {
    if (!g_watches) {
        g_watches = new std::map<uint64_t, Watch>;
        g_deadlines = new std::set<std::pair<uint64_t, uint64_t>>;
        g_parked = new std::unordered_set<int>;
    }
    if (g_epfd >= 0) return true;
    int wake = sys::place_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (wake < 0 || (g_epfd = sys::start_epoll_thread(run, "usmc-loop")) < 0) {
        if (wake >= 0) sys::real().close(wake);
        log::warn("cannot start the engine's event loop thread");
        return false;
    }
    g_wake = wake;
    g_epfd_atomic.store(g_epfd, std::memory_order_release);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    sys::real().epoll_ctl(g_epfd, EPOLL_CTL_ADD, g_wake, &ev);
    return true;
}

// Puts `fd` in the set, armed once for `ev`. Under g_mu.
// (Parked or not is a hint: a registration found where none was thought
// to be is re-armed too.)
bool arm(int fd, epoll_event& ev) {
    if (g_parked->erase(fd) && sys::real().epoll_ctl(g_epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
        return true;
    if (sys::real().epoll_ctl(g_epfd, EPOLL_CTL_ADD, fd, &ev) == 0) return true;
    return errno == EEXIST && sys::real().epoll_ctl(g_epfd, EPOLL_CTL_MOD, fd, &ev) == 0;
}

} // namespace

uint64_t add(int fd, uint32_t events, int timeout_ms, std::function<void(uint32_t)> on_event,
             Kind kind) {
    std::unique_lock lock(g_mu);
    if (!start()) return 0;
    uint64_t id = g_next_id++;
    if (fd < 0 && timeout_ms < 0) return 0; // a timer that never fires
    uint64_t deadline = timeout_ms >= 0 ? now_ms() + uint64_t(timeout_ms) : UINT64_MAX;
    auto it = g_watches->emplace(id, Watch{fd, deadline, std::move(on_event), kind}).first;
    if (deadline != UINT64_MAX) g_deadlines->insert({deadline, id});
    // Armed last and the lock let go at once: the event may be there
    // already (a loopback peer answers within microseconds), and the loop
    // thread then wants the lock.
    if (fd >= 0) {
        epoll_event ev{};
        ev.events = events | EPOLLONESHOT;
        ev.data.u64 = id;
        if (!arm(fd, ev)) {
            if (deadline != UINT64_MAX) g_deadlines->erase({deadline, id});
            g_watches->erase(it);
            return 0;
        }
    }
    // The thread sleeps until the nearest deadline it knew of; only an
    // earlier one (a first watch, or a shorter timeout) needs a wake-up.
    bool wake = deadline < g_sleep_until;
    if (wake) g_sleep_until = deadline; // one wake-up is enough until it recomputes
    lock.unlock();
    if (wake) {
        uint64_t v = 1;
        ssize_t rc = sys::real().write(g_wake, &v, sizeof v);
        (void)rc;
    }
    return id;
}

namespace {
bool cancel(uint64_t id, bool closing) {
    std::lock_guard lock(g_mu);
    if (!g_watches) return false;
    auto it = g_watches->find(id);
    if (it == g_watches->end()) return false;
    take(it, false, closing);
    return true;
}
} // namespace

bool cancel(uint64_t id) {
    return cancel(id, false);
}

bool cancel_closing(uint64_t id) {
    return cancel(id, true);
}

void forget(int fd) {
    std::lock_guard lock(g_mu);
    if (g_parked) g_parked->erase(fd);
}

size_t pending() {
    std::lock_guard lock(g_mu);
    return g_watches ? g_watches->size() : 0;
}

void set_raw_handler(RawHandler h) {
    g_raw_handler.store(h, std::memory_order_release);
}

bool start_now() {
    std::lock_guard lock(g_mu);
    return start();
}

bool add_raw(int fd, uint32_t events, uint64_t key) {
    int epfd = g_epfd_atomic.load(std::memory_order_acquire);
    if (epfd < 0 || fd < 0 || (key & kRawBit)) return false;
    epoll_event ev{};
    ev.events = events | EPOLLONESHOT;
    ev.data.u64 = key | kRawBit;
    // (A registration a fired one-shot watch of the same file left, disabled:
    // re-armed. The parked hint stays; it only saves a failing call.)
    if (sys::real().epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0) return true;
    return errno == EEXIST && sys::real().epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) == 0;
}

void cancel_raw(int fd) {
    int epfd = g_epfd_atomic.load(std::memory_order_acquire);
    if (epfd >= 0 && fd >= 0) sys::real().epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
}

bool batched() {
    return g_batched.load(std::memory_order_relaxed);
}

void on_fork_child() {
    new (&g_mu) std::mutex();
    if (g_epfd >= 0) sys::real().close(g_epfd);
    if (g_wake >= 0) sys::real().close(g_wake);
    g_epfd = g_wake = -1;
    g_epfd_atomic.store(-1, std::memory_order_relaxed);
    g_sleep_until = UINT64_MAX;
    g_tick_until = 0;
    g_watches = nullptr; // the parent's (its memory is a copy here)
    g_deadlines = nullptr;
    g_parked = nullptr;
    g_window_start_ms = g_last_wakeup_ms = 0;
    g_window_events = 0;
    g_storm = false;
    g_batched.store(false,
                    std::memory_order_relaxed); // (a new thread: the forking thread's policy)
}

} // namespace usmc::loop
