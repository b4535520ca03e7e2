// SPDX-License-Identifier: MIT
// The learner: when SMC-D pays (engine/sock/learn.hpp). Decisions, decay, probe
// cadence, stale generations and the data-path line, over a private table.
#include "engine/sock/learn.hpp"

#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace usmc;
using namespace usmc::learn;

namespace {

constexpr uint64_t kNow = 1'000'000'000'000ull; // any time well past 0

struct Fixture {
    std::vector<Slot> slots = std::vector<Slot>(32);
    Table table{slots.data(), uint32_t(slots.size())};
};

// Reports `paid` paid and `unpaid` unpaid connections (paid first).
void feed(Table& t, Ticket k, uint32_t paid, uint32_t unpaid, uint64_t now = kNow) {
    for (uint32_t i = 0; i < paid; ++i)
        t.report(k, true, now);
    for (uint32_t i = 0; i < unpaid; ++i)
        t.report(k, false, now);
}

} // namespace

TEST_CASE("learn: a window decides by the share that paid") {
    struct Row {
        uint32_t paid, unpaid;
        bool tcp;
    };
    // kWindow = 16 reports; TCP when fewer than a quarter (4) paid.
    const Row rows[] = {
        {0, 16, true}, {1, 15, true}, {3, 13, true}, {4, 12, false}, {8, 8, false}, {16, 0, false},
    };
    for (const auto& row : rows) {
        Fixture f;
        Ticket k = f.table.ticket(42, kNow);
        // Unpaid first here, so a paid report never lands while TCP holds.
        feed(f.table, k, 0, row.unpaid);
        feed(f.table, k, row.paid, 0);
        INFO("paid " << row.paid << " unpaid " << row.unpaid);
        CHECK((f.table.tcp_until(k) == kNow + kHoldNs) == row.tcp);
        if (!row.tcp) CHECK(f.table.tcp_until(k) == 0);
    }
}

TEST_CASE("learn: no decision before a full window") {
    Fixture f;
    Ticket k = f.table.ticket(7, kNow);
    feed(f.table, k, 0, kWindow - 1);
    CHECK(f.table.tcp_until(k) == 0);
    uint32_t p = 99, u = 99;
    REQUIRE(f.table.counts(k, &p, &u));
    CHECK(p == 0);
    CHECK(u == kWindow - 1);
    f.table.report(k, false, kNow);
    CHECK(f.table.tcp_until(k) == kNow + kHoldNs);
}

TEST_CASE("learn: each decision halves both counts (decay)") {
    Fixture f;
    Ticket k = f.table.ticket(7, kNow);
    feed(f.table, k, 0, 6);
    feed(f.table, k, 10, 0); // the 16th report decides: 10 of 16 paid
    uint32_t p = 0, u = 0;
    REQUIRE(f.table.counts(k, &p, &u));
    CHECK(p == 5);
    CHECK(u == 3);
    CHECK(f.table.tcp_until(k) == 0);
    // The halves weigh in the next window: 8 more unpaid reports make
    // 5 paid of 16, still a quarter: SMC-D.
    feed(f.table, k, 0, 8);
    REQUIRE(f.table.counts(k, &p, &u));
    CHECK(p == 2);
    CHECK(u == 5);
    CHECK(f.table.tcp_until(k) == 0);
    // Now 2 paid + 5 unpaid + 9 unpaid = 2 of 16: TCP.
    feed(f.table, k, 0, 9, kNow + 5);
    CHECK(f.table.tcp_until(k) == kNow + 5 + kHoldNs);
}

TEST_CASE("learn: a window of non-paying reports renews the hold") {
    Fixture f;
    Ticket k = f.table.ticket(7, kNow);
    feed(f.table, k, 0, kWindow);
    CHECK(f.table.tcp_until(k) == kNow + kHoldNs);
    // After halving, 8 more non-paying reports fill the next window.
    feed(f.table, k, 0, kWindow / 2, kNow + kHoldNs - 1);
    CHECK(f.table.tcp_until(k) == kNow + 2 * kHoldNs - 1);
}

TEST_CASE("learn: a connection that pays while TCP holds ends the hold") {
    Fixture f;
    Ticket k = f.table.ticket(7, kNow);
    feed(f.table, k, 0, kWindow);
    REQUIRE(f.table.tcp_until(k) > kNow);
    f.table.report(k, true, kNow + 1); // a probe that paid
    CHECK(f.table.tcp_until(k) == 0);
    // A new window starts from it: the old unpaid ones do not outvote the
    // paying connections that follow.
    uint32_t p = 0, u = 0;
    REQUIRE(f.table.counts(k, &p, &u));
    CHECK(p == 1);
    CHECK(u == 0);
    feed(f.table, k, 3, 12, kNow + 2); // 4 of 16 paid: SMC-D stays
    CHECK(f.table.tcp_until(k) == 0);
    // Once the hold is over, a paying report changes nothing more.
    Fixture g;
    Ticket m = g.table.ticket(7, kNow);
    feed(g.table, m, 0, kWindow);
    g.table.report(m, true, kNow + kHoldNs + 1);
    CHECK(g.table.tcp_until(m) == kNow + kHoldNs);
}

TEST_CASE("learn: a slow stream probes every kProbeEvery-th held connect, not the first") {
    Fixture f;
    Ticket k = f.table.ticket(7, kNow);
    std::vector<uint32_t> probes;
    // One connect per 10 ms: kProbeEvery of them take longer than kProbeGapNs.
    for (uint32_t i = 1; i <= 3 * kProbeEvery; ++i)
        if (f.table.probe(k, kNow + uint64_t{i} * 10'000'000)) probes.push_back(i);
    CHECK(probes == std::vector<uint32_t>{kProbeEvery, 2 * kProbeEvery, 3 * kProbeEvery});
}

TEST_CASE("learn: a fast stream probes at most once per kProbeGapNs") {
    Fixture f;
    Ticket k = f.table.ticket(7, kNow);
    std::vector<uint64_t> at;
    // 10 000 connects a second for two seconds.
    for (uint64_t i = 1; i <= 20'000; ++i) {
        uint64_t now = kNow + i * 100'000;
        if (f.table.probe(k, now)) at.push_back(now);
    }
    REQUIRE(at.size() >= 7);
    CHECK(at.size() <= 2'000'000'000 / kProbeGapNs + 1);
    CHECK(at.front() == kNow + kProbeEvery * 100'000); // the first after kProbeEvery
    for (size_t i = 1; i < at.size(); ++i)
        CHECK(at[i] - at[i - 1] >= kProbeGapNs);
}

TEST_CASE("learn: a key keeps its slot; different keys get different slots") {
    Fixture f;
    Ticket a = f.table.ticket(1, kNow);
    Ticket b = f.table.ticket(2, kNow);
    CHECK(a != 0);
    CHECK(b != 0);
    CHECK(a != b);
    CHECK(f.table.ticket(1, kNow + 1) == a);
    CHECK(f.table.ticket(0, kNow) == 0); // no key, no learner
}

TEST_CASE("learn: a slot given to another key ignores the old key's reports") {
    // One slot: every new key evicts the one before.
    std::vector<Slot> slots(1);
    Table t(slots.data(), 1);
    Ticket old = t.ticket(1, kNow);
    feed(t, old, 0, kWindow - 1);
    Ticket fresh = t.ticket(2, kNow + 1);
    REQUIRE(fresh != old);
    // The old key's connections end now: their reports are stale.
    feed(t, old, 0, kWindow);
    CHECK(t.tcp_until(old) == 0);
    CHECK(t.tcp_until(fresh) == 0);
    uint32_t p = 9, u = 9;
    CHECK_FALSE(t.counts(old, &p, &u));
    REQUIRE(t.counts(fresh, &p, &u));
    CHECK(p + u == 0);
    CHECK_FALSE(t.probe(old, kNow + 2));
    // The new key learns on its own.
    feed(t, fresh, 0, kWindow);
    CHECK(t.tcp_until(fresh) == kNow + kHoldNs);
    // A ticket naming no slot at all is ignored.
    t.report(Ticket{99} << 32, false, kNow);
    CHECK(t.tcp_until(Ticket{99} << 32) == 0);
}

TEST_CASE("learn: the least recently used learner near a key is given away first") {
    std::vector<Slot> slots(8); // kNear covers the whole table
    Table t(slots.data(), 8);
    std::vector<Ticket> tickets;
    for (uint64_t key = 1; key <= 8; ++key)
        tickets.push_back(t.ticket(key, kNow + key));
    t.ticket(1, kNow + 100); // key 1 used again: key 2 is now the oldest
    Ticket ninth = t.ticket(9, kNow + 101);
    CHECK(t.ticket(1, kNow + 102) == tickets[0]); // kept
    uint32_t p, u;
    CHECK_FALSE(t.counts(tickets[1], &p, &u)); // key 2's slot went to key 9
    CHECK(t.counts(ninth, &p, &u));
}

TEST_CASE("learn: reports from a forked child land in the parent's learner") {
    // As the process's learners: one shared anonymous mapping.
    void* m =
        mmap(nullptr, sizeof(Slot) * 4, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    Table t(static_cast<Slot*>(m), 4);
    Ticket k = t.ticket(5, kNow);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        Table child(static_cast<Slot*>(m), 4);
        feed(child, k, 0, kWindow);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(t.tcp_until(k) == kNow + kHoldNs);
    munmap(m, sizeof(Slot) * 4);
}

TEST_CASE("learn: the data path's line: turns or bytes") {
    struct Row {
        const char* what;
        std::vector<std::pair<uint8_t, uint64_t>> calls; // direction, bytes
        bool pays;
    };
    auto round_trips = [](uint32_t n, uint64_t bytes) {
        std::vector<std::pair<uint8_t, uint64_t>> v;
        for (uint32_t i = 0; i < n; ++i) {
            v.push_back({SmcConn::kLearnIn, bytes});
            v.push_back({SmcConn::kLearnOut, bytes});
        }
        return v;
    };
    auto stream = [](uint32_t n, uint64_t bytes) {
        return std::vector<std::pair<uint8_t, uint64_t>>(n, {SmcConn::kLearnOut, bytes});
    };
    const Row rows[] = {
        {"one request", round_trips(1, 100), false},
        {"63 turns", round_trips(kPaysTurns - 1, 100), false},
        {"64 turns", round_trips(kPaysTurns, 100), true},
        {"just under a MiB streamed", stream(1023, 1024), false},
        {"a MiB streamed", stream(1024, 1024), true},
        {"sends only: no turns", stream(1000, 10), false},
    };
    std::vector<Slot> slots(2);
    Table t(slots.data(), 2);
    for (const auto& row : rows) {
        INFO(row.what);
        SmcConn c;
        c.learn_dir.store(SmcConn::kLearnNone); // counting, as learn::begin leaves it
        bool paid_at_end = false;
        for (auto [dir, n] : row.calls) {
            // note_io calls learn::paid on the line; without a learn word it
            // only stops counting, which is what is looked at here.
            note_io(c, dir, n);
            paid_at_end = c.learn_dir.load() == SmcConn::kLearnDone;
        }
        CHECK(paid_at_end == row.pays);
    }
}
