// SPDX-License-Identifier: MIT
#include "tools/procnet.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <netlink/cache.h>
#include <netlink/idiag/idiagnl.h>
#include <netlink/idiag/msg.h>
#include <netlink/netlink.h>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace usmc::tools {

const char* tcp_state_name(unsigned st) {
    static const char* names[] = {"?",          "ESTABLISHED", "SYN_SENT",  "SYN_RECV",
                                  "FIN_WAIT1",  "FIN_WAIT2",   "TIME_WAIT", "CLOSE",
                                  "CLOSE_WAIT", "LAST_ACK",    "LISTEN",    "CLOSING"};
    return st < sizeof names / sizeof names[0] ? names[st] : "?";
}

namespace {

void read_one(const std::string& path, std::map<uint64_t, TcpEntry>& out) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line); // header
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string sl, local, peer, st, queues, timer, retr, uid, timeout;
        uint64_t inode = 0;
        if (!(fields >> sl >> local >> peer >> st >> queues >> timer >> retr >> uid >> timeout >>
              inode))
            continue;
        out[inode] = {decode_proc_address(local), decode_proc_address(peer),
                      tcp_state_name(static_cast<unsigned>(std::strtoul(st.c_str(), nullptr, 16)))};
    }
}

} // namespace

// GCC 12 at -O3 reports -Wrestrict inside libstdc++'s operator+(const char*,
// std::string&&) on the IPv6 line below: a known false positive (GCC bug
// 105329 and its duplicates; the strings never overlap). Silenced for this
// function only, and only for GCC (clang has no -Wrestrict).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
std::string decode_proc_address(const std::string& hex) {
    auto colon = hex.find(':');
    if (colon == std::string::npos) return hex;
    std::string addr = hex.substr(0, colon);
    unsigned port = static_cast<unsigned>(std::strtoul(hex.c_str() + colon + 1, nullptr, 16));
    char buf[INET6_ADDRSTRLEN] = {};
    // The kernel prints each 32-bit word of the address in host byte order.
    if (addr.size() == 8) {
        uint32_t word = static_cast<uint32_t>(std::strtoul(addr.c_str(), nullptr, 16));
        in_addr a;
        a.s_addr = word;
        inet_ntop(AF_INET, &a, buf, sizeof buf);
        return std::string(buf) + ":" + std::to_string(port);
    }
    if (addr.size() == 32) {
        in6_addr a;
        for (int i = 0; i < 4; ++i) {
            uint32_t word =
                static_cast<uint32_t>(std::strtoul(addr.substr(i * 8, 8).c_str(), nullptr, 16));
            std::memcpy(a.s6_addr + i * 4, &word, 4);
        }
        inet_ntop(AF_INET6, &a, buf, sizeof buf);
        return "[" + std::string(buf) + "]:" + std::to_string(port);
    }
    return hex;
}
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic pop
#endif

namespace {

// "127.0.0.1:8080", "[::1]:80", as /proc's decoded form. (libnl builds an
// IPv4 address from the whole 16-byte field of inet_diag_sockid: its
// first four bytes are the address.)
std::string address_text(nl_addr* a, uint16_t port) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (!a) return "-";
    int family = nl_addr_get_family(a);
    unsigned len = nl_addr_get_len(a);
    if ((family != AF_INET || len < 4) && (family != AF_INET6 || len != 16)) return "-";
    if (!inet_ntop(family, nl_addr_get_binary_addr(a), buf, sizeof buf)) return "-";
    if (family == AF_INET6) return fmt::format("[{}]:{}", buf, port);
    return fmt::format("{}:{}", buf, port);
}

// (libnl keeps the ports as the kernel sent them: in network byte order.)
std::pair<uint64_t, TcpEntry> entry_of(idiagnl_msg* m) {
    return {idiagnl_msg_get_inode(m),
            TcpEntry{address_text(idiagnl_msg_get_src(m), ntohs(idiagnl_msg_get_sport(m))),
                     address_text(idiagnl_msg_get_dst(m), ntohs(idiagnl_msg_get_dport(m))),
                     tcp_state_name(idiagnl_msg_get_state(m))}};
}

// The network namespace of `pid`, as (device, inode) of /proc/<pid>/ns/net;
// nullopt if we may not look (another user's process, without privilege).
std::optional<std::pair<dev_t, ino_t>> netns_of(const std::string& proc) {
    struct stat st;
    if (stat((proc + "/ns/net").c_str(), &st) != 0) return std::nullopt;
    return std::pair{st.st_dev, st.st_ino};
}

} // namespace

std::optional<std::pair<uint64_t, TcpEntry>> parse_diag(nlmsghdr* msg) {
    idiagnl_msg* m = nullptr;
    if (idiagnl_msg_parse(msg, &m) < 0 || !m) return std::nullopt;
    auto out = entry_of(m);
    idiagnl_msg_put(m);
    return out;
}

std::optional<std::map<uint64_t, TcpEntry>> diag_tcp_sockets(const std::set<uint64_t>& inodes) {
    nl_sock* sk = nl_socket_alloc();
    if (!sk) return std::nullopt;
    std::optional<std::map<uint64_t, TcpEntry>> out;
    if (idiagnl_connect(sk) == 0) {
        out.emplace();
        // One dump per family, every state; the sockets are matched by inode
        // here (sock_diag's filters have no inode condition).
        for (int family : {AF_INET, AF_INET6}) {
            nl_cache* cache = nullptr;
            if (idiagnl_msg_alloc_cache(sk, family, IDIAGNL_SS_ALL, &cache) < 0) {
                out.reset();
                break;
            }
            for (nl_object* o = nl_cache_get_first(cache); o; o = nl_cache_get_next(o)) {
                auto* m = reinterpret_cast<idiagnl_msg*>(o);
                if (inodes.count(idiagnl_msg_get_inode(m))) out->insert(entry_of(m));
            }
            nl_cache_free(cache);
        }
    }
    nl_socket_free(sk);
    return out;
}

std::map<uint64_t, TcpEntry> tcp_sockets(const std::map<pid_t, std::set<uint64_t>>& wanted) {
    std::map<uint64_t, TcpEntry> out;
    auto ours = netns_of("/proc/self");
    std::set<uint64_t> here;
    std::vector<pid_t> elsewhere;
    for (const auto& [pid, inodes] : wanted) {
        auto ns = netns_of("/proc/" + std::to_string(pid));
        if (ours && ns == ours)
            here.insert(inodes.begin(), inodes.end());
        else
            elsewhere.push_back(pid); // another namespace, or we cannot tell
    }
    if (!here.empty()) {
        if (auto diag = diag_tcp_sockets(here))
            out = std::move(*diag);
        else // no sock_diag for TCP here: what /proc says, for each process
            for (const auto& [pid, inodes] : wanted)
                if (netns_of("/proc/" + std::to_string(pid)) == ours) elsewhere.push_back(pid);
    }
    for (pid_t pid : elsewhere) {
        const auto& inodes = wanted.at(pid);
        for (auto& [inode, e] : read_tcp_table(pid))
            if (inodes.count(inode)) out[inode] = e;
    }
    return out;
}

std::map<uint64_t, TcpEntry> read_tcp_table(pid_t pid) {
    std::map<uint64_t, TcpEntry> out;
    std::string base = "/proc/" + std::to_string(pid) + "/net/";
    read_one(base + "tcp", out);
    read_one(base + "tcp6", out);
    return out;
}

uint64_t socket_inode(pid_t pid, int fd) {
    char path[64], target[128];
    std::snprintf(path, sizeof path, "/proc/%d/fd/%d", static_cast<int>(pid), fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    unsigned long long inode = 0;
    if (std::sscanf(target, "socket:[%llu]", &inode) != 1) return 0;
    return inode;
}

} // namespace usmc::tools
