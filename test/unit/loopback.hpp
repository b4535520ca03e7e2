// SPDX-License-Identifier: MIT
#pragma once
// Real TCP on 127.0.0.1 for unit tests that need the kernel's behaviour
// (a FIN is not a socketpair's hang-up; a listener's backlog is real).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace usmc::test {

// A listener on an ephemeral loopback port.
inline int loopback_listener(int backlog, int type_flags = 0) {
    int fd = socket(AF_INET, SOCK_STREAM | type_flags, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(fd, backlog) == 0);
    return fd;
}

// A blocking connect to listener `lfd`.
inline int connect_to(int lfd) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    REQUIRE(getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), len) == 0);
    return fd;
}

// A connected loopback pair, closed when it goes out of scope unless taken.
struct TcpPair {
    int client = -1, server = -1;
    TcpPair() {
        int l = loopback_listener(4);
        client = connect_to(l);
        server = accept(l, nullptr, nullptr);
        close(l);
        REQUIRE(server >= 0);
    }
    TcpPair(const TcpPair&) = delete;
    TcpPair& operator=(const TcpPair&) = delete;
    ~TcpPair() {
        if (client >= 0) close(client);
        if (server >= 0) close(server);
    }
};

} // namespace usmc::test
