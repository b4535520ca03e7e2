// SPDX-License-Identifier: MIT
// listen() and accept() for SMC listeners: the short-lived-connection path.
//
// accept() takes connections from the kernel listener and classifies them
// without waiting: one that a local usmc client announced and that starts
// (or may start) with a CLC Proposal is handshaken off the caller (its
// first bytes awaited in the connect watch, its steps on a worker), and
// accept() takes the next one; any other is plain TCP at once, untouched. Completed handshakes
// come back through the listener's queue (listener.hpp), which accept()
// serves first. See handshake_queue.hpp for congestion and SMC_LIMIT_HS.
#include "engine/base/count.hpp"
#include "engine/base/fallback.hpp"
#include "engine/base/fdtable.hpp"
#include "engine/base/log.hpp"
#include "engine/base/loop.hpp"
#include "engine/base/sys.hpp"
#include "engine/clc/clc_io.hpp"
#include "engine/discovery/registry.hpp"
#include "engine/handshake/connect_watch.hpp"
#include "engine/handshake/handshake.hpp"
#include "engine/handshake/hs_track.hpp"
#include "engine/sock/af_smc_internal.hpp"
#include "engine/sock/learn.hpp"
#include "engine/sock/runtime.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <netinet/in.h>
#include <new>
#include <poll.h>
#include <thread>
#include <vector>

namespace usmc::af_smc {

using namespace detail;

namespace {

// The kernel caps every backlog at net.core.somaxconn; so do we.
int clamp_backlog(int backlog) {
    static const int somaxconn = [] {
        int v = 4096;
        if (FILE* f = std::fopen("/proc/sys/net/core/somaxconn", "re")) {
            if (std::fscanf(f, "%d", &v) != 1) v = 4096;
            std::fclose(f);
        }
        return v;
    }();
    return (backlog < 0 || backlog > somaxconn) ? somaxconn : backlog;
}

// The server queue is congested until `until_ns`: listeners with
// SMC_LIMIT_HS tell clients in their registry entry (and whether they have
// it: a listener that follows the global knob may have changed).
void on_server_congestion(uint64_t until_ns, bool onset) {
    if (onset) counters::count(counters::hs_congestion_onsets);
    std::lock_guard lock(g_listen_mu);
    for (uint32_t fd = 0; fd < g_fds.high() && fd < g_conns_capacity; ++fd)
        if (SmcListener* l = g_listeners[fd].load(std::memory_order_acquire)) {
            bool on = limit_hs(int(fd));
            l->reg().set_flag(registry::kLimitHs, on);
            l->reg().set_congested_until(on ? until_ns : 0);
        }
}

// Records an accepted socket in the fd table; false if it cannot be tracked.
bool track_accepted(int lfd, int nfd, SockInfo* out) {
    SockInfo l = g_fds.get(lfd);
    if (!l.tracked()) {
        g_fds.clear(nfd); // a recycled number must not keep an old socket's record
        if (in_table(nfd)) slot(nfd).store(nullptr);
        return false;
    }
    runtime::publish_own_stats();
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
        counters::count(counters::fd_untracked);
        return false;
    }
    if (in_table(nfd)) slot(nfd).store(nullptr);
    counters::count(counters::server_accepts);
    *out = s;
    return true;
}

// The rest of a Proposal header whose first bytes came: a moment on the
// worker.
constexpr int kHeaderRestMs = 10;
// How long a connection whose port no client has announced may wait for
// it while some client is between connect() and its announcement: a fifth
// of clc_detect_timeout_ms (10 ms at its default). Clients announce right
// after connect() returns, so only a descheduled one misses this; a plain
// connection arriving meanwhile waits that long at most, and a setting
// that gives Proposals longer (a loaded machine) gives announcements
// proportionally longer too.
constexpr uint64_t kUnknownPortShare = 5;

// A server handshake as it is handed on between accept()'s intake, the
// event loop (connect_watch) and handshake workers. Copied with each
// hand-off; only the holder of the latest copy moves it.
struct ServerHandshake {
    SmcListener* l; // with a reference, dropped at the end (server_done)
    int fd;
    Origin origin;
    core::ServerHs state = core::ServerHs::Intake;

    void on(core::ServerEvent e) { hs_track::advance(state, e, fd); }
};

// A connection that is not handed out by the accept() that took it waits
// (a handshake on the loop or a worker, then the listener's queue) as a
// descriptor where the kernel's queue held none: close-on-exec until
// accept() hands it out, whatever that accept asked, so that a child
// spawned meanwhile (posix_spawn, system(), popen(): no fork handler of
// ours runs there) does not keep it open past the application's close.
void keep_from_children(ServerHandshake& h) {
    if (h.origin.flags < 0 || (h.origin.flags & SOCK_CLOEXEC)) return; // (< 0: set at hand-out)
    if (sys::real().fcntl(h.fd, F_SETFD, FD_CLOEXEC) == 0) h.origin.flags |= SOCK_CLOEXEC;
}

// The handshake is over (`why`): the connection goes to the listener's
// queue as `a` says (its descriptor and origin filled in here).
void server_done(ServerHandshake h, Accepted a, core::ServerEvent why) {
    h.on(why);
    SmcListener* l = h.l;
    a.fd = h.fd;
    a.origin = h.origin;
    counters::count(counters::handshakes_inflight, uint64_t(-1));
    if (a.conn) a.conn->learn_ticket = l->learn_ticket;
    // Counted before it is visible: accept() may take it at once.
    counters::count(counters::accept_queue);
    if (auto back = l->push_done(std::move(a))) {
        counters::count(counters::accept_queue, uint64_t(-1));
        discard_accepted(*back);
        l->unstall_if_room(); // one fewer: room again, maybe
    }
    l->unref();
}

// ... ending as TCP, for `reason`.
void server_done(ServerHandshake h, uint32_t reason, core::ServerEvent why, bool late_clc = false) {
    Accepted a;
    a.reason = reason;
    a.late_clc = late_clc;
    server_done(h, std::move(a), why);
}

// ... ending as `result` says.
void server_done(ServerHandshake h, HandshakeResult& result) {
    Accepted a;
    if (auto* conn = std::get_if<std::unique_ptr<SmcConn>>(&result)) {
        a.conn = std::move(*conn);
        return server_done(h, std::move(a), core::ServerEvent::Up);
    }
    if (auto* fb = std::get_if<Fallback>(&result)) {
        a.reason = fb->reason;
        return server_done(h, std::move(a), core::ServerEvent::FellBack);
    }
    // Half way through, the connection is unusable. The kernel drops such a
    // connection, but it never said "readable" for it; our listener did (the
    // kernel listener's readiness), and a blocking accept() after poll() must
    // then return. So it goes out shut down: the application reads its end,
    // as of a client that connected and left.
    counters::count(counters::handshake_errors);
    log::warn("fd {}: server handshake failed half way ({}): the connection is reset", h.fd,
              std::strerror(-std::get<int>(result)));
    sys::real().shutdown(h.fd, SHUT_RDWR);
    a.reason = fallback::INTERR;
    server_done(h, std::move(a), core::ServerEvent::Error);
}

// The second half, once the client's Confirm can be read (or its time ran
// out): on the event loop, on a worker, or here if none can take it.
void server_finish(ServerHandshake h, SmcConn* conn, uint64_t token, bool timed_out,
                   clc::ReadResult* taken = nullptr) {
    auto result = smc_listen_finish(h.fd, std::unique_ptr<SmcConn>(conn), token, devices(),
                                    handshake_config(), timed_out, taken);
    server_done(h, result);
}

void server_job(ServerHandshake h, int rest_ms, bool congested = false);
void await_confirm(ServerHandshake h, SmcConn* pending, uint64_t token);

// Begin: the Proposal read (`taken`: already), the Accept written; then the
// event loop waits for the Confirm, or the handshake ends here.
// Up inside the accept() that began it (`here`): the connection goes back
// to that call, not through the listener's queue (no eventfd written there
// and read back a moment later by the same call, nobody else woken).
void up_here(ServerHandshake h, std::unique_ptr<SmcConn> conn, Accepted* here) {
    h.on(core::ServerEvent::AcceptTook);
    counters::count(counters::handshakes_inflight, uint64_t(-1));
    conn->learn_ticket = h.l->learn_ticket;
    here->conn = std::move(conn);
    here->fd = h.fd;
    here->origin = h.origin;
    h.l->handshake_ended_here(h.fd);
    h.l->unref();
}

// `here`: the caller hands out a connection that is up at once (else it is queued).
void begin(ServerHandshake h, clc::ReadResult* taken = nullptr, Accepted* here = nullptr) {
    uint64_t token = 0;
    bool complete = false;
    auto result = smc_listen_begin(h.fd, devices(), handshake_config(), &token, taken, &complete);
    if (auto* conn = std::get_if<std::unique_ptr<SmcConn>>(&result)) {
        // The Accept took the client's named DMB: up, with no Confirm to wait for.
        if (complete && here) return up_here(h, std::move(*conn), here);
        keep_from_children(h);
        if (complete) {
            Accepted a;
            a.conn = std::move(*conn);
            return server_done(h, std::move(a), core::ServerEvent::AcceptTook);
        }
        return await_confirm(h, conn->release(), token);
    }
    keep_from_children(h);
    server_done(h, result);
}

// A whole Proposal there: its begin waits for nothing (what it reads is
// there, what it writes is one small message into an empty socket), so it
// runs right here, on the caller's thread, with no hand-off to a worker.
// Not while the test-only handshake delay is on (it sleeps). The first
// bytes are known to start a Proposal (clc::classify: others stay
// untouched), by `look`, the last look at them.
bool begin_here(ServerHandshake& h, const clc::FirstLook& look, Accepted* here = nullptr) {
    if (runtime::get().cfg.testonly_server_handshake_delay_ms) return false;
    auto msg = clc::take_whole_message(h.fd, look);
    if (!msg) return false;
    h.on(core::ServerEvent::ProposalHere);
    counters::count(counters::server_begins_here);
    begin(h, &*msg, here);
    return true;
}

// A worker takes the handshake from its Proposal on (server_job); false if
// none can (the caller ends `h`).
bool to_worker(ServerHandshake& h, int rest_ms, bool congested) {
    keep_from_children(h);
    h.on(core::ServerEvent::ProposalHere);
    return server_queue()->submit([=] { server_job(h, rest_ms, congested); });
}

// An announced connection whose first bytes are not there yet: the wait for
// them (clc_detect_timeout_ms; a fifth of it while its port is unknown) is the
// connect watch's, so a client that announces and then sends nothing holds
// no worker. False if it could not be watched (the caller ends `h`).
bool await_first_bytes(ServerHandshake& h, uint16_t port, bool known, uint64_t since_ns) {
    uint64_t detect_ns = uint64_t{runtime::get().cfg.clc_detect_timeout_ms} * 1000000;
    uint64_t spent = sys::mono_ns() - since_ns;
    uint64_t limit = known ? detect_ns : detect_ns / kUnknownPortShare;
    uint32_t wait_ms = spent >= limit ? 0 : uint32_t((limit - spent + 999999) / 1000000);
    keep_from_children(h);
    h.on(core::ServerEvent::NothingYet);
    return connect_watch::add(
        h.fd, connect_watch::Want::Readable, wait_ms, [=](bool readable) mutable {
            // A Proposal may still come: swallowed before the first read.
            constexpr bool kLate = true;
            if (!readable) {
                if (!known && h.l->reg().expects_port(port) &&
                    await_first_bytes(h, port, true, since_ns))
                    return; // announced meanwhile: its full wait
                return server_done(h, fallback::PEERNOSMC, core::ServerEvent::NotSmc, kLate);
            }
            // The rest of a partial header gets a moment on the worker. A
            // Proposal that comes while handshakes are congested is declined
            // there, as one already there at intake is (SMC_LIMIT_HS): new
            // handshakes do not join a congested queue, however late their
            // first bytes.
            bool congested = limit_hs(h.l->fd()) && server_queue()->congested();
            clc::FirstLook look;
            if ((!congested &&
                 clc::classify(look = clc::first_look(h.fd)) == clc::FirstBytes::Proposal &&
                 begin_here(h, look)) ||
                to_worker(h, kHeaderRestMs, congested))
                return;
            server_done(h, fallback::INTERR, core::ServerEvent::FellBack, kLate);
        });
}

// Once the Accept is out, the client attaches, then confirms: that wait is
// the event loop's, not a worker's (a client that stalls there must not
// keep a worker from everyone else's handshakes).
void await_confirm(ServerHandshake h, SmcConn* pending, uint64_t token) {
    int timeout_ms = handshake_config().clc_timeout_ms;
    h.on(core::ServerEvent::AcceptSent);
    bool watched = connect_watch::add(
        h.fd, connect_watch::Want::Readable, uint32_t(timeout_ms), [=](bool readable) mutable {
            // The Confirm whole, and the attach served (a client attaches
            // before it confirms) or none coming (a Confirm on a link
            // group, a Decline): nothing left to wait for, so finish
            // here rather than wake a worker for it.
            // (Taken whole or not at all; a worker gets what was taken.)
            std::optional<clc::ReadResult> msg;
            if (readable) msg = clc::take_whole_message(h.fd);
            if (msg) {
                auto hdr = clc::parse_header(msg->bytes);
                auto* head = std::get_if<clc::Header>(&hdr);
                if (!head || head->type != clc::Type::Confirm || !(head->typev2 & 0b10) ||
                    transports_attached(g_engine.devs, token))
                    return server_finish(h, pending, token, false, &*msg);
            }
            h.on(core::ServerEvent::NeedsThread);
            if (!server_queue()->submit([=]() mutable {
                    server_finish(h, pending, token, !readable, msg ? &*msg : nullptr);
                }))
                server_finish(h, pending, token, true);
        });
    if (watched) return;
    h.on(core::ServerEvent::NeedsThread);
    pollfd p{h.fd, POLLIN, 0};
    server_finish(h, pending, token, sys::real().poll(&p, 1, timeout_ms) != 1);
}

// A worker's part: the handshake of a connection that starts with a
// Proposal (`rest_ms`: its first bytes are there, the rest of the header
// may take that long), up to the Accept; the result, or later the Confirm's
// (server_finish), goes to the listener's queue.
void server_job(ServerHandshake h, int rest_ms, bool congested) {
    const auto& cfg = runtime::get().cfg;
    auto first = rest_ms > 0 ? clc::classify(h.fd, rest_ms) : clc::FirstBytes::Proposal;
    if (first != clc::FirstBytes::Proposal)
        return server_done(h, fallback::PEERNOSMC, core::ServerEvent::NotSmc,
                           first == clc::FirstBytes::Nothing);
    if (congested) {
        smc_decline_late_proposal(h.fd, fallback::HSLIMIT, rest_ms);
        counters::count(counters::hs_congested_declines);
        return server_done(h, fallback::HSLIMIT, core::ServerEvent::FellBack);
    }
    if (cfg.testonly_server_handshake_delay_ms)
        std::this_thread::sleep_for(
            std::chrono::milliseconds(cfg.testonly_server_handshake_delay_ms));
    begin(h);
}

// As accept() and getpeername() fill the caller's address: as much as fits,
// and the length it has.
void copy_address(const Origin& o, sockaddr* addr, socklen_t* len) {
    std::memcpy(addr, &o.peer, std::min<size_t>(*len, o.peer_len));
    *len = o.peer_len;
}

// Gives the application a connection a worker finished, with the flags and
// the address of this accept call.
int hand_out(Accepted& a, sockaddr* addr, socklen_t* len, bool nonblock, bool cloexec) {
    int fd = a.fd;
    // Only what differs from how it was accepted (nginx accepts every
    // connection alike: three system calls a connection saved).
    const Origin& o = a.origin;
    if (addr && !len) { // the kernel takes the connection, fails its copy-out and closes it
        discard_accepted(a);
        return fail(EFAULT);
    }
    if (o.flags < 0 || bool(o.flags & SOCK_NONBLOCK) != nonblock) {
        int fl = sys::real().fcntl(fd, F_GETFL);
        if (fl >= 0)
            sys::real().fcntl(fd, F_SETFL, nonblock ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
    }
    if (o.flags < 0 || bool(o.flags & SOCK_CLOEXEC) != cloexec)
        sys::real().fcntl(fd, F_SETFD, cloexec ? FD_CLOEXEC : 0);
    if (addr && len) {
        if (o.peer_len)
            copy_address(o, addr, len);
        else
            sys::real().getpeername(fd, addr, len);
    }
    if (a.conn) {
        install(fd, std::move(a.conn), nonblock);
        count_result(0, true);
    } else {
        set_mode(fd, SockMode::Tcp, a.reason);
        if (a.late_clc) slot(fd).store(kLateClc);
        count_result(a.reason, false);
    }
    return fd;
}

int accept_plain(int lfd, sockaddr* addr, socklen_t* len, int flags, bool use_accept4) {
    int nfd = use_accept4 ? sys::real().accept4(lfd, addr, len, flags)
                          : sys::real().accept(lfd, addr, len);
    if (nfd < 0) return nfd;
    int saved = errno;
    SockInfo s;
    if (track_accepted(lfd, nfd, &s)) count_result(s.reason, false);
    errno = saved;
    return nfd;
}

// The peer of an accepted connection runs on this host: its address is a
// loopback one or the connection's own local address (the kernel picks the
// destination as the source for a connection to a local address).
bool peer_on_this_host(int fd, const sockaddr_storage& peer) {
    if (peer.ss_family == AF_INET) {
        auto a = reinterpret_cast<const sockaddr_in&>(peer).sin_addr.s_addr;
        if ((ntohl(a) >> 24) == 127) return true;
    } else if (peer.ss_family == AF_INET6) {
        const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127))
            return true;
    } else {
        return false;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (sys::real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0 ||
        local.ss_family != peer.ss_family)
        return false;
    if (peer.ss_family == AF_INET)
        return reinterpret_cast<const sockaddr_in&>(local).sin_addr.s_addr ==
               reinterpret_cast<const sockaddr_in&>(peer).sin_addr.s_addr;
    return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(local).sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr,
                       sizeof(in6_addr)) == 0;
}

// One connection from the kernel listener, classified by its first bytes
// without waiting: given to a handshake worker (fd == kQueued), or to go out
// as TCP now (with its reason, and whether a Proposal may still arrive).
constexpr int kQueued = -2;
struct Intake {
    int fd = -1; // -1: nothing (errno says why)
    uint32_t reason = 0;
    bool late = false;
    bool untracked = false;
    Origin origin;
    Accepted up; // (fd == kQueued) up already, for the caller to hand out (`here`)
};

// `here`: the caller is accept(), which hands out a connection up at once.
Intake intake(SmcListener* l, int lfd, int flags, bool use_accept4, bool here = false) {
    Intake in;
    // Into our own buffer, never the caller's: a connection queued for a
    // handshake goes out from a later call, whose buffer and length are
    // those to fill (this call's length, once set to the address's, let
    // that later call write past a short buffer). The peer's address also
    // classifies the connection: no getpeername for either.
    Origin& origin = in.origin;
    origin.peer_len = sizeof origin.peer;
    auto* peer_addr = reinterpret_cast<sockaddr*>(&origin.peer);
    in.fd = use_accept4 ? sys::real().accept4(lfd, peer_addr, &origin.peer_len, flags)
                        : sys::real().accept(lfd, peer_addr, &origin.peer_len);
    if (in.fd < 0) return in;
    origin.flags = use_accept4 ? (flags & (SOCK_NONBLOCK | SOCK_CLOEXEC)) : 0;
    int nfd = in.fd;
    SockInfo s;
    if (!track_accepted(lfd, nfd, &s)) {
        in.untracked = true;
        return in;
    }
    // Did a usmc client announce this connection (by its port)? Then its
    // Proposal is worth waiting for (in the connect watch,
    // clc_detect_timeout_ms). While clients are between connect() and their
    // port's announcement, one not (yet) known gets a short grace
    // (kUnknownPortShare).
    // Others are plain TCP at once: clients that connect without SMC (the
    // limit_hs bypass, plain programs) never wait for a worker.
    //
    // Only such a connection is ever looked at: one that was not announced
    // is the client's plain TCP stream, byte for byte (a plain client whose
    // first bytes happen to look like a Proposal included), and never waits
    // behind a handshake. Nor is one from another host: SMC-D peers share
    // this kernel.
    in.reason = fallback::PEERNOSMC;
    // What the learner (fed by this process and its forked children) says
    // goes to the registry entry, where clients look before connecting.
    if (l->learn_ticket) l->reg().set_learned_tcp_until(learn::listener_tcp_until(l->learn_ticket));
    // (A client that gave up waiting for our answer has left the counts but
    // keeps its port known: its Proposal is still to be taken off the stream.)
    bool counted = l->reg().pending_connects() > 0;
    bool unknown_ports = counted && l->reg().unported_connects() > 0; // before the port table
    const sockaddr_storage& peer = origin.peer;
    uint16_t port =
        ntohs(peer.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_port
                                         : reinterpret_cast<const sockaddr_in*>(&peer)->sin_port);
    bool known = l->reg().expects_port(port);
    if (!(known || unknown_ports) || !peer_on_this_host(nfd, peer)) return in;
    clc::FirstLook look = clc::first_look(nfd);
    auto first = clc::classify(look);
    if (first != clc::FirstBytes::Proposal && first != clc::FirstBytes::Nothing) return in;
    HandshakeQueue* q = ensure_engine(true) ? server_queue() : nullptr;
    if (!q)
        in.reason = fallback::INTERR;
    else if (q->congested() && limit_hs(lfd))
        in.reason = fallback::HSLIMIT;
    else if (!fd_budget_ok(nfd))
        in.reason = fallback::FDLIMIT;
    else
        in.reason = 0;
    if (!in.reason) {
        l->handshake_started(nfd);
        l->ref();
        counters::count(counters::handshakes_inflight);
        ServerHandshake h{l, nfd, origin};
        bool queued = first == clc::FirstBytes::Proposal
                          ? begin_here(h, look, here ? &in.up : nullptr) || to_worker(h, 0, false)
                          : await_first_bytes(h, port, known, sys::mono_ns());
        if (queued) {
            in.fd = kQueued;
            return in;
        }
        h.on(core::ServerEvent::FellBack);
        counters::count(counters::handshakes_inflight, uint64_t(-1));
        Accepted none;
        none.fd = nfd; // stays open: it goes out as TCP below
        none.error = true;
        l->push_done(std::move(none)); // undoes handshake_started
        l->unref();
        in.reason = fallback::INTERR;
    }
    // No handshake now: a Proposal already here gets its Decline at once;
    // one still on its way is swallowed before the first read.
    if (first == clc::FirstBytes::Proposal) {
        smc_decline_late_proposal(nfd, in.reason);
        if (in.reason == fallback::HSLIMIT) counters::count(counters::hs_congested_declines);
    } else {
        in.late = true;
    }
    return in;
}

// Intake stops at the backlog (patch 2): the kernel's queue then fills.
bool check_backlog(SmcListener* l) {
    bool full = l->at_backlog();
    if (full && !l->stalled()) counters::count(counters::backlog_stalls);
    l->set_stalled(full);
    return full;
}

// Handshakes progress without the application, as the kernel's listen work
// (smc_tcp_listen_work) runs without accept(): from listen() on, the loop of
// ours takes connections into the listener's queue, handshakes included, up
// to the backlog, so a client's connect() never waits for the server's
// accept() (an FTP client accepts its data connection only after the
// server's reply to a command, which the server sends once its connect()
// has returned). Once the application has accepted, it gets the first
// chance (kGraceMs) at what arrives. What a process queued before it first
// accepted is held by its forked children too, and the first accept() of
// any of them takes it (SmcListener::claim); while another process may
// accept, nothing is taken (listen_share.hpp).
// (On the engine's event loop: the listener's readiness, then a timer.)
constexpr int kGraceMs = 10;
std::mutex g_watch_mu;
struct WatchedListener {
    SmcListener* l; // with a reference
    uint64_t watch; // its pending loop watch (readiness or the grace timer), 0 if none
};
// By a key never used twice, which the loop's handlers carry: a listener
// removed meanwhile (and another made at its address) is not theirs.
std::map<uint64_t, WatchedListener>* g_watched = nullptr;
uint64_t g_next_watch_key = 1;

void watch_listener(SmcListener* l) {
    // No client has announced an SMC connect: whatever waits is plain TCP
    // and needs no handshake; the application takes it, as from any kernel
    // listener. (Taking it into our queue only cost the application: a
    // hand-out through our queue per connection, every one of them under a
    // limit_hs bypass storm.)
    if (l->reg().pending_connects() == 0) return;
    // Another process may accept from this listener: what waits is as much
    // its as ours, and what we took it could never accept (listen_share.hpp).
    if (l->share().others_may_accept()) return;
    // An application thread taking connections right now needs no help.
    std::unique_lock intake_lock(l->intake_mu(), std::try_to_lock);
    if (!intake_lock.owns_lock()) return;
    for (int i = 0; i < 256 && !check_backlog(l); ++i) {
        pollfd p{l->fd(), POLLIN, 0};
        if (sys::real().poll(&p, 1, 0) != 1 || !(p.revents & POLLIN)) break;
        // Nonblocking as the application takes its connections, and
        // close-on-exec whatever it asks: until an accept() hands it out,
        // the connection is a descriptor where the kernel's queue held none,
        // and a child spawned meanwhile (posix_spawn, system(), popen():
        // no fork handler of ours runs there) would keep it open past the
        // application's close.
        int flags = std::max(l->accept_flags(), 0) & SOCK_NONBLOCK;
        Intake in = intake(l, l->fd(), flags | SOCK_CLOEXEC, true);
        if (in.fd == kQueued) continue;
        if (in.fd < 0) break;
        Accepted a;
        a.fd = in.fd;
        a.reason = in.reason;
        a.late_clc = in.late;
        a.origin = in.origin;
        l->handshake_started();                  // push_done counts it out again
        counters::count(counters::accept_queue); // before accept() can take it
        if (auto back = l->push_done(std::move(a))) {
            counters::count(counters::accept_queue, uint64_t(-1));
            discard_accepted(*back);
        }
    }
}

void listener_event(uint64_t key, bool grace_over);

// Under g_watch_mu: the listener's next wait on the loop.
void arm_listener(uint64_t key, WatchedListener& w, bool grace) {
    w.watch =
        grace ? loop::add(-1, 0, kGraceMs, [key](uint32_t) { listener_event(key, true); })
              : loop::add(w.l->fd(), EPOLLIN, -1, [key](uint32_t) { listener_event(key, false); });
}

void listener_event(uint64_t key, bool grace_over) {
    std::lock_guard lock(g_watch_mu);
    if (!g_watched) return;
    auto it = g_watched->find(key);
    if (it == g_watched->end()) return; // closed meanwhile
    // Readable: an application that accepts gets its chance first; one that
    // has not accepted yet is not waited for. Either way the timer comes
    // between two looks (what is left waiting, plain connections, stays
    // readable: no spin).
    SmcListener* l = it->second.l;
    if (grace_over == l->app_accepted()) watch_listener(l);
    arm_listener(key, it->second, !grace_over);
}

void listen_watch_add(SmcListener* l, int lfd) {
    std::lock_guard lock(g_watch_mu);
    l->set_accepts_here();
    if (!g_watched) g_watched = new std::map<uint64_t, WatchedListener>;
    (void)lfd; // (the listener's own descriptor: l->fd())
    uint64_t key = g_next_watch_key++;
    WatchedListener w{l, 0};
    arm_listener(key, w, false);
    if (!w.watch) return;
    l->ref();
    g_watched->emplace(key, w);
}

int accept_smc(SmcListener* l, int lfd, sockaddr* addr, socklen_t* len, int flags,
               bool use_accept4) {
    // (Asked of the kernel when first needed: a connection already done
    // needs no answer. Other processes may hold the listener and change it.)
    int listener_nonblock = -1;
    bool nonblock_hinted = false; // taken from our own record of the flag
    bool want_nonblock = use_accept4 && (flags & SOCK_NONBLOCK);
    bool want_cloexec = use_accept4 && (flags & SOCK_CLOEXEC);
    l->note_accept_flags((want_nonblock ? SOCK_NONBLOCK : 0) | (want_cloexec ? SOCK_CLOEXEC : 0));
    l->note_app_accept();
    if (!l->accepts_here()) listen_watch_add(l, lfd);
    l->share().accepting();
    bool took = false; // this call queued a handshake
    while (true) {
        if (auto a = l->pop_done()) {
            counters::count(counters::accept_queue, uint64_t(-1));
            if (!SmcListener::claim(*a)) { // a process forked since took it
                discard_accepted(*a);
                continue;
            }
            return hand_out(*a, addr, len, want_nonblock, want_cloexec);
        }
        std::unique_lock intake_lock(l->intake_mu());
        bool full = check_backlog(l);
        if (listener_nonblock < 0 || nonblock_hinted) {
            // An event loop's listener (O_NONBLOCK as it set it through us),
            // on this call's first pass with no handshake of ours in
            // progress, nothing in our queue and room in it, needs no
            // question to the kernel: there the answer changes nothing.
            // Should the flag have changed where we could not see it (another
            // process, a dup, a vfork child), accept() sleeps in the kernel
            // as a blocking one does, and nothing can reach our queue while
            // we hold intake_mu. Any other state asks the kernel (a blocking
            // listener must not sleep past our queue, nor say EAGAIN).
            nonblock_hinted = !took && !full && l->in_handshake() == 0 && l->queued() == 0 &&
                              (g_fds.get(lfd).hints & kHintNonblock);
            listener_nonblock = nonblock_hinted ? 1 : fd_nonblocking(lfd);
        }
        // Shared with processes that may accept too: one connection per
        // call, taken for this call. A blocking call waits for the
        // handshakes in progress here before it takes another (what it took
        // beyond that would wait in our queue for an accept() this process
        // may never make). A nonblocking one that took one is done.
        bool hold = false;
        if (!full && listener_nonblock) {
            hold = took && l->share().others_may_accept();
        } else if (!full && l->in_handshake() > 0) {
            hold = l->share().others_may_accept();
        } else if (!full && l->queued() > 0) {
            continue; // finished since the look above (counted out after queued)
        }
        bool wait = full || hold;
        // A blocking listener is accepted from only when the kernel has a
        // connection now (looked at under intake_mu): what an earlier poll
        // saw may have gone to our listen watcher or another process, and a
        // blocking accept() would then sleep past handshakes that complete
        // into our queue.
        if (!wait && !listener_nonblock) {
            pollfd now{lfd, POLLIN, 0};
            wait = sys::real().poll(&now, 1, 0) != 1;
        }
        if (wait) {
            intake_lock.unlock();
            if (listener_nonblock) return fail(EAGAIN);
            // Blocking: a worker may finish first (and below the backlog the
            // kernel listener may get a connection).
            pollfd p[2] = {{l->done_event(), POLLIN, 0}, {lfd, POLLIN, 0}};
            if (sys::real().poll(p, full || hold ? 1 : 2, -1) < 0) return -1;
            continue;
        }
        int saved = errno;
        Intake in = intake(l, lfd, flags, use_accept4, true);
        if (in.up.conn) {
            intake_lock.unlock();
            l->unstall_if_room(); // one handshake fewer
            return hand_out(in.up, addr, len, want_nonblock, want_cloexec);
        }
        if (in.fd == kQueued) {
            took = true;
            continue;
        }
        if (in.fd >= 0 && addr && !len) { // as hand_out
            g_fds.clear(in.fd);
            sys::real().close(in.fd);
            return fail(EFAULT);
        }
        if (in.fd >= 0 && addr && len) copy_address(in.origin, addr, len);
        if (in.fd < 0 || in.untracked) return in.fd;
        if (in.late) slot(in.fd).store(kLateClc);
        set_mode(in.fd, SockMode::Tcp, in.reason);
        count_result(in.reason, false);
        errno = saved;
        return in.fd;
    }
}

} // namespace

namespace detail {
void listen_watch_remove(SmcListener* l) {
    std::lock_guard lock(g_watch_mu); // waits for an intake in progress
    if (!g_watched) return;
    auto it = std::find_if(g_watched->begin(), g_watched->end(),
                           [l](const auto& e) { return e.second.l == l; });
    if (it == g_watched->end()) return;
    if (it->second.watch) loop::cancel(it->second.watch); // (its fd out of the loop's set)
    g_watched->erase(it);
    l->unref();
}

void listen_watch_fork_child() {
    new (&g_watch_mu) std::mutex();
    g_watched = nullptr; // the parent's list (a copy here); its references stay unused
}

SmcListener* acquire_listener(int fd) {
    if (!in_table(fd) || !g_listeners[fd].load(std::memory_order_relaxed)) return nullptr;
    std::lock_guard lock(g_listen_mu);
    SmcListener* l = g_listeners[fd].load(std::memory_order_acquire);
    if (l) l->ref();
    return l;
}

HandshakeQueue* server_queue() {
    std::lock_guard lock(g_engine_mu);
    if (!g_engine.server_q)
        g_engine.server_q = new HandshakeQueue(runtime::get().cfg.hs_workers,
                                               runtime::get().cfg.hs_congestion_hold_ms,
                                               on_server_congestion, 0, "usmc-hs-server");
    return g_engine.server_q;
}
} // namespace detail

void on_listen(int fd, int backlog) {
    runtime::publish_own_stats();
    SockInfo s = g_fds.get(fd);
    if (!in_table(fd) || !s.has(kFlagAllowD) || g_listeners[fd].load()) return;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (sys::real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return;
    uint32_t flags = uint32_t{registry::kSmcD} | (limit_hs(fd) ? uint32_t{registry::kLimitHs} : 0u);
    // Our endpoint hands clients the listener's announcement memory, so it
    // runs from the moment we publish (a pre-fork master too).
    if (!ensure_engine(true)) {
        log::info("fd {}: no ISM endpoint for the SMC listener; clients will use TCP", fd);
        return;
    }
    uint64_t gid = 0;
    {
        std::lock_guard lock(g_engine_mu);
        gid = transports_id(g_engine.devs);
    }
    auto reg = registry::Listener::publish(reinterpret_cast<sockaddr*>(&local), len, gid, flags);
    if (!reg.published()) {
        log::info("fd {}: could not publish the SMC listener; clients will use TCP", fd);
        return;
    }
    auto* l = new SmcListener(std::move(reg), fd, clamp_backlog(backlog));
    if (!l->ok()) {
        log::info("fd {}: no eventfd for the SMC listener; clients will use TCP", fd);
        l->reg().withdraw();
        delete l;
        return;
    }
    // Learning only where the policy leaves the choice to usmc (auto).
    if (runtime::get().cfg.learn_smc && s.has(kFlagAllowD) && s.has(kFlagAllowR))
        l->learn_ticket = learn::listener_ticket(reinterpret_cast<sockaddr*>(&local), len);
    g_listeners[fd].store(l, std::memory_order_release);
    // Put in epoll sets before listen(): the queue's eventfd joins them, or
    // connections the engine completes would wake nobody.
    if (s.has(kFlagEpollEarly)) l->adopt_epoll_regs();
    listen_watch_add(l, fd); // handshakes run whether or not accept() is called
}

namespace {
void mark_listeners_exec(bool going) {
    if (!g_listeners) return;
    std::lock_guard lock(g_listen_mu);
    for (uint32_t fd = 0; fd < g_fds.high() && fd < g_conns_capacity; ++fd)
        if (SmcListener* l = g_listeners[fd].load(std::memory_order_acquire))
            l->reg().mark_exec(going);
}
} // namespace

void detail::listener_passed(int fd) {
    if (SmcListener* l = acquire_listener(fd)) {
        log::info("fd {}: listener passed to another process: no longer announced", fd);
        l->reg().withdraw();
        l->unref();
    }
}

void before_exec() {
    mark_listeners_exec(true);
    conns_before_exec();
}

void exec_failed() {
    mark_listeners_exec(false);
    conns_exec_failed();
}

bool limit_hs(int fd) {
    SockInfo s = g_fds.get(fd);
    if (s.role == SockRole::Listener && !s.has(kFlagLimitHsSet)) return runtime::default_limit_hs();
    return s.has(kFlagLimitHs);
}

void on_listen_again(int fd, int backlog) {
    if (SmcListener* l = acquire_listener(fd)) {
        l->set_backlog(clamp_backlog(backlog));
        l->unref();
    }
}

void on_limit_hs(int fd, bool on) {
    if (SmcListener* l = acquire_listener(fd)) {
        l->reg().set_flag(registry::kLimitHs, on);
        uint64_t until = 0;
        {
            std::lock_guard lock(g_engine_mu);
            if (g_engine.server_q) until = g_engine.server_q->congested_until();
        }
        l->reg().set_congested_until(on ? until : 0);
        l->unref();
    }
}

int accept(int lfd, sockaddr* addr, socklen_t* len, int flags, bool use_accept4) {
    SmcListener* l = acquire_listener(lfd);
    if (!l) return accept_plain(lfd, addr, len, flags, use_accept4);
    if (use_accept4 && (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))) { // the kernel's first check
        l->unref();
        return fail(EINVAL);
    }
    int rc = accept_smc(l, lfd, addr, len, flags, use_accept4);
    int saved = errno;
    l->unref();
    errno = saved;
    return rc;
}

} // namespace usmc::af_smc
