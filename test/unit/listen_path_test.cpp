// SPDX-License-Identifier: MIT
// The short-lived-connection pieces on their own: the handshake queue's
// congestion, the listener queue's backlog and epoll behaviour, the global
// knob's file editing.
#include "config/config.hpp"
#include "config/knob.hpp"
#include "engine/base/sys.hpp"
#include "engine/handshake/connect_watch.hpp"
#include "engine/handshake/handshake_queue.hpp"
#include "engine/sock/listener.hpp"
#include "test/unit/loopback.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <netinet/in.h>
#include <sstream>
#include <sys/epoll.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

using namespace usmc;

TEST_CASE("handshake queue: congestion starts at `workers` waiting jobs, lasts the hold after") {
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    std::vector<std::pair<uint64_t, bool>> calls; // (until, onset)
    std::atomic<int> done{0};
    // Worker threads live as long as the process (as in the engine): the
    // queue is never destroyed (kept reachable for the leak checker).
    static HandshakeQueue* keep = nullptr;
    constexpr uint32_t kHoldMs = 200;
    keep = new HandshakeQueue(2, kHoldMs, [&](uint64_t until, bool onset) {
        std::lock_guard lock(mu);
        calls.emplace_back(until, onset);
    });
    auto& q = *keep;
    CHECK_FALSE(q.congested());
    CHECK(q.congested_until() == 0);
    auto job = [&] {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return release; });
        ++done;
    };
    // One job: a worker takes it, nothing waits, no congestion.
    REQUIRE(q.submit(job));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (q.running() < 1 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK_FALSE(q.congested());
    // Three more: one takes the second worker, two wait: congested.
    for (int i = 0; i < 3; ++i)
        REQUIRE(q.submit(job));
    while ((q.running() < 2 || q.waiting() < 2) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(q.running() == 2);
    CHECK(q.waiting() == 2);
    CHECK(q.congested());
    {
        std::lock_guard lock(mu);
        release = true;
    }
    cv.notify_all();
    while (done < 4 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(done == 4);
    // Nothing waits any more, yet the congestion holds until its time is up,
    // then ends by itself (nobody has to submit anything).
    uint64_t now = sys::mono_ns();
    uint64_t until = q.congested_until();
    CHECK(until > now);
    CHECK(until <= now + uint64_t{kHoldMs} * 1000000);
    CHECK(q.congested() == (until > now + 1000000)); // (unless the hold just ran out)
    while (q.congested() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK_FALSE(q.congested());
    std::lock_guard lock(mu);
    REQUIRE_FALSE(calls.empty());
    CHECK(calls[0].second); // the onset
    for (size_t i = 1; i < calls.size(); ++i) {
        CHECK_FALSE(calls[i].second); // extensions of the same congestion
        CHECK(calls[i].first > calls[i - 1].first);
    }
    CHECK(calls.back().first == until);
}

namespace {
int listening_socket() {
    return test::loopback_listener(8, SOCK_NONBLOCK);
}
using test::connect_to;
// A usmc listener on a kernel listener, watched by an epoll set with the
// application's data; closes all three when the test ends.
struct WatchedListener {
    int lfd = listening_socket();
    SmcListener* l;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    WatchedListener(int backlog, uint64_t data)
        : l(new SmcListener(registry::Listener{}, lfd, backlog)) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = data;
        REQUIRE(l->epoll_ctl(ep, EPOLL_CTL_ADD, &ev) == 0);
    }
    ~WatchedListener() {
        close(ep);
        l->close();
        l->unref();
        close(lfd);
    }
};
// Watches `fd` and returns what the watch called back with (the test fails
// if it never does); `meanwhile` runs once the watch is in place, `took`
// gets the time until the call.
bool watch_result(int fd, connect_watch::Want want, uint32_t timeout_ms,
                  const std::function<void()>& meanwhile = {},
                  std::chrono::milliseconds* took = nullptr) {
    using namespace std::chrono;
    std::promise<bool> p;
    auto t0 = steady_clock::now();
    REQUIRE(connect_watch::add(fd, want, timeout_ms, [&](bool ok) { p.set_value(ok); }));
    if (meanwhile) meanwhile();
    auto f = p.get_future();
    REQUIRE(f.wait_for(seconds(5)) == std::future_status::ready);
    if (took) *took = duration_cast<milliseconds>(steady_clock::now() - t0);
    return f.get();
}
} // namespace

TEST_CASE("handshake queue: handshakes in flight beyond the bound congest it, with no job queued") {
    static HandshakeQueue* keep = nullptr; // (as above: lives for the process)
    std::atomic<int> onsets{0};
    keep = new HandshakeQueue(
        8, 200, [&](uint64_t, bool onset) { onsets += onset; }, 3);
    auto& q = *keep;
    q.begin();
    q.begin();
    CHECK(q.in_flight() == 2);
    CHECK_FALSE(q.congested());
    q.begin(); // the third reaches the bound
    CHECK(q.congested());
    CHECK(onsets == 1);
    q.end();
    q.end();
    q.end();
    CHECK(q.in_flight() == 0);
    CHECK(q.congested_until() > 0); // the hold runs on
    // Without a bound, handshakes in flight never congest.
    static HandshakeQueue* plain = nullptr;
    plain = new HandshakeQueue(1, 200, nullptr);
    for (int i = 0; i < 100; ++i)
        plain->begin();
    CHECK_FALSE(plain->congested());
}

TEST_CASE("handshake queue: congestion back right after its hold doubles the hold") {
    using namespace std::chrono;
    static HandshakeQueue* keep = nullptr; // (as above: lives for the process)
    constexpr uint64_t kHoldNs = 60'000'000;
    keep = new HandshakeQueue(1, 60, nullptr);
    auto& q = *keep;
    std::mutex mu;
    std::condition_variable cv;
    int open = 0; // jobs allowed to finish
    std::atomic<int> done{0};
    auto job = [&] {
        {
            std::unique_lock lock(mu);
            cv.wait(lock, [&] { return open > 0; });
            --open;
        }
        // Counted last, after mu is let go: once all are counted the test
        // may end, and mu with it.
        ++done;
    };
    // One worker busy and one job waiting: congested.
    auto congest = [&](int expect_done) {
        REQUIRE(q.submit(job));
        REQUIRE(q.submit(job));
        auto deadline = steady_clock::now() + seconds(5);
        while (!q.congested() && steady_clock::now() < deadline)
            std::this_thread::sleep_for(milliseconds(1));
        REQUIRE(q.congested());
        {
            std::lock_guard lock(mu);
            open += 2;
        }
        cv.notify_all();
        while (done < expect_done && steady_clock::now() < deadline)
            std::this_thread::sleep_for(milliseconds(1));
        REQUIRE(done == expect_done);
    };
    auto wait_end = [&] {
        auto deadline = steady_clock::now() + seconds(5);
        while (q.congested() && steady_clock::now() < deadline)
            std::this_thread::sleep_for(milliseconds(1));
        REQUIRE_FALSE(q.congested());
    };
    congest(2);
    CHECK(q.hold_ns() == kHoldNs);
    wait_end();
    congest(4); // back at once: a storm
    CHECK(q.hold_ns() == 2 * kHoldNs);
    wait_end();
    congest(6);
    CHECK(q.hold_ns() == 4 * kHoldNs);
    wait_end();
    // Quiet for longer than the hold: a new spike starts from the setting.
    std::this_thread::sleep_for(nanoseconds(4 * kHoldNs + 20'000'000));
    congest(8);
    CHECK(q.hold_ns() == kHoldNs);
}

TEST_CASE("connect watch: tells when the TCP connect is up, failed or timed out") {
    using namespace std::chrono;
    int lfd = test::loopback_listener(0); // room for one connection, never accepted
    sockaddr_in a{};
    socklen_t alen = sizeof a;
    getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen);
    int filler = connect_to(lfd);
    // The queue is full: this SYN is dropped, the connect stays in progress.
    auto dropped = [&] {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        REQUIRE(connect(s, reinterpret_cast<sockaddr*>(&a), alen) == -1);
        REQUIRE(errno == EINPROGRESS);
        return s;
    };
    SECTION("timed out (the first watch wakes the thread for its deadline)") {
        int s = dropped();
        milliseconds took{};
        CHECK_FALSE(watch_result(s, connect_watch::Want::Connected, 150, {}, &took));
        CHECK(took >= milliseconds(140));
        close(s);
    }
    SECTION("shut down while connecting (what close() does)") {
        int s = dropped();
        CHECK_FALSE(watch_result(s, connect_watch::Want::Connected, 10000,
                                 [&] { shutdown(s, SHUT_RDWR); }));
        close(s);
    }
    SECTION("up") {
        int l2 = listening_socket();
        sockaddr_in b{};
        socklen_t blen = sizeof b;
        getsockname(l2, reinterpret_cast<sockaddr*>(&b), &blen);
        int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        int rc = connect(s, reinterpret_cast<sockaddr*>(&b), blen);
        REQUIRE((rc == 0 || errno == EINPROGRESS));
        CHECK(watch_result(s, connect_watch::Want::Connected, 10000));
        close(s);
        close(l2);
    }
    close(filler);
    close(lfd);
}

TEST_CASE("connect watch: waits for the peer's answer; a later, shorter deadline is kept") {
    using namespace std::chrono;
    int l = listening_socket();
    auto pair = [&] {
        int s = connect_to(l);
        int peer = accept(l, nullptr, nullptr);
        REQUIRE(peer >= 0);
        return std::pair{s, peer};
    };
    auto [quiet, quiet_peer] = pair();
    std::promise<bool> long_wait;
    REQUIRE(connect_watch::add(quiet, connect_watch::Want::Readable, 10000,
                               [&](bool ok) { long_wait.set_value(ok); }));
    SECTION("an answer") {
        auto [s, peer] = pair();
        CHECK(watch_result(s, connect_watch::Want::Readable, 10000,
                           // clang 14 cannot capture a structured binding
                           [fd = peer] { REQUIRE(write(fd, "A", 1) == 1); }));
        close(s);
        close(peer);
    }
    SECTION("no answer: the shorter deadline ends its watch on time") {
        // The thread sleeps to the 10 s deadline above; this one must wake it.
        auto [s, peer] = pair();
        milliseconds took{};
        CHECK_FALSE(watch_result(s, connect_watch::Want::Readable, 150, {}, &took));
        CHECK(took >= milliseconds(140));
        close(s);
        close(peer);
    }
    // A hang-up is for the handshake to read: reported as an answer.
    shutdown(quiet, SHUT_RDWR);
    auto f = long_wait.get_future();
    REQUIRE(f.wait_for(seconds(5)) == std::future_status::ready);
    CHECK(f.get());
    close(quiet);
    close(quiet_peer);
    close(l);
}

TEST_CASE("listener queue: backlog counts handshakes plus completed, not accepted") {
    int lfd = listening_socket();
    auto* l = new SmcListener(registry::Listener{}, lfd, 2);
    REQUIRE(l->ok());
    CHECK_FALSE(l->at_backlog());
    l->handshake_started();
    l->handshake_started();
    CHECK(l->at_backlog()); // two in a handshake
    Accepted a;
    a.fd = dup(lfd);
    CHECK_FALSE(l->push_done(std::move(a))); // queued
    CHECK(l->queued() == 1);
    CHECK(l->at_backlog()); // one in a handshake + one queued
    Accepted failed;
    failed.error = true;
    auto back = l->push_done(std::move(failed)); // a failed handshake is handed back, not queued
    CHECK(back.has_value());
    CHECK_FALSE(l->at_backlog());
    auto got = l->pop_done();
    REQUIRE(got.has_value());
    close(got->fd);
    CHECK_FALSE(l->pop_done());
    CHECK(l->queued() == 0);
    l->set_backlog(0); // listen(fd, 0) still lets one through, as the kernel does
    CHECK(l->backlog() == 1);
    l->close();
    l->unref();
    close(lfd);
}

TEST_CASE("listener queue: completed handshakes wake epoll with the application's data; a stall "
          "hides the kernel listener") {
    WatchedListener w(4, 0xfeed);
    auto* l = w.l;
    int lfd = w.lfd, ep = w.ep;
    epoll_event out[4];
    CHECK(epoll_wait(ep, out, 4, 0) == 0);

    // A worker finishes: the queue's eventfd reports with the app's data.
    l->handshake_started();
    Accepted a;
    a.fd = dup(lfd);
    REQUIRE_FALSE(l->push_done(std::move(a)));
    REQUIRE(epoll_wait(ep, out, 4, 0) == 1);
    CHECK(out[0].data.u64 == 0xfeed);
    auto got = l->pop_done();
    REQUIRE(got);
    close(got->fd);
    CHECK(epoll_wait(ep, out, 4, 0) == 0); // drained with the queue

    // A connection waits in the kernel: readable. Stalled, it is hidden.
    int c = connect_to(lfd);
    CHECK(epoll_wait(ep, out, 4, 100) == 1);
    l->set_stalled(true);
    CHECK(epoll_wait(ep, out, 4, 0) == 0);
    l->set_stalled(false);
    CHECK(epoll_wait(ep, out, 4, 100) == 1);
    CHECK(l->epoll_ctl(ep, EPOLL_CTL_DEL, nullptr) == 0);
    CHECK(epoll_wait(ep, out, 4, 0) == 0);
    close(c);
}

TEST_CASE("listener queue: a stall ends when accept takes the last queued connection, and the "
          "kernel listener shows again") {
    WatchedListener w(1, 0xbeef);
    auto* l = w.l;
    int lfd = w.lfd, ep = w.ep;
    l->handshake_started();
    Accepted a;
    a.fd = dup(lfd);
    REQUIRE_FALSE(l->push_done(std::move(a)));
    REQUIRE(l->at_backlog());
    l->set_stalled(true);    // as accept() does at the backlog
    int c = connect_to(lfd); // waits in the kernel listener, hidden
    epoll_event out[4];
    CHECK(epoll_wait(ep, out, 4, 0) == 1); // the queue's eventfd only
    auto got = l->pop_done();
    REQUIRE(got);
    close(got->fd);
    // The queue is empty and its eventfd drained: without the kernel
    // listener back in the set, the application would sleep for good.
    CHECK_FALSE(l->stalled());
    CHECK(epoll_wait(ep, out, 4, 100) == 1);
    CHECK(out[0].data.u64 == 0xbeef);
    close(c);
}

TEST_CASE("limit-hs knob: the file is edited in place, everything else kept") {
    std::string err;
    auto out = config::with_limit_smc_hs("", true, "t.toml", &err);
    REQUIRE(out);
    CHECK(*out == "limit_smc_hs = true\n");
    std::string text = "# comment\nlimit_smc_hs = true\nrmem = \"1M\"\n[[policy]]\nport = "
                       "\"80-80\"\nmode = \"tcp\"\n";
    out = config::with_limit_smc_hs(text, false, "t.toml", &err);
    REQUIRE(out);
    CHECK(*out == "# comment\nlimit_smc_hs = false\nrmem = \"1M\"\n[[policy]]\nport = "
                  "\"80-80\"\nmode = \"tcp\"\n");
    auto parsed = config::parse_config(*out, "t.toml");
    REQUIRE(std::holds_alternative<config::Config>(parsed));
    CHECK(std::get<config::Config>(parsed).rmem == 1u << 20);
    // A broken file is reported, never rewritten.
    CHECK_FALSE(config::with_limit_smc_hs("rmem = [", true, "bad.toml", &err));
    CHECK(err.find("bad.toml") != std::string::npos);

    char dir[] = "/tmp/usmc-knob-XXXXXX";
    REQUIRE(mkdtemp(dir));
    std::string path = std::string(dir) + "/usmc.toml";
    CHECK(config::write_limit_smc_hs(path, true).empty()); // created
    CHECK(config::write_limit_smc_hs(path, false).empty());
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    CHECK(ss.str() == "limit_smc_hs = false\n");
    std::string cleanup = std::string("rm -rf ") + dir;
    CHECK(std::system(cleanup.c_str()) == 0);
}
