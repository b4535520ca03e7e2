// Readiness for SMC connections and SMC listeners: poll()/ppoll() (and
// select via poll in the preload) substitute the eventfds; epoll_ctl()
// registers them in the application's epoll sets with its own epoll_data,
// so epoll_wait needs no translation at all.
#include "engine/af_smc_internal.hpp"
#include "engine/peer_watch.hpp"
#include "engine/sys.hpp"

#include <algorithm>
#include <time.h>
#include <vector>

namespace usmc::af_smc {

using namespace detail;

namespace {

// An SMC listener's queue eventfd, or -1; `stalled` says whether the kernel
// listener should be left out (backlog full). No reference is kept.
int listener_event(int fd, bool* stalled) {
    if (!in_table(fd)) return -1;
    SmcListener* l = g_listeners[fd].load(std::memory_order_acquire);
    if (!l) return -1;
    *stalled = l->stalled();
    return l->done_event();
}

int ms_left(const timespec& start, int timeout_ms) {
    if (timeout_ms < 0) return -1;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t spent = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    return spent >= timeout_ms ? 0 : int(timeout_ms - spent);
}

// The eventfd registrations of a connection whose handshake still runs:
// readable / writable only once it is done (af_smc_connect.cpp).
int connecting_ctl(SmcConn* c, int epfd, int op, epoll_event* ev) {
    auto it = std::find_if(c->connecting_regs.begin(), c->connecting_regs.end(),
                           [&](const SmcConn::EpollReg& r) { return r.epfd == epfd; });
    if ((op == EPOLL_CTL_ADD) == (it != c->connecting_regs.end()))
        return fail(op == EPOLL_CTL_ADD ? EEXIST : ENOENT);
    epoll_event rx{}, tx{};
    if (ev) {
        uint32_t common = ev->events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE);
        rx.events = (ev->events & EPOLLIN) | common;
        rx.data = ev->data;
        tx.events = (ev->events & EPOLLOUT) | common;
        tx.data = ev->data;
    }
    bool del = op == EPOLL_CTL_DEL;
    if (sys::real().epoll_ctl(epfd, op, c->rx_event, del ? nullptr : &rx) != 0) return -1;
    sys::real().epoll_ctl(epfd, op, c->tx_event, del ? nullptr : &tx);
    if (del)
        c->connecting_regs.erase(it);
    else if (it != c->connecting_regs.end())
        it->ev = *ev;
    else
        c->connecting_regs.push_back({epfd, *ev});
    c->epoll_watched.store(true, std::memory_order_relaxed);
    return 0;
}

int active_ctl(SmcConn* c, int epfd, int op, epoll_event* ev) {
    // Only the eventfds go into the application's set; the TCP socket is
    // watched by peer_watch (a vanished peer wakes the eventfds).
    auto it = std::find(c->epoll_sets.begin(), c->epoll_sets.end(), epfd);
    bool member = it != c->epoll_sets.end();
    if ((op == EPOLL_CTL_ADD) == member) return fail(op == EPOLL_CTL_ADD ? EEXIST : ENOENT);
    size_t idx = size_t(it - c->epoll_sets.begin());
    if (op == EPOLL_CTL_DEL) {
        sys::real().epoll_ctl(epfd, EPOLL_CTL_DEL, c->rx_event, nullptr);
        sys::real().epoll_ctl(epfd, EPOLL_CTL_DEL, c->tx_event, nullptr);
        c->epoll_sets.erase(it);
        c->epoll_regs.erase(c->epoll_regs.begin() + long(idx));
        return 0;
    }
    uint32_t common = ev->events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE);
    epoll_event rx{}, tx{};
    rx.events = (ev->events & (EPOLLIN | EPOLLRDHUP)) | common;
    rx.data = ev->data;
    tx.events = (ev->events & EPOLLOUT) | common;
    tx.data = ev->data;
    // Event loops (ae, libevent) switch EPOLLOUT on and off around every
    // write with EPOLL_CTL_MOD: touch only the eventfd whose part changed.
    bool touch_rx = true, touch_tx = true;
    short newly =
        short(((ev->events & EPOLLIN) ? POLLIN : 0) | ((ev->events & EPOLLOUT) ? POLLOUT : 0));
    if (op == EPOLL_CTL_MOD && !(ev->events & EPOLLONESHOT)) {
        const epoll_event& old = c->epoll_regs[idx];
        bool same_data = old.data.u64 == ev->data.u64;
        uint32_t rx_mask = EPOLLIN | EPOLLRDHUP | EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE;
        uint32_t tx_mask = EPOLLOUT | EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE;
        touch_rx = !same_data || (old.events & rx_mask) != (ev->events & rx_mask);
        touch_tx = !same_data || (old.events & tx_mask) != (ev->events & tx_mask);
        newly = short(((ev->events & EPOLLIN) && touch_rx ? POLLIN : 0) |
                      ((ev->events & EPOLLOUT) && touch_tx ? POLLOUT : 0));
    }
    if (touch_rx && sys::real().epoll_ctl(epfd, op, c->rx_event, &rx) != 0) return -1;
    if (touch_tx) sys::real().epoll_ctl(epfd, op, c->tx_event, &tx);
    if (op == EPOLL_CTL_ADD) {
        c->epoll_sets.push_back(epfd);
        c->epoll_regs.push_back(*ev);
    } else {
        c->epoll_regs[idx] = *ev;
    }
    c->epoll_watched.store(true, std::memory_order_relaxed);
    if (op == EPOLL_CTL_ADD) peer_watch::add(c); // once per connection (it ignores repeats)
    // Make the eventfds tell the truth now (level-triggered), or arm the
    // peer's wake-ups for when it becomes true.
    if (newly) smc_arm(*c, newly);
    return 0;
}

} // namespace

bool any_smc(const pollfd* fds, nfds_t n) {
    if (!g_conns.load(std::memory_order_acquire)) return false;
    for (nfds_t i = 0; i < n; ++i)
        if (is_smc(conn_of(fds[i].fd)) || is_listener(fds[i].fd)) return true;
    return false;
}

int poll(pollfd* fds, nfds_t n, int timeout_ms, const sigset_t* mask) {
    // Each SMC entry becomes up to three kernel entries (rx eventfd, tx
    // eventfd, the TCP socket for a vanished peer), an SMC listener two (its
    // queue's eventfd and the kernel listener); results map back.
    enum class Kind : uint8_t { Plain, Queue, Smc };
    struct Owner {
        nfds_t i;
        Kind kind;
    };
    std::vector<pollfd> k;
    std::vector<Owner> owner;
    std::vector<bool> built_smc(n);
    k.reserve(n * 2);
    timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (true) {
        k.clear();
        owner.clear();
        int ready = 0;
        for (nfds_t i = 0; i < n; ++i) {
            fds[i].revents = 0;
            SmcConn* c = conn_of(fds[i].fd);
            built_smc[i] = is_smc(c);
            if (built_smc[i]) {
                short want = fds[i].events & (POLLIN | POLLOUT | POLLRDHUP | POLLPRI);
                bool active = c->phase.load(std::memory_order_acquire) == Phase::Active;
                short now = active ? smc_arm(*c, want & (POLLIN | POLLOUT)) : 0;
                if (now) {
                    fds[i].revents = short((now & (want | POLLERR | POLLHUP)));
                    if (fds[i].revents) ++ready;
                }
                if (want & POLLIN) {
                    k.push_back({c->rx_event, POLLIN, 0});
                    owner.push_back({i, Kind::Smc});
                    if (active) { // the TCP socket only wakes when the peer is gone
                        k.push_back({fds[i].fd, POLLIN, 0});
                        owner.push_back({i, Kind::Smc});
                    }
                }
                if (want & POLLOUT) {
                    k.push_back({c->tx_event, POLLOUT, 0});
                    owner.push_back({i, Kind::Smc});
                }
                continue;
            }
            bool stalled = false;
            int queue = (fds[i].events & POLLIN) ? listener_event(fds[i].fd, &stalled) : -1;
            if (queue >= 0) {
                k.push_back({queue, POLLIN, 0});
                owner.push_back({i, Kind::Queue});
                if (stalled) continue; // accept() takes nothing from the kernel now
            }
            k.push_back({fds[i].fd, fds[i].events, 0});
            owner.push_back({i, Kind::Plain});
        }
        int wait_ms = ready ? 0 : ms_left(start, timeout_ms);
        timespec ts{wait_ms / 1000, (wait_ms % 1000) * 1000000L};
        int r = mask ? sys::real().ppoll(k.data(), k.size(), wait_ms < 0 ? nullptr : &ts, mask)
                     : sys::real().poll(k.data(), k.size(), wait_ms);
        if (r < 0) return ready ? ready : -1;
        for (size_t j = 0; j < k.size(); ++j) {
            auto [i, kind] = owner[j];
            if (kind == Kind::Plain) fds[i].revents |= k[j].revents;
            if (kind == Kind::Queue && (k[j].revents & POLLIN)) fds[i].revents |= POLLIN;
        }
        ready = 0;
        bool changed = false;
        for (nfds_t i = 0; i < n; ++i) {
            if (built_smc[i]) {
                SmcConn* c = conn_of(fds[i].fd);
                fds[i].revents = 0;
                if (!is_smc(c)) {
                    changed = true; // went TCP under us: ask the kernel instead
                } else if (c->phase.load(std::memory_order_acquire) == Phase::Active) {
                    short want = fds[i].events & (POLLIN | POLLOUT | POLLRDHUP | POLLPRI);
                    if (!c->peer_gone.load()) smc_check_peer(*c);
                    fds[i].revents = short(smc_poll_events(*c) & (want | POLLERR | POLLHUP));
                }
            }
            if (fds[i].revents) ++ready;
        }
        if (ready || (wait_ms == 0 && !changed)) return ready;
        // Woken with nothing to report (a stale eventfd count, a handshake
        // that ended): wait again for what is left of the timeout.
    }
}

int epoll_ctl(int epfd, int op, int fd, epoll_event* ev) {
    if (op != EPOLL_CTL_DEL && !ev) return fail(EFAULT);
    SmcConn* c = conn_of(fd);
    if (is_smc(c)) {
        std::unique_lock lock(c->epoll_mu);
        switch (c->phase.load(std::memory_order_acquire)) {
        case Phase::Connecting:
            return connecting_ctl(c, epfd, op, ev);
        case Phase::Active:
            return active_ctl(c, epfd, op, ev);
        case Phase::Tcp:
            break;
        }
    } else if (SmcListener* l = acquire_listener(fd)) {
        int rc = l->epoll_ctl(epfd, op, ev);
        int saved = errno;
        l->unref();
        errno = saved;
        return rc;
    }
    return sys::real().epoll_ctl(epfd, op, fd, ev);
}

} // namespace usmc::af_smc
