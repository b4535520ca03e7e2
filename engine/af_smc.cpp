#include "engine/af_smc.hpp"

#include "engine/clc_io.hpp"
#include "engine/fallback.hpp"
#include "engine/fdtable.hpp"
#include "engine/handshake.hpp"
#include "engine/log.hpp"
#include "engine/registry.hpp"
#include "engine/runtime.hpp"
#include "engine/sys.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <linux/sockios.h>
#include <mutex>
#include <new>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace usmc::af_smc {

std::atomic<std::atomic<SmcConn*>*> g_conns{nullptr};
uint32_t g_conns_capacity = 0;

namespace {

// A connection handed to the application as TCP by a listener that expected
// SMC clients: its first bytes may still be a late CLC Proposal, which the
// shim must swallow (and decline) before the application reads. Marked in
// the connection table itself, so reads still cost one lookup.
SmcConn* const kLateClc = reinterpret_cast<SmcConn*>(uintptr_t{1});

std::atomic<registry::Listener*>* g_listeners = nullptr;

std::mutex g_engine_mu;
ism::Device* g_dev = nullptr;
ism::Endpoint* g_ep = nullptr;
uint64_t g_fork_gen = 1;

std::atomic<SmcConn*>& slot(int fd) {
    return g_conns.load(std::memory_order_acquire)[fd];
}
bool in_table(int fd) {
    return g_conns.load() && static_cast<unsigned>(fd) < g_conns_capacity;
}

// The process's ISM device and endpoint, made on first need (and again in a
// forked child, which gets its own GID).
bool ensure_engine(bool need_endpoint) {
    std::lock_guard lock(g_engine_mu);
    const auto& cfg = runtime::get().cfg;
    if (!g_dev) g_dev = new ism::Device(cfg.max_dmb_memory);
    if (need_endpoint && !g_ep) g_ep = ism::Endpoint::start(g_dev->gid());
    return !need_endpoint || g_ep != nullptr;
}

HandshakeConfig handshake_config() {
    const auto& cfg = runtime::get().cfg;
    HandshakeConfig h;
    h.dmb_size = static_cast<uint32_t>(std::clamp<uint64_t>(cfg.rmem, 16 << 10, 1 << 20));
    h.busy_poll_us = cfg.busy_poll_us;
    return h;
}

void set_mode(int fd, SockMode mode, uint32_t reason) {
    SockInfo s = g_fds.get(fd);
    if (!s.tracked()) return;
    s.mode = mode;
    s.reason = reason;
    g_fds.set(fd, s);
}

void count_result(uint32_t reason, bool smc) {
    runtime::count(smc ? counters::conn_smcd : counters::conn_tcp);
    if (!smc && reason) runtime::count_fallback(reason);
}

void install(int fd, std::unique_ptr<SmcConn> c, bool nonblock) {
    c->nonblock.store(nonblock);
    c->rx.control()->owner_refs.store(1, std::memory_order_relaxed);
    slot(fd).store(c.release(), std::memory_order_release);
    set_mode(fd, SockMode::SmcD, 0);
}

void fold_counters(SmcConn* c) {
    runtime::count(counters::notifications, c->notifications.load());
    runtime::count(counters::notifications_suppressed, c->notifications_suppressed.load());
    runtime::count(counters::cursor_updates, c->cursor_updates.load());
}

// Our copies of the descriptors and mappings, without touching the peer or
// the DMB pool (another process may still use them).
void drop_local(SmcConn* c) {
    for (int* fd : {&c->rx_event, &c->tx_event, &c->peer_rx_event, &c->peer_tx_event}) {
        if (*fd >= 0) sys::real().close(*fd);
        *fd = -1;
    }
    ism::unmap(c->rx);
    ism::unmap(c->tx);
}

void release(SmcConn* c) {
    smc_quiesce(*c); // no other thread of ours is inside a call on it any more
    // Take our eventfds out of every epoll set: the peer holds references to
    // them, so the kernel would keep the registrations (and their epoll_data).
    {
        std::lock_guard lock(c->epoll_mu);
        for (int ep : c->epoll_sets) {
            sys::real().epoll_ctl(ep, EPOLL_CTL_DEL, c->rx_event, nullptr);
            sys::real().epoll_ctl(ep, EPOLL_CTL_DEL, c->tx_event, nullptr);
        }
        c->epoll_sets.clear();
    }
    fold_counters(c);
    if (c->rx.control()->owner_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // The last process holding this side: tell the peer. Unread data
        // means an abort, as TCP answers with a reset.
        smc_close(*c, smc_rx_available(*c) > 0);
        std::lock_guard lock(g_engine_mu);
        if (g_dev)
            smc_conn_release(*c, *g_dev, c->peer_uid);
        else
            drop_local(c);
    } else {
        drop_local(c);
    }
    delete c;
}

void handle_late_clc(int fd) {
    switch (clc::classify(fd, 0)) {
    case clc::FirstBytes::Proposal:
        smc_decline_late_proposal(fd, fallback::PEERNOSMC);
        runtime::count(counters::late_proposals);
        [[fallthrough]];
    case clc::FirstBytes::Other:
    case clc::FirstBytes::Closed: {
        SmcConn* expected = kLateClc;
        slot(fd).compare_exchange_strong(expected, nullptr);
        break;
    }
    case clc::FirstBytes::Nothing:
        break; // not yet: look again at the next read
    }
}

bool fd_nonblocking(int fd) {
    int fl = sys::real().fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

int fail(int err) {
    errno = err;
    return -1;
}

} // namespace

void init(uint32_t capacity) {
    size_t bytes = size_t{capacity} * sizeof(void*);
    void* conns = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void* listeners = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (conns == MAP_FAILED || listeners == MAP_FAILED) return;
    g_listeners = static_cast<std::atomic<registry::Listener*>*>(listeners);
    g_conns_capacity = capacity;
    g_conns.store(static_cast<std::atomic<SmcConn*>*>(conns), std::memory_order_release);
}

void on_listen(int fd) {
    SockInfo s = g_fds.get(fd);
    if (!in_table(fd) || !s.has(kFlagAllowD) || g_listeners[fd].load()) return;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (sys::real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return;
    uint32_t flags =
        uint32_t{registry::kSmcD} | (s.has(kFlagLimitHs) ? uint32_t{registry::kLimitHs} : 0u);
    auto l = registry::Listener::publish(reinterpret_cast<sockaddr*>(&local), len, 0, flags);
    if (!l.published()) {
        log::info("fd {}: could not publish the SMC listener; clients will use TCP", fd);
        return;
    }
    g_listeners[fd].store(new registry::Listener(std::move(l)), std::memory_order_release);
}

int connect(int fd, const sockaddr* addr, socklen_t len) {
    SockInfo s = g_fds.get(fd);
    bool inet = addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6);
    if (!s.tracked() || !inet || s.has(kFlagDecided)) return sys::real().connect(fd, addr, len);

    uint32_t reason = 0;
    config::ModeSet modes = runtime::decide(config::Role::Client, addr, len, &reason);
    bool candidate = false;
    if (modes & config::kModeSmcD) {
        // Cheapest test first: event-loop clients (nonblocking) skip the
        // registry lookup (a few file operations) altogether.
        std::optional<registry::Found> found;
        if (fd_nonblocking(fd))
            reason = fallback::ASYNC;
        else if (!(found = registry::lookup(addr, len, runtime::get().cfg.trusted_uids)) ||
                 !(found->flags & registry::kSmcD))
            reason = fallback::NOLISTENER;
        else if (found->flags & registry::kCongested)
            reason = fallback::PEERNOSMC; // SYN option withheld
        else if (found->pid == getpid())
            reason = fallback::SAMEPROC;
        else
            candidate = in_table(fd);
    } else if (!reason) {
        // SMC-R only: this build has no RDMA device support yet.
        reason = (modes & config::kModeSmcR) ? uint32_t{fallback::NOSMCRDEV}
                                             : uint32_t{fallback::POLICY};
    }
    if (candidate) registry::announce_pending(addr, len, true);
    int rc = sys::real().connect(fd, addr, len);
    int err = errno;
    if (rc != 0 && err != EINPROGRESS) {
        if (candidate) registry::announce_pending(addr, len, false);
        errno = err;
        return rc;
    }
    s.role = SockRole::Client;
    s.flags = static_cast<uint8_t>(s.flags | kFlagDecided |
                                   ((modes & config::kModeSmcD) ? kFlagAllowD : 0) |
                                   ((modes & config::kModeSmcR) ? kFlagAllowR : 0));
    s.reason = reason;
    g_fds.set(fd, s);
    runtime::count(counters::client_connects);
    if (!candidate) {
        count_result(reason, false);
        errno = err;
        return rc;
    }
    bool smc = false;
    {
        ensure_engine(false);
        auto result = smc_connect_handshake(fd, *g_dev, handshake_config());
        registry::announce_pending(addr, len, false);
        if (auto* conn = std::get_if<std::unique_ptr<SmcConn>>(&result)) {
            install(fd, std::move(*conn), false);
            smc = true;
        } else if (auto* fb = std::get_if<Fallback>(&result)) {
            reason = fb->reason;
            set_mode(fd, SockMode::Tcp, reason);
        } else {
            runtime::count(counters::handshake_errors);
            set_mode(fd, SockMode::Tcp, fallback::INTERR);
            return fail(-std::get<int>(result));
        }
    }
    count_result(reason, smc);
    return 0;
}

int accept(int lfd, sockaddr* addr, socklen_t* len, int flags, bool use_accept4) {
    while (true) {
        int nfd = use_accept4 ? sys::real().accept4(lfd, addr, len, flags)
                              : sys::real().accept(lfd, addr, len);
        if (nfd < 0) return nfd;
        int saved = errno;
        SockInfo l = g_fds.get(lfd);
        if (!l.tracked()) {
            g_fds.clear(nfd); // a recycled number must not keep an old socket's record
            if (in_table(nfd)) slot(nfd).store(nullptr);
            return nfd;
        }
        SockInfo s;
        s.kind = SockKind::Stream;
        s.family = l.family;
        s.role = SockRole::Server;
        // Accepted sockets follow their listener's policy decision. SMC_LIMIT_HS
        // starts from the global default, as the kernel's smc_sk_init() does.
        s.flags = static_cast<uint8_t>(
            (l.flags & (kFlagAfSmc | kFlagIpprotoSmc | kFlagAllowD | kFlagAllowR | kFlagDecided)) |
            (runtime::default_limit_hs() ? kFlagLimitHs : 0));
        s.reason = l.reason;
        if (!g_fds.set(nfd, s)) {
            runtime::count(counters::fd_untracked);
            return nfd;
        }
        runtime::count(counters::server_accepts);
        registry::Listener* listener =
            in_table(lfd) ? g_listeners[lfd].load(std::memory_order_acquire) : nullptr;
        slot(nfd).store(nullptr);
        if (!listener) {
            count_result(s.reason, false);
            errno = saved;
            return nfd;
        }
        // Was a usmc client announced? Then its Proposal is worth waiting for
        // (clc_detect_timeout_ms); otherwise only look at what is already there.
        bool expected = listener->pending_connects() > 0;
        auto first =
            clc::classify(nfd, expected ? int(runtime::get().cfg.clc_detect_timeout_ms) : 0);
        if (first != clc::FirstBytes::Proposal) {
            if (first == clc::FirstBytes::Nothing && expected) slot(nfd).store(kLateClc);
            set_mode(nfd, SockMode::Tcp, fallback::PEERNOSMC);
            count_result(fallback::PEERNOSMC, false);
            errno = saved;
            return nfd;
        }
        HandshakeResult result;
        if (!ensure_engine(true)) {
            result = Fallback{fallback::INTERR, 0};
            smc_decline_late_proposal(nfd, fallback::INTERR);
        } else {
            result = smc_listen_handshake(nfd, *g_dev, *g_ep, handshake_config());
        }
        if (auto* conn = std::get_if<std::unique_ptr<SmcConn>>(&result)) {
            bool nonblock = use_accept4 && (flags & SOCK_NONBLOCK);
            install(nfd, std::move(*conn), nonblock);
            count_result(0, true);
            errno = saved;
            return nfd;
        }
        if (auto* fb = std::get_if<Fallback>(&result)) {
            set_mode(nfd, SockMode::Tcp, fb->reason);
            count_result(fb->reason, false);
            errno = saved;
            return nfd;
        }
        // A handshake that failed half way leaves no usable connection: drop it
        // and hand the application the next one, as the kernel would.
        runtime::count(counters::handshake_errors);
        g_fds.clear(nfd);
        sys::real().close(nfd);
    }
}

Closed on_close(int fd) {
    Closed closed;
    if (!in_table(fd)) return closed;
    // Most closes are of fds usmc holds nothing for: two loads, no stores.
    if (g_listeners[fd].load(std::memory_order_acquire) == nullptr &&
        slot(fd).load(std::memory_order_acquire) == nullptr)
        return closed;
    if (auto* l = g_listeners[fd].exchange(nullptr, std::memory_order_acq_rel)) {
        struct stat st;
        closed.listener = l;
        closed.inode = fstat(fd, &st) == 0 ? st.st_ino : 0;
    }
    SmcConn* c = slot(fd).exchange(nullptr, std::memory_order_acq_rel);
    if (!c || c == kLateClc) return closed;
    if (c->fd_refs.fetch_sub(1, std::memory_order_acq_rel) > 1) {
        // Another descriptor (dup) still names it: keep watching a live one.
        if (c->tcp_fd == fd) {
            auto* conns = g_conns.load();
            for (uint32_t i = 0; i < g_fds.high() && i < g_conns_capacity; ++i)
                if (conns[i].load() == c) {
                    c->tcp_fd = static_cast<int>(i);
                    break;
                }
        }
        return closed;
    }
    release(c);
    return closed;
}

void after_close(const Closed& closed) {
    auto* l = static_cast<registry::Listener*>(closed.listener);
    if (!l) return;
    l->socket_closed(closed.inode);
    delete l;
}

void on_dup(int from, int to) {
    if (!in_table(from) || !in_table(to)) return;
    SmcConn* c = slot(from).load();
    if (c == kLateClc) c = nullptr;
    if (c) c->fd_refs.fetch_add(1, std::memory_order_acq_rel);
    SmcConn* old = slot(to).exchange(c);
    if (old && old != kLateClc && old->fd_refs.fetch_sub(1) == 1) release(old);
}

ssize_t recv(SmcConn* c, int fd, const iovec* iov, int iovcnt, int flags) {
    if (c == kLateClc) {
        handle_late_clc(fd);
        return kPassThrough;
    }
    if (flags & MSG_OOB) return fail(EINVAL); // no urgent data on SMC-D
    bool nonblock = c->nonblock.load(std::memory_order_relaxed) || (flags & MSG_DONTWAIT);
    ssize_t r = smc_recv(*c, iov, iovcnt, flags & (MSG_PEEK | MSG_WAITALL), nonblock,
                         c->rcvtimeo_ms.load());
    if (r < 0) return fail(int(-r));
    if (!(flags & MSG_PEEK)) runtime::count(counters::smcd_bytes_rx, uint64_t(r));
    return r;
}

ssize_t send(SmcConn* c, int fd, const iovec* iov, int iovcnt, int flags) {
    (void)fd;
    if (flags & MSG_OOB) return fail(EOPNOTSUPP);
    bool nonblock = c->nonblock.load(std::memory_order_relaxed) || (flags & MSG_DONTWAIT);
    ssize_t r = smc_send(*c, iov, iovcnt, nonblock, c->sndtimeo_ms.load());
    if (r == -EPIPE && !(flags & MSG_NOSIGNAL)) raise(SIGPIPE);
    if (r < 0) return fail(int(-r));
    runtime::count(counters::smcd_bytes_tx, uint64_t(r));
    return r;
}

ssize_t sendfile(SmcConn* c, int fd, int in_fd, off_t* offset, size_t count) {
    char buf[65536];
    size_t done = 0;
    off_t pos = offset ? *offset : 0;
    while (done < count) {
        size_t want = std::min(sizeof buf, count - done);
        ssize_t n = offset ? pread(in_fd, buf, want, pos) : sys::real().read(in_fd, buf, want);
        if (n < 0) {
            if (done) break;
            return -1;
        }
        if (n == 0) break;
        iovec iov{buf, size_t(n)};
        ssize_t w = send(c, fd, &iov, 1, 0);
        if (w < 0) {
            if (done) break;
            return -1;
        }
        done += size_t(w);
        pos += w;
        if (w < n) {
            // The peer's ring is full: give back what we read beyond it.
            if (!offset) lseek(in_fd, w - n, SEEK_CUR);
            break;
        }
    }
    if (offset) *offset = pos;
    return ssize_t(done);
}

int shutdown(SmcConn* c, int fd, int how) {
    (void)fd;
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return fail(EINVAL);
    if (how != SHUT_RD) smc_shutdown_write(*c);
    return 0;
}

void set_nonblock(SmcConn* c, bool on) {
    c->nonblock.store(on, std::memory_order_relaxed);
}

void set_timeout(SmcConn* c, int optname, const void* optval, socklen_t optlen) {
    if (!optval || optlen < sizeof(timeval)) return;
    const auto* tv = static_cast<const timeval*>(optval);
    int ms =
        (tv->tv_sec == 0 && tv->tv_usec == 0) ? -1 : int(tv->tv_sec * 1000 + tv->tv_usec / 1000);
    if (ms == 0) ms = 1;
    (optname == SO_RCVTIMEO ? c->rcvtimeo_ms : c->sndtimeo_ms).store(ms);
}

int ioctl_queue(SmcConn* c, unsigned long request, int* out) {
    if (!out) return fail(EFAULT);
    if (request == FIONREAD)
        *out = int(smc_rx_available(*c));
    else if (request == SIOCOUTQ)
        *out = int(smc_tx_unconsumed(*c));
    else
        return fail(EINVAL);
    return 0;
}

bool any_smc(const pollfd* fds, nfds_t n) {
    if (!g_conns.load(std::memory_order_acquire)) return false;
    for (nfds_t i = 0; i < n; ++i) {
        SmcConn* c = conn_of(fds[i].fd);
        if (c && c != kLateClc) return true;
    }
    return false;
}

int poll(pollfd* fds, nfds_t n, int timeout_ms, const sigset_t* mask) {
    // Each SMC entry becomes up to three kernel entries (rx eventfd, tx
    // eventfd, the TCP socket for a vanished peer); results map back.
    std::vector<pollfd> k;
    std::vector<nfds_t> owner;
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
            if (!c || c == kLateClc) {
                k.push_back({fds[i].fd, fds[i].events, 0});
                owner.push_back(i);
                continue;
            }
            short want = fds[i].events & (POLLIN | POLLOUT | POLLRDHUP | POLLPRI);
            short now = smc_arm(*c, want & (POLLIN | POLLOUT));
            if (now) {
                fds[i].revents = short((now & (want | POLLERR | POLLHUP)));
                if (fds[i].revents) ++ready;
            }
            if (want & POLLIN) {
                k.push_back({c->rx_event, POLLIN, 0});
                owner.push_back(i);
                k.push_back(
                    {fds[i].fd, POLLIN, 0}); // the TCP socket only wakes when the peer is gone
                owner.push_back(i);
            }
            if (want & POLLOUT) {
                k.push_back({c->tx_event, POLLOUT, 0});
                owner.push_back(i);
            }
        }
        int wait_ms = ready ? 0 : timeout_ms;
        if (!ready && timeout_ms > 0) {
            timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            int64_t spent =
                (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
            wait_ms = spent >= timeout_ms ? 0 : int(timeout_ms - spent);
        }
        timespec ts{wait_ms / 1000, (wait_ms % 1000) * 1000000L};
        int r = mask ? sys::real().ppoll(k.data(), k.size(), wait_ms < 0 ? nullptr : &ts, mask)
                     : sys::real().poll(k.data(), k.size(), wait_ms);
        if (r < 0) return ready ? ready : -1;
        for (size_t j = 0; j < k.size(); ++j) {
            nfds_t i = owner[j];
            SmcConn* c = conn_of(fds[i].fd);
            if (!c || c == kLateClc) {
                fds[i].revents = k[j].revents;
                continue;
            }
        }
        ready = 0;
        for (nfds_t i = 0; i < n; ++i) {
            SmcConn* c = conn_of(fds[i].fd);
            if (c && c != kLateClc) {
                short want = fds[i].events & (POLLIN | POLLOUT | POLLRDHUP | POLLPRI);
                if (!c->peer_gone.load()) smc_check_peer(*c);
                fds[i].revents = short(smc_poll_events(*c) & (want | POLLERR | POLLHUP));
            }
            if (fds[i].revents) ++ready;
        }
        if (ready || wait_ms == 0) return ready;
        // Woken with nothing to report (a stale eventfd count): wait again.
    }
}

int epoll_ctl(int epfd, int op, int fd, epoll_event* ev) {
    SmcConn* c = conn_of(fd);
    if (!c || c == kLateClc) return sys::real().epoll_ctl(epfd, op, fd, ev);
    if (op != EPOLL_CTL_DEL && !ev) return fail(EFAULT);
    // The TCP socket itself: under its own number, only to report a vanished
    // peer (in SMC mode no byte arrives on it otherwise).
    epoll_event tcp_ev{};
    if (ev) {
        tcp_ev = *ev;
        tcp_ev.events &= (EPOLLIN | EPOLLRDHUP | EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE);
    }
    int rc = sys::real().epoll_ctl(epfd, op, fd, op == EPOLL_CTL_DEL ? nullptr : &tcp_ev);
    if (rc != 0) return rc;
    int saved = errno;
    epoll_event rx{}, tx{};
    if (ev) {
        uint32_t common = ev->events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE);
        rx.events = (ev->events & EPOLLIN) | common;
        rx.data = ev->data;
        tx.events = (ev->events & EPOLLOUT) | common;
        tx.data = ev->data;
    }
    if (op == EPOLL_CTL_DEL) {
        sys::real().epoll_ctl(epfd, EPOLL_CTL_DEL, c->rx_event, nullptr);
        sys::real().epoll_ctl(epfd, EPOLL_CTL_DEL, c->tx_event, nullptr);
        std::lock_guard lock(c->epoll_mu);
        std::erase(c->epoll_sets, epfd);
    } else {
        sys::real().epoll_ctl(epfd, op, c->rx_event, &rx);
        sys::real().epoll_ctl(epfd, op, c->tx_event, &tx);
        if (op == EPOLL_CTL_ADD) {
            std::lock_guard lock(c->epoll_mu);
            c->epoll_sets.push_back(epfd);
        }
        // Make the eventfds tell the truth now (level-triggered), or arm the
        // peer's wake-ups for when it becomes true.
        smc_arm(*c, short(((ev->events & EPOLLIN) ? POLLIN : 0) |
                          ((ev->events & EPOLLOUT) ? POLLOUT : 0)));
    }
    errno = saved;
    return 0;
}

void on_exit() {
    auto* conns = g_conns.load();
    if (!conns) return;
    for (uint32_t fd = 0; fd < g_fds.high() && fd < g_conns_capacity; ++fd) {
        SmcConn* c = conns[fd].load();
        if (!c || c == kLateClc) continue;
        if (c->rx.valid() && c->rx.control()->owner_refs.load() <= 1 &&
            !(c->conn_flags.load() & (cdc::kPeerConnClosed | cdc::kPeerConnAbort)))
            smc_close(*c, false);
    }
}

namespace {
// Adds `delta` to the shared reference count of every connection (each once,
// however many descriptors name it). Runs around fork: no allocation.
void adjust_owner_refs(int64_t delta) {
    auto* conns = g_conns.load();
    if (!conns) return;
    ++g_fork_gen;
    for (uint32_t fd = 0; fd < g_fds.high() && fd < g_conns_capacity; ++fd) {
        SmcConn* c = conns[fd].load();
        if (!c || c == kLateClc || c->fork_gen == g_fork_gen) continue;
        c->fork_gen = g_fork_gen;
        c->rx.control()->owner_refs.fetch_add(uint64_t(delta), std::memory_order_acq_rel);
    }
}
} // namespace

void before_fork() {
    adjust_owner_refs(1);
}
void fork_failed() {
    adjust_owner_refs(-1);
}

void on_fork_child() {
    // The parent's endpoint thread does not exist here; its GID is the
    // parent's. This process gets its own device and endpoint on first need.
    // (The parent's objects are left alone: their locks may be held.)
    if (g_ep) g_ep->abandon_after_fork();
    g_ep = nullptr;
    g_dev = nullptr;
    new (&g_engine_mu) std::mutex();
}

} // namespace usmc::af_smc
