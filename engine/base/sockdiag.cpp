// SPDX-License-Identifier: MIT
#include "engine/base/sockdiag.hpp"

#include "engine/base/sys.hpp"

#include <cerrno>
#include <cstring>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace usmc::sockdiag {
namespace {

constexpr unsigned kListen = 10; // TCP_LISTEN in the kernel's numbering

// Bounds every wait for the kernel's answer: netlink dumps are answered at
// once, so this only stops a dump that never ends from holding a close.
constexpr int kTimeoutMs = 1000;
constexpr int kMaxMessages = 1 << 16;

struct Request {
    nlmsghdr nh;
    inet_diag_req_v2 req;
};

// One dump of the listeners of `family`: true when `inode` is among those on
// `port`, false when not, nullopt when the dump failed.
std::optional<bool> dump_has(int fd, uint8_t family, uint64_t inode, uint16_t port) {
    Request r{};
    r.nh.nlmsg_len = sizeof r;
    r.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    r.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    r.nh.nlmsg_seq = family;
    r.req.sdiag_family = family;
    r.req.sdiag_protocol = IPPROTO_TCP;
    r.req.idiag_states = 1u << kListen;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sys::real().sendto(fd, &r, sizeof r, 0, reinterpret_cast<sockaddr*>(&kernel),
                           sizeof kernel) != static_cast<ssize_t>(sizeof r))
        return std::nullopt;
    alignas(nlmsghdr) char buf[16384];
    bool found = false;
    for (int messages = 0; messages < kMaxMessages;) {
        ssize_t n = sys::real().recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return std::nullopt;
        size_t left = static_cast<size_t>(n);
        for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, left);
             h = NLMSG_NEXT(h, left), ++messages) {
            if (h->nlmsg_seq != family) continue; // not our dump's
            if (h->nlmsg_type == NLMSG_DONE) return found;
            if (h->nlmsg_type == NLMSG_ERROR) return std::nullopt;
            if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
                h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg)))
                continue;
            const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
            if (m->idiag_inode == inode && ntohs(m->id.idiag_sport) == port) found = true;
        }
    }
    return std::nullopt;
}

} // namespace

std::optional<bool> tcp_listening(uint64_t inode, uint16_t port) {
    int fd = sys::real().socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) return std::nullopt;
    timeval tv{kTimeoutMs / 1000, (kTimeoutMs % 1000) * 1000};
    sys::real().setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::optional<bool> answer = false;
    // A listener bound to an IPv6 socket serves IPv4 too: both dumps.
    for (uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}}) {
        auto has = dump_has(fd, family, inode, port);
        if (!has) {
            answer = std::nullopt;
            break;
        }
        if (*has) {
            answer = true;
            break;
        }
    }
    sys::real().close(fd);
    return answer;
}

} // namespace usmc::sockdiag
