// SPDX-License-Identifier: MIT
// connect(): who becomes an SMC candidate, and the client handshake.
//
// A blocking connect() runs the handshake in the calling thread, as the
// kernel does. A nonblocking one returns EINPROGRESS at once and the
// handshake runs on a client worker (the kernel's smc_connect_work): until it
// ends the socket is not writable (EPOLLOUT, POLLOUT) and its calls answer
// EAGAIN, so the application learns "connected" only once it is known
// whether the connection runs as SMC-D or as TCP.
#include "engine/base/count.hpp"
#include "engine/base/fallback.hpp"
#include "engine/base/fdtable.hpp"
#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"
#include "engine/clc/clc_io.hpp"
#include "engine/conn/peer_watch.hpp"
#include "engine/discovery/registry.hpp"
#include "engine/handshake/connect_watch.hpp"
#include "engine/handshake/hs_track.hpp"
#include "engine/readiness/wakeup.hpp"
#include "engine/sock/af_smc_internal.hpp"
#include "engine/sock/learn.hpp"
#include "engine/sock/runtime.hpp"
#include "engine/sock/user_sets.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <netinet/in.h>
#include <poll.h>

namespace usmc::af_smc {

using namespace detail;

namespace {

// TCP connect of a nonblocking socket: wait this long for it on the worker
// before giving the socket back to the application as TCP, still connecting.
constexpr int kTcpConnectWaitMs = 10000;
// The same wait in the connect watch, which costs nothing while it waits:
// as long as the kernel tries (SYN retries, tcp_syn_retries = 6: ~127 s),
// so a connect whose SYNs were dropped (a listener's backlog full) still
// ends as SMC-D. The application sees it connecting all that time, as
// with TCP.
constexpr int kTcpConnectWatchMs = 130000;

// The worker is done: switch the application's view of the socket to what
// the handshake gave, under the sets' lock and epoll_mu so an epoll_ctl
// cannot slip between.
void finish_connect(int fd, SmcConn* c, const ConnectResult& result, uint32_t* reason_out) {
    std::unique_lock user_lock(user_sets_mutex());
    std::unique_lock lock(c->epoll_mu);
    uint32_t reason = 0;
    if (std::holds_alternative<std::monostate>(result)) {
        c->start_owner_refs();
        learn::begin(*c);
        // `sig` is in the application's sets already, as epoll_ctl puts it
        // for an Active connection.
        short want = POLLOUT; // connected: writable now (the peer's ring is empty)
        for (auto& r : c->connecting_regs) {
            // As connecting_ctl registered it: what active_ctl chooses too.
            c->epoll_members.push_back({r.epfd, sig_registration(r.ev), false});
            if (r.ev.events & EPOLLIN) want |= POLLIN; // ask the peer to wake us for data
        }
        // A set kept in user memory that holds it (since its epoll_ctl while
        // connecting) is rung below: it finds it writable, as the kernel's
        // set is told when a TCP connect completes.
        const bool in_user_set = c->user_set != nullptr;
        if (!c->connecting_regs.empty() || in_user_set) peer_watch::add(c);
        c->connecting_regs.clear();
        set_mode(fd, SockMode::SmcD, 0);
        c->phase.store(Phase::Active, std::memory_order_release);
        // (Counted under both locks: an epoll_ctl ADD or MOD after them
        // sees it with the bits, not as a second edge.)
        if (in_user_set) c->out_wakes.fetch_add(1, std::memory_order_acq_rel);
        tcp_options_active(*c);
        // Active and in every set: an epoll_ctl from here on goes through
        // active_ctl. Let go before `sig` turns writable: that wakes the
        // application, whose next epoll_ctl would otherwise wait on this
        // lock (a futex and two context switches per connection when the
        // loop and the application share a CPU).
        lock.unlock();
        user_lock.unlock();
        activated(fd, *c);
        if (in_user_set) smc_wake_user(*c);
        smc_arm(*c, want, TcpEndWatch::EpollSets);
    } else {
        if (auto* fb = std::get_if<Fallback>(&result)) {
            reason = fb->reason;
            if (reason == fallback::CLCWAIT) c->late_clc.store(true);
        } else {
            reason = fallback::INTERR;
            c->so_error.store(-std::get<int>(result));
            counters::count(counters::handshake_errors);
            log::warn("fd {}: client handshake failed half way ({}): the connection is reset", fd,
                      std::strerror(-std::get<int>(result)));
            sys::real().shutdown(fd, SHUT_RDWR); // the connection is unusable
        }
        // TCP from here on, before the socket itself joins the application's
        // sets: an event there makes the application send at once, and
        // send() must then reach the kernel, not answer EAGAIN as while
        // connecting.
        set_mode(fd, SockMode::Tcp, reason);
        c->phase.store(Phase::Tcp, std::memory_order_release);
        sync_tcp_options(fd, *c); // (none: set while connecting, they went to the socket)
        for (auto& r : c->connecting_regs) {
            // (Not in a set whose number now names another: the one it was
            // registered in is gone.)
            if (sys::real().epoll_ctl(r.epfd, EPOLL_CTL_DEL, c->sig, nullptr) == 0 ||
                errno != ENOENT)
                sys::real().epoll_ctl(r.epfd, EPOLL_CTL_ADD, fd, &r.ev);
            note_epoll_member(r.epfd, -1);
        }
        c->connecting_regs.clear();
        user_connect_ended_locked(c); // one a set held: the kernel's, on the socket
        // Wake poll()ers on `sig`: they look again and see TCP. The pair
        // is of no more use: it goes as soon as they have left (a TCP
        // connection must not hold usmc's descriptors: kept until the
        // connection closed, fallbacks' wake-up sockets took much of usmc's
        // quarter).
        smc_wake_all(*c);
        smc_retire_wakeups(*c);
    }
    *reason_out = reason;
}

// Client handshakes wait for a worker (the queue's congestion, as the
// server's): read without creating the queue or taking a lock.
bool client_congested() {
    HandshakeQueue* q = g_engine.client_q.load(std::memory_order_acquire);
    return q && q->congested();
}

// Which server process took our last SMC connection to an address (its
// GID): the one whose link group the next Proposal names our DMB in. The
// registry names only the listener's publisher, which in a pre-fork server
// (nginx) is not the process that accepts. A hint: a wrong one costs the
// name (the Confirm follows as before), never the connection.
struct AcceptorHint {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> gid{0};
};
constexpr size_t kAcceptorHints = 64;
AcceptorHint g_acceptors[kAcceptorHints];

// FNV-1a over what names the destination: family, port and address.
uint64_t destination_key(const sockaddr* addr, socklen_t len) {
    const uint8_t* b = reinterpret_cast<const uint8_t*>(addr);
    size_t n = addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    n = std::min<size_t>(n, len);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i)
        h = (h ^ b[i]) * 1099511628211ull;
    return h | 1; // never 0, the empty entry
}

uint64_t acceptor_of(uint64_t key) {
    const AcceptorHint& e = g_acceptors[key % kAcceptorHints];
    return e.key.load(std::memory_order_relaxed) == key ? e.gid.load(std::memory_order_relaxed) : 0;
}

void note_acceptor(uint64_t key, uint64_t gid) {
    AcceptorHint& e = g_acceptors[key % kAcceptorHints];
    if (e.gid.load(std::memory_order_relaxed) != gid) e.gid.store(gid, std::memory_order_relaxed);
    if (e.key.load(std::memory_order_relaxed) != key) e.key.store(key, std::memory_order_relaxed);
}

// The client port connect() chose (0 if unknown): announced so the server
// knows which connection will send a Proposal.
uint16_t local_port(int fd) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (sys::real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return 0;
    return ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
}

// A nonblocking connect's handshake as it is handed on: between the
// application's thread, the event loop (connect_watch) and a client worker.
// Copied with each hand-off; only the holder of the latest copy moves it.
struct ClientHandshake {
    int fd;
    SmcConn* c;
    sockaddr_storage addr;
    socklen_t len;
    uint16_t port;
    uint64_t key;        // destination_key of addr
    uint64_t server_gid; // the process we expect to take it (acceptor hint, else the publisher)
    core::ClientHs state = core::ClientHs::Start;

    void on(core::ClientEvent e) { hs_track::advance(state, e, fd); }
};

core::ClientEvent event_of(const ConnectResult& result) {
    if (std::holds_alternative<std::monostate>(result)) return core::ClientEvent::Up;
    if (auto* fb = std::get_if<Fallback>(&result))
        return fb->reason ? core::ClientEvent::FellBack : core::ClientEvent::TcpFailed;
    return core::ClientEvent::Error;
}

// The connect is no longer pending at the server. One that gave up waiting
// for the server's answer (CLCWAIT, or declined for want of a worker after
// its Proposal went out: `late`) keeps its port known, so the server takes
// its Proposal off the stream however late it accepts.
void end_announcement(const sockaddr* addr, socklen_t len, uint16_t port,
                      const ConnectResult& result, bool late) {
    auto* fb = std::get_if<Fallback>(&result);
    if (fb && port && (late || fb->reason == fallback::CLCWAIT) &&
        registry::announce_gave_up(addr, len, port))
        return;
    registry::announce_pending(addr, len, false, port);
}

// The handshake is over (on the application's thread, the event loop or a
// worker): the application's view of the socket, the counts, the queue's load.
void end_client(ClientHandshake h, const ConnectResult& result, core::ClientEvent why) {
    h.on(why);
    SmcConn* c = h.c;
    end_announcement(reinterpret_cast<sockaddr*>(&h.addr), h.len, h.port, result,
                     c->late_clc.load());
    uint32_t reason = 0;
    bool smc = std::holds_alternative<std::monostate>(result);
    bool tcp_failed =
        std::holds_alternative<Fallback>(result) && !std::get<Fallback>(result).reason;
    if (smc) {
        note_acceptor(h.key, c->peer_gid);
    } else if (c->transport.has_buffers()) {
        // Ended before the handshake's own steps gave back what it claimed
        // (a Proposal that could not be written, no worker to go on).
        std::lock_guard lock(g_engine_mu);
        transports_abandon(*c, g_engine.devs);
    }
    finish_connect(h.fd, c, result, &reason);
    if (!tcp_failed) count_result(reason, smc);
    g_engine.client_q.load(std::memory_order_acquire)->end();
    // Last touch of `c`: close() may free it once worker_done is set.
    c->phase.notify_all();
    c->worker_done.store(true, std::memory_order_release);
}

void end_client(ClientHandshake h, const ConnectResult& result) {
    end_client(h, result, event_of(result));
}

// A worker's part, by where the handshake was when it needed one: the TCP
// connect still to wait for and the Proposal unsent (Start, Connecting), or
// the Proposal out and the answer to read (AwaitAccept; `late`: the event
// loop's wait for it ran out).
void client_job(ClientHandshake h, core::ClientHs from, bool late) {
    ConnectResult result;
    HandshakeConfig cfg = handshake_config();
    if (from == core::ClientHs::AwaitAccept) {
        if (late) cfg.accept_wait_ms = 0; // waited for in the watch
        result = smc_connect_handshake(h.fd, *h.c, devices(), cfg, true);
    } else {
        pollfd p{h.fd, POLLOUT, 0};
        if (sys::real().poll(&p, 1, kTcpConnectWaitMs) == 1 && !(p.revents & (POLLERR | POLLHUP)))
            result = smc_connect_handshake(h.fd, *h.c, devices(), cfg, false, h.server_gid);
        else // failed or still going: the application reads the kernel's outcome
            result = Fallback{0, 0};
    }
    end_client(h, result);
}

// What comes next blocks: a client worker takes it (`job`, given the
// handshake as it is then). If none can, the connection goes on as TCP,
// declining a Proposal already sent.
template <typename Job>
void to_worker(ClientHandshake h, Job job) {
    bool sent = h.state == core::ClientHs::AwaitAccept || h.state == core::ClientHs::Attaching;
    h.on(core::ClientEvent::NeedsThread);
    HandshakeQueue* q = client_queue();
    if (q && q->submit([h, job]() mutable { job(h); })) return;
    if (sent) {
        // The server took the DMB our Proposal named: it believes SMC is up,
        // and only an error is honest (no thread is left to finish it).
        if (!transports_withdraw_named(*h.c)) return end_client(h, -ECONNRESET);
        // The server answers our Proposal: decline, and skip its answer.
        clc::send_decline(h.fd, transports_id(g_engine.devs), fallback::INTERR, 1000);
        h.c->late_clc.store(true);
    }
    end_client(h, Fallback{fallback::INTERR, 0});
}

void to_worker(ClientHandshake h, bool late = false) {
    core::ClientHs from = h.state;
    to_worker(h, [from, late](ClientHandshake on) { client_job(on, from, late); });
}

// Sends the Proposal now that the TCP connection is up, if our memory has
// room for a DMB: ProposalSent, ProposalFailed, or NeedsThread (no room: a
// worker goes on, and falls back). On a link group with the process we
// expect to take it, our DMB is claimed now and named in it.
core::ClientEvent send_proposal_now(const ClientHandshake& h) {
    switch (transports_proposal_now(h.fd, *h.c, devices(), handshake_config(), h.server_gid)) {
    case ProposalNow::Sent:
        return core::ClientEvent::ProposalSent;
    case ProposalNow::Failed:
        return core::ClientEvent::ProposalFailed;
    case ProposalNow::NoRoom:
        break;
    }
    return core::ClientEvent::NeedsThread;
}

// A loopback TCP connect is mostly complete when connect() returns. Then
// the Proposal goes out now, from the caller's thread: the server finds it
// at accept time and starts its handshake at once. Sent by a worker instead,
// it would wait behind the client's queue while a server worker waits for
// it (clc_detect_timeout_ms): two queues waiting on each other, which
// stalled a storm of short connections for whole seconds. A connect not up yet
// is TcpPending: the connect watch sends it when it is (connect_watch.hpp).
core::ClientEvent early_proposal(const ClientHandshake& h) {
    pollfd p{h.fd, POLLOUT, 0};
    int n = sys::real().poll(&p, 1, 0);
    if (n == 0) return core::ClientEvent::TcpPending;
    if (n != 1 || p.revents != POLLOUT) return core::ClientEvent::NeedsThread;
    return send_proposal_now(h);
}

// Attaching, on the event loop: the endpoint's answer completes the
// handshake there. Every link to that server busy: a worker attaches,
// waiting for one.
void attach(ClientHandshake h, const clc::AcceptConfirmD& accept) {
    h.on(core::ClientEvent::NeedsAttach);
    bool started = transports_attach_on_loop(
        h.fd, *h.c, devices(), handshake_config(), accept, [h](ConnectResult result) {
            counters::count(counters::client_handshakes_on_watch);
            end_client(h, result);
        });
    if (started) return;
    to_worker(h, [accept](ClientHandshake on) {
        end_client(on, transports_attach(on.fd, *on.c, devices(), handshake_config(), accept));
    });
}

// AwaitAccept, on the event loop: the whole answer to our Proposal there is
// read and acted on (confirmed on a link group, or attached without
// waiting), so no worker takes the connection and no thread waits for the
// server. An answer not yet whole goes to a worker.
void on_answer(ClientHandshake h) {
    auto answer = clc::take_whole_message(h.fd);
    if (!answer) return to_worker(h);
    HandshakeConfig cfg = handshake_config();
    auto step = smc_connect_accept(h.fd, *h.c, devices(), cfg, true, &*answer);
    if (auto* done = std::get_if<ConnectResult>(&step)) return end_client(h, *done);
    auto accept = std::get<clc::AcceptConfirmD>(step);
    if (auto done =
            transports_reuse(h.fd, *h.c, devices(), cfg, accept)) { // a link group: no attach
        counters::count(counters::client_handshakes_on_watch);
        return end_client(h, *done);
    }
    attach(h, accept);
}

// The Proposal is out (`sent`: ProposalSent; otherwise the handshake ends
// or a worker takes it): the connect watch waits for the server's answer,
// and a worker takes the handshake only if it is not whole. A worker
// blocked on the Accept waits for the server's handshake queue; the
// server's workers wait for our attaches, which then queue behind those
// blocked workers (a cycle only timeouts broke: a storm of connections
// froze for seconds).
void after_proposal(ClientHandshake h, core::ClientEvent sent) {
    if (sent == core::ClientEvent::NeedsThread) return to_worker(h);
    // A Proposal half written: the connection is unusable.
    if (sent == core::ClientEvent::ProposalFailed) return end_client(h, -ECONNRESET, sent);
    h.on(sent);
    bool watched =
        connect_watch::add(h.fd, connect_watch::Want::Readable,
                           uint32_t(handshake_config().clc_timeout_ms), [h](bool answered) {
                               if (answered) return on_answer(h);
                               to_worker(h, true);
                           });
    if (!watched) to_worker(h);
}

// Nonblocking connect of a candidate: EINPROGRESS; the handshake goes on
// without the application (event loop, worker).
int connect_async(int fd, const sockaddr* addr, socklen_t len, uint32_t* reason,
                  learn::Ticket learner, uint64_t publisher_gid) {
    HandshakeQueue* q = client_queue();
    auto* c = new SmcConn;
    c->learn_ticket = learner;
    if (!q || !smc_conn_init_wakeups(*c, true, transports_random_token())) {
        discard(c);
        *reason = errno == EMFILE ? fallback::FDLIMIT : fallback::MEM;
        return 1; // go on as plain TCP
    }
    c->tcp_fd = fd;
    c->nonblock.store(true);
    c->phase.store(Phase::Connecting);
    c->worker_done.store(false);
    if (!registry::announce_pending(addr, len, true)) {
        discard(c);
        *reason = fallback::NOLISTENER; // its announcements cannot be reached
        return 1;
    }
    int rc = sys::real().connect(fd, addr, len);
    if (rc != 0 && errno != EINPROGRESS) {
        int err = errno;
        registry::announce_pending(addr, len, false);
        discard(c);
        errno = err;
        return -1;
    }
    slot(fd).store(c, std::memory_order_release);
    q->begin(); // ended where the handshake ends (end_client)
    uint64_t key = destination_key(addr, len);
    uint64_t acceptor = acceptor_of(key);
    ClientHandshake h{fd, c, {}, len, local_port(fd), key, acceptor ? acceptor : publisher_gid};
    registry::announce_pending(addr, len, true, h.port);
    std::memcpy(&h.addr, addr, std::min<size_t>(len, sizeof h.addr));
    counters::count(counters::client_async_handshakes);
    auto early = early_proposal(h);
    if (early == core::ClientEvent::TcpPending) {
        // close() of the socket meanwhile shuts it down and waits for the
        // handshake's end: the watch sees the hang-up.
        h.on(early);
        bool watched = connect_watch::add(
            fd, connect_watch::Want::Connected, kTcpConnectWatchMs, [h](bool up) {
                if (!up)
                    return end_client(h,
                                      Fallback{0, 0}); // the kernel's outcome is the application's
                after_proposal(h, send_proposal_now(h));
            });
        if (watched) {
            counters::count(counters::connects_watched);
            errno = EINPROGRESS;
            return -1;
        }
        early = core::ClientEvent::NeedsThread; // a worker waits for the connect
    }
    after_proposal(h, early);
    errno = EINPROGRESS;
    return -1;
}

// Blocking connect of a candidate: the real connect, then the handshake here.
int connect_blocking(int fd, const sockaddr* addr, socklen_t len, uint32_t* reason,
                     learn::Ticket learner, uint64_t publisher_gid) {
    if (!registry::announce_pending(addr, len, true)) {
        *reason = fallback::NOLISTENER; // its announcements cannot be reached
        return 1;
    }
    int rc = sys::real().connect(fd, addr, len);
    if (rc != 0) {
        int err = errno;
        registry::announce_pending(addr, len, false);
        errno = err;
        return -1;
    }
    uint16_t port = local_port(fd);
    registry::announce_pending(addr, len, true, port);
    auto conn = std::make_unique<SmcConn>();
    conn->learn_ticket = learner;
    ConnectResult result = Fallback{fallback::MEM, 0};
    auto state = core::ClientHs::Start;
    hs_track::advance(state, core::ClientEvent::NeedsThread,
                      fd); // the caller blocks, as in the kernel
    errno = 0;
    uint64_t key = destination_key(addr, len);
    uint64_t acceptor = acceptor_of(key);
    if (smc_conn_init_wakeups(*conn, true, transports_random_token()))
        result = smc_connect_handshake(fd, *conn, devices(), handshake_config(), false,
                                       acceptor ? acceptor : publisher_gid);
    hs_track::advance(state, event_of(result), fd);
    end_announcement(addr, len, port, result, false);
    if (std::holds_alternative<std::monostate>(result)) {
        note_acceptor(key, conn->peer_gid);
        install(fd, std::move(conn), false);
        count_result(0, true);
        return 0;
    }
    discard(conn.release());
    if (auto* fb = std::get_if<Fallback>(&result)) {
        *reason = fb->reason;
        if (*reason == fallback::CLCWAIT) slot(fd).store(kLateClc);
        set_mode(fd, SockMode::Tcp, *reason);
        count_result(*reason, false);
        return 0;
    }
    counters::count(counters::handshake_errors);
    log::warn("fd {}: client handshake failed half way ({})", fd,
              std::strerror(-std::get<int>(result)));
    set_mode(fd, SockMode::Tcp, fallback::INTERR);
    return fail(-std::get<int>(result));
}

// Whether this connect runs as plain TCP because SMC-D was learned not to
// pay here: the listener says so (its registry entry) or our own learner
// of the destination does; then every kProbeEvery-th such connect goes
// SMC-D all the same, to measure again. Only in mode "auto": an explicit
// smcd always tries. `learner` receives the destination's learner (0 if
// not learning) for the connection to report to.
bool learned_tcp(config::ModeSet modes, uint32_t flags, const sockaddr* addr, socklen_t len,
                 learn::Ticket* learner) {
    if (!runtime::get().cfg.learn_smc || modes != config::kModeAuto) return false;
    *learner = learn::destination_ticket(addr, len);
    bool tcp =
        (flags & registry::kLearnedTcp) || sys::mono_ns() < learn::destination_tcp_until(*learner);
    if (!tcp) return false;
    if (learn::destination_probe(*learner)) {
        counters::count(counters::learn_probes);
        return false;
    }
    return true;
}

} // namespace

namespace detail {
HandshakeQueue* client_queue() {
    std::lock_guard lock(g_engine_mu);
    if (!g_engine.client_q.load(std::memory_order_relaxed)) {
        // A client handshake mostly waits for its server; a queued one sends
        // its Proposal late, and a server past clc_detect_timeout_ms would
        // take the connection as TCP. So more workers here than for servers.
        // Handshakes in flight congest it at four per worker: past that a
        // new one waits behind the others' answers (handshake_queue.hpp).
        unsigned workers = std::max(8u, 4 * runtime::get().cfg.hs_workers);
        g_engine.client_q.store(new HandshakeQueue(workers,
                                                   runtime::get().cfg.hs_congestion_hold_ms,
                                                   nullptr, 4 * workers, "usmc-hs-client"),
                                std::memory_order_release);
    }
    return g_engine.client_q.load(std::memory_order_relaxed);
}
} // namespace detail

void note_epoll_add(int fd) {
    SockInfo s = g_fds.get(fd);
    if (!s.tracked() || s.has(kFlagDecided) || s.role != SockRole::None) return;
    s.flags = static_cast<uint8_t>(s.flags | kFlagEpollEarly);
    g_fds.set(fd, s);
}

int connect(int fd, const sockaddr* addr, socklen_t len) {
    SockInfo s = g_fds.get(fd);
    bool inet = addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6);
    if (!s.tracked() || !inet || s.has(kFlagDecided)) return sys::real().connect(fd, addr, len);
    runtime::publish_own_stats();

    uint32_t reason = 0;
    config::ModeSet modes = runtime::decide(config::Role::Client, addr, len, &reason);
    bool nonblock = false;
    bool candidate = false;
    learn::Ticket learner = 0;
    uint64_t publisher_gid = 0;
    if (modes & config::kModeSmcD) {
        auto found = registry::lookup(addr, len, runtime::get().cfg.trusted_uids);
        if (found) publisher_gid = found->gid;
        if (!found || !(found->flags & registry::kSmcD)) {
            reason = fallback::NOLISTENER;
        } else if (found->flags & registry::kCongested) {
            reason = fallback::HSLIMIT; // the kernel's listener would withhold the SYN option
            counters::count(counters::hs_limit_bypassed);
        } else if (learned_tcp(modes, found->flags, addr, len, &learner)) {
            reason = fallback::LEARNED;
        } else if ((found->flags & registry::kLimitHs) && (s.hints & kHintNonblock) &&
                   client_congested()) {
            // The same bypass for our own side: handshakes wait for a client
            // worker (wrk, thousands of short connections), so a new one
            // would only queue behind them. Only where the server asked for
            // it with SMC_LIMIT_HS, and only for nonblocking connects (a
            // blocking one waits for its own handshake). The hint, not the
            // kernel, answers that here: a wrong hint only swaps a bypass
            // for an SMC attempt or back, both correct, and the bypass then
            // costs no system call of ours.
            reason = fallback::HSLIMIT;
            counters::count(counters::hs_client_bypassed);
        } else {
            // Asked only here: a connect that goes plain TCP (no listener of
            // ours there, or a bypass) pays no system call of ours.
            nonblock = fd_nonblocking(fd);
            if (s.has(kFlagEpollEarly)) {
                // (A socket in no set before connect() is registered as an SMC
                // connection by epoll_ctl: connecting_ctl, active_ctl.)
                reason = fallback::EPOLLEARLY;
            } else if (!nonblock && found->pid == getpid()) {
                reason = fallback::SAMEPROC; // we would wait for our own accept()
            } else if (!in_table(fd) || !fd_budget_ok(fd)) {
                reason = in_table(fd) ? uint32_t{fallback::FDLIMIT} : uint32_t{fallback::FDTABLE};
            } else if (!registry::publisher_alive(addr, len, found->pid)) {
                reason = fallback::NOLISTENER; // it died: its address may be anyone's now
            } else {
                candidate = ensure_engine(false);
            }
        }
    } else if (!reason) {
        // SMC-R only: this build has no RDMA device support yet.
        reason = (modes & config::kModeSmcR) ? uint32_t{fallback::NOSMCRDEV}
                                             : uint32_t{fallback::POLICY};
    }
    s.role = SockRole::Client;
    s.flags = static_cast<uint8_t>(s.flags | kFlagDecided |
                                   ((modes & config::kModeSmcD) ? kFlagAllowD : 0) |
                                   ((modes & config::kModeSmcR) ? kFlagAllowR : 0));
    s.reason = reason;
    g_fds.set(fd, s);

    int rc = 1; // 1: not (or no longer) a candidate, connect as plain TCP
    if (candidate)
        rc = nonblock ? connect_async(fd, addr, len, &reason, learner, publisher_gid)
                      : connect_blocking(fd, addr, len, &reason, learner, publisher_gid);
    if (rc == 1) {
        rc = sys::real().connect(fd, addr, len);
        int err = errno;
        if (rc != 0 && err != EINPROGRESS) {
            // A connect that failed outright leaves the socket undecided (it
            // may be tried again), as before it.
            s.flags = static_cast<uint8_t>(s.flags & ~kFlagDecided);
            g_fds.set(fd, s);
            errno = err;
            return rc;
        }
        set_mode(fd, SockMode::Tcp, reason);
        count_result(reason, false);
        errno = err;
    }
    if (rc == 0 || errno == EINPROGRESS) counters::count(counters::client_connects);
    return rc;
}

} // namespace usmc::af_smc
