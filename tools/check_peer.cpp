// SPDX-License-Identifier: MIT
// The programs `usmc check` runs under usmc-run: this binary again, as a
// hidden subcommand, so the check needs nothing but usmc's own files.
//
//   server KIB        listens on 127.0.0.1 (a free port), takes one
//                     connection, reads KIB KiB and checks them, sends KIB
//                     KiB of its own
//   client PORT KIB   the other end: sends, then reads and checks
//   connect ADDR PORT connects and holds the connection, sending nothing
//                     (a port scanner's connect: no byte a real server could
//                     misread)
//
// Each says on standard output what it found ("PRELOAD", "READY", "DONE",
// "CONNECTED"), then holds its connection until its standard input ends,
// so the check reads its sockets' modes from the stats segments meanwhile.
// Every wait is bounded; the check stops it by PID anyway.
#include "tools/check.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <linux/tcp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace usmc::tools::check {

namespace {

constexpr int kWaitMs = 20000; // for the peer or the check, at most

uint8_t pattern(size_t i, uint8_t seed) {
    return uint8_t((i * 131 + (i >> 9) * 7 + seed) & 0xff);
}

void say(const std::string& line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
}

// Whether usmc's library is in this process, and where from.
std::string preload_path() {
    FILE* f = std::fopen("/proc/self/maps", "re");
    if (!f) return "unknown";
    char line[4096];
    std::string found = "none";
    while (std::fgets(line, sizeof line, f)) {
        const char* p = std::strstr(line, "libusmc-preload");
        if (!p) continue;
        const char* path = std::strchr(line, '/');
        found = path ? std::string(path) : std::string(p);
        while (!found.empty() && (found.back() == '\n' || found.back() == ' '))
            found.pop_back();
        break;
    }
    std::fclose(f);
    return found;
}

bool wait_for(int fd, short events) {
    pollfd p{fd, events, 0};
    return poll(&p, 1, kWaitMs) == 1;
}

bool send_all(int fd, const std::vector<uint8_t>& data) {
    size_t off = 0;
    while (off < data.size()) {
        ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        off += size_t(n);
    }
    return true;
}

// Reads `want` bytes and counts those that differ from the pattern.
size_t recv_checked(int fd, size_t want, uint8_t seed, size_t* got) {
    std::vector<uint8_t> buf(64 << 10);
    size_t bad = 0;
    *got = 0;
    while (*got < want) {
        if (!wait_for(fd, POLLIN)) break;
        ssize_t n = ::recv(fd, buf.data(), std::min(buf.size(), want - *got), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; ++i)
            if (buf[size_t(i)] != pattern(*got + size_t(i), seed)) ++bad;
        *got += size_t(n);
    }
    return bad;
}

std::vector<uint8_t> make(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i)
        v[i] = pattern(i, seed);
    return v;
}

// What TCP itself carried on the socket (the kernel's counters): with
// SMC-D, only the handshake.
std::string tcp_bytes(int fd) {
    tcp_info info{};
    socklen_t len = sizeof info;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
        len < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received)
        return "-1 -1";
    return fmt::format("{} {}", info.tcpi_bytes_received, info.tcpi_bytes_acked);
}

// Holds on until the check closes our standard input (or the bound).
void hold() {
    pollfd p{0, POLLIN, 0};
    char c;
    while (poll(&p, 1, kWaitMs) == 1 && ::read(0, &c, 1) == 1) {
    }
}

constexpr uint8_t kClientSeed = 17, kServerSeed = 101;

int serve(size_t bytes) {
    int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 4) != 0 ||
        getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        say(fmt::format("FAILED listen: {}", std::strerror(errno)));
        return 1;
    }
    say(fmt::format("READY {}", ntohs(a.sin_port)));
    if (!wait_for(l, POLLIN)) {
        say("FAILED no connection came");
        return 1;
    }
    int fd = ::accept(l, nullptr, nullptr);
    if (fd < 0) {
        say(fmt::format("FAILED accept: {}", std::strerror(errno)));
        return 1;
    }
    size_t got = 0;
    size_t bad = recv_checked(fd, bytes, kClientSeed, &got);
    bool sent = got == bytes && send_all(fd, make(bytes, kServerSeed));
    say(fmt::format("DONE {} {} {} {} {}", got == bytes && !bad && sent ? "ok" : "bad", got, bad,
                    tcp_bytes(fd), fd));
    hold();
    ::close(fd);
    ::close(l);
    return 0;
}

int client(uint16_t port, size_t bytes) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        say(fmt::format("FAILED connect: {}", std::strerror(errno)));
        return 1;
    }
    size_t got = 0, bad = bytes;
    if (send_all(fd, make(bytes, kClientSeed))) bad = recv_checked(fd, bytes, kServerSeed, &got);
    say(fmt::format("DONE {} {} {} {} {}", got == bytes && !bad ? "ok" : "bad", got, bad,
                    tcp_bytes(fd), fd));
    hold();
    ::close(fd);
    return 0;
}

int connect_only(const std::string& host, const std::string& port) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res) {
        say("FAILED not a numeric address and port");
        return 1;
    }
    int fd = ::socket(res->ai_family, SOCK_STREAM, 0);
    int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
    int err = errno;
    freeaddrinfo(res);
    if (rc != 0) {
        say(fmt::format("FAILED connect: {}", std::strerror(err)));
        return 1;
    }
    say(fmt::format("CONNECTED {}", fd));
    hold();
    ::close(fd);
    return 0;
}

} // namespace

int run_peer(const std::vector<std::string>& args) {
    say("PRELOAD " + preload_path());
    auto number = [](const std::string& s) { return std::strtoul(s.c_str(), nullptr, 10); };
    if (args.size() == 2 && args[0] == "server") return serve(number(args[1]) << 10);
    if (args.size() == 3 && args[0] == "client")
        return client(uint16_t(number(args[1])), number(args[2]) << 10);
    if (args.size() == 3 && args[0] == "connect") return connect_only(args[1], args[2]);
    say("FAILED usage: server KIB | client PORT KIB | connect ADDR PORT");
    return 2;
}

} // namespace usmc::tools::check
