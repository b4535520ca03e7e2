// SPDX-License-Identifier: MIT
#include "engine/base/sockdiag.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace usmc;

namespace {

struct Sock {
    int fd = -1;
    uint64_t inode = 0;
    uint16_t port = 0;
};

// A TCP socket bound to an ephemeral port of `family`'s loopback, listening
// if asked.
Sock make(int family, bool listen_too) {
    Sock s;
    s.fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(s.fd >= 0);
    sockaddr_storage ss{};
    socklen_t len;
    if (family == AF_INET) {
        auto* in = reinterpret_cast<sockaddr_in*>(&ss);
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(sockaddr_in);
    } else {
        auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = in6addr_loopback;
        len = sizeof(sockaddr_in6);
    }
    REQUIRE(bind(s.fd, reinterpret_cast<sockaddr*>(&ss), len) == 0);
    if (listen_too) REQUIRE(listen(s.fd, 4) == 0);
    REQUIRE(getsockname(s.fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0);
    s.port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    struct stat st {};
    REQUIRE(fstat(s.fd, &st) == 0);
    s.inode = st.st_ino;
    return s;
}

} // namespace

TEST_CASE("sockdiag: a listener is found by inode and port, and gone once closed") {
    for (int family : {AF_INET, AF_INET6}) {
        Sock l = make(family, true);
        CHECK(sockdiag::tcp_listening(l.inode, l.port) == true);
        // The same inode on another port, another inode on the port: no.
        CHECK(sockdiag::tcp_listening(l.inode, static_cast<uint16_t>(l.port + 1)) == false);
        CHECK(sockdiag::tcp_listening(l.inode + 1, l.port) == false);
        // Another process's copy keeps it listening: a dup stands in for it.
        int copy = dup(l.fd);
        close(l.fd);
        CHECK(sockdiag::tcp_listening(l.inode, l.port) == true);
        close(copy);
        CHECK(sockdiag::tcp_listening(l.inode, l.port) == false);
    }
}

TEST_CASE("sockdiag: a bound socket that does not listen is not a listener") {
    Sock s = make(AF_INET, false);
    CHECK(sockdiag::tcp_listening(s.inode, s.port) == false);
    close(s.fd);
}
