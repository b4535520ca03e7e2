// SPDX-License-Identifier: MIT
// First contacts arbitrated per peer (engine/smcr/contact_gate): the second
// connection to a peer waits for the first's group and reuses it; other
// peers never wait; a first contact that fails lets the next one try; a
// waiter's deadline holds. Threads synchronise on the gate's own state and
// on promises, never on sleeps.
#include "engine/smcr/contact_gate.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

using namespace usmc::smcr;
using Clock = std::chrono::steady_clock;

namespace {
PeerKey key(uint8_t n) {
    PeerKey k;
    k.peer[7] = n;
    return k;
}
auto far() {
    return Clock::now() + std::chrono::seconds(30);
}
} // namespace

TEST_CASE("contact gate: the second connection to a peer waits, then reuses the first's group") {
    ContactGate g;
    std::atomic<bool> group_made{false};
    auto reuse = [&] { return group_made.load(); };
    REQUIRE(g.enter(key(1), reuse, far()) == ContactGate::Turn::First);
    std::promise<ContactGate::Turn> second;
    std::thread t([&] { second.set_value(g.enter(key(1), reuse, far())); });
    auto fut = second.get_future();
    for (int i = 0; i < 10000000 && g.waiting() == 0; ++i)
        std::this_thread::yield();
    REQUIRE(g.waiting() == 1); // it waits while the first contact is in flight
    CHECK(fut.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
    group_made = true;
    g.finish(key(1));
    CHECK(fut.get() == ContactGate::Turn::Reuse);
    t.join();
    CHECK(g.in_flight() == 0);
}

TEST_CASE("contact gate: a first contact to another peer never waits") {
    ContactGate g;
    auto none = [] { return false; };
    REQUIRE(g.enter(key(1), none, far()) == ContactGate::Turn::First);
    // Peer 1's first contact is in flight and stays so; peer 2 goes at once.
    auto other = std::async(std::launch::async, [&] {
        return g.enter(key(2), none, Clock::now() + std::chrono::seconds(5));
    });
    CHECK(other.get() == ContactGate::Turn::First);
    CHECK(g.in_flight() == 2);
    PeerKey other_device = key(1);
    other_device.device = 1; // the same peer through another device: its own group
    CHECK(g.enter(other_device, none, Clock::now()) == ContactGate::Turn::First);
    g.finish(key(1));
    g.finish(key(2));
    g.finish(other_device);
    CHECK(g.in_flight() == 0);
}

TEST_CASE("contact gate: a failed first contact lets a waiter make its own") {
    ContactGate g;
    auto none = [] { return false; };
    REQUIRE(g.enter(key(3), none, far()) == ContactGate::Turn::First);
    auto waiter = std::async(std::launch::async, [&] { return g.enter(key(3), none, far()); });
    // Until it waits on the gate (bounded: it has nothing else to do).
    for (int i = 0; i < 10000000 && g.waiting() == 0; ++i)
        std::this_thread::yield();
    REQUIRE(g.waiting() == 1);
    g.finish(key(3)); // no group made
    CHECK(waiter.get() == ContactGate::Turn::First);
    CHECK(g.in_flight() == 1);
    g.finish(key(3));
}

TEST_CASE("contact gate: a waiter's deadline holds while the first contact hangs") {
    ContactGate g;
    auto none = [] { return false; };
    REQUIRE(g.enter(key(4), none, far()) == ContactGate::Turn::First);
    auto t0 = Clock::now();
    CHECK(g.enter(key(4), none, t0 + std::chrono::milliseconds(100)) ==
          ContactGate::Turn::TimedOut);
    CHECK(Clock::now() - t0 >= std::chrono::milliseconds(100));
    CHECK(g.in_flight() == 1); // still the first one's
    g.finish(key(4));
}

TEST_CASE("contact gate: many connections to one peer, one first contact") {
    ContactGate g;
    std::atomic<bool> group_made{false};
    std::atomic<int> firsts{0}, reuses{0};
    auto reuse = [&] { return group_made.load(); };
    std::vector<std::thread> ts;
    for (int i = 0; i < 8; ++i)
        ts.emplace_back([&] {
            auto turn = g.enter(key(5), reuse, far());
            if (turn == ContactGate::Turn::First) {
                ++firsts;
                group_made = true; // its group built
                g.finish(key(5));
            } else if (turn == ContactGate::Turn::Reuse) {
                ++reuses;
            }
        });
    for (auto& t : ts)
        t.join();
    CHECK(firsts == 1);
    CHECK(reuses == 7);
}

TEST_CASE("contact gate: our client's and our server's first contacts to one peer never wait "
          "for each other") {
    // Two processes connecting to each other at once: each one's server
    // holds the peer's key while its client meets the peer's Accept. With
    // one key for both roles each client waited for its own server, which
    // waited for the other's client: both stalled to the deadline.
    ContactGate g;
    auto none = [] { return false; };
    PeerKey as_server = key(6);
    as_server.role = Role::Server;
    PeerKey as_client = key(6);
    as_client.role = Role::Client;
    REQUIRE(g.enter(as_server, none, far()) == ContactGate::Turn::First);
    CHECK(g.enter(as_client, none, Clock::now()) == ContactGate::Turn::First);
    g.finish(as_server);
    g.finish(as_client);
}
