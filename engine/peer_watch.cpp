#include "engine/peer_watch.hpp"

#include "engine/log.hpp"
#include "engine/sys.hpp"

#include <mutex>
#include <new>
#include <sys/epoll.h>
#include <thread>
#include <unordered_set>

namespace usmc::peer_watch {

namespace {

std::mutex g_mu;
int g_epfd = -1;
std::unordered_set<SmcConn*>* g_live = nullptr; // connections registered (under g_mu)

void run(int epfd) {
    epoll_event ev[64];
    while (true) {
        int n = sys::real().epoll_wait(epfd, ev, 64, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        std::lock_guard lock(g_mu);
        for (int i = 0; i < n; ++i) {
            auto* c = static_cast<SmcConn*>(ev[i].data.ptr);
            if (!g_live || !g_live->count(c)) continue; // removed meanwhile
            smc_check_peer(*c);
            // Wake readers and writers: they look and see EOF, a reset or EPIPE.
            uint64_t v = 1;
            ssize_t rc = sys::real().write(c->rx_event, &v, sizeof v);
            rc = sys::real().read(c->tx_event, &v, sizeof v);
            (void)rc;
        }
    }
}

} // namespace

void add(SmcConn* c) {
    std::lock_guard lock(g_mu);
    if (!g_live) g_live = new std::unordered_set<SmcConn*>;
    if (g_live->count(c) || c->tcp_fd < 0) return;
    if (g_epfd < 0 && (g_epfd = sys::start_epoll_thread(run)) < 0) {
        log::warn("cannot start the peer watch thread");
        return;
    }
    epoll_event ev{};
    ev.events = EPOLLRDHUP | EPOLLONESHOT;
    ev.data.ptr = c;
    if (sys::real().epoll_ctl(g_epfd, EPOLL_CTL_ADD, c->tcp_fd, &ev) == 0) g_live->insert(c);
}

void remove(SmcConn* c) {
    std::lock_guard lock(g_mu);
    if (!g_live || !g_live->erase(c)) return;
    sys::real().epoll_ctl(g_epfd, EPOLL_CTL_DEL, c->tcp_fd, nullptr);
}

void on_fork_child() {
    new (&g_mu) std::mutex();
    if (g_epfd >= 0) sys::real().close(g_epfd);
    g_epfd = -1;
    g_live = nullptr; // the parent's set (its memory is a copy here)
}

} // namespace usmc::peer_watch
