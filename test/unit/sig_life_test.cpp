// SPDX-License-Identifier: MIT
// The lifecycle word of a connection side's `sig` (engine/readiness/
// sig_life.hpp): its table against one written out here on its own, every
// event applied in every phase the word can reach, and the close that
// must happen exactly once whoever leaves last.
#include "engine/readiness/sig_life.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>

using namespace usmc::readiness;

namespace {

using P = SigPhase;
using E = SigEvent;
using A = SigAct;

// Adding a phase or an event means writing its rows below.
static_assert(kSigPhases == 6, "a new phase: add its rows to kExpected");
static_assert(kSigEvents == 7, "a new event: add its rows to kExpected");

// One row per (phase, event): the step with pollers still inside after the
// event's own change of their count, and with none inside. (Enter never
// leaves none; nor does an event that keeps the count in a retired phase:
// those columns repeat the first.)
struct Row {
    P phase;
    E event;
    P next;
    A act;
    P next_none;
    A act_none;
};
constexpr Row kExpected[] = {
    {P::None, E::MadeBlocked, P::Blocked, A::Nothing, P::Blocked, A::Nothing},
    {P::None, E::MadeOpen, P::Open, A::Nothing, P::Open, A::Nothing},
    {P::None, E::Unblock, P::None, A::Nothing, P::None, A::Nothing},
    {P::None, E::Enter, P::None, A::Nothing, P::None, A::Nothing},
    {P::None, E::Leave, P::None, A::Nothing, P::None, A::Nothing},
    {P::None, E::Retire, P::Retired, A::Nothing, P::Closed, A::Close},
    {P::None, E::Close, P::Closed, A::Close, P::Closed, A::Close},

    {P::Blocked, E::MadeBlocked, P::Blocked, A::Refused, P::Blocked, A::Refused},
    {P::Blocked, E::MadeOpen, P::Blocked, A::Refused, P::Blocked, A::Refused},
    {P::Blocked, E::Unblock, P::Open, A::Unblock, P::Open, A::Unblock},
    {P::Blocked, E::Enter, P::Blocked, A::Nothing, P::Blocked, A::Nothing},
    {P::Blocked, E::Leave, P::Blocked, A::Nothing, P::Blocked, A::Nothing},
    {P::Blocked, E::Retire, P::RetiredBlocked, A::Nothing, P::Closed, A::Close},
    {P::Blocked, E::Close, P::Closed, A::Close, P::Closed, A::Close},

    {P::Open, E::MadeBlocked, P::Open, A::Refused, P::Open, A::Refused},
    {P::Open, E::MadeOpen, P::Open, A::Refused, P::Open, A::Refused},
    {P::Open, E::Unblock, P::Open, A::Nothing, P::Open, A::Nothing},
    {P::Open, E::Enter, P::Open, A::Nothing, P::Open, A::Nothing},
    {P::Open, E::Leave, P::Open, A::Nothing, P::Open, A::Nothing},
    {P::Open, E::Retire, P::Retired, A::Nothing, P::Closed, A::Close},
    {P::Open, E::Close, P::Closed, A::Close, P::Closed, A::Close},

    {P::RetiredBlocked, E::MadeBlocked, P::RetiredBlocked, A::Refused, P::RetiredBlocked,
     A::Refused},
    {P::RetiredBlocked, E::MadeOpen, P::RetiredBlocked, A::Refused, P::RetiredBlocked, A::Refused},
    {P::RetiredBlocked, E::Unblock, P::Retired, A::Unblock, P::Retired, A::Unblock},
    {P::RetiredBlocked, E::Enter, P::RetiredBlocked, A::Refused, P::RetiredBlocked, A::Refused},
    {P::RetiredBlocked, E::Leave, P::RetiredBlocked, A::Nothing, P::Closed, A::Close},
    {P::RetiredBlocked, E::Retire, P::RetiredBlocked, A::Nothing, P::RetiredBlocked, A::Nothing},
    {P::RetiredBlocked, E::Close, P::Closed, A::Close, P::Closed, A::Close},

    {P::Retired, E::MadeBlocked, P::Retired, A::Refused, P::Retired, A::Refused},
    {P::Retired, E::MadeOpen, P::Retired, A::Refused, P::Retired, A::Refused},
    {P::Retired, E::Unblock, P::Retired, A::Nothing, P::Retired, A::Nothing},
    {P::Retired, E::Enter, P::Retired, A::Refused, P::Retired, A::Refused},
    {P::Retired, E::Leave, P::Retired, A::Nothing, P::Closed, A::Close},
    {P::Retired, E::Retire, P::Retired, A::Nothing, P::Retired, A::Nothing},
    {P::Retired, E::Close, P::Closed, A::Close, P::Closed, A::Close},

    {P::Closed, E::MadeBlocked, P::Closed, A::Refused, P::Closed, A::Refused},
    {P::Closed, E::MadeOpen, P::Closed, A::Refused, P::Closed, A::Refused},
    {P::Closed, E::Unblock, P::Closed, A::Refused, P::Closed, A::Refused},
    {P::Closed, E::Enter, P::Closed, A::Refused, P::Closed, A::Refused},
    {P::Closed, E::Leave, P::Closed, A::Nothing, P::Closed, A::Nothing},
    {P::Closed, E::Retire, P::Closed, A::Refused, P::Closed, A::Refused},
    {P::Closed, E::Close, P::Closed, A::Refused, P::Closed, A::Refused},
};

const Row* expected(P p, E e) {
    const Row* found = nullptr;
    for (const Row& r : kExpected)
        if (r.phase == p && r.event == e) {
            REQUIRE(found == nullptr); // one row each
            found = &r;
        }
    return found;
}

std::string where(size_t p, size_t e, uint32_t pollers = 0) {
    return "phase " + std::to_string(p) + ", event " + std::to_string(e) + ", pollers " +
           std::to_string(pollers);
}

// A word in phase `p` with `n` pollers inside, reached through events only
// (nullopt: no sequence of events reaches it: a retired phase with nobody
// inside is Closed).
std::optional<uint32_t> reach(SigLife& l, P p, uint32_t n) {
    auto enter = [&] {
        for (uint32_t i = 0; i < n; ++i)
            REQUIRE(l.apply(E::Enter).act == A::Nothing);
    };
    switch (p) {
    case P::None:
        enter();
        break;
    case P::Blocked:
    case P::Open:
        REQUIRE(l.apply(p == P::Blocked ? E::MadeBlocked : E::MadeOpen).act == A::Nothing);
        enter();
        break;
    case P::RetiredBlocked:
    case P::Retired:
        if (n == 0) return std::nullopt;
        REQUIRE(l.apply(p == P::RetiredBlocked ? E::MadeBlocked : E::MadeOpen).act == A::Nothing);
        enter();
        REQUIRE(l.apply(E::Retire).act == A::Nothing);
        break;
    case P::Closed: // an outright close with pollers inside keeps their count
        REQUIRE(l.apply(E::MadeOpen).act == A::Nothing);
        enter();
        REQUIRE(l.apply(E::Close).act == A::Close);
        break;
    }
    REQUIRE(l.phase() == p);
    REQUIRE(l.pollers() == n);
    return l.word();
}

} // namespace

TEST_CASE("sig_life: the table is the one written out here, for every phase and event") {
    for (size_t p = 0; p < kSigPhases; ++p)
        for (size_t e = 0; e < kSigEvents; ++e) {
            INFO(where(p, e));
            const Row* r = expected(P(p), E(e));
            REQUIRE(r != nullptr);
            CHECK(sig_step(P(p), E(e), false) == SigStep{r->next, r->act});
            CHECK(sig_step(P(p), E(e), true) == SigStep{r->next_none, r->act_none});
        }
    CHECK(std::size(kExpected) == kSigPhases * kSigEvents);
    // A refused event leaves the phase where it was; only Close steps close,
    // only into Closed; only Unblock steps unblock.
    for (const Row& r : kExpected)
        for (auto [next, act] : {std::pair{r.next, r.act}, std::pair{r.next_none, r.act_none}}) {
            if (act == A::Refused) CHECK(next == r.phase);
            if (act == A::Close) CHECK((next == P::Closed && r.phase != P::Closed));
            if (act == A::Unblock) CHECK(r.event == E::Unblock);
        }
}

TEST_CASE("sig_life: every event in every reachable phase does what the table says") {
    for (size_t p = 0; p < kSigPhases; ++p)
        for (uint32_t n : {0u, 1u, 2u})
            for (size_t e = 0; e < kSigEvents; ++e) {
                INFO(where(p, e, n));
                SigLife l;
                std::optional<uint32_t> before = reach(l, P(p), n);
                if (!before) continue;
                SigOutcome o = l.apply(E(e));
                const Row* r = expected(P(p), E(e));
                REQUIRE(r != nullptr);
                if (E(e) == E::Leave && n == 0) { // a leave without its enter
                    CHECK(o.act == A::Refused);
                    CHECK(l.word() == *before);
                    continue;
                }
                uint32_t after = E(e) == E::Enter ? n + 1 : E(e) == E::Leave ? n - 1 : n;
                A act = after == 0 ? r->act_none : r->act;
                P next = after == 0 ? r->next_none : r->next;
                CHECK(o.act == act);
                CHECK(o.word == l.word());
                if (act == A::Refused) {
                    CHECK(l.word() == *before);
                } else {
                    CHECK(l.phase() == next);
                    CHECK(l.pollers() == after);
                }
            }
}

TEST_CASE("sig_life: a connecting `sig` is unblocked once, and never after its close") {
    SigLife l;
    CHECK(l.apply(E::MadeBlocked).act == A::Nothing);
    CHECK(l.blocked());
    CHECK(l.apply(E::Unblock).act == A::Unblock);
    CHECK_FALSE(l.blocked());
    uint32_t open = l.word();
    CHECK(l.apply(E::Unblock).act == A::Nothing); // (writes nothing)
    CHECK(l.word() == open);
    CHECK(l.apply(E::MadeOpen).act == A::Refused); // made once

    SigLife closed;
    CHECK(closed.apply(E::MadeBlocked).act == A::Nothing);
    CHECK(closed.apply(E::Close).act == A::Close);
    CHECK_FALSE(closed.blocked());
    CHECK(closed.apply(E::Unblock).act == A::Refused);
}

TEST_CASE("sig_life: retired with no poller inside, `sig` closes at once") {
    for (E made : {E::MadeBlocked, E::MadeOpen}) {
        SigLife l;
        CHECK(l.apply(made).act == A::Nothing);
        CHECK_FALSE(l.retired());
        CHECK(l.apply(E::Retire).act == A::Close);
        CHECK(l.phase() == P::Closed);
        CHECK(l.retired());
        CHECK(l.apply(E::Retire).act == A::Refused);
        CHECK(l.apply(E::Close).act == A::Refused);
        CHECK(l.apply(E::Enter).act == A::Refused);
    }
}

TEST_CASE("sig_life: enter, retire, leave: the last one out closes, once") {
    SigLife l;
    CHECK(l.apply(E::MadeBlocked).act == A::Nothing);
    CHECK(l.apply(E::Enter).act == A::Nothing);
    CHECK(l.apply(E::Enter).act == A::Nothing);
    CHECK(l.apply(E::Retire).act == A::Nothing); // they are inside
    CHECK(l.phase() == P::RetiredBlocked);
    CHECK(l.apply(E::Enter).act == A::Refused); // no new one comes in
    CHECK(l.pollers() == 2);
    // The retirement still wakes those waiting for the OUT edge.
    CHECK(l.apply(E::Unblock).act == A::Unblock);
    CHECK(l.phase() == P::Retired);
    CHECK(l.apply(E::Leave).act == A::Nothing);
    CHECK(l.apply(E::Leave).act == A::Close);
    CHECK(l.phase() == P::Closed);
    CHECK(l.pollers() == 0);
    CHECK(l.apply(E::Leave).act == A::Refused); // a leave without its enter
    CHECK(l.apply(E::Close).act == A::Refused);
}

TEST_CASE("sig_life: closed outright while polled, the pollers still leave") {
    SigLife l;
    CHECK(l.apply(E::MadeOpen).act == A::Nothing);
    CHECK(l.apply(E::Enter).act == A::Nothing);
    CHECK(l.apply(E::Close).act == A::Close);
    CHECK(l.pollers() == 1);
    CHECK(l.apply(E::Leave).act == A::Nothing); // not a second close
    CHECK(l.pollers() == 0);
    CHECK(l.phase() == P::Closed);
}

TEST_CASE("sig_life: pollers of two threads against a retirement: exactly one close") {
    constexpr int kRounds = 200;
    constexpr int kPerRound = 2000;
    for (int round = 0; round < kRounds; ++round) {
        SigLife l;
        REQUIRE(l.apply(round % 2 ? E::MadeBlocked : E::MadeOpen).act == A::Nothing);
        std::atomic<int> closes{0};
        std::atomic<int> entered{0};
        std::atomic<int> wrong{0}; // (Catch asserts on the test's thread only)
        auto poller = [&] {
            for (int i = 0; i < kPerRound; ++i) {
                if (l.apply(E::Enter).act == A::Refused) {
                    // Refused only once retired; and then for good.
                    if (!l.retired() || l.apply(E::Enter).act != A::Refused) wrong.fetch_add(1);
                    return;
                }
                entered.fetch_add(1);
                SigOutcome o = l.apply(E::Leave);
                if (o.act == A::Refused) wrong.fetch_add(1);
                if (o.act == A::Close) closes.fetch_add(1);
            }
        };
        std::thread a(poller), b(poller);
        // The retirement lands among them: after a few enters when the
        // threads got going (bounded: it retires anyway).
        for (int spins = 0; spins < 10000 && entered.load() < round % 50; ++spins)
            std::this_thread::yield();
        SigOutcome r = l.apply(E::Retire);
        REQUIRE(r.act != A::Refused);
        if (r.act == A::Close) closes.fetch_add(1);
        a.join();
        b.join();
        CHECK(wrong.load() == 0);
        CHECK(closes.load() == 1);
        CHECK(l.phase() == P::Closed);
        CHECK(l.pollers() == 0);
    }
}
