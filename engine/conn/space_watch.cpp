// SPDX-License-Identifier: MIT
#include "engine/conn/space_watch.hpp"

#include "engine/base/count.hpp"
#include "engine/base/log.hpp"
#include "engine/base/loop.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/tx.hpp"
#include "engine/readiness/wakeup.hpp"

#include <mutex>
#include <new>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unordered_map>

namespace usmc::space_watch {

namespace {

std::mutex g_mu;
int g_bell = -1;
uint64_t g_bell_id = 0;
// Waiting connections by a key never used twice (as peer_watch: an event
// for a connection removed meanwhile must not find another at its address).
std::unordered_map<uint64_t, SmcConn*>* g_waiting = nullptr;
uint64_t g_next_key = 1;
bool g_timer = false;

void arm_timer_locked();

// Under g_mu: every waiting connection with space (or ended) made writable.
void look_locked(bool backstop) {
    if (!g_waiting) return;
    for (auto it = g_waiting->begin(); it != g_waiting->end();) {
        SmcConn* c = it->second;
        if (!smc_tx_space_or_end(*c)) {
            ++it;
            continue;
        }
        smc_open_writable(*c, true);
        smc_wake_user(*c);
        if (backstop) counters::count(counters::space_backstop_unfills);
        c->space_key = 0;
        it = g_waiting->erase(it);
    }
}

void watch_bell_locked();

void on_bell(uint32_t) {
    wakeup::drain(g_bell);
    std::lock_guard lock(g_mu);
    look_locked(false);
    watch_bell_locked();
}

void watch_bell_locked() {
    if (g_bell >= 0 && !loop::add(g_bell, EPOLLIN, -1, on_bell, loop::Kind::Wakeup))
        log::warn("cannot watch the space bell: writers wait for the backstop");
}

void on_timer(uint32_t) {
    std::lock_guard lock(g_mu);
    g_timer = false;
    look_locked(true);
    arm_timer_locked();
}

void arm_timer_locked() {
    if (g_timer || !g_waiting || g_waiting->empty()) return;
    g_timer = loop::add(-1, 0, kBackstopMs, on_timer) != 0;
}

} // namespace

uint64_t bell() {
    std::lock_guard lock(g_mu);
    if (g_bell_id) return g_bell_id;
    int fd = sys::real().socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    fd = fd < 0 ? -1 : sys::place_high(fd);
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, 0) != sizeof id) id = sys::mono_ns();
    id |= 1; // never 0: 0 means "no bell"
    wakeup::Name name = wakeup::bell_name(id);
    if (fd < 0 ||
        sys::real().bind(fd, reinterpret_cast<const sockaddr*>(&name.sun), name.len) != 0) {
        if (fd >= 0) sys::real().close(fd);
        return 0;
    }
    g_bell = fd;
    g_bell_id = id;
    watch_bell_locked();
    return id;
}

void add(SmcConn* c) {
    std::lock_guard lock(g_mu);
    if (!g_waiting) g_waiting = new std::unordered_map<uint64_t, SmcConn*>;
    if (c->space_key) {
        auto it = g_waiting->find(c->space_key);
        if (it != g_waiting->end() && it->second == c) return;
    }
    c->space_key = g_next_key++;
    g_waiting->emplace(c->space_key, c);
    arm_timer_locked();
}

void remove(SmcConn* c) {
    std::lock_guard lock(g_mu);
    if (!g_waiting || !c->space_key) return;
    auto it = g_waiting->find(c->space_key);
    if (it != g_waiting->end() && it->second == c) g_waiting->erase(it);
    c->space_key = 0;
}

size_t waiting() {
    std::lock_guard lock(g_mu);
    return g_waiting ? g_waiting->size() : 0;
}

void on_fork_child() {
    new (&g_mu) std::mutex();
    if (g_bell >= 0) sys::real().close(g_bell); // the parent's: its loop reads it
    g_bell = -1;
    g_bell_id = 0;
    g_waiting = nullptr; // the parent's (its memory is a copy here)
    g_timer = false;
}

} // namespace usmc::space_watch
