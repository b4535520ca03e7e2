#include "tools/procnet.hpp"

#include <arpa/inet.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace usmc::tools {

namespace {

const char* state_name(unsigned st) {
    static const char* names[] = {"?",          "ESTABLISHED", "SYN_SENT",  "SYN_RECV",
                                  "FIN_WAIT1",  "FIN_WAIT2",   "TIME_WAIT", "CLOSE",
                                  "CLOSE_WAIT", "LAST_ACK",    "LISTEN",    "CLOSING"};
    return st < sizeof names / sizeof names[0] ? names[st] : "?";
}

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
                      state_name(static_cast<unsigned>(std::strtoul(st.c_str(), nullptr, 16)))};
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
