// SPDX-License-Identifier: MIT
#include "engine/base/forkref.hpp"
#include "engine/base/loop.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/conn.hpp"
#include "engine/conn/peer_watch.hpp"
#include "engine/conn/space_watch.hpp"
#include "engine/conn/tx.hpp"
#include "engine/handshake/handshake_ism.hpp"
#include "engine/readiness/wakeup.hpp"
#include "engine/smcd/wait_flags.hpp"
#include "test/unit/loopback.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace usmc;

namespace {

// Two ends of one SMC-D connection inside one process: a's DMB is b's tx
// ring and the other way round, as after a real handshake and attach.
constexpr uint64_t kPeerGid = 0x5eed;
struct Pair {
    SmcConn a, b;
    ism::Dmb da, db;
    int tcp[2] = {-1, -1};
    // `with_sig`: both `sig`s made at once, as a poll() or a blocking call
    // makes them (the cases below look at them); without, as an epoll
    // program's connections run: none until a wait needs one.
    explicit Pair(uint32_t size = 64 * 1024, bool with_sig = true) {
        da = *ism::create_dmb(size);
        db = *ism::create_dmb(size);
        REQUIRE(smc_conn_init_wakeups(a, false, ism::random64()));
        REQUIRE(smc_conn_init_wakeups(b, false, ism::random64()));
        if (with_sig) {
            REQUIRE(smc_ensure_sig(a));
            REQUIRE(smc_ensure_sig(b));
        }
        a.transport.smcd().rx = da;
        a.transport.smcd().tx = db;
        b.transport.smcd().rx = db;
        b.transport.smcd().tx = da;
        REQUIRE(smc_conn_peer_wakeups(a, kPeerGid, b.token)); // (both in this process)
        REQUIRE(smc_conn_peer_wakeups(b, kPeerGid, a.token));
        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, tcp) == 0); // stands in for the TCP connection
        a.tcp_fd = tcp[0];
        b.tcp_fd = tcp[1];
    }
    ~Pair() {
        smc_cork_forget(a); // the backstop flusher must not see them again
        smc_cork_forget(b);
        space_watch::remove(&a); // nor the space watch
        space_watch::remove(&b);
        smc_close_wakeups(a);
        smc_close_wakeups(b);
        for (int fd : {tcp[0], tcp[1]})
            if (fd >= 0) close(fd);
        ism::unmap(da);
        ism::unmap(db);
    }
};

ssize_t send_buf(SmcConn& c, const void* p, size_t n, bool nonblock = false, int timeout = -1) {
    iovec iov{const_cast<void*>(p), n};
    return smc_send(c, &iov, 1, nonblock, timeout);
}

ssize_t recv_buf(SmcConn& c, void* p, size_t n, int flags = 0, bool nonblock = false,
                 int timeout = -1) {
    iovec iov{p, n};
    return smc_recv(c, &iov, 1, flags, nonblock, timeout);
}

bool writable(int fd) {
    pollfd p{fd, POLLOUT, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLOUT);
}

// Writable again once the peer freed space: the peer rings our bell, and
// our engine loop drains the sink (space_watch.hpp), so it comes a moment
// later, from another thread.
bool writable_soon(int fd) {
    pollfd p{fd, POLLOUT, 0};
    return poll(&p, 1, 10000) == 1 && (p.revents & POLLOUT);
}

bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& b : v) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b = uint8_t(x);
    }
    return v;
}

} // namespace

TEST_CASE("cursor arithmetic across the wrap and the window update limit") {
    using core::Cursor;
    CHECK(core::advance({0, 100}, 50, 1000) == Cursor{0, 150});
    CHECK(core::advance({0, 990}, 10, 1000) == Cursor{1, 0});
    CHECK(core::advance({7, 990}, 20, 1000) == Cursor{8, 10});
    CHECK(core::advance({0xffff, 999}, 1, 1000) == Cursor{0, 0}); // wrap counter wraps too
    CHECK(core::distance({0, 100}, {0, 150}, 1000) == 50u);
    CHECK(core::distance({3, 900}, {4, 100}, 1000) == 200u);
    CHECK(core::distance({3, 900}, {4, 900}, 1000) == 1000u); // exactly one full ring
    CHECK(core::distance({0xffff, 900}, {0, 10}, 1000) == 110u);
    CHECK_FALSE(core::distance({0, 150}, {0, 100}, 1000)); // backwards
    CHECK_FALSE(core::distance({3, 900}, {4, 901}, 1000)); // more than one ring ahead
    CHECK_FALSE(core::distance({3, 100}, {5, 0}, 1000));   // two wraps ahead
    CHECK_FALSE(core::distance({0, 0}, {0, 1000}, 1000));  // count outside the ring
    CHECK(core::update_limit(65536 - 64) == 6547);
    CHECK(core::update_limit(16384 - 64) == 2304);
    CHECK(smcd::unpack_cons(smcd::pack_cons({5, 12345}, 0x80, 0x40)) == Cursor{5, 12345});
    CHECK(smcd::conn_flags_of(smcd::pack_cons({5, 12345}, 0x80, 0x40)) == 0x40);
    CHECK(smcd::prod_flags_of(smcd::pack_cons({5, 12345}, 0x80, 0x40)) == 0x80);
}

TEST_CASE("a shared cursor read by another thread is never torn") {
    // One thread advances a cursor as a receiver does; another reads it as
    // poll does. Every value read must be one that was stored: each stored
    // count is a function of its wrap, so a wrap of one value with the count
    // of another shows up (a torn read made poll report, then take back, an
    // error, and Python's sendall raised TimeoutError early).
    constexpr uint32_t kSize = 131008;
    auto count_for = [](uint16_t wrap) { return uint32_t(wrap) * 7919u % kSize; };
    core::SharedCursor shared;
    shared.store({0, count_for(0)});
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> torn{0}, reads{0};
    std::thread reader([&] {
        while (!stop.load(std::memory_order_relaxed)) {
            core::Cursor c = shared.load();
            if (c.count != count_for(c.wrap)) torn.fetch_add(1);
            reads.fetch_add(1, std::memory_order_relaxed);
        }
    });
    // The stores start once the reader reads (on a busy machine it may get
    // no CPU for a while), and go on until it has read during them too.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (reads.load() == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    uint64_t before = reads.load();
    for (uint32_t i = 1; i < 2000000 || (reads.load() < before + 1000 &&
                                         std::chrono::steady_clock::now() < deadline);
         ++i) {
        uint16_t wrap = uint16_t(i);
        shared.store({wrap, count_for(wrap)});
    }
    stop = true;
    reader.join();
    CHECK(reads.load() > 0);
    CHECK(torn.load() == 0);
}

TEST_CASE("send and recv through the DMBs; no wake-up when nobody waits") {
    Pair p;
    CHECK(send_buf(p.a, "hello", 5) == 5);
    char buf[16] = {};
    CHECK(smc_rx_available(p.b) == 5);
    CHECK(recv_buf(p.b, buf, sizeof buf, MSG_PEEK) == 5);
    CHECK(smc_rx_available(p.b) == 5); // peek consumes nothing
    CHECK(recv_buf(p.b, buf, sizeof buf) == 5);
    CHECK(std::memcmp(buf, "hello", 5) == 0);
    CHECK(p.a.notifications.load() == 0);
    CHECK(p.a.notifications_suppressed.load() == 1);
    // The ring ran empty: the consumer cursor was announced at once.
    CHECK(smc_tx_unconsumed(p.a) == 0);
    // An empty nonblocking read of a connection no kernel epoll set watches
    // asks for nothing (poll and blocking calls arm themselves before they
    // sleep): the next send wakes nobody.
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -EAGAIN);
    CHECK(send_buf(p.a, "first", 5) == 5);
    CHECK_FALSE(readable(p.b.sig));
    CHECK(p.a.notifications.load() == 0);
    CHECK(recv_buf(p.b, buf, sizeof buf) == 5);
    // Watched by a kernel epoll set (on `sig`): b found the ring empty and
    // said it waits: the next send wakes it, once.
    p.b.epoll_watched = true;
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -EAGAIN);
    CHECK_FALSE(readable(p.b.sig));
    CHECK(send_buf(p.a, "again", 5) == 5);
    CHECK(readable(p.b.sig));
    CHECK(p.a.notifications.load() == 1);
    CHECK(send_buf(p.a, "more", 4) == 4);
    CHECK(p.a.notifications.load() == 1); // already woken: no second system call
    CHECK(recv_buf(p.b, buf, sizeof buf) == 9);
}

TEST_CASE("a full ring: EAGAIN, sig unwritable, then space frees and it is writable again") {
    Pair p(16 * 1024);
    uint32_t ring = p.a.transport.smcd().tx.ring_size();
    auto data = pattern(ring + 100, 1);
    CHECK(writable(p.a.sig));
    CHECK(send_buf(p.a, data.data(), data.size(), true) == ssize_t(ring)); // partial write
    CHECK(send_buf(p.a, data.data(), 10, true) == -EAGAIN);
    CHECK_FALSE(writable(p.a.sig));
    CHECK((smc_poll_events(p.a) & POLLOUT) == 0);
    std::vector<uint8_t> got(ring);
    CHECK(recv_buf(p.b, got.data(), 100) == 100);
    // 100 bytes consumed is below the update limit, but the writer waits: announced and woken.
    CHECK(writable_soon(p.a.sig));
    CHECK(space_watch::waiting() == 0);
    CHECK(send_buf(p.a, data.data() + ring, 100, true) == 100);
    got.resize(ring + 100);
    CHECK(recv_buf(p.b, got.data() + 100, ring) == ssize_t(ring));
    CHECK(std::equal(got.begin(), got.end(), data.begin()));
    CHECK(recv_buf(p.b, got.data(), 10, 0, true) == -EAGAIN);
}

TEST_CASE("data survives the ring's wrap, with many iovecs per call") {
    Pair p(16 * 1024);
    auto data = pattern(200000, 2);
    std::vector<uint8_t> out(data.size());
    size_t sent = 0, got = 0;
    while (got < data.size()) {
        if (sent < data.size()) {
            size_t n = std::min<size_t>(7777, data.size() - sent);
            iovec iov[3] = {{data.data() + sent, n / 3},
                            {data.data() + sent + n / 3, n / 3},
                            {data.data() + sent + 2 * (n / 3), n - 2 * (n / 3)}};
            ssize_t r = smc_send(p.a, iov, 3, true, -1);
            if (r > 0) sent += size_t(r);
        }
        iovec in[2] = {{out.data() + got, 1000}, {out.data() + got + 1000, 4000}};
        size_t room = data.size() - got;
        in[0].iov_len = std::min<size_t>(1000, room);
        in[1].iov_len = std::min<size_t>(4000, room - in[0].iov_len);
        ssize_t r = smc_recv(p.b, in, 2, 0, true, -1);
        if (r > 0) got += size_t(r);
    }
    CHECK(out == data);
}

TEST_CASE("64 MiB each way between two threads, blocking, checksummed") {
    Pair p;
    const size_t total = 64u << 20;
    // Runs in two threads at once: it reports through `ok` and `send_error`,
    // checked by the main thread, as Catch2's assertions are not thread-safe.
    auto run = [&](SmcConn& tx, SmcConn& rx, uint32_t seed, bool& ok, ssize_t& send_error) {
        send_error = 0;
        std::thread sender([&] {
            auto chunk = pattern(100000, seed);
            size_t sent = 0;
            while (sent < total) {
                size_t n = std::min(chunk.size(), total - sent);
                size_t off = 0; // keep the byte stream aligned with the pattern
                while (off < n) {
                    ssize_t r = send_buf(tx, chunk.data() + off, n - off);
                    if (r <= 0) {
                        send_error = r;
                        smc_close(tx, true); // wake the reader instead of leaving it hanging
                        return;
                    }
                    off += size_t(r);
                }
                sent += n;
            }
        });
        auto chunk = pattern(100000, seed);
        std::vector<uint8_t> buf(65536);
        size_t got = 0;
        ok = true;
        while (got < total) {
            ssize_t r = recv_buf(rx, buf.data(), buf.size());
            if (r <= 0) {
                ok = false;
                break;
            }
            for (ssize_t i = 0; i < r; ++i)
                if (buf[size_t(i)] != chunk[(got + size_t(i)) % chunk.size()]) ok = false;
            got += size_t(r);
        }
        sender.join();
    };
    bool ok1 = false, ok2 = false;
    ssize_t send_error1 = 0, send_error2 = 0;
    std::thread t([&] { run(p.a, p.b, 3, ok1, send_error1); });
    run(p.b, p.a, 4, ok2, send_error2);
    t.join();
    CHECK(ok1);
    CHECK(ok2);
    CHECK(send_error1 == 0);
    CHECK(send_error2 == 0);
    // Sleeping readers and writers were woken, but far fewer times than calls.
    INFO("notifications " << p.a.notifications.load() + p.b.notifications.load() << ", suppressed "
                          << p.a.notifications_suppressed.load() +
                                 p.b.notifications_suppressed.load());
    CHECK(p.a.cursor_updates.load() > 0);
}

TEST_CASE("MSG_WAITALL waits for the whole request") {
    Pair p;
    std::thread writer([&] {
        for (int i = 0; i < 10; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            send_buf(p.a, "0123456789", 10);
        }
    });
    char buf[100];
    CHECK(recv_buf(p.b, buf, sizeof buf, MSG_WAITALL) == 100);
    writer.join();
}

TEST_CASE("shutdown(SHUT_WR): data then EOF; sending afterwards is EPIPE") {
    Pair p;
    CHECK(send_buf(p.a, "last words", 10) == 10);
    smc_shutdown_write(p.a);
    CHECK(send_buf(p.a, "x", 1) == -EPIPE);
    char buf[32];
    CHECK(recv_buf(p.b, buf, sizeof buf) == 10);
    CHECK(recv_buf(p.b, buf, sizeof buf) == 0);
    CHECK((smc_poll_events(p.b) & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP));
    // The other direction still works (half close).
    CHECK(send_buf(p.b, "reply", 5) == 5);
    CHECK(recv_buf(p.a, buf, sizeof buf) == 5);
}

TEST_CASE("a blocked reader is woken by EOF, a blocked writer by the peer's close") {
    Pair p(16 * 1024);
    std::thread closer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        smc_shutdown_write(p.a);
    });
    char buf[8];
    CHECK(recv_buf(p.b, buf, sizeof buf) == 0);
    closer.join();

    auto big = pattern(64 * 1024, 5);
    CHECK(send_buf(p.b, big.data(), big.size(), true) > 0); // fills a's ring
    std::thread closer2([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        smc_close(p.a, false);
    });
    CHECK(send_buf(p.b, big.data(), big.size()) == -EPIPE);
    closer2.join();
}

TEST_CASE("after the peer's close the first send is taken and the next is EPIPE, as TCP") {
    Pair p;
    smc_close(p.a, false);
    CHECK(send_buf(p.b, "late answer", 11) == 11);
    CHECK(send_buf(p.b, "x", 1) == -EPIPE);
    // After an abort (a reset) no send is taken: the first reports the
    // reset, the next EPIPE.
    Pair q;
    smc_close(q.a, true);
    CHECK(send_buf(q.b, "x", 1) == -ECONNRESET);
    CHECK(send_buf(q.b, "x", 1) == -EPIPE);
}

TEST_CASE("abort: ECONNRESET for the reader") {
    Pair p;
    smc_close(p.a, true);
    char buf[8];
    CHECK(smc_poll_events(p.b) & POLLERR);
    CHECK(recv_buf(p.b, buf, sizeof buf) == -ECONNRESET);
    // Reported once, as TCP's sk_err: then EOF, HUP without ERR, EPIPE.
    CHECK(recv_buf(p.b, buf, sizeof buf) == 0);
    CHECK((smc_poll_events(p.b) & (POLLERR | POLLHUP)) == POLLHUP);
    CHECK(send_buf(p.b, "x", 1) == -EPIPE);
    CHECK_FALSE(smc_take_error(p.b));
}

TEST_CASE("abort: of the threads that race to it, one reports the reset") {
    for (int round = 0; round < 20; ++round) {
        Pair p;
        smc_close(p.a, true);
        std::atomic<int> resets{0}, ends{0};
        std::vector<std::thread> ts;
        for (int i = 0; i < 4; ++i)
            ts.emplace_back([&, i] {
                char buf[8];
                ssize_t n = i % 2 ? recv_buf(p.b, buf, sizeof buf) : send_buf(p.b, "x", 1);
                if (n == -ECONNRESET)
                    ++resets;
                else if (n == 0 || n == -EPIPE)
                    ++ends;
            });
        for (auto& t : ts)
            t.join();
        CHECK(resets.load() == 1);
        CHECK(ends.load() == 3);
    }
}

TEST_CASE("a peer that dies (its TCP connection closes) ends a blocked recv promptly") {
    Pair p;
    std::thread killer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        close(p.tcp[0]); // what the kernel does when the peer process dies
        p.tcp[0] = -1;
    });
    auto t0 = std::chrono::steady_clock::now();
    char buf[8];
    CHECK(recv_buf(p.b, buf, sizeof buf) == -ECONNRESET);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
    killer.join();
}

TEST_CASE("timeouts: SO_RCVTIMEO / SO_SNDTIMEO semantics") {
    Pair p(16 * 1024);
    char buf[8];
    auto t0 = std::chrono::steady_clock::now();
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, false, 50) == -EAGAIN);
    auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(waited >= std::chrono::milliseconds(45));
    CHECK(waited < std::chrono::milliseconds(1000));
    auto big = pattern(32 * 1024, 6);
    CHECK(send_buf(p.a, big.data(), big.size(), false, 50) ==
          ssize_t(p.a.transport.smcd().tx.ring_size())); // partial
    CHECK(send_buf(p.a, big.data(), big.size(), false, 50) == -EAGAIN);
}

TEST_CASE("hostile peer cursors break only this connection") {
    SECTION("producer cursor outside the ring") {
        Pair p;
        p.b.transport.smcd().rx.control()->prod.store(smcd::pack_prod({0, 0xfffffff0u}));
        char buf[8];
        CHECK(recv_buf(p.b, buf, sizeof buf) == -ECONNRESET);
        CHECK(smc_broken(p.b));
    }
    SECTION("producer cursor two wraps ahead") {
        Pair p;
        p.b.transport.smcd().rx.control()->prod.store(smcd::pack_prod({2, 10}));
        char buf[8];
        CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -ECONNRESET);
    }
    SECTION("consumer cursor ahead of what we produced") {
        Pair p;
        p.a.transport.smcd().rx.control()->cons.store(smcd::pack_cons({0, 500}, 0, 0));
        CHECK(send_buf(p.a, "x", 1) == -ECONNRESET);
        CHECK(smc_poll_events(p.a) & POLLERR);
    }
    SECTION("a reserved connection-flag bit is no news: recv waits, not loops") {
        // (A reader that took any nonzero flag byte as news looked again at
        // once, forever: these calls would not return.)
        Pair p;
        p.b.transport.smcd().rx.control()->cons.store(smcd::pack_cons({0, 0}, 0, 0x01));
        char buf[8];
        CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -EAGAIN);
        CHECK(recv_buf(p.b, buf, sizeof buf, 0, false, 0) == -EAGAIN);
        CHECK_FALSE(smc_poll_events(p.b) & POLLIN);
        CHECK(send_buf(p.a, "x", 1) == 1); // and data still arrives
        CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == 1);
    }
    SECTION("garbage everywhere, then the other connection still works") {
        Pair bad, good;
        auto junk = pattern(64, 9);
        std::memcpy(static_cast<void*>(bad.b.transport.smcd().rx.control()), junk.data(), 64);
        char buf[8];
        ssize_t r = recv_buf(bad.b, buf, sizeof buf, 0, true);
        CHECK(r < 0);
        CHECK(send_buf(good.a, "ok", 2) == 2);
        CHECK(recv_buf(good.b, buf, sizeof buf) == 2);
    }
}

TEST_CASE("a peer's move to TCP: the ring first, then every call says moved; one claim each") {
    Pair p;
    CHECK(send_buf(p.a, "abc", 3) == 3);
    char buf[8];
    // a stops using the rings: its consumer cursor and kMovedOut, once.
    CHECK(p.a.publish_move(core::kMovedOut));
    CHECK_FALSE(p.a.publish_move(core::kMovedTook));
    CHECK(smcd::conn_flags(*p.b.transport.smcd().rx.control()) == core::kMovedOut);
    CHECK_FALSE(smc_move_noticed(p.a)); // (a's own flag: the peer's line is b's)
    CHECK(smc_move_noticed(p.b));
    // b reads what a wrote before it moved, then is told to use TCP.
    CHECK(recv_buf(p.b, buf, sizeof buf) == 3);
    CHECK(std::memcmp(buf, "abc", 3) == 0);
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == kSmcMoved);
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, false) == kSmcMoved); // never sleeps
    CHECK(send_buf(p.b, "x", 1) == kSmcMoved);
    CHECK(smc_poll_events(p.b) == (POLLIN | POLLOUT));
    CHECK(p.b.publish_move(core::kMovedTook));
    CHECK(smcd::conn_flags(*p.a.transport.smcd().rx.control()) == core::kMovedTook);
}

TEST_CASE("a side two processes hold, moved by the other one: its ring is never read again") {
    Pair p;
    CHECK(send_buf(p.a, "abc", 3) == 3);
    char buf[8];
    // b's side is held by two processes (fork): its word in a's line is
    // theirs, and the other one moved (b's copy here never did).
    p.b.fork_gen.store(1);
    smcd::Control& b_word_line = *p.a.transport.smcd().rx.control();
    SECTION("the other one moved out (exec): a sends the ring's bytes again over TCP") {
        CHECK(smcd::send_move(b_word_line, {0, 0}, 0, core::kMovedOut));
    }
    SECTION("a moved out and the other one took it: the ring's bytes are in its stash") {
        CHECK(p.a.publish_move(core::kMovedOut));
        CHECK(smcd::send_move(b_word_line, {0, 0}, 0, core::kMovedTook));
    }
    CHECK(smc_move_noticed(p.b));
    CHECK(recv_buf(p.b, buf, sizeof buf, MSG_PEEK, true) == kSmcMoved);
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == kSmcMoved);
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, false) == kSmcMoved);            // never sleeps
    CHECK(smcd::unpack_cons(b_word_line.cons.load()) == core::Cursor{0, 0}); // nothing consumed
}

TEST_CASE("the move flag of a side is claimed once among its processes") {
    smcd::Control line{};
    CHECK(smcd::send_move(line, {0, 7}, core::kPeerDoneWriting, core::kMovedTook));
    CHECK(smcd::conn_flags(line) == (core::kPeerDoneWriting | core::kMovedTook));
    CHECK(smcd::unpack_cons(line.cons.load()) == core::Cursor{0, 7});
    CHECK_FALSE(smcd::send_move(line, {0, 9}, 0, core::kMovedOut));
    CHECK(smcd::unpack_cons(line.cons.load()) == core::Cursor{0, 7}); // untouched
}

// [fork-threads]: the child's writer, waiting for space, starts the engine
// loop for its bell (scripts/tsan.sh runs such cases in a process of their own).
TEST_CASE("between two processes: 32 MiB through shared memory, checksummed", "[fork-threads]") {
    Pair p;
    const size_t total = 32u << 20;
    pid_t child = fork();
    if (child == 0) {
        // As the engine's fork handler does: the parent's loop and bell are
        // not this process's (a writer waiting for space here needs its own).
        loop::on_fork_child();
        space_watch::on_fork_child();
        auto chunk = pattern(65536, 7);
        size_t sent = 0;
        while (sent < total) {
            ssize_t r = send_buf(p.a, chunk.data() + (sent % chunk.size()),
                                 chunk.size() - (sent % chunk.size()));
            if (r <= 0) _exit(1);
            sent += size_t(r);
        }
        smc_shutdown_write(p.a);
        _exit(0);
    }
    auto chunk = pattern(65536, 7);
    std::vector<uint8_t> buf(100000);
    size_t got = 0;
    bool same = true;
    while (true) {
        ssize_t r = recv_buf(p.b, buf.data(), buf.size());
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; ++i)
            if (buf[size_t(i)] != chunk[(got + size_t(i)) % chunk.size()]) same = false;
        got += size_t(r);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(got == total);
    CHECK(same);
}

TEST_CASE("tokens: unguessable block per process, never the same in a forked child") {
    uint64_t first = ism::random64(); // the block is filled now
    CHECK(ism::random64() != first);
    int p[2];
    REQUIRE(pipe(p) == 0);
    pid_t child = fork();
    if (child == 0) {
        uint64_t v = ism::random64();
        _exit(write(p[1], &v, sizeof v) == sizeof v ? 0 : 1);
    }
    uint64_t theirs = 0, ours = ism::random64();
    CHECK(read(p[0], &theirs, sizeof theirs) == sizeof theirs);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    close(p[0]);
    close(p[1]);
    // With the parent's block copied into the child, both would hand out
    // the same next token.
    CHECK(theirs != ours);
    CHECK(theirs != 0);
}

TEST_CASE("DMB device: waiting DMBs of peers that never close do not hide the others") {
    ism::Device dev(64 << 20, false); // DMBs of their own
    std::vector<ism::Dmb> held;
    for (int i = 0; i < 20; ++i) {
        auto d = dev.allocate(16 * 1024, 1000);
        REQUIRE(d);
        held.push_back(*d);
    }
    auto inode = [](int fd) {
        struct stat st;
        fstat(fd, &st);
        return st.st_ino;
    };
    // All released before their peers closed; only the last two peers close.
    std::vector<ino_t> closed;
    for (int i = 0; i < 20; ++i) {
        if (i >= 18) {
            held[size_t(i)].control()->cons.store(
                smcd::pack_cons({0, 0}, 0, core::kPeerConnClosed));
            closed.push_back(inode(held[size_t(i)].fd));
        }
        dev.release(held[size_t(i)], 1000, false);
    }
    CHECK(dev.spare_count() == 20);
    // One allocation looks at a bounded batch; within two, the sweep has
    // gone past the eighteen that never close and found the two that did.
    auto first = dev.allocate(16 * 1024, 1000);
    auto second = dev.allocate(16 * 1024, 1000);
    REQUIRE(first);
    REQUIRE(second);
    bool reused = std::find(closed.begin(), closed.end(), inode(first->fd)) != closed.end() ||
                  std::find(closed.begin(), closed.end(), inode(second->fd)) != closed.end();
    CHECK(reused);
    dev.release(*first, ism::kUnknownPeer);
    dev.release(*second, ism::kUnknownPeer);
}

TEST_CASE("DMB device: memory cap, reuse for the same peer uid only, zeroed on reuse") {
    ism::Device dev(3 * 64 * 1024, false); // DMBs of their own
    auto d1 = dev.allocate(64 * 1024, 1000);
    auto d2 = dev.allocate(64 * 1024, 1000);
    auto d3 = dev.allocate(64 * 1024, 1000);
    REQUIRE(d1);
    REQUIRE(d2);
    REQUIRE(d3);
    CHECK_FALSE(dev.allocate(64 * 1024, 1000)); // past the cap
    CHECK(dev.memory_in_use() == 3 * 64 * 1024);
    // The peer wrote two bytes and published them; a wrapped peer may have
    // written anywhere.
    d1->ring()[0] = 0x5a;
    d1->ring()[1] = 0x5b;
    d1->control()->prod.store(smcd::pack_prod({0, 2}));
    d2->ring()[d2->ring_size() - 1] = 0x5c;
    d2->control()->prod.store(smcd::pack_prod({1, 0}));
    uint64_t old_token = d1->token;
    auto inode = [](int fd) {
        struct stat st;
        fstat(fd, &st);
        return st.st_ino;
    };
    ino_t old_inode = inode(d1->fd);
    dev.release(*d1, 1000);
    auto again = dev.allocate(64 * 1024, 1000);
    REQUIRE(again);
    CHECK(inode(again->fd) == old_inode); // reused
    CHECK(again->ring()[0] == 0);         // zeroed
    CHECK(again->ring()[1] == 0);
    CHECK(again->control()->prod.load() == 0);
    CHECK(again->token != old_token);
    dev.release(*d2, 1000);
    auto wrapped = dev.allocate(64 * 1024, 1000);
    REQUIRE(wrapped);
    CHECK(wrapped->ring()[wrapped->ring_size() - 1] == 0);
    d2 = wrapped;
    dev.release(*again, 1000);
    auto other = dev.allocate(64 * 1024, 2000); // another user's peer: not the old DMB
    REQUIRE(other);                             // (the free one was dropped to make room)
    CHECK(inode(other->fd) != old_inode);
    // A DMB whose peer's user is unknown (a handshake that failed around the
    // attach: that peer may hold it) is never reused, nor is one reused for
    // an unknown peer.
    ino_t other_inode = inode(other->fd);
    dev.release(*other, ism::kUnknownPeer);
    auto unknown = dev.allocate(64 * 1024, ism::kUnknownPeer);
    REQUIRE(unknown);
    CHECK(inode(unknown->fd) != other_inode);
    ino_t unknown_inode = inode(unknown->fd);
    dev.release(*unknown, 1000);
    auto for_unknown = dev.allocate(64 * 1024, ism::kUnknownPeer);
    REQUIRE(for_unknown);
    CHECK(inode(for_unknown->fd) != unknown_inode);
    CHECK_FALSE(dev.has_room(64 * 1024)); // d2, d3 and this one: the cap
    dev.release(*for_unknown, 2000);
    CHECK(dev.has_room(64 * 1024)); // a spare counts as room
    CHECK(dev.gid() != 0);
    CHECK_FALSE(ism::create_dmb(1000));    // below 16 KiB
    CHECK_FALSE(ism::create_dmb(2 << 20)); // above 1 MiB
    // A descriptor that is not the size the peer claimed is refused.
    auto small = ism::create_dmb(16 * 1024);
    CHECK_FALSE(ism::map_peer_dmb(small->fd, 64 * 1024));
    ism::unmap(*small);
}

TEST_CASE("DMB device: a DMB released before its peer closed is reused only after the close") {
    ism::Device dev(4 * 64 * 1024, false); // DMBs of their own
    auto inode = [](int fd) {
        struct stat st;
        fstat(fd, &st);
        return st.st_ino;
    };
    auto d = dev.allocate(64 * 1024, 1000);
    REQUIRE(d);
    ino_t first = inode(d->fd);
    dev.release(*d, 1000, /*reusable=*/false); // the peer may still write
    CHECK(dev.spare_count() == 1);
    auto fresh = dev.allocate(64 * 1024, 1000);
    REQUIRE(fresh);
    CHECK(inode(fresh->fd) != first); // not while the old peer may write
    // The old peer closes: its flag lands in the control line.
    d->control()->cons.store(uint64_t{core::kPeerConnClosed} << 56);
    auto reused = dev.allocate(64 * 1024, 1000);
    REQUIRE(reused);
    CHECK(inode(reused->fd) == first);
    CHECK(smcd::conn_flags_of(reused->control()->cons.load()) == 0); // a clean control line
    // Waiting ones give way under the memory cap.
    dev.release(*fresh, 1000, false);
    dev.release(*reused, 1000, false);
    CHECK(dev.allocate(64 * 1024, 1000));
    CHECK(dev.allocate(64 * 1024, 1000));
    CHECK(dev.allocate(64 * 1024, 1000));
    CHECK(dev.allocate(64 * 1024, 1000));
    CHECK(dev.memory_in_use() == 4 * 64 * 1024);
}

TEST_CASE("closing under a blocked reader and writer: both return EBADF, then the memory may go") {
    Pair p(16 * 1024);
    auto big = pattern(64 * 1024, 11);
    CHECK(send_buf(p.a, big.data(), big.size(), true) > 0); // fill b's ring: the next send blocks
    ssize_t rr = 0, sr = 0;
    std::thread reader([&] {
        char buf[8];
        rr = recv_buf(p.a, buf, sizeof buf); // nothing will come
    });
    std::thread writer([&] { sr = send_buf(p.a, big.data(), big.size()); });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    smc_quiesce(p.a);
    reader.join();
    writer.join();
    CHECK(rr == -EBADF);
    CHECK(sr == -EBADF);
}

TEST_CASE("corking decision: MSG_MORE / TCP_CORK up to min(ring / 2, autocorking_size)") {
    constexpr uint32_t K = 1024;
    static_assert(cork_hold(0, 100, 64 * K, 64 * K, true, false, 1000));      // MSG_MORE
    static_assert(cork_hold(0, 100, 64 * K, 64 * K, false, true, 1000));      // TCP_CORK
    static_assert(!cork_hold(0, 100, 64 * K, 64 * K, false, false, 1000));    // neither
    static_assert(cork_hold(0, 32 * K, 64 * K, 64 * K, true, false, 1));      // ring / 2 exactly
    static_assert(!cork_hold(0, 32 * K + 1, 64 * K, 64 * K, true, false, 1)); // past ring / 2
    static_assert(!cork_hold(30 * K, 3 * K, 64 * K, 64 * K, true, false, 1)); // held + n past it
    static_assert(!cork_hold(0, 9 * K, 1024 * K, 8 * K, true, false, 1));     // autocorking_size
    static_assert(!cork_hold(0, 1, 64 * K, 0, true, true, 1000));             // 0 disables
    static_assert(!cork_hold(0, 100, 64 * K, 64 * K, true, true, 0));         // ring full: publish
    SUCCEED();
}

TEST_CASE("MSG_MORE and TCP_CORK hold bytes back (no wake-up), the last part publishes all") {
    Pair p;
    p.a.autocorking_size = 64 * 1024;
    char buf[256];
    // b arms for data (an empty nonblocking read of a connection a kernel
    // epoll set watches), as a reader going to sleep.
    p.b.epoll_watched = true;
    REQUIRE(recv_buf(p.b, buf, sizeof buf, 0, true) == -EAGAIN);
    iovec part{const_cast<char*>("hello "), 6};
    REQUIRE(smc_send(p.a, &part, 1, true, -1, /*more=*/true) == 6);
    CHECK(p.a.tx_held == 6);
    CHECK(smc_rx_available(p.b) == 0); // not visible
    pollfd pf{p.b.sig, POLLIN, 0};
    CHECK(poll(&pf, 1, 0) == 0); // and nobody was woken for it
    iovec last{const_cast<char*>("world"), 5};
    REQUIRE(smc_send(p.a, &last, 1, true, -1, false) == 5);
    CHECK(p.a.tx_held == 0);
    CHECK(poll(&pf, 1, 0) == 1); // one wake-up, for the whole message
    REQUIRE(recv_buf(p.b, buf, sizeof buf, 0, true) == 11);
    CHECK(std::memcmp(buf, "hello world", 11) == 0);

    // TCP_CORK: held until uncorked.
    smc_set_cork(p.a, true);
    REQUIRE(send_buf(p.a, "abc", 3, true) == 3);
    CHECK(smc_rx_available(p.b) == 0);
    smc_set_cork(p.a, false);
    CHECK(smc_rx_available(p.b) == 3);
    REQUIRE(recv_buf(p.b, buf, sizeof buf, 0, true) == 3);

    // Past the corking size (ring / 2 = 32 KiB here) it goes out at once.
    std::vector<char> big(40 * 1024, 'x');
    iovec bigv{big.data(), big.size()};
    REQUIRE(smc_send(p.a, &bigv, 1, true, -1, true) == ssize_t(big.size()));
    CHECK(smc_rx_available(p.b) == big.size());
}

TEST_CASE("a forgotten cork is published by the backstop within its ceiling") {
    Pair p;
    p.a.autocorking_size = 64 * 1024;
    smc_set_cork(p.a, true);
    REQUIRE(send_buf(p.a, "late", 4, true) == 4);
    CHECK(smc_rx_available(p.b) == 0);
    auto t0 = std::chrono::steady_clock::now();
    while (smc_rx_available(p.b) == 0 &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto took = std::chrono::steady_clock::now() - t0;
    CHECK(smc_rx_available(p.b) == 4);
    CHECK(took >= std::chrono::milliseconds(kCorkCeilingMs - 20));
    CHECK(took < std::chrono::milliseconds(kCorkCeilingMs + 500));
}

TEST_CASE("peer watch: a hang-up seen for a removed connection never wakes a new one at its "
          "address") {
    // The watch thread takes an event from epoll_wait, then waits for the
    // lock while the connection is removed and freed, and a new one is made
    // at the same address (malloc reuses it at once). Keyed by address, the
    // event woke the new connection: a readable event with nothing to read.
    alignas(SmcConn) unsigned char mem[sizeof(SmcConn)];
    auto make = [&](int sv[2]) {
        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        auto* c = new (mem) SmcConn;
        c->tcp_fd = sv[0];
        REQUIRE(smc_conn_init_wakeups(*c, false, ism::random64()));
        REQUIRE(smc_ensure_sig(*c));
        peer_watch::add(c);
        REQUIRE(c->peer_watch_id != 0);
        return c;
    };
    auto drop = [](SmcConn* c, int sv[2]) {
        peer_watch::remove(c);
        smc_close_wakeups(*c);
        close(sv[0]);
        close(sv[1]);
        c->~SmcConn();
    };
    int a_sv[2], b_sv[2];
    SmcConn* a = make(a_sv);
    uint64_t old_key = a->peer_watch_id;
    drop(a, a_sv);
    SmcConn* b = make(b_sv);
    CHECK(b->peer_watch_id != old_key);
    char v = 0;
    peer_watch::deliver(old_key, 0); // the old connection's late event
    CHECK(recv(b->sig, &v, 1, MSG_DONTWAIT) == -1);
    CHECK_FALSE(b->self_woken.load());
    peer_watch::deliver(b->peer_watch_id, 0); // its own wakes it, as our own wake-up
    CHECK(recv(b->sig, &v, 1, MSG_DONTWAIT) == 1);
    CHECK(b->self_woken.load());
    drop(b, b_sv);
}

TEST_CASE("peer watch: the peer's end reaches the connection through the loop thread") {
    Pair p;
    REQUIRE(peer_watch::add(&p.b));
    CHECK(peer_watch::armed(p.b));
    CHECK(peer_watch::add(&p.b, true)); // poll's repeat: watched already, nothing made
    char v;
    while (recv(p.b.sig, &v, 1, MSG_DONTWAIT) == 1) {
    }
    close(p.tcp[0]); // the peer process died
    p.tcp[0] = -1;
    // The loop thread delivers the hang-up: `sig` turns readable.
    pollfd w{p.b.sig, POLLIN, 0};
    CHECK(poll(&w, 1, 10000) == 1);
    CHECK_FALSE(peer_watch::armed(p.b)); // fired: poll looks at the socket itself again
    CHECK(p.b.peer_gone.load());
    peer_watch::remove(&p.b);
    CHECK(p.b.peer_watch_id == 0);
}

TEST_CASE("peer watch: a connection whose descriptor number another one takes loses its "
          "watch and says so") {
    // A connection's first descriptor closed, a dup of it kept (its tcp_fd
    // moved): the number, and the watch's slot, go to a new connection.
    Pair p;
    REQUIRE(peer_watch::add(&p.b));
    const uint64_t old_key = p.b.peer_watch_id;
    int number = p.b.tcp_fd;
    int moved = dup(number);
    REQUIRE(moved >= 0);
    p.b.tcp_fd = p.tcp[1] = moved;
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    REQUIRE(dup2(sv[0], number) == number);
    close(sv[0]);
    SmcConn c;
    c.tcp_fd = number;
    REQUIRE(smc_conn_init_wakeups(c, false, ism::random64()));
    REQUIRE(smc_ensure_sig(c));
    REQUIRE(peer_watch::add(&c, true)); // from poll: no allocation needed for it either
    CHECK(peer_watch::armed(c));
    CHECK_FALSE(peer_watch::armed(p.b)); // its own looks at the socket are back
    CHECK(p.b.peer_watch_id == 0);
    peer_watch::remove(&p.b); // nothing of the new one's goes
    CHECK(peer_watch::armed(c));
    // The old registration's late event (its file is still open) wakes
    // nobody: its key is not the slot's any more.
    char v;
    while (recv(c.sig, &v, 1, MSG_DONTWAIT) == 1) {
    }
    peer_watch::deliver(old_key, EPOLLHUP | EPOLLRDHUP);
    CHECK(recv(c.sig, &v, 1, MSG_DONTWAIT) == -1);
    CHECK(peer_watch::armed(c));
    CHECK_FALSE(c.peer_gone.load());
    peer_watch::remove(&c);
    CHECK_FALSE(peer_watch::armed(c));
    smc_close_wakeups(c);
    close(number);
    close(sv[1]);
}

namespace {
struct sockaddr_un_name {
    sockaddr_un sun{};
    socklen_t len = sizeof sun;
};
sockaddr_un_name name_of(int fd) {
    sockaddr_un_name n;
    REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&n.sun), &n.len) == 0);
    return n;
}
} // namespace

TEST_CASE("sig: readable when woken by name, unwritable while its sink holds a fill, and "
          "nobody else sends into the sink") {
    uint64_t token = ism::random64();
    int sig = wakeup::make_sig(false);
    REQUIRE(sig >= 0);
    REQUIRE(wakeup::name_sig(sig, wakeup::sig_name(token)));
    CHECK_FALSE(wakeup::name_sig(wakeup::make_sig(false), wakeup::sig_name(token))); // taken
    CHECK_FALSE(readable(sig));
    CHECK(writable(sig));
    wakeup::Wakers* w = wakeup::wakers_for(0x77);
    REQUIRE(w);
    wakeup::send(w, wakeup::sig_name(token)); // the peer wakes us
    CHECK(readable(sig));
    CHECK(writable(sig)); // (the wake-up is charged to the waker, not to `sig`)
    wakeup::drain(sig);
    CHECK_FALSE(readable(sig));
    std::atomic<int> sink{-1};
    wakeup::Name sink_name;
    // Another user binds the name a sink was once given (usmc-k-<token>,
    // the token public in /proc/net/unix as `sig`'s name): no matter.
    int squatter = socket(AF_UNIX, SOCK_DGRAM, 0);
    wakeup::Name old_name = wakeup::sig_name(token);
    old_name.sun.sun_path[6] = 'k'; // "\0usmc-s-..." -> "\0usmc-k-..."
    REQUIRE(bind(squatter, reinterpret_cast<sockaddr*>(&old_name.sun), old_name.len) == 0);
    REQUIRE(wakeup::fill(sig, token, sink, sink_name, true)); // the peer's ring is full
    REQUIRE(sink.load() >= 0);
    CHECK_FALSE(writable(sig));
    CHECK_FALSE(readable(sig)); // the fill is in the sink, not in `sig`
    int first_sink = sink.load();
    REQUIRE(wakeup::fill(sig, token, sink, sink_name, false)); // again: still not, and it returns
    CHECK(sink.load() == first_sink);                          // one sink per `sig`
    CHECK_FALSE(writable(sig));
    // Another call making the sink right now: this one does not wait.
    std::atomic<int> busy{wakeup::kSinkMaking};
    wakeup::Name busy_name;
    CHECK_FALSE(wakeup::fill(sig, token, busy, busy_name, false));
    CHECK(busy.load() == wakeup::kSinkMaking);
    int stranger = socket(AF_UNIX, SOCK_DGRAM, 0);
    auto sn = name_of(sink.load());
    CHECK(sn.len == sink_name.len);
    CHECK(std::memcmp(&sn.sun, &sink_name.sun, sn.len) == 0);
    CHECK(sendto(stranger, "x", 1, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&sn.sun), sn.len) ==
          -1);
    CHECK(errno == EPERM);
    wakeup::unfill(sink.load()); // space found
    CHECK(writable(sig));
    // A stranger can make it readable (spuriously): a drain takes it.
    auto sg = name_of(sig);
    CHECK(sendto(stranger, "x", 1, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&sg.sun), sg.len) ==
          1);
    CHECK(readable(sig));
    wakeup::drain(sig);
    CHECK_FALSE(readable(sig));
    wakeup::release(w);
    for (int fd : {sig, sink.load(), stranger, squatter})
        close(fd);
}

TEST_CASE("sig: whether the peer's wake-up is queued is the kernel's word, not the peer's") {
    Pair p;
    smcd::Control& a_requests =
        *p.a.transport.smcd().tx.control(); // a asks b through the line of b's DMB
    smc_arm_for_data(p.a);
    CHECK_FALSE(smc_wake_queued(p.a)); // asked, not taken
    // A lying peer: it takes the request, says its wake-up landed, sends nothing.
    REQUIRE(smcd::take_data_request(a_requests));
    smcd::data_woken(a_requests);
    CHECK_FALSE(smc_wake_queued(p.a)); // `sig` is empty: a self-wake is still due
    CHECK_FALSE(readable(p.a.sig));
    // An honest peer: its write takes the request and wakes `sig`.
    smc_arm_for_data(p.a);
    REQUIRE(send_buf(p.b, "x", 1, true) == 1);
    CHECK(readable(p.a.sig));
    CHECK(smc_wake_queued(p.a));
    CHECK(smc_wake_queued(p.a)); // (remembered: no second look)
    // A drain takes the wake-up, and the answer with it.
    smc_drain_wakeup(p.a);
    CHECK_FALSE(readable(p.a.sig));
    CHECK_FALSE(smc_wake_queued(p.a));
}

TEST_CASE("sig spares: taken with their name and token; one parked before a fork is closed") {
    while (auto left = wakeup::take_spare()) // (another test's)
        close(left->fd);
    uint64_t token = ism::random64();
    int sig = wakeup::make_sig(false);
    REQUIRE(sig >= 0);
    wakeup::Name name = wakeup::sig_name(token);
    REQUIRE(wakeup::name_sig(sig, name));
    REQUIRE(wakeup::park({sig, token, name}));
    auto got = wakeup::take_spare();
    REQUIRE(got);
    CHECK(got->fd == sig);
    CHECK(got->token == token);
    CHECK(got->name.len == name.len);
    CHECK_FALSE(wakeup::take_spare()); // one spare, taken once
    // Blocked again for a client: deaf to others until unblocked.
    REQUIRE(wakeup::block(sig));
    wakeup::Wakers* w = wakeup::wakers_for(0x7a);
    wakeup::send(w, name);
    CHECK_FALSE(readable(sig));
    wakeup::unblock(sig);
    wakeup::send(w, name);
    CHECK(readable(sig));
    wakeup::release(w);
    // Parked, then a fork: a child may hold it too. Closed, not taken.
    REQUIRE(wakeup::park(*got));
    forkref::note_fork();
    CHECK_FALSE(wakeup::take_spare());
    CHECK(fcntl(sig, F_GETFD) == -1);
}

TEST_CASE("sig: a connecting client's is unwritable and deaf to everyone until unblocked") {
    uint64_t token = ism::random64();
    int sig = wakeup::make_sig(true);
    REQUIRE(sig >= 0);
    REQUIRE(wakeup::name_sig(sig, wakeup::sig_name(token)));
    CHECK_FALSE(writable(sig));
    CHECK_FALSE(readable(sig));
    int epfd = epoll_create1(0);
    epoll_event ev{EPOLLIN | EPOLLOUT | EPOLLET, {.u64 = 1}};
    REQUIRE(epoll_ctl(epfd, EPOLL_CTL_ADD, sig, &ev) == 0);
    epoll_event got{};
    CHECK(epoll_wait(epfd, &got, 1, 0) == 0);
    wakeup::Wakers* w = wakeup::wakers_for(0x78);
    wakeup::send(w, wakeup::sig_name(token)); // refused (EPERM): nobody can reach it yet
    CHECK_FALSE(readable(sig));
    wakeup::unblock(sig);
    REQUIRE(epoll_wait(epfd, &got, 1, 0) == 1); // the OUT edge of "connected"
    CHECK(got.events == EPOLLOUT);
    wakeup::send(w, wakeup::sig_name(token));
    REQUIRE(epoll_wait(epfd, &got, 1, 0) == 1);
    CHECK((got.events & EPOLLIN));
    wakeup::release(w);
    close(epfd);
    close(sig);
}

TEST_CASE("sig: a queue a stranger filled blocks no call, and a peer that never drains fills "
          "only its own wakers") {
    uint64_t token = ism::random64();
    int sig = wakeup::make_sig(false);
    REQUIRE(sig >= 0);
    REQUIRE(wakeup::name_sig(sig, wakeup::sig_name(token)));
    int stranger = socket(AF_UNIX, SOCK_DGRAM, 0);
    auto sg = name_of(sig);
    char junk[512] = {};
    for (int i = 0; i < 10000 && sendto(stranger, junk, sizeof junk, MSG_DONTWAIT,
                                        reinterpret_cast<sockaddr*>(&sg.sun), sg.len) > 0;
         ++i) {
    }
    alarm(10); // a blocking call would end the test here (SIGALRM)
    wakeup::Wakers* w = wakeup::wakers_for(0x79);
    wakeup::send(w, wakeup::sig_name(token)); // into a full queue: it is readable anyway
    CHECK(readable(sig));
    wakeup::drain(sig); // a bounded number of calls
    alarm(0);
    // Many peers' `sig`s none of which is ever drained: the pool grows
    // while its members are full, and every wake-up still lands.
    std::vector<int> sigs;
    std::vector<uint64_t> tokens;
    for (int i = 0; i < 3000; ++i) {
        int s = wakeup::make_sig(false);
        if (s < 0) break;
        tokens.push_back(ism::random64());
        REQUIRE(wakeup::name_sig(s, wakeup::sig_name(tokens.back())));
        sigs.push_back(s);
    }
    REQUIRE(sigs.size() > 1000);
    for (uint64_t t : tokens)
        wakeup::send(w, wakeup::sig_name(t));
    size_t woken = 0;
    for (int s : sigs)
        woken += readable(s);
    CHECK(woken == sigs.size());
    wakeup::release(w);
    for (int s : sigs)
        close(s);
    close(sig);
    close(stranger);
}

namespace {

// The peer publishes (and wakes us) between a read's first look at the ring
// and its arm: at the read's look at the TCP socket (smc_check_peer's poll,
// the one system call in between), the writer sends `slip_bytes`.
Pair* g_slip_pair = nullptr;
size_t g_slip_bytes = 0;
int (*g_real_poll)(pollfd*, nfds_t, int) = nullptr;

bool polls(const pollfd* fds, nfds_t n, int fd) {
    return std::any_of(fds, fds + n, [&](const pollfd& p) { return p.fd == fd; });
}

int slip_in_poll(pollfd* fds, nfds_t nfds, int timeout) {
    if (g_slip_pair && polls(fds, nfds, g_slip_pair->b.tcp_fd) && g_slip_bytes > 0) {
        auto data = pattern(g_slip_bytes, 9);
        g_slip_bytes = 0;
        CHECK(send_buf(g_slip_pair->a, data.data(), data.size()) == ssize_t(data.size()));
    }
    return g_real_poll(fds, nfds, timeout);
}

// One nonblocking recv of `want` bytes (MSG_PEEK: `flags`) during which
// 1000 bytes slip in as above; returns what it read.
ssize_t recv_with_slip(Pair& p, size_t want, int flags) {
    sys::resolve();
    g_real_poll = sys::g_table.poll;
    g_slip_pair = &p;
    g_slip_bytes = 1000;
    sys::g_table.poll = slip_in_poll;
    std::vector<uint8_t> buf(want);
    ssize_t n = recv_buf(p.b, buf.data(), want, flags, true);
    sys::g_table.poll = g_real_poll;
    g_slip_pair = nullptr;
    return n;
}

} // namespace

TEST_CASE("a read that finds data only after arming leaves sig readable while data is left") {
    // haproxy (level-triggered epoll) reads at most a buffer's worth and
    // waits for epoll while data is left. The writer's wake-up came after
    // the read's first look, the read's arm drained it, and the read took
    // part of the data: `sig` must still say so, or nothing wakes it again
    // (the writer's request is pending and it has nothing more to send).
    Pair p;
    p.b.epoll_watched.store(true);
    char buf[64];
    REQUIRE(recv_buf(p.b, buf, sizeof buf, 0, true) == -EAGAIN); // b waits for data
    REQUIRE_FALSE(readable(p.b.sig));
    SECTION("a partial read") {
        CHECK(recv_with_slip(p, 100, 0) == 100);
        CHECK(p.a.notifications.load() == 1); // the writer's wake-up, drained by the arm
        CHECK(smc_rx_available(p.b) == 900);
        CHECK(readable(p.b.sig));
        // Read to the end: `sig` is quiet again, and the next write wakes it.
        std::vector<uint8_t> rest(2000);
        CHECK(recv_buf(p.b, rest.data(), rest.size(), 0, true) == 900);
        CHECK_FALSE(readable(p.b.sig));
        CHECK(send_buf(p.a, "x", 1) == 1);
        CHECK(readable(p.b.sig));
    }
    SECTION("MSG_PEEK") {
        CHECK(recv_with_slip(p, 100, MSG_PEEK) == 100);
        CHECK(smc_rx_available(p.b) == 1000);
        CHECK(readable(p.b.sig));
    }
    SECTION("a read of everything: quiet, armed") {
        CHECK(recv_with_slip(p, 4096, 0) == 1000);
        CHECK_FALSE(readable(p.b.sig));
        CHECK(send_buf(p.a, "x", 1) == 1);
        CHECK(readable(p.b.sig));
    }
}

namespace {

// The peer's last words land while a read or an arm looks at the TCP
// socket (smc_check_peer's poll): its last bytes, its close flag, and the
// end of its TCP stream, in the order a closing process publishes them.
Pair* g_leaving_pair = nullptr;
size_t g_leaving_bytes = 0;

int leave_in_poll(pollfd* fds, nfds_t nfds, int timeout) {
    if (g_leaving_pair && polls(fds, nfds, g_leaving_pair->b.tcp_fd) && g_leaving_bytes > 0) {
        auto data = pattern(g_leaving_bytes, 11);
        g_leaving_bytes = 0;
        CHECK(send_buf(g_leaving_pair->a, data.data(), data.size()) == ssize_t(data.size()));
        smc_close(g_leaving_pair->a, false);
        shutdown(g_leaving_pair->tcp[0], SHUT_WR);
    }
    return g_real_poll(fds, nfds, timeout);
}

struct LeaveDuringPeek {
    explicit LeaveDuringPeek(Pair& p, size_t bytes) {
        sys::resolve();
        g_real_poll = sys::g_table.poll;
        g_leaving_pair = &p;
        g_leaving_bytes = bytes;
        sys::g_table.poll = leave_in_poll;
    }
    ~LeaveDuringPeek() {
        sys::g_table.poll = g_real_poll;
        g_leaving_pair = nullptr;
    }
};

} // namespace

TEST_CASE(
    "a peer that writes and closes and ends its TCP stream while a read looks: data then EOF") {
    // haproxy reading nginx's last response bytes: before, the read saw an
    // empty ring, then the TCP stream's end, and reported ECONNRESET with
    // the response's tail still in the ring.
    Pair p;
    std::vector<uint8_t> buf(4096);
    SECTION("recv") {
        {
            LeaveDuringPeek leave(p, 1000);
            CHECK(recv_buf(p.b, buf.data(), buf.size(), 0, true) == 1000);
        }
        CHECK(std::equal(buf.begin(), buf.begin() + 1000, pattern(1000, 11).begin()));
        CHECK(recv_buf(p.b, buf.data(), buf.size(), 0, true) == 0);
    }
    SECTION("recv after its last bytes were read: EOF, not a reset") {
        {
            LeaveDuringPeek leave(p, 1);
            CHECK(recv_buf(p.b, buf.data(), buf.size(), 0, true) == 1);
        }
        CHECK(recv_buf(p.b, buf.data(), buf.size(), 0, true) == 0);
        CHECK(recv_buf(p.b, buf.data(), buf.size(), 0, true) == 0);
    }
    SECTION("an arm for reading (poll, epoll): readable and hung up for reading, no error") {
        short ready;
        {
            LeaveDuringPeek leave(p, 1000);
            ready = smc_arm(p.b, POLLIN | POLLRDHUP);
        }
        CHECK((ready & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP));
        CHECK_FALSE(ready & (POLLERR | POLLHUP));
        CHECK_FALSE(smc_poll_events(p.b) & (POLLERR | POLLHUP)); // as TCP in CLOSE_WAIT
        CHECK(recv_buf(p.b, buf.data(), buf.size(), 0, true) == 1000);
        CHECK(recv_buf(p.b, buf.data(), buf.size(), 0, true) == 0);
    }
}

TEST_CASE("a peer that closes right after its last write: every byte before EOF") {
    // Races the reader's look at the ring against the writer's last bytes
    // and close flag, round after round. Bounded by rounds, not by time.
    for (int round = 0; round < 400; ++round) {
        Pair p(16 * 1024);
        size_t n = 1 + (round * 7919) % (12 * 1024);
        auto data = pattern(n, round);
        std::atomic<bool> go{false};
        std::thread writer([&] {
            while (!go.load()) {
            }
            CHECK(send_buf(p.a, data.data(), n) == ssize_t(n));
            smc_close(p.a, false);
            shutdown(p.tcp[0], SHUT_WR);
        });
        std::vector<uint8_t> got;
        std::vector<uint8_t> buf(2048);
        go.store(true);
        ssize_t r = 0;
        for (int reads = 0; reads < 100000000; ++reads) {
            r = recv_buf(p.b, buf.data(), buf.size(), 0, true);
            if (r == -EAGAIN) continue;
            if (r <= 0) break;
            got.insert(got.end(), buf.begin(), buf.begin() + r);
        }
        writer.join();
        INFO("round " << round << ", " << n << " bytes");
        REQUIRE(r == 0);
        REQUIRE(got == data);
    }
}

TEST_CASE("a peer that holds its waking flag for good costs an arm 2 ms once, then only a spin") {
    Pair p;
    // b's peer (a) "is writing a wake-up" and never finishes.
    p.b.transport.smcd().tx.control()->waiting.fetch_or(smcd::kWakingData);
    auto t0 = std::chrono::steady_clock::now();
    smc_arm_for_data(p.b);
    auto first = std::chrono::steady_clock::now() - t0;
    CHECK(first >= std::chrono::milliseconds(2));
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i)
        smc_arm_for_data(p.b);
    auto hundred = std::chrono::steady_clock::now() - t0;
    CHECK(hundred < std::chrono::milliseconds(100)); // 2 ms each before: 200 ms
}

namespace {

ssize_t send_urgent(SmcConn& c, const char* s) {
    iovec iov{const_cast<char*>(s), std::strlen(s)};
    return smc_send(c, &iov, 1, false, -1, false, true);
}

// What recv returns, as a string (or "E<errno>").
std::string recv_str(SmcConn& c, int flags = 0, bool nonblock = true) {
    char buf[64];
    ssize_t n = recv_buf(c, buf, sizeof buf, flags, nonblock);
    return n < 0 ? "E" + std::to_string(-n) : std::string(buf, size_t(n));
}

std::string oob_str(SmcConn& c, bool peek = false) {
    char b = 0;
    ssize_t n = smc_recv_urgent(c, &b, 1, peek);
    return n < 0 ? "E" + std::to_string(-n) : std::string(&b, size_t(n));
}

void set_inline(SmcConn& c) {
    int on = 1;
    REQUIRE(setsockopt(c.tcp_fd, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on) == 0);
}

} // namespace

TEST_CASE("urgent data: the last byte of a MSG_OOB send is urgent and leaves the stream") {
    Pair p;
    CHECK(oob_str(p.b) == "E" + std::to_string(EINVAL)); // none yet
    CHECK(send_buf(p.a, "abc", 3) == 3);
    CHECK(send_urgent(p.a, "XYZ") == 3);
    CHECK(send_buf(p.a, "def", 3) == 3);
    CHECK(smc_poll_events(p.b) & POLLPRI);
    CHECK_FALSE(smc_at_mark(p.b));
    CHECK(smc_rx_available(p.b) == 5); // TCP counts only the bytes before the mark
    CHECK(recv_str(p.b, MSG_WAITALL, false) == "abcXY"); // a read never crosses the mark
    CHECK(smc_at_mark(p.b));
    CHECK(smc_rx_available(p.b) == 0);
    CHECK(smc_poll_events(p.b) & POLLIN); // "def" waits behind it
    CHECK(oob_str(p.b, true) == "Z");
    CHECK(oob_str(p.b) == "Z");
    CHECK(oob_str(p.b) == "E" + std::to_string(EINVAL)); // once
    CHECK_FALSE(smc_poll_events(p.b) & POLLPRI);
    CHECK(smc_at_mark(p.b));
    CHECK(recv_str(p.b, MSG_PEEK) == "def"); // a peek passes over the byte too
    CHECK(recv_str(p.b) == "def");
    CHECK_FALSE(smc_at_mark(p.b));
    CHECK(oob_str(p.b) == "E" + std::to_string(EINVAL));
    // After the mark: the fast path again (the key matches the count).
    CHECK(p.b.rx_urg_key.load() == 1);
    CHECK(send_buf(p.a, "more", 4) == 4);
    CHECK(recv_str(p.b) == "more");
}

TEST_CASE("urgent data with SO_OOBINLINE stays in the stream; MSG_OOB is EINVAL") {
    Pair p;
    set_inline(p.b);
    CHECK(send_buf(p.a, "abc", 3) == 3);
    CHECK(send_urgent(p.a, "XYZ") == 3);
    CHECK(send_buf(p.a, "def", 3) == 3);
    CHECK(smc_poll_events(p.b) & POLLPRI);
    CHECK(smc_rx_available(p.b) == 9);
    CHECK(oob_str(p.b) == "E" + std::to_string(EINVAL));
    CHECK(recv_str(p.b) == "abcXY");
    CHECK(smc_at_mark(p.b));
    CHECK(recv_str(p.b) == "Zdef");
    CHECK_FALSE(smc_at_mark(p.b));
    CHECK_FALSE(smc_poll_events(p.b) & POLLPRI);
}

TEST_CASE("urgent data: a newer mark replaces the old one, as TCP keeps only the latest") {
    SECTION("both before any read: the old urgent byte is ordinary data") {
        Pair p;
        CHECK(send_buf(p.a, "x", 1) == 1);
        CHECK(send_urgent(p.a, "A") == 1);
        CHECK(send_buf(p.a, "bc", 2) == 2);
        CHECK(send_urgent(p.a, "D") == 1);
        CHECK(send_buf(p.a, "e", 1) == 1);
        CHECK(recv_str(p.b) == "xAbc");
        CHECK(smc_at_mark(p.b));
        CHECK(oob_str(p.b) == "D");
        CHECK(recv_str(p.b) == "e");
    }
    SECTION("read out of band, then superseded: the old byte is data too, as Linux TCP") {
        Pair p;
        CHECK(send_buf(p.a, "x", 1) == 1);
        CHECK(send_urgent(p.a, "A") == 1);
        CHECK(oob_str(p.b) == "A");
        CHECK(send_buf(p.a, "bc", 2) == 2);
        CHECK(send_urgent(p.a, "D") == 1);
        CHECK(recv_str(p.b) == "xAbc");
        CHECK(oob_str(p.b) == "D");
    }
    SECTION("the reader stood at the old mark: the old byte is dropped") {
        Pair p;
        CHECK(send_buf(p.a, "x", 1) == 1);
        CHECK(send_urgent(p.a, "A") == 1);
        CHECK(recv_str(p.b) == "x");
        CHECK(smc_at_mark(p.b));
        CHECK(send_buf(p.a, "bc", 2) == 2);
        CHECK(send_urgent(p.a, "D") == 1);
        CHECK(send_buf(p.a, "e", 1) == 1);
        CHECK(oob_str(p.b) == "D");
        CHECK(recv_str(p.b) == "bc");
        CHECK(recv_str(p.b) == "e");
    }
}

TEST_CASE("urgent data: a lone urgent byte is not readable data") {
    Pair p;
    CHECK(send_urgent(p.a, "A") == 1);
    CHECK((smc_poll_events(p.b) & (POLLIN | POLLPRI)) == POLLPRI);
    CHECK(smc_at_mark(p.b));
    CHECK(recv_str(p.b, MSG_PEEK) == "E" + std::to_string(EAGAIN));
    CHECK(oob_str(p.b) == "A");
    CHECK((smc_poll_events(p.b) & (POLLIN | POLLPRI)) == 0);
    CHECK(recv_str(p.b) == "E" + std::to_string(EAGAIN)); // passes over it, then nothing
    CHECK_FALSE(smc_at_mark(p.b));
    // A blocking peek at the mark waits for data after the byte.
    CHECK(send_urgent(p.a, "B") == 1);
    std::string peeked;
    std::thread reader([&] { peeked = recv_str(p.b, MSG_PEEK, false); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // (let it block)
    CHECK(send_buf(p.a, "z", 1) == 1);
    reader.join();
    CHECK(peeked == "z");
    CHECK(recv_str(p.b) == "z");
    // At EOF, MSG_OOB with nothing urgent is EINVAL, a read is 0.
    smc_shutdown_write(p.a);
    CHECK(oob_str(p.b) == "E" + std::to_string(EINVAL));
    CHECK(recv_str(p.b) == "");
}

TEST_CASE("urgent data: a partial nonblocking MSG_OOB send marks its last byte") {
    Pair p(16 * 1024);
    std::vector<char> big(p.a.transport.smcd().tx.ring_size() + 100, 'q');
    big[p.a.transport.smcd().tx.ring_size() - 1] = '!';
    iovec iov{big.data(), big.size()};
    ssize_t n = smc_send(p.a, &iov, 1, true, -1, false, true);
    REQUIRE(n == ssize_t(p.a.transport.smcd().tx.ring_size()));
    CHECK(oob_str(p.b) == "!");
    std::vector<char> got(big.size());
    iovec in{got.data(), got.size()};
    CHECK(smc_recv(p.b, &in, 1, 0, true, -1) == n - 1);
    CHECK(smc_at_mark(p.b));
}

TEST_CASE("hostile urgent marks break only this connection, never read outside the ring") {
    auto forge = [](Pair& p, uint16_t count, core::Cursor mark, core::Cursor prod) {
        p.b.transport.smcd().rx.control()->urg.store(smcd::pack_prod(mark, count));
        p.b.transport.smcd().rx.control()->prod.store(smcd::pack_prod(prod, count));
    };
    char buf[8];
    SECTION("a mark beyond what the peer produced") {
        Pair p;
        forge(p, 1, {0, 100}, {0, 10});
        CHECK(smc_poll_events(p.b) & POLLERR);
        CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -ECONNRESET);
        CHECK(smc_broken(p.b));
    }
    SECTION("a mark outside the ring") {
        Pair p;
        forge(p, 1, {0, 0xfffffff0u}, {0, 10});
        CHECK(smc_recv_urgent(p.b, buf, 1, false) == -ECONNRESET);
    }
    SECTION("a mark at what we already consumed") {
        Pair p;
        CHECK(send_buf(p.a, "abcd", 4) == 4);
        CHECK(recv_buf(p.b, buf, 2, 0, true) == 2);
        forge(p, 1, {0, 2}, {0, 4});
        CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -ECONNRESET);
    }
    SECTION("a mark whose count never matches: urgent data on its way, data still flows") {
        Pair p;
        CHECK(send_buf(p.a, "abcd", 4) == 4);
        p.b.transport.smcd().rx.control()->urg.store(smcd::pack_prod({0, 2}, 7));
        p.b.transport.smcd().rx.control()->prod.store(smcd::pack_prod({0, 4}, 6));
        CHECK(smc_recv_urgent(p.b, buf, 1, false) == -EAGAIN);
        CHECK_FALSE(smc_poll_events(p.b) & (POLLPRI | POLLERR));
        CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == 4);
        CHECK_FALSE(smc_broken(p.b));
    }
    SECTION("the other connection is untouched") {
        Pair bad, good;
        forge(bad, 3, {9, 9}, {0, 1});
        CHECK(recv_buf(bad.b, buf, sizeof buf, 0, true) == -ECONNRESET);
        CHECK(send_urgent(good.a, "ok") == 2);
        CHECK(oob_str(good.b) == "k");
    }
}

TEST_CASE("urgent data: a read of 0 bytes at the mark leaves the urgent byte") {
    Pair p;
    CHECK(send_urgent(p.a, "A") == 1);
    char b;
    CHECK(recv_buf(p.b, &b, 0, 0, true) == 0);
    CHECK(smc_at_mark(p.b));
    CHECK(oob_str(p.b) == "A");
}

TEST_CASE("urgent data: a wait for POLLPRI alone sleeps with data waiting, wakes for urgent data") {
    Pair p;
    CHECK(send_buf(p.a, "data", 4) == 4);
    // Data waits, nothing urgent: POLLPRI is not ready, and `sig` (what the
    // wait sleeps on) is armed for the peer's next write, not readable.
    CHECK(smc_arm(p.b, POLLPRI) == 0);
    CHECK_FALSE(readable(p.b.sig));
    CHECK(send_urgent(p.a, "U") == 1);
    CHECK(readable(p.b.sig)); // the urgent write woke it
    CHECK(smc_arm(p.b, POLLPRI) & POLLPRI);
    // Level-triggered watchers of `sig` see the waiting data again.
    smc_restore_level(p.b);
    CHECK(readable(p.b.sig));
    CHECK(recv_str(p.b) == "data");
    CHECK(oob_str(p.b) == "U");
}

TEST_CASE("urgent data between threads: a reader, an out-of-band reader and poll at once") {
    // The sender interleaves ordinary bytes ('n') and urgent sends ("nU");
    // one thread reads the stream, one reads out of band, one polls. Every
    // ordinary byte arrives, in order with nothing else but urgent bytes a
    // newer mark turned into data; out of band only urgent bytes.
    Pair p;
    constexpr int kRounds = 3000;
    std::atomic<bool> done{false};
    std::atomic<int> oob_bytes{0}, bad_oob{0}, bad_send{0};
    std::thread sender([&] { // (no REQUIRE outside the test's thread)
        for (int i = 0; i < kRounds; ++i) {
            if (send_buf(p.a, "nn", 2) != 2) bad_send.fetch_add(1);
            if (send_urgent(p.a, "nU") != 2) bad_send.fetch_add(1);
        }
        smc_shutdown_write(p.a);
    });
    std::thread oob([&] {
        while (!done.load()) {
            char b = 0;
            if (smc_recv_urgent(p.b, &b, 1, false) == 1) {
                oob_bytes.fetch_add(1);
                if (b != 'U') bad_oob.fetch_add(1);
            }
            (void)smc_at_mark(p.b);
            (void)smc_poll_events(p.b);
            (void)smc_rx_available(p.b);
        }
    });
    size_t normal = 0, inline_urgent = 0, other = 0;
    char buf[64];
    while (true) {
        ssize_t n = recv_buf(p.b, buf, sizeof buf, 0, false, 5000);
        if (n <= 0) {
            CHECK(n == 0);
            break;
        }
        for (ssize_t i = 0; i < n; ++i)
            (buf[i] == 'n' ? normal : buf[i] == 'U' ? inline_urgent : other)++;
    }
    done.store(true);
    sender.join();
    oob.join();
    CHECK(bad_send.load() == 0);
    CHECK(normal == size_t(3 * kRounds));
    CHECK(other == 0);
    CHECK(bad_oob.load() == 0);
    // (An urgent byte read out of band and then superseded before the reader
    // got to it is also read inline, as Linux TCP delivers it: each at most
    // once each way.)
    CHECK(inline_urgent <= size_t(kRounds));
    CHECK(size_t(oob_bytes.load()) <= size_t(kRounds));
    CHECK_FALSE(smc_broken(p.b));
}

TEST_CASE("a read whose arm takes the peer watch's wake-up for a dead peer still ends") {
    // The peer watch wakes `sig` after marking the peer gone. A nonblocking
    // read that looked before (peer alive) and drains `sig` after takes that
    // wake-up: it must look again and see the death, or a level-triggered
    // watcher of `sig` sleeps for good. The peer's waking flag held widens the
    // window (the arm waits for it, up to 2 ms) so most rounds land in it.
    for (int round = 0; round < 50; ++round) {
        Pair p;
        p.b.epoll_watched.store(true);
        p.b.transport.smcd().tx.control()->waiting.fetch_or(smcd::kWakingData);
        std::atomic<bool> started{false}, delivered{false};
        std::thread watch([&] {
            while (!started.load())
                std::this_thread::yield();
            close(p.tcp[0]); // the peer process died
            p.tcp[0] = -1;
            smc_check_peer(p.b); // what peer_watch::deliver does
            smc_self_wake(p.b);
            delivered.store(true);
            p.b.transport.smcd().tx.control()->waiting.fetch_and(~uint64_t{smcd::kWakingData});
        });
        started.store(true);
        char buf[8];
        ssize_t n = recv_buf(p.b, buf, sizeof buf, 0, true);
        bool after = delivered.load();
        watch.join();
        INFO("round " << round << " recv " << n);
        CHECK((n == -ECONNRESET || n == -EAGAIN));
        // EAGAIN with the death already told: `sig` must still say so.
        if (n == -EAGAIN && after) CHECK(readable(p.b.sig));
        // (Reported once: after it, the end.)
        CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == (n == -ECONNRESET ? 0 : -ECONNRESET));
    }
}

TEST_CASE("a peer that wrote on its TCP socket and died is gone, the bytes left unread") {
    // (A hostile peer: SMC-D's TCP connection carries nothing after the
    // handshake. The peer watch looks once per hang-up, so the look must see
    // the end of the stream past any byte before it.)
    Pair p;
    CHECK_FALSE(smc_check_peer(p.b));
    REQUIRE(write(p.tcp[0], "x", 1) == 1);
    CHECK_FALSE(smc_check_peer(p.b)); // alive, whatever it wrote
    close(p.tcp[0]);
    p.tcp[0] = -1;
    CHECK(smc_check_peer(p.b));
    char buf[8];
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -ECONNRESET);
}

namespace {
// A loopback TCP connection in place of the Pair's socketpair (whose close
// looks like a reset: POLLHUP), tcp[0] the peer's end.
void use_tcp(Pair& p) {
    close(p.tcp[0]);
    close(p.tcp[1]);
    int l = test::loopback_listener(1);
    p.tcp[0] = test::connect_to(l);
    p.tcp[1] = accept(l, nullptr, nullptr);
    REQUIRE(p.tcp[1] >= 0);
    close(l);
    p.a.tcp_fd = p.tcp[0];
    p.b.tcp_fd = p.tcp[1];
}

// The peer's process ends with the connection open (exit, exec, a kill): the
// kernel closes its TCP socket; SO_LINGER 0 makes that close a reset.
void peer_ends(Pair& p, bool reset) {
    if (reset) {
        linger lg{1, 0};
        REQUIRE(setsockopt(p.tcp[0], SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
    }
    close(p.tcp[0]);
    p.tcp[0] = p.a.tcp_fd = -1;
    pollfd end{p.tcp[1], POLLRDHUP, 0}; // its FIN or reset has arrived
    REQUIRE(poll(&end, 1, 10000) == 1);
}
} // namespace

TEST_CASE("a peer that ends without a word and had read all of ours: its last bytes then EOF") {
    // TCP's close of a process that ended sends a FIN when nothing is left
    // unread: the survivor reads an end of stream. (A forked child that
    // exec'd as the last holder, a killed server: it read ECONNRESET.)
    Pair p;
    use_tcp(p);
    REQUIRE(send_buf(p.a, "last", 4) == 4);
    peer_ends(p, false);
    char buf[8];
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == 4);
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == 0);
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == 0);
    short ev = smc_poll_events(p.b);
    CHECK((ev & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP));
    CHECK((ev & (POLLERR | POLLHUP)) == 0);
    CHECK(smc_arm(p.b, POLLIN | POLLRDHUP) == (POLLIN | POLLRDHUP));
}

TEST_CASE("a peer that ends without a word and left ours unread: a reset") {
    Pair p;
    use_tcp(p);
    char buf[8];
    SECTION("bytes of ours it never read (TCP's close answers them with a reset)") {
        REQUIRE(send_buf(p.b, "x", 1) == 1);
        peer_ends(p, false);
        CHECK(smc_arm(p.b, POLLIN) & POLLERR);
        CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -ECONNRESET);
    }
    SECTION("its TCP socket reset") {
        peer_ends(p, true);
        CHECK(smc_arm(p.b, POLLIN) & POLLERR);
        CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -ECONNRESET);
    }
}

TEST_CASE("a peer that ended quietly takes one more write, as a closed TCP peer does") {
    Pair p;
    use_tcp(p);
    peer_ends(p, false);
    char buf[8];
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == 0);
    CHECK(send_buf(p.b, "late", 4) == 4);
    CHECK(send_buf(p.b, "x", 1) == -EPIPE);
}

TEST_CASE("a peer that shut down writing and then vanished with ours unread: EOF, EPIPE, POLLERR") {
    // TCP: a reset in CLOSE_WAIT leaves the FIN taken (reads end) and
    // fails writes (tcp_reset: EPIPE).
    Pair p;
    use_tcp(p);
    REQUIRE(send_buf(p.b, "unread", 6) == 6);
    smc_shutdown_write(p.a);
    peer_ends(p, false);
    REQUIRE(smc_check_peer(p.b)); // (what the peer watch does when it sees the end)
    char buf[8];
    CHECK(smc_arm(p.b, POLLIN) & POLLERR);
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == 0);
    CHECK(send_buf(p.b, "x", 1) == -EPIPE);
    CHECK(p.b.close_state.load() == core::CloseState::EofThenReset);
}

TEST_CASE("a vanished peer's later words do not take its reset back") {
    Pair p;
    use_tcp(p);
    peer_ends(p, true);
    char buf[8];
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -ECONNRESET);
    // Whoever still maps the line writes "done writing", then "closed".
    smc_shutdown_write(p.a);
    smc_close(p.a, false);
    // The reset was reported once: the end, never data or a wait.
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == 0);
    CHECK(smc_poll_events(p.b) & POLLHUP);
    CHECK_FALSE(smc_poll_events(p.b) & POLLERR);
    CHECK(p.b.close_state.load() == core::CloseState::ResetTaken);
}

TEST_CASE("an error queued on the TCP socket is not the peer's end") {
    // POLLERR without POLLRDHUP/POLLHUP: the peer is alive.
    Pair p;
    CHECK_FALSE(smc_note_tcp_end(p.b, POLLERR));
    CHECK_FALSE(p.b.peer_gone.load());
    CHECK(p.b.close_state.load() == core::CloseState::Open);
    CHECK(smc_note_tcp_end(p.b, POLLRDHUP | POLLIN));
    CHECK(p.b.close_state.load() == core::CloseState::PeerClosed); // FIN, nothing of ours unread
}

TEST_CASE("a fill that lands after another thread opened sig is undone by its own caller") {
    // smc_block_writable sets the flag, then fills; another thread (send
    // seeing the peer gone) takes the flag and drains before the fill is in.
    // The filler, finding the connection writable, must drain all the same.
    Pair p;
    p.b.sig_filled.store(true); // the filler's first step
    smc_open_writable(p.b);     // the other thread: flag taken, nothing to drain yet
    REQUIRE(
        wakeup::fill(p.b.sig, p.b.token, p.b.sink, p.b.sink_name, true)); // the filler's fill lands
    CHECK_FALSE(writable(p.b.sig));
    smc_open_writable(p.b); // what the filler did before: the flag is gone, nothing happens
    CHECK_FALSE(writable(p.b.sig));
    smc_open_writable(p.b, true); // its own fill: drained whatever the flag says
    CHECK(writable(p.b.sig));
}

TEST_CASE("sig: a sink the parent was making at a fork is made again in the child") {
    SmcConn c;
    c.sink.store(wakeup::kSinkMaking);
    c.reset_locks_after_fork(); // (what a forked child runs for each connection)
    CHECK(c.sink.load() == -1);
    c.sink.store(7); // one made before the fork stays
    c.reset_locks_after_fork();
    CHECK(c.sink.load() == 7);
    c.sink.store(-1);
}

TEST_CASE("sig: a connection that ends with nothing queued in `sig` leaves a spare that needs no "
          "drain") {
    SECTION("asked for data, the peer never wrote: clean") {
        Pair p;
        smc_arm_for_data(p.a); // a waits for data; b never writes
        REQUIRE(smc_withdraw_requests(p.a));
        CHECK(p.a.sig_clean);
    }
    SECTION("the peer took the request and woke `sig`: not clean") {
        Pair p;
        smc_arm_for_data(p.a);
        REQUIRE(send_buf(p.b, "x", 1, true) == 1); // takes a's request, wakes its `sig`
        REQUIRE(readable(p.a.sig));
        REQUIRE(smc_withdraw_requests(p.a));
        CHECK_FALSE(p.a.sig_clean);
    }
    SECTION("a self-wake not drained yet: not clean") {
        Pair p;
        smc_self_wake(p.a);
        REQUIRE(smc_withdraw_requests(p.a));
        CHECK_FALSE(p.a.sig_clean);
    }
}

TEST_CASE("bell requests through a gate (issue 44): the line rides beside the id") {
    smcd::Control line{};
    smcd::ask_for_data_bell(line, 0xabcdefull, 42);
    auto req = smcd::take_data_request(line);
    CHECK(req.bell == 0xabcdefull);
    CHECK(req.gate == 42);
    CHECK(line.waiting.load() == 0);
    // Kept: the gate comes back with the bell.
    smcd::keep_data_request(line, req);
    req = smcd::take_data_request(line);
    CHECK(req.gate == 42);
    // Named again without a gate: none (a set beyond the lines rings per connection).
    smcd::ask_for_data_bell(line, 5, 3);
    smcd::ask_for_data_bell(line, 5);
    req = smcd::take_data_request(line);
    CHECK(req.bell == 5);
    CHECK(req.gate == -1);
    // Withdrawn: nothing of it stays; a `sig` request beside it is untouched
    // by the bell's withdrawal.
    smcd::ask_for_data(line);
    smcd::ask_for_data_bell(line, 5, 63);
    smcd::withdraw_data_bell(line);
    CHECK(smcd::data_asked(line));
    CHECK(line.waiting.load() == smcd::kWaitData);
    smcd::ask_for_data_bell(line, 5, 63);
    CHECK(smcd::withdraw_data_request(line));
    CHECK(line.waiting.load() == 0);
}

TEST_CASE("bell requests (issue 44): the id rides in the request word, one take answers both") {
    smcd::Control line{};
    // A bell request alone: the take gets the id, marks no `sig` wake-up in flight.
    smcd::ask_for_data_bell(line, 0x123456789abcull);
    CHECK(smcd::data_bell_asked(line));
    CHECK_FALSE(smcd::data_asked(line));
    auto req = smcd::take_data_request(line);
    CHECK_FALSE(req.sig);
    CHECK(req.bell == 0x123456789abcull);
    CHECK_FALSE(smcd::data_bell_asked(line));
    CHECK_FALSE(smcd::data_wake_in_flight(line));
    // Both at once (a blocked call beside the set): one take, both answered;
    // a space request beside them is untouched.
    smcd::ask_for_space(line);
    smcd::ask_for_data(line);
    smcd::ask_for_data_bell(line, smcd::kBellIdMax);
    req = smcd::take_data_request(line);
    CHECK(req.sig);
    CHECK(req.bell == smcd::kBellIdMax);
    CHECK(smcd::data_wake_in_flight(line));
    CHECK(smcd::space_asked(line));
    // Kept (the reader had read everything): both stand again, nothing in flight.
    smcd::keep_data_request(line, req);
    CHECK(smcd::data_asked(line));
    CHECK(smcd::data_bell_asked(line));
    CHECK_FALSE(smcd::data_wake_in_flight(line));
    // A bell named again replaces the id; a keep then leaves the newer one.
    auto taken = smcd::take_data_request(line);
    smcd::ask_for_data_bell(line, 7);
    smcd::keep_data_request(line, taken);
    CHECK(smcd::take_data_request(line).bell == 7);
    // Withdrawn at the end: every data request goes, the space one stays.
    smcd::ask_for_data(line);
    smcd::ask_for_data_bell(line, 9);
    CHECK(smcd::withdraw_data_request(line));
    CHECK_FALSE(smcd::data_asked(line));
    CHECK_FALSE(smcd::data_bell_asked(line));
    CHECK(smcd::space_asked(line));
    // The close takes everything, the bell with it.
    smcd::ask_for_data_bell(line, 11);
    auto all = smcd::take_all_requests(line);
    CHECK(all.space);
    CHECK(all.data_bell == 11);
    CHECK_FALSE(all.data);
}

namespace {
// Whether an abstract name is bound (a second bind finds it taken).
bool name_bound(const wakeup::Name& n) {
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(s >= 0);
    bool taken =
        bind(s, reinterpret_cast<const sockaddr*>(&n.sun), n.len) != 0 && errno == EADDRINUSE;
    close(s);
    return taken;
}
// Spares an earlier case parked would be taken at init: none here.
void no_spares() {
    while (auto spare = wakeup::take_spare())
        close(spare->fd);
}
} // namespace

TEST_CASE("lazy sig: none until a wait needs one; a nonblocking read asks the peer for nothing") {
    no_spares();
    Pair p(64 * 1024, false);
    REQUIRE(p.b.sig == -1);
    CHECK(p.a.sig == -1);
    CHECK(p.b.sig_name.valid());
    CHECK_FALSE(name_bound(p.b.sig_name));
    char buf[16];
    // Empty ring, nonblocking: EAGAIN, and no `sig` request in the peer's
    // line (nobody would hear its wake-up): the peer's write sends nothing.
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == -EAGAIN);
    CHECK_FALSE(p.b.transport.wants_data());
    CHECK(send_buf(p.a, "hi", 2) == 2);
    CHECK(p.a.notifications.load() == 0);
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, true) == 2);
    CHECK(p.b.sig == -1);
    // A full ring, nonblocking: EAGAIN without a fill (no sink made).
    std::vector<uint8_t> big(p.a.transport.smcd().tx.ring_size() + 10, 'x');
    CHECK(send_buf(p.a, big.data(), big.size(), true) > 0);
    CHECK(send_buf(p.a, big.data(), 10, true) == -EAGAIN);
    CHECK(p.a.sig == -1);
    CHECK(p.a.sink.load() == -1);
    std::vector<uint8_t> sink(big.size());
    while (recv_buf(p.b, sink.data(), sink.size(), 0, true) > 0) {
    }
    CHECK(p.b.sig == -1);
}

TEST_CASE("lazy sig: made, bound to its name, once; a blocking read sleeps on it and wakes") {
    no_spares();
    Pair p(64 * 1024, false);
    REQUIRE(p.b.sig == -1);
    REQUIRE(smc_ensure_sig(p.b));
    int made = p.b.sig;
    CHECK(made >= 0);
    CHECK(name_bound(p.b.sig_name));
    CHECK(writable(made)); // open: not blocked
    REQUIRE(smc_ensure_sig(p.b));
    CHECK(p.b.sig == made); // the second is a no-op
    // a: its first blocking read makes one, sleeps, and is woken by b's write.
    char buf[8] = {};
    ssize_t got = 0;
    std::thread reader([&] { got = recv_buf(p.a, buf, sizeof buf, 0, false, 10000); });
    // (Bounded: the reader's `sig` appears once it arms; then b writes.)
    for (int i = 0; i < 10000 && !p.a.transport.wants_data(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(p.a.sig >= 0);
    CHECK(send_buf(p.b, "wake", 4) == 4);
    reader.join();
    CHECK(got == 4);
    CHECK(std::memcmp(buf, "wake", 4) == 0);
}

TEST_CASE("lazy sig: blocked while connecting, open once the handshake's unblock comes") {
    no_spares();
    Pair p(64 * 1024, false);
    REQUIRE(p.b.sig == -1);
    p.b.phase.store(Phase::Connecting);
    REQUIRE(smc_ensure_sig(p.b));
    CHECK_FALSE(writable(p.b.sig));
    p.b.phase.store(Phase::Active);
    smc_unblock(p.b);
    CHECK(writable(p.b.sig));
    // Connected before the make: an Unblock that came while there was no
    // `sig` changed nothing, and the make sees the phase: open at once.
    p.a.phase.store(Phase::Active);
    smc_unblock(p.a);
    REQUIRE(smc_ensure_sig(p.a));
    CHECK(writable(p.a.sig));
}

TEST_CASE("lazy sig: refused after the close, and when its name is held by another socket") {
    {
        no_spares();
        Pair p(64 * 1024, false);
        REQUIRE(p.b.sig == -1);
        smc_close_wakeups(p.b);
        errno = 0;
        CHECK_FALSE(smc_ensure_sig(p.b));
        CHECK(errno == EBADF);
        CHECK(p.b.sig == -1);
    }
    no_spares();
    Pair p(64 * 1024, false);
    REQUIRE(p.b.sig == -1);
    int squatter = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(squatter >= 0);
    REQUIRE(bind(squatter, reinterpret_cast<const sockaddr*>(&p.b.sig_name.sun),
                 p.b.sig_name.len) == 0);
    errno = 0;
    CHECK_FALSE(smc_ensure_sig(p.b));
    CHECK(errno == EADDRINUSE);
    CHECK(p.b.sig == -1);
    // A blocking read that would sleep says so (the socket layer moves the
    // connection to TCP), it never sleeps without a `sig`.
    char buf[4];
    CHECK(recv_buf(p.b, buf, sizeof buf, 0, false, 1000) == kSmcNoSig);
    close(squatter);
}
