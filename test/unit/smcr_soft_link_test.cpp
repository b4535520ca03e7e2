// SPDX-License-Identifier: MIT
// The soft device's link (engine/smcr/soft_link): two soft QPs over a real
// stream socket pair, completions announced on the channel descriptor, a
// socket that takes little at a time, and the peer going away.
#include "engine/smcr/soft_link.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <numeric>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

using namespace usmc::smcr::soft;

namespace {

bool readable(int fd, int ms = 0) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

// Serves both links, each when its socket is ready, until `done` holds.
// Bounded in time; waits in poll(), never in a sleep.
template <class Done>
bool serve(Link& a, Link& b, Done done) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
        if (std::chrono::steady_clock::now() > until) return false;
        pollfd p[2] = {{a.fd(), short(POLLIN | (a.wants_write() ? POLLOUT : 0)), 0},
                       {b.fd(), short(POLLIN | (b.wants_write() ? POLLOUT : 0)), 0}};
        if (::poll(p, 2, 100) < 0) return false;
        if (p[0].revents) a.service();
        if (p[1].revents) b.service();
    }
    return true;
}

struct Pair {
    Link a, b;
    explicit Pair(int sndbuf = 0) {
        int sv[2];
        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        if (sndbuf) {
            for (int fd : sv) {
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
                setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof sndbuf);
            }
        }
        REQUIRE(a.open(sv[0], 0));
        REQUIRE(b.open(sv[1], 0));
    }
};

} // namespace

TEST_CASE("soft link: a WRITE and a SEND over a socket; the channel says when to poll") {
    Pair p;
    std::vector<uint8_t> rmb(8192, 0);
    Qp::Region r = p.b.reg_mr(rmb.data(), rmb.size());
    char cdc[44];
    REQUIRE(p.b.post_recv(1, cdc, sizeof cdc));
    CHECK_FALSE(readable(p.a.channel_fd()));
    REQUIRE(p.a.post_write(10, "payload", 7, r.rkey, r.vaddr + 8, true));
    REQUIRE(p.a.post_send(11, "cdc!", 4, true));
    REQUIRE(serve(p.a, p.b, [&] { return readable(p.a.channel_fd()); }));
    CHECK(std::string(reinterpret_cast<char*>(rmb.data() + 8), 7) == "payload");
    CHECK(readable(p.b.channel_fd()));
    Completion c[4];
    REQUIRE(p.b.poll(c, 4) == 1);
    CHECK(c[0].wr_id == 1);
    CHECK(c[0].byte_len == 4);
    CHECK_FALSE(readable(p.b.channel_fd())); // drained
    size_t n = p.a.poll(c, 4);
    REQUIRE(n == 2);
    CHECK(c[0].wr_id == 10);
    CHECK(c[1].wr_id == 11);
    CHECK_FALSE(readable(p.a.channel_fd()));
}

TEST_CASE("soft link: a socket that takes little at a time still carries a large WRITE whole") {
    Pair p(4096);
    std::vector<uint8_t> rmb(1 << 20, 0), src(1 << 20);
    std::iota(src.begin(), src.end(), uint8_t(1));
    Qp::Region r = p.b.reg_mr(rmb.data(), rmb.size());
    REQUIRE(p.a.post_write(1, src.data(), uint32_t(src.size()), r.rkey, r.vaddr, true));
    CHECK(p.a.wants_write()); // the socket took only part of it
    REQUIRE(serve(p.a, p.b, [&] { return readable(p.a.channel_fd()); }));
    CHECK(rmb == src);
    Completion c[2];
    REQUIRE(p.a.poll(c, 2) == 1);
    CHECK(c[0].status == IBV_WC_SUCCESS);
    CHECK(c[0].byte_len == src.size());
    CHECK_FALSE(p.a.wants_write());
}

TEST_CASE("soft link: the peer's socket gone is a port error; everything outstanding flushed") {
    auto* p = new Pair();
    std::vector<uint8_t> rmb(64);
    Qp::Region r = p->b.reg_mr(rmb.data(), rmb.size());
    char buf[44];
    REQUIRE(p->a.post_recv(5, buf, sizeof buf));
    // Never served: b's process stops before it acknowledges anything.
    REQUIRE(p->a.post_write(6, "abc", 3, r.rkey, r.vaddr, true));
    Link& a = p->a;
    int b_fd = p->b.fd();
    REQUIRE(shutdown(b_fd, SHUT_RDWR) == 0); // as its exit closes the socket
    REQUIRE(readable(a.fd(), 5000));
    CHECK_FALSE(a.service());
    CHECK(a.in_error());
    REQUIRE(readable(a.channel_fd()));
    Completion c[4];
    REQUIRE(a.poll(c, 4) == 2);
    for (int i = 0; i < 2; ++i)
        CHECK(c[i].status == IBV_WC_WR_FLUSH_ERR);
    CHECK_FALSE(a.post_send(7, "x", 1, true));
    delete p;
}
