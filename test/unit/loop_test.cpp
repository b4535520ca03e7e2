// SPDX-License-Identifier: MIT
// The engine's event loop (loop.hpp): readiness, deadlines, timers, cancel.
#include "engine/base/loop.hpp"
#include "engine/base/sys.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace usmc;
using namespace std::chrono;

namespace {
// What handlers reported, waited for by event (never by sleeping).
struct Seen {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<int, uint32_t>> calls; // (tag, events)
    void note(int tag, uint32_t ev) {
        std::lock_guard l(mu);
        calls.emplace_back(tag, ev);
        cv.notify_all();
    }
    bool wait_for(size_t n, milliseconds limit = milliseconds(10000)) {
        std::unique_lock l(mu);
        return cv.wait_for(l, limit, [&] { return calls.size() >= n; });
    }
    std::pair<int, uint32_t> at(size_t i) {
        std::lock_guard l(mu);
        return calls.at(i);
    }
};
} // namespace

TEST_CASE("loop: a watch fires once with its events, a timer at its deadline") {
    auto seen_p = std::make_shared<Seen>(); // outlives a handler still returning
    Seen& seen = *seen_p;
    int sp[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    size_t before = loop::pending(); // (watches of earlier cases may stand)
    auto start = steady_clock::now();
    REQUIRE(loop::add(sp[0], EPOLLIN, -1, [seen_p](uint32_t ev) { seen_p->note(1, ev); }));
    REQUIRE(loop::add(-1, 0, 30, [seen_p](uint32_t ev) { seen_p->note(2, ev); }));
    REQUIRE(seen.wait_for(1));
    CHECK(seen.at(0) == std::pair<int, uint32_t>(2, 0)); // nothing readable yet
    CHECK(steady_clock::now() - start >= milliseconds(29));
    REQUIRE(write(sp[1], "x", 1) == 1);
    REQUIRE(seen.wait_for(2));
    CHECK(seen.at(1).first == 1);
    CHECK(seen.at(1).second & EPOLLIN);
    CHECK(loop::pending() <= before); // one-shot: both are gone
    close(sp[0]);
    close(sp[1]);
}

TEST_CASE("loop: a deadline ends a watch with 0; a cancelled watch never fires") {
    auto seen_p = std::make_shared<Seen>(); // outlives a handler still returning
    Seen& seen = *seen_p;
    int sp[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    uint64_t cancelled =
        loop::add(sp[0], EPOLLIN, -1, [seen_p](uint32_t ev) { seen_p->note(3, ev); });
    REQUIRE(cancelled);
    CHECK(loop::cancel(cancelled));
    CHECK_FALSE(loop::cancel(cancelled));
    REQUIRE(write(sp[1], "x", 1) == 1); // readable now: nobody is told
    int other[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, other) == 0);
    REQUIRE(loop::add(other[0], EPOLLIN, 20, [seen_p](uint32_t ev) { seen_p->note(4, ev); }));
    REQUIRE(seen.wait_for(1));
    CHECK(seen.at(0) == std::pair<int, uint32_t>(4, 0));
    // (Its fd is out of the set: a new watch of it can be made.)
    REQUIRE(loop::add(sp[0], EPOLLIN, -1, [seen_p](uint32_t ev) { seen_p->note(5, ev); }));
    REQUIRE(seen.wait_for(2));
    CHECK(seen.at(1).first == 5);
    std::lock_guard l(seen.mu);
    for (auto& c : seen.calls)
        CHECK(c.first != 3);
    for (int fd : {sp[0], sp[1], other[0], other[1]})
        close(fd);
}

TEST_CASE("loop: a handler may add the next watch") {
    // (Everything the handlers touch is theirs: the case may end while the
    // last one is still returning.)
    struct Chain {
        Seen seen;
        int left = 3;
    };
    auto chain = std::make_shared<Chain>();
    struct Step {
        std::shared_ptr<Chain> chain;
        void operator()(uint32_t) const {
            bool more = --chain->left > 0; // (only the loop thread touches `left`)
            if (more) loop::add(-1, 0, 1, *this);
            chain->seen.note(6, 0);
        }
    };
    REQUIRE(loop::add(-1, 0, 0, Step{chain}));
    REQUIRE(chain->seen.wait_for(3));
    CHECK(loop::add(-1, 0, -1, [](uint32_t) {}) == 0); // a timer that never fires is refused
}

TEST_CASE("loop: a descriptor watched again after its watch fired, and its number reused") {
    // A fired watch leaves its registration parked (disabled): the next
    // watch of the same descriptor re-arms it; a number closed and reused
    // for another socket is added afresh.
    auto seen_p = std::make_shared<Seen>();
    Seen& seen = *seen_p;
    int sp[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    REQUIRE(write(sp[1], "x", 1) == 1);
    REQUIRE(loop::add(sp[0], EPOLLIN, -1, [seen_p](uint32_t ev) { seen_p->note(1, ev); }));
    REQUIRE(seen.wait_for(1));
    // Parked: readable still, but nothing fires until watched again.
    REQUIRE(loop::add(sp[0], EPOLLIN, -1, [seen_p](uint32_t ev) { seen_p->note(2, ev); }));
    REQUIRE(seen.wait_for(2));
    CHECK(seen.at(1).first == 2);
    CHECK(seen.at(1).second & EPOLLIN);
    // The number closed (the kernel drops the parked registration) and
    // reused by a new socket with nothing to read: no event until a write.
    int fd = sp[0];
    close(sp[0]);
    close(sp[1]);
    int np[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, np) == 0);
    if (np[0] != fd) std::swap(np[0], np[1]);
    REQUIRE(np[0] == fd);
    REQUIRE(loop::add(np[0], EPOLLIN, -1, [seen_p](uint32_t ev) { seen_p->note(3, ev); }));
    // A timer after it: the loop has looked at the new registration by then.
    REQUIRE(loop::add(-1, 0, 20, [seen_p](uint32_t ev) { seen_p->note(4, ev); }));
    REQUIRE(seen.wait_for(3));
    CHECK(seen.at(2).first == 4);
    REQUIRE(write(np[1], "y", 1) == 1);
    REQUIRE(seen.wait_for(4));
    CHECK(seen.at(3).first == 3);
    close(np[0]);
    close(np[1]);
}

TEST_CASE("loop: a far deadline added while the loop sleeps still fires, a near one on time") {
    auto seen_p = std::make_shared<Seen>();
    Seen& seen = *seen_p;
    auto start = steady_clock::now();
    REQUIRE(loop::add(-1, 0, 250, [seen_p](uint32_t ev) { seen_p->note(1, ev); }));
    REQUIRE(loop::add(-1, 0, 400, [seen_p](uint32_t ev) { seen_p->note(2, ev); }));
    REQUIRE(loop::add(-1, 0, 10, [seen_p](uint32_t ev) { seen_p->note(3, ev); }));
    REQUIRE(seen.wait_for(3));
    CHECK(seen.at(0).first == 3);
    CHECK(seen.at(1).first == 1);
    CHECK(seen.at(2).first == 2);
    CHECK(steady_clock::now() - start >= milliseconds(399));
}

TEST_CASE("loop: deadlines fire whether added while the loop still ticks or after it went idle") {
    auto seen_p = std::make_shared<Seen>();
    Seen& seen = *seen_p;
    int n = 0;
    auto timer = [&](int ms) {
        auto start = steady_clock::now();
        int id = ++n;
        REQUIRE(loop::add(-1, 0, ms, [seen_p, id](uint32_t ev) { seen_p->note(id, ev); }));
        REQUIRE(seen.wait_for(size_t(id)));
        CHECK(seen.at(size_t(id - 1)).first == id);
        CHECK(steady_clock::now() - start >= milliseconds(ms - 1));
    };
    timer(30); // the loop ticks for a while after a deadline went...
    timer(30); // ... so this one needed no wake-up: its tick finds it
    std::this_thread::sleep_for(milliseconds(1200)); // past the linger: asleep until news
    timer(30);                                       // a wake-up brings it
}

namespace {
// Whether this process's threads may switch themselves to SCHED_BATCH and
// back (a container may forbid it): asked on a thread of its own.
bool may_batch() {
    bool ok = false;
    std::thread([&] {
        sched_param none{};
        ok = sched_getscheduler(0) == SCHED_OTHER &&
             sched_setscheduler(0, SCHED_BATCH, &none) == 0 &&
             sched_setscheduler(0, SCHED_OTHER, &none) == 0;
    }).join();
    return ok;
}

// Fires `n` watches of `kind` at once (eventfds made readable after all are
// armed); returns the loop thread's policies seen by their handlers.
std::vector<int> fire(int n, loop::Kind kind) {
    auto seen_p = std::make_shared<Seen>();
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) {
        int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        REQUIRE(fd >= 0);
        fds.push_back(fd);
        REQUIRE(loop::add(
            fd, EPOLLIN, -1, [seen_p](uint32_t) { seen_p->note(sched_getscheduler(0), 0); }, kind));
    }
    for (int fd : fds) {
        uint64_t one = 1;
        REQUIRE(write(fd, &one, sizeof one) == sizeof one);
    }
    REQUIRE(seen_p->wait_for(size_t(n)));
    std::vector<int> policies;
    for (int i = 0; i < n; ++i)
        policies.push_back(seen_p->at(size_t(i)).first);
    for (int fd : fds)
        close(fd);
    return policies;
}
} // namespace

TEST_CASE("loop: a storm of handshake events runs the thread as SCHED_BATCH, a wake-up undoes it") {
    if (!may_batch()) {
        WARN("not run: this process may not change its threads' scheduling policy");
        return;
    }
    // A few handshake events leave the thread as it was.
    for (int policy : fire(3, loop::Kind::Handshake))
        CHECK(policy == SCHED_OTHER);
    // Many in one window: batched from that turn on. (Rounds, because a
    // machine that stalls the loop past a window between two turns splits
    // a round's events in two windows.)
    // (Rounds until batched, bounded in time rather than in count: a fast
    // machine runs many rounds inside one window.)
    bool batched = false;
    auto until = steady_clock::now() + seconds(20);
    while (!batched && steady_clock::now() < until)
        batched = fire(200, loop::Kind::Handshake).back() == SCHED_BATCH;
    CHECK(batched);
    CHECK(loop::batched());
    // A writer's space bell: the loop runs it, and what follows, promptly.
    auto woken = fire(1, loop::Kind::Wakeup);
    CHECK(woken.at(0) == SCHED_OTHER);
    CHECK_FALSE(loop::batched());
    // A storm that ends leaves the thread under the normal policy by
    // itself, with no event to bring it back (it must not sleep batched).
    // (The wake-up above holds the normal policy for a while: on a fast
    // machine fifty rounds of a storm all fell inside that hold.)
    batched = false;
    until = steady_clock::now() + seconds(20);
    while (!batched && steady_clock::now() < until)
        batched = fire(200, loop::Kind::Handshake).back() == SCHED_BATCH;
    REQUIRE(batched);
    auto give_up = steady_clock::now() + seconds(10);
    while (loop::batched() && steady_clock::now() < give_up)
        std::this_thread::sleep_for(milliseconds(10)); // (polls a state, bounded)
    CHECK_FALSE(loop::batched());
}

// A signal sent to the process must reach one of the application's threads,
// under its mask: every thread of ours blocks them all, the loop's too, and
// the caller's own mask is left as it was.
TEST_CASE("usmc's threads block every signal; the caller's mask is untouched", "[loop]") {
    sigset_t before;
    pthread_sigmask(SIG_SETMASK, nullptr, &before);
    std::mutex mu;
    std::condition_variable cv;
    bool seen = false, all_blocked = false;
    REQUIRE(sys::start_thread([&] {
        sigset_t now;
        pthread_sigmask(SIG_SETMASK, nullptr, &now);
        bool all = sigismember(&now, SIGUSR1) && sigismember(&now, SIGTERM) &&
                   sigismember(&now, SIGINT) && sigismember(&now, SIGCHLD) &&
                   sigismember(&now, SIGRTMIN);
        std::lock_guard lock(mu);
        all_blocked = all;
        seen = true;
        cv.notify_one();
    }));
    {
        std::unique_lock lock(mu);
        REQUIRE(cv.wait_for(lock, seconds(10), [&] { return seen; }));
    }
    CHECK(all_blocked);
    sigset_t after;
    pthread_sigmask(SIG_SETMASK, nullptr, &after);
    for (int s : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGCHLD})
        CHECK(sigismember(&after, s) == sigismember(&before, s));
}
