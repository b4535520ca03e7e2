#include "engine/peer_watch.hpp"

#include "engine/log.hpp"
#include "engine/sys.hpp"
#include "engine/wakeup.hpp"

#include <mutex>
#include <new>
#include <sys/epoll.h>
#include <thread>
#include <unordered_map>

namespace usmc::peer_watch {

namespace {

std::mutex g_mu;
int g_epfd = -1;
// Connections registered, by a key that is never used twice (under g_mu).
// Not by address: an event taken from epoll_wait just before its connection
// was removed would find a new connection at the same address and wake it
// for nothing (wrk read EAGAIN after such a wake-up: a "read error").
std::unordered_map<uint64_t, SmcConn*>* g_live = nullptr;
uint64_t g_next_id = 1;

// Under g_mu. (A connection a forked child inherited keeps its parent's
// key, which the child's fresh table does not hold.)
bool watched(const SmcConn* c) {
    if (!g_live || !c->peer_watch_id) return false;
    auto it = g_live->find(c->peer_watch_id);
    return it != g_live->end() && it->second == c;
}

void run(int epfd) {
    epoll_event ev[64];
    while (true) {
        int n = sys::real().epoll_wait(epfd, ev, 64, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        for (int i = 0; i < n; ++i)
            deliver(ev[i].data.u64);
    }
}

} // namespace

void deliver(uint64_t key) {
    std::lock_guard lock(g_mu);
    if (!g_live) return;
    auto it = g_live->find(key);
    if (it == g_live->end()) return; // removed meanwhile
    SmcConn* c = it->second;
    smc_check_peer(*c);
    // Wake readers and writers: they look and see EOF, a reset or EPIPE.
    // A wake-up of our own, so the next drain takes it.
    smc_self_wake(*c);
    wakeup::drain(c->sig_far);
}

void add(SmcConn* c) {
    std::lock_guard lock(g_mu);
    if (!g_live) g_live = new std::unordered_map<uint64_t, SmcConn*>;
    if (watched(c) || c->tcp_fd < 0) return;
    if (g_epfd < 0 && (g_epfd = sys::start_epoll_thread(run, "usmc-peerwatch")) < 0) {
        log::warn("cannot start the peer watch thread");
        return;
    }
    epoll_event ev{};
    ev.events = EPOLLRDHUP | EPOLLONESHOT;
    uint64_t id = g_next_id++;
    ev.data.u64 = id;
    if (sys::real().epoll_ctl(g_epfd, EPOLL_CTL_ADD, c->tcp_fd, &ev) == 0) {
        g_live->emplace(id, c);
        c->peer_watch_id = id;
    }
}

void remove(SmcConn* c) {
    std::lock_guard lock(g_mu);
    if (!watched(c)) return;
    g_live->erase(c->peer_watch_id);
    c->peer_watch_id = 0;
    sys::real().epoll_ctl(g_epfd, EPOLL_CTL_DEL, c->tcp_fd, nullptr);
}

void on_fork_child() {
    new (&g_mu) std::mutex();
    if (g_epfd >= 0) sys::real().close(g_epfd);
    g_epfd = -1;
    g_live = nullptr; // the parent's set (its memory is a copy here)
}

} // namespace usmc::peer_watch
