// SPDX-License-Identifier: MIT
// When waits spin (spin.hpp): a thread's backoff after misses, the
// /proc/loadavg and schedstat parsers, the machine-wide contention signal
// and the thread's own wait for its CPU.
#include "engine/conn/spin.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <unistd.h>

using namespace usmc;

TEST_CASE("spin: misses back off 1, 2, 4 .. 64 waits; a hit starts over") {
    spin::Thread t;
    CHECK(spin::take_turn(t));
    uint32_t expect = 1;
    for (int miss = 0; miss < 9; ++miss) {
        spin::after(t, false);
        CHECK(t.skip == expect);
        for (uint32_t i = 0; i < expect; ++i)
            CHECK_FALSE(spin::take_turn(t));
        CHECK(spin::take_turn(t));
        expect = std::min<uint32_t>(expect * 2, spin::kMaxBackoff);
    }
    spin::after(t, true);
    CHECK(t.skip == 0);
    CHECK(t.backoff == 0);
    spin::after(t, false);
    CHECK(t.skip == 1); // from the start again
}

TEST_CASE("spin: the runnable count of /proc/loadavg") {
    struct Case {
        const char* text;
        bool ok;
        uint32_t running;
    };
    const Case cases[] = {
        {"0.00 0.01 0.05 3/456 789\n", true, 3},
        {"12.50 8.00 4.25 17/1203 99999\n", true, 17},
        {"0.00 0.01 0.05 0/1 1\n", true, 0},
        {"0.00 0.01 0.05 /456 789\n", false, 0},  // no digits
        {"0.00 0.01 0.05 3 456 789\n", false, 0}, // no slash
        {"0.00 0.01\n", false, 0},                // too few fields
        {"", false, 0},
        {"0.00 0.01 0.05 99999999999/4 1\n", false, 0}, // past ten digits
    };
    for (const auto& c : cases) {
        uint32_t running = 12345;
        CAPTURE(c.text);
        CHECK(spin::parse_running(c.text, std::strlen(c.text), &running) == c.ok);
        if (c.ok) CHECK(running == c.running);
    }
    // Cut short anywhere: never read past the end.
    const char* full = "0.00 0.01 0.05 3/456 789\n";
    for (size_t n = 0; n < 16; ++n) {
        uint32_t running;
        CHECK_FALSE(spin::parse_running(full, n, &running));
    }
}

namespace {
uint32_t g_fake_running = 0;
bool fake_source(uint32_t* running) {
    *running = g_fake_running;
    return true;
}
bool failing_source(uint32_t*) {
    return false;
}
} // namespace

TEST_CASE("spin: no spin while runnable threads outnumber the CPUs") {
    // (This thread's own wait for its CPU, real under load, stays out of it.)
    spin::testing::set_delay_source(+[](uint64_t* ns) {
        *ns = 0;
        return true;
    });
    g_fake_running = 2;
    spin::testing::set_source(fake_source, 2);
    CHECK(spin::cpu_spare()); // two runnable on two CPUs: nobody waits
    CHECK(spin::begin(20) == 20'000);
    spin::end(true);
    CHECK(spin::begin(0) == 0); // busy_poll_us = 0: never

    g_fake_running = 3;
    spin::testing::set_source(fake_source, 2);
    auto sampled = std::chrono::steady_clock::now();
    CHECK_FALSE(spin::cpu_spare());
    CHECK(spin::begin(20) == 0);
    // The contended sample holds for kHoldNs, whatever later samples say
    // (they are taken at most once per kSampleNs). Checked only while the
    // hold can still stand: a loaded machine may have kept this thread off
    // its CPU longer.
    g_fake_running = 1;
    bool spare = spin::cpu_spare();
    if (std::chrono::steady_clock::now() - sampled < std::chrono::nanoseconds(spin::kHoldNs))
        CHECK_FALSE(spare);

    // A source that cannot be read leaves spinning as configured.
    spin::testing::set_source(failing_source, 2);
    CHECK(spin::cpu_spare());
    CHECK(spin::begin(20) == 20'000);
    spin::end(false); // a miss: the next wait sleeps at once
    CHECK(spin::begin(20) == 0);
    CHECK(spin::begin(20) == 20'000);
    spin::testing::set_source(nullptr, 0);
    spin::testing::set_delay_source(nullptr);
}

namespace {
uint64_t g_fake_delay = 0;
uint64_t g_delay_step = 0; // added at each read
bool fake_delay(uint64_t* ns) {
    g_fake_delay += g_delay_step;
    *ns = g_fake_delay;
    return true;
}
} // namespace

TEST_CASE("spin: a thread that waited for its CPU stops spinning") {
    g_fake_running = 1;
    spin::testing::set_source(fake_source, 2); // the machine has CPUs to spare
    g_fake_delay = 7'000'000;
    g_delay_step = 0;
    spin::testing::set_delay_source(fake_delay);
    CHECK(spin::begin(20) == 20'000); // the first sample: nothing to compare with
    spin::end(true);
    // A second of waiting since: the next sample, taken once kSampleNs has
    // passed, stops the spins (a bounded wait for the clock to move on).
    g_fake_delay += 1'000'000'000;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    bool stopped = false;
    while (!stopped && std::chrono::steady_clock::now() < deadline) {
        stopped = spin::begin(20) == 0;
        if (!stopped) spin::end(true);
    }
    auto at = std::chrono::steady_clock::now();
    CHECK(stopped);
    // And stays so for kWaitedHoldNs (checked only while it can still stand).
    bool spins = spin::begin(20) != 0;
    if (std::chrono::steady_clock::now() - at < std::chrono::nanoseconds(spin::kWaitedHoldNs))
        CHECK_FALSE(spins);
    spin::testing::set_delay_source(nullptr);
    spin::testing::set_source(nullptr, 0);
}

TEST_CASE("spin: a few microseconds of waiting now and then do not stop spins") {
    // A kernel worker or the engine's own loop taking the CPU of a pinned
    // server for a moment: under an eighth of the time between samples.
    g_fake_running = 1;
    spin::testing::set_source(fake_source, 2);
    g_fake_delay = 0;
    g_delay_step = 0;
    spin::testing::set_delay_source(fake_delay);
    CHECK(spin::begin(20) == 20'000);
    spin::end(true);
    g_delay_step = 5'000; // 5 us per read, samples at least 1 ms apart
    // 30 samples' worth of waits, bounded in time; every one may spin.
    int samples = 0, spun = 0, waits = 0;
    uint64_t last = g_fake_delay;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (samples < 30 && std::chrono::steady_clock::now() < deadline) {
        ++waits;
        if (spin::begin(20) != 0) {
            ++spun;
            spin::end(true);
        }
        if (g_fake_delay != last) {
            last = g_fake_delay;
            ++samples;
        }
    }
    CHECK(samples == 30);
    CHECK(spun == waits);
    g_delay_step = 0;
    spin::testing::set_delay_source(nullptr);
    spin::testing::set_source(nullptr, 0);
}

TEST_CASE("spin: an eighth of the window waited is contention") {
    STATIC_REQUIRE(spin::kWaitedShare == 8);
    CHECK(spin::waited_too_long(125'000, 1'000'000));
    CHECK_FALSE(spin::waited_too_long(124'999, 1'000'000));
    CHECK(spin::waited_too_long(5'000'000, 10'000'000));  // a CPU shared half and half
    CHECK_FALSE(spin::waited_too_long(5'000, 1'000'000)); // a kernel worker's moment
    CHECK_FALSE(spin::waited_too_long(0, 0));             // no window
    CHECK(spin::waited_too_long(UINT64_MAX, UINT64_MAX)); // no overflow
}

TEST_CASE("spin: the run-queue wait is read from schedstat") {
    uint64_t ns = 0;
    CHECK(spin::parse_run_delay("2816971 7855 2\n", 15, &ns));
    CHECK(ns == 7855);
    CHECK_FALSE(spin::parse_run_delay("2816971", 7, &ns));
    CHECK_FALSE(spin::parse_run_delay("2816971 7855", 12, &ns)); // cut short
    CHECK_FALSE(spin::parse_run_delay("1 x 2\n", 6, &ns));
    // Where this kernel keeps it (CONFIG_SCHED_INFO), it reads.
    uint64_t real = 0;
    errno = 1234;
    bool read = spin::read_run_delay(&real);
    CHECK(errno == 1234); // the caller's errno stays, read or not
    if (access("/proc/thread-self/schedstat", R_OK) == 0) CHECK(read);
}

TEST_CASE("spin: the real /proc/loadavg is read") {
    uint32_t running = 0;
    REQUIRE(spin::read_running(&running));
    CHECK(running >= 1); // this thread runs
}
