// SPDX-License-Identifier: MIT
#include "engine/conn/peer_watch.hpp"

#include "engine/base/log.hpp"
#include "engine/base/loop.hpp"
#include "engine/readiness/wakeup.hpp"

#include <atomic>
#include <mutex>
#include <new>
#include <sys/epoll.h>
#include <unordered_map>

namespace usmc::peer_watch {

namespace {

std::mutex g_mu;
struct Entry {
    SmcConn* c;
    uint64_t watch; // its loop watch
};
// Connections registered, by a key that is never used twice (under g_mu).
// Not by address: an event taken just before its connection was removed
// would find a new connection at the same address and wake it for nothing
// (wrk read EAGAIN after such a wake-up: a "read error").
std::unordered_map<uint64_t, Entry>* g_live = nullptr;
uint64_t g_next_id = 1;
// Bumped in a forked child: the flags its connections carry from the
// parent name the parent's watches, not its own.
std::atomic<uint32_t> g_generation{1};

// Under g_mu. (A connection a forked child inherited keeps its parent's
// key, which the child's fresh table does not hold.)
bool watched(const SmcConn* c) {
    if (!g_live || !c->peer_watch_id) return false;
    auto it = g_live->find(c->peer_watch_id);
    return it != g_live->end() && it->second.c == c;
}

} // namespace

void deliver(uint64_t key, uint32_t events) {
    std::lock_guard lock(g_mu);
    if (!g_live) return;
    auto it = g_live->find(key);
    if (it == g_live->end()) return; // removed meanwhile
    SmcConn* c = it->second.c;
    it->second.watch = 0; // fired: nothing to cancel
    c->peer_watch_armed.store(0, std::memory_order_release);
    // What epoll said is what a poll would say now (EPOLLRDHUP, EPOLLHUP
    // are POLLRDHUP, POLLHUP): no second look.
    if (!smc_note_tcp_end(*c, short(events))) smc_check_peer(*c);
    // Wake readers and writers: they look and see EOF, a reset or EPIPE.
    // A wake-up of our own, so the next drain takes it; none if `sig` is
    // readable already (the peer's, for its last bytes or its close).
    if (!smc_wake_queued(*c)) smc_self_wake(*c);
    smc_open_writable(*c, true);
}

void add(SmcConn* c) {
    std::lock_guard lock(g_mu);
    if (!g_live) g_live = new std::unordered_map<uint64_t, Entry>;
    if (watched(c) || c->tcp_fd < 0) return;
    uint64_t id = g_next_id++;
    uint64_t watch =
        loop::add(c->tcp_fd, EPOLLRDHUP, -1, [id](uint32_t events) { deliver(id, events); });
    if (!watch) {
        log::warn("fd {}: cannot watch the TCP socket for the peer's end", c->tcp_fd);
        return;
    }
    g_live->emplace(id, Entry{c, watch});
    c->peer_watch_id = id;
    c->peer_watch_armed.store(g_generation.load(std::memory_order_relaxed),
                              std::memory_order_release);
}

bool armed(const SmcConn& c) {
    uint32_t gen = c.peer_watch_armed.load(std::memory_order_acquire);
    return gen != 0 && gen == g_generation.load(std::memory_order_relaxed);
}

namespace {
void remove(SmcConn* c, bool closing) {
    std::lock_guard lock(g_mu);
    if (!watched(c)) return;
    auto it = g_live->find(c->peer_watch_id);
    c->peer_watch_armed.store(0, std::memory_order_release);
    if (it->second.watch) {
        if (closing)
            loop::cancel_closing(it->second.watch);
        else
            loop::cancel(it->second.watch);
    }
    g_live->erase(it);
    c->peer_watch_id = 0;
}
} // namespace

void remove(SmcConn* c) {
    remove(c, false);
}

void remove_closing(SmcConn* c) {
    remove(c, true);
}

void on_fork_child() {
    new (&g_mu) std::mutex();
    g_live = nullptr; // the parent's set (its memory is a copy here)
    g_generation.fetch_add(1, std::memory_order_relaxed);
}

} // namespace usmc::peer_watch
