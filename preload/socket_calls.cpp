// SPDX-License-Identifier: MIT
// Socket lifecycle and options: where usmc learns about TCP sockets, applies
// policy, and answers SOL_SMC.
#include "config/policy.hpp"
#include "engine/sock/engine.hpp"
#include "preload/shim.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>

using namespace usmc;

namespace {

constexpr int kIpprotoSmc = 256; // IPPROTO_SMC, Linux 6.11

bool is_tcp_request(int domain, int base_type, int protocol) {
    return (domain == AF_INET || domain == AF_INET6) && base_type == SOCK_STREAM &&
           (protocol == 0 || protocol == IPPROTO_TCP);
}

uint8_t allow_flags(config::ModeSet modes) {
    return static_cast<uint8_t>(((modes & config::kModeSmcD) ? kFlagAllowD : 0) |
                                ((modes & config::kModeSmcR) ? kFlagAllowR : 0));
}

} // namespace

namespace usmc::shim {

void track_new_socket(int fd, int family, uint8_t flags, int type) {
    ErrnoGuard keep;
    runtime::get();
    runtime::publish_own_stats();
    SockInfo s;
    s.kind = SockKind::Stream;
    s.family = static_cast<uint8_t>(family);
    s.hints = (type & SOCK_NONBLOCK) ? kHintNonblock : 0;
    s.flags = static_cast<uint8_t>(flags | (runtime::default_limit_hs() ? kFlagLimitHs : 0));
    if (g_fds.set(fd, s))
        counters::count(counters::sockets_tracked);
    else
        counters::count(counters::fd_untracked);
}

} // namespace usmc::shim

USMC_EXPORT int socket(int domain, int type, int protocol) noexcept {
    const auto& real = sys::real();
    if (shim::vfork_child()) return real.socket(domain, type, protocol);
    int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (domain == sockopt::kAfSmc) {
        // Programs written for AF_SMC get a TCP socket that usmc treats as
        // SMC, so they run on kernels without the smc module. The checks
        // mirror the kernel's smc_create().
        if (base != SOCK_STREAM) return shim::fail(ESOCKTNOSUPPORT);
        if (protocol != sockopt::kSmcProto && protocol != sockopt::kSmcProto6)
            return shim::fail(EPROTONOSUPPORT);
        int family = protocol == sockopt::kSmcProto6 ? AF_INET6 : AF_INET;
        int fd = real.socket(family, type, IPPROTO_TCP);
        if (fd >= 0) {
            shim::track_new_socket(fd, family, kFlagAfSmc, type);
            counters::count(counters::sockets_af_smc);
        }
        return fd;
    }
    bool ipproto_smc =
        (domain == AF_INET || domain == AF_INET6) && base == SOCK_STREAM && protocol == kIpprotoSmc;
    int fd = real.socket(domain, type, ipproto_smc ? IPPROTO_TCP : protocol);
    if (fd < 0) return fd;
    if (ipproto_smc) {
        shim::track_new_socket(fd, domain, kFlagIpprotoSmc, type);
        counters::count(counters::sockets_af_smc);
    } else if (is_tcp_request(domain, base, protocol)) {
        shim::track_new_socket(fd, domain, 0, type);
    } else {
        g_fds.clear(fd);
    }
    return fd;
}

USMC_EXPORT int socketpair(int domain, int type, int protocol, int sv[2]) noexcept {
    int rc = sys::real().socketpair(domain, type, protocol, sv);
    if (rc == 0 && !shim::vfork_child()) {
        g_fds.clear(sv[0]);
        g_fds.clear(sv[1]);
    }
    return rc;
}

USMC_EXPORT int bind(int fd, const sockaddr* addr, socklen_t len) noexcept {
    return sys::real().bind(fd, addr, len);
}

USMC_EXPORT int listen(int fd, int backlog) noexcept {
    int rc = sys::real().listen(fd, backlog);
    if (rc != 0 || shim::vfork_child()) return rc;
    SockInfo s = g_fds.get(fd);
    if (!s.tracked()) return rc;
    shim::ErrnoGuard keep;
    if (s.role == SockRole::Listener) { // listen() again: a new backlog only
        af_smc::on_listen_again(fd, backlog);
        return rc;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (sys::real().getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) len = 0;
    uint32_t reason = 0;
    config::ModeSet modes =
        runtime::decide(config::Role::Server, reinterpret_cast<sockaddr*>(&local), len, &reason);
    s.role = SockRole::Listener;
    s.flags = static_cast<uint8_t>((s.flags & ~(kFlagAllowD | kFlagAllowR)) | allow_flags(modes) |
                                   kFlagDecided);
    s.reason = reason;
    g_fds.set(fd, s);
    counters::count(counters::listens);
    af_smc::on_listen(fd, backlog);
    return rc;
}

// accept and connect: policy, the SMC-D handshake and the bookkeeping live in
// the engine (af_smc.cpp); a socket that is not an SMC candidate costs the
// real call plus one fd-table lookup.
USMC_EXPORT int accept(int fd, sockaddr* addr, socklen_t* len) {
    if (shim::vfork_child()) return sys::real().accept(fd, addr, len);
    return af_smc::accept(fd, addr, len, 0, false);
}

USMC_EXPORT int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
    if (shim::vfork_child()) return sys::real().accept4(fd, addr, len, flags);
    return af_smc::accept(fd, addr, len, flags, true);
}

USMC_EXPORT int connect(int fd, const sockaddr* addr, socklen_t len) {
    if (shim::vfork_child()) return sys::real().connect(fd, addr, len);
    return af_smc::connect(fd, addr, len);
}

USMC_EXPORT int shutdown(int fd, int how) noexcept {
    // (smc_for_write: also a connection moved to TCP whose resend must go first.)
    if (SmcConn* c = shim::smc_for_write(fd)) return af_smc::shutdown(c, fd, how);
    return sys::real().shutdown(fd, how);
}

USMC_EXPORT int getsockname(int fd, sockaddr* addr, socklen_t* len) noexcept {
    return sys::real().getsockname(fd, addr, len);
}

USMC_EXPORT int getpeername(int fd, sockaddr* addr, socklen_t* len) noexcept {
    return sys::real().getpeername(fd, addr, len);
}

USMC_EXPORT int getsockopt(int fd, int level, int optname, void* optval,
                           socklen_t* optlen) noexcept {
    // TCP_NODELAY and TCP_CORK of an SMC connection: as usmc keeps them.
    if (level == IPPROTO_TCP && (optname == TCP_NODELAY || optname == TCP_CORK))
        if (SmcConn* c = shim::smc(fd))
            return af_smc::get_tcp_option(c, fd, optname, optval, optlen);
    if (level == sockopt::kSolSmc || level == SOL_SOCKET) {
        SockInfo s = g_fds.get(fd);
        if (s.tracked() && level == sockopt::kSolSmc) {
            counters::count(counters::sol_smc_get);
            int err = sockopt::get(optname, optval, optlen, af_smc::limit_hs(fd));
            return err ? shim::fail(err) : 0;
        }
        // Sockets created as AF_SMC / IPPROTO_SMC report what the program asked for.
        if (s.tracked() && (optname == SO_DOMAIN || optname == SO_PROTOCOL) &&
            s.has(static_cast<SockFlags>(kFlagAfSmc | kFlagIpprotoSmc))) {
            int val;
            if (s.has(kFlagAfSmc))
                val = optname == SO_DOMAIN
                          ? sockopt::kAfSmc
                          : (s.family == AF_INET6 ? sockopt::kSmcProto6 : sockopt::kSmcProto);
            else
                val = optname == SO_DOMAIN ? s.family : 256;
            int err = sockopt::put_int(val, optval, optlen);
            return err ? shim::fail(err) : 0;
        }
        // A background SMC handshake that failed reports its error here once.
        if (level == SOL_SOCKET && optname == SO_ERROR && s.tracked())
            if (int so_error = 0; af_smc::take_so_error(fd, &so_error)) {
                int err = sockopt::put_int(so_error, optval, optlen);
                return err ? shim::fail(err) : 0;
            }
    }
    return sys::real().getsockopt(fd, level, optname, optval, optlen);
}

USMC_EXPORT int setsockopt(int fd, int level, int optname, const void* optval,
                           socklen_t optlen) noexcept {
    if (level == sockopt::kSolSmc && !shim::vfork_child()) {
        SockInfo s = g_fds.get(fd);
        if (s.tracked()) {
            counters::count(counters::sol_smc_set);
            bool limit_hs = af_smc::limit_hs(fd);
            int err = sockopt::set(optname, optval, optlen, limit_hs);
            if (err) return shim::fail(err);
            s.flags = static_cast<uint8_t>(
                (limit_hs ? (s.flags | kFlagLimitHs) : (s.flags & ~kFlagLimitHs)) |
                (optname == sockopt::kLimitHs ? kFlagLimitHsSet : 0));
            g_fds.set(fd, s);
            if (s.role == SockRole::Listener) af_smc::on_limit_hs(fd, limit_hs);
            return 0;
        }
    }
    // TCP_NODELAY and TCP_CORK of an SMC connection (nginx toggles them
    // around each response): kept by usmc, no system call while Active.
    if (level == IPPROTO_TCP && (optname == TCP_NODELAY || optname == TCP_CORK))
        if (SmcConn* c = shim::smc(fd))
            return af_smc::set_tcp_option(c, fd, optname, optval, optlen);
    int rc = sys::real().setsockopt(fd, level, optname, optval, optlen);
    if (rc == 0 && level == SOL_SOCKET && (optname == SO_RCVTIMEO || optname == SO_SNDTIMEO))
        if (SmcConn* c = shim::smc(fd)) af_smc::set_timeout(c, optname, optval, optlen);
    return rc;
}
