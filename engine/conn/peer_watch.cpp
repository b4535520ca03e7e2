// SPDX-License-Identifier: MIT
#include "engine/conn/peer_watch.hpp"

#include "engine/base/log.hpp"
#include "engine/base/loop.hpp"
#include "engine/readiness/wakeup.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>

namespace usmc::peer_watch {

namespace {

// Connections registered, in a table indexed by the descriptor number the
// watch was made under (the low 32 bits of its key; the high ones count
// watches made, so a key is not used twice). Not by address: an event taken
// just before its connection was removed would find a new connection at
// the same address and wake it for nothing (wrk read EAGAIN after such a
// wake-up: a "read error"). A table mapped once, and raw loop watches, so
// that poll() can add a watch without allocating (select_probe.c).
struct Slot {
    SmcConn* c;
    uint64_t key; // 0: free
    uint32_t gen; // the fork generation that made it (a parent's is free here)
    bool fired;   // its one-shot registration fired: armed no more
};
std::mutex g_mu;
std::atomic<Slot*> g_slots{nullptr};
uint32_t g_capacity = 0; // written before g_slots is published
uint32_t g_next_seq = 1; // under g_mu; 31 bits (the loop keeps the top one)
// Bumped in a forked child: the flags its connections carry from the
// parent name the parent's watches, not its own.
std::atomic<uint32_t> g_generation{1};

uint32_t generation() {
    return g_generation.load(std::memory_order_relaxed);
}

constexpr uint64_t kMaxSlots = uint64_t{1} << 22;

// The table, mapped on first use (a system call, no allocator: safe in
// poll()); as many slots as descriptors may exist, touched only where used.
Slot* slots() {
    Slot* s = g_slots.load(std::memory_order_acquire);
    if (s) return s;
    // (As many as the descriptor table: runtime.cpp's table_capacity.)
    rlimit rl{};
    uint64_t cap = 65536;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        cap = rl.rlim_max == RLIM_INFINITY ? kMaxSlots : std::max(rl.rlim_max, rl.rlim_cur);
    cap = std::clamp<uint64_t>(cap, 1024, kMaxSlots);
    void* m = mmap(nullptr, cap * sizeof(Slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    // Under g_mu (every caller holds it): no second mapping races this one.
    g_capacity = uint32_t(cap);
    g_slots.store(static_cast<Slot*>(m), std::memory_order_release);
    return static_cast<Slot*>(m);
}

uint32_t slot_of(uint64_t key) {
    return uint32_t(key & 0xffffffffu);
}

// Under g_mu. (A connection a forked child inherited keeps its parent's
// key, and the child's copy of the table its slot, of the parent's
// generation: free here, its connection pointer never followed.)
Slot* watched(const SmcConn* c) {
    Slot* s = g_slots.load(std::memory_order_relaxed);
    if (!s || !c->peer_watch_id || slot_of(c->peer_watch_id) >= g_capacity) return nullptr;
    Slot& e = s[slot_of(c->peer_watch_id)];
    return e.key == c->peer_watch_id && e.c == c && e.gen == generation() ? &e : nullptr;
}

void handle(uint64_t key, uint32_t events) {
    deliver(key, events);
}

} // namespace

void deliver(uint64_t key, uint32_t events) {
    std::lock_guard lock(g_mu);
    Slot* s = g_slots.load(std::memory_order_relaxed);
    if (!s || slot_of(key) >= g_capacity) return;
    Slot& e = s[slot_of(key)];
    if (e.key != key || e.gen != generation() || e.fired) return; // removed meanwhile
    SmcConn* c = e.c;
    e.fired = true;
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

bool add(SmcConn* c, bool from_poll) {
    std::unique_lock lock(g_mu, std::defer_lock);
    if (from_poll) {
        if (!lock.try_lock()) return false;
    } else {
        lock.lock();
    }
    if (watched(c)) return armed(*c);
    if (c->tcp_fd < 0) return false;
    loop::set_raw_handler(handle); // (an atomic store)
    if (!from_poll && !loop::start_now()) return false;
    Slot* s = slots();
    if (!s || uint32_t(c->tcp_fd) >= g_capacity) return false;
    Slot& e = s[c->tcp_fd];
    if (e.key && e.gen == generation() && e.c != c) {
        // A connection whose descriptor number moved (its first one closed,
        // a dup kept) still holds the slot: it loses its watch, and looks
        // at its socket itself from now on (its registration's late events
        // carry a key the slot no longer has).
        e.c->peer_watch_armed.store(0, std::memory_order_release);
        e.c->peer_watch_id = 0;
        e.key = 0;
    }
    uint32_t seq = g_next_seq;
    g_next_seq = (g_next_seq + 1) & 0x7fffffffu;
    if (!g_next_seq) g_next_seq = 1;
    uint64_t key = (uint64_t{seq} << 32) | uint32_t(c->tcp_fd);
    // Recorded before the registration: its event may come at once.
    e = Slot{c, key, generation(), false};
    c->peer_watch_id = key;
    // (Before start_now has ever run in this process, add_raw fails: poll
    // then looks itself, and the watch comes with the first epoll_ctl or
    // connect.)
    if (!loop::add_raw(c->tcp_fd, EPOLLRDHUP, key)) {
        e.key = 0;
        e.c = nullptr;
        c->peer_watch_id = 0;
        if (!from_poll)
            log::warn("fd {}: cannot watch the TCP socket for the peer's end", c->tcp_fd);
        return false;
    }
    c->peer_watch_armed.store(generation(), std::memory_order_release);
    return true;
}

bool armed(const SmcConn& c) {
    uint32_t gen = c.peer_watch_armed.load(std::memory_order_acquire);
    return gen != 0 && gen == g_generation.load(std::memory_order_relaxed);
}

namespace {
void remove(SmcConn* c, bool closing) {
    std::lock_guard lock(g_mu);
    Slot* e = watched(c);
    if (!e) return;
    c->peer_watch_armed.store(0, std::memory_order_release);
    // Closing: the kernel drops the registration with the file. Else it
    // goes now, fired (left disabled) or not.
    if (!closing) loop::cancel_raw(int(slot_of(e->key)));
    e->key = 0;
    e->c = nullptr;
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
    // The table stays: the inherited connections' slots are taken out by
    // their remove, as the parent's would be; the child's loop has none of
    // their registrations, so none of their keys comes back.
    g_generation.fetch_add(1, std::memory_order_relaxed);
}

} // namespace usmc::peer_watch
