// SPDX-License-Identifier: MIT
// Diagnostics (engine/base/log.hpp): what a peer that makes us log over and
// over gets on our stderr.
#include "engine/base/log.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <string>
#include <thread>
#include <unistd.h>

using namespace usmc;

namespace {

time_t coarse_second() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return ts.tv_sec;
}

// Returns once the coarse clock's second has changed (at most ~1 s).
void next_second() {
    time_t now = coarse_second();
    for (int i = 0; i < 3000 && coarse_second() == now; ++i) {
        timespec pause{0, 1000000};
        nanosleep(&pause, nullptr);
    }
}

// What `emit` writes to fd 2 while `body` runs.
template <typename F>
std::string stderr_of(F body) {
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
    int saved = dup(2);
    dup2(p[1], 2);
    body();
    dup2(saved, 2);
    close(saved);
    close(p[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof buf)) > 0)
        out.append(buf, size_t(n));
    close(p[0]);
    return out;
}

// The sum of the "N lines not shown" notices in `s`.
size_t not_shown(const std::string& s) {
    size_t sum = 0;
    for (size_t at = s.find(" lines not shown"); at != std::string::npos;
         at = s.find(" lines not shown", at + 1)) {
        size_t begin = s.rfind(' ', at - 1) + 1;
        sum += std::stoul(s.substr(begin, at - begin));
    }
    return sum;
}

size_t lines_with(const std::string& s, const char* what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
        ++n;
    return n;
}

} // namespace

TEST_CASE("log: at most kLinesPerSecond lines a second; the next one says how many did not go") {
    log::set_level(log::LogLevel::Warn);
    next_second(); // a second of our own (other tests may have logged in this one)
    std::string burst = stderr_of([] {
        for (int i = 0; i < 100; ++i)
            log::warn("peer made us say {}", i);
    });
    // (The burst takes well under a millisecond; should it cross into the
    // next second, that second's lines go out too. Lines other tests'
    // threads log meanwhile count against the same budget.)
    size_t shown = lines_with(burst, "peer made us say");
    CHECK(shown >= 1);
    CHECK(shown <= 2 * log::kLinesPerSecond);
    CHECK(burst.find("peer made us say 0\n") != std::string::npos);
    next_second();
    std::string after = stderr_of([] { log::warn("later"); });
    CHECK(lines_with(after, "later") == 1);
    // Every line held back is told of, in the burst's next second or now.
    CHECK(not_shown(burst) + not_shown(after) >= 100 - shown);
    // Debug lines, asked for, are never held back.
    log::set_level(log::LogLevel::Debug);
    next_second();
    std::string debug = stderr_of([] {
        for (int i = 0; i < 50; ++i)
            log::debug("detail {}", i);
    });
    CHECK(lines_with(debug, "detail") == 50);
    log::set_level(log::LogLevel::Warn);
}

TEST_CASE("log: a full stderr pipe (nobody reads it) holds the line back instead of blocking") {
    log::set_level(log::LogLevel::Warn);
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    // Filled while nonblocking, then blocking again, as a program's stderr
    // would be.
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    char fill[4096] = {};
    while (write(p[1], fill, sizeof fill) > 0) {
    }
    fcntl(p[1], F_SETFL, 0);
    int saved = dup(2);
    dup2(p[1], 2);
    next_second(); // a budget of its own
    std::atomic<bool> done{false};
    std::thread t([&] {
        log::warn("into a full pipe");
        done = true;
    });
    for (int i = 0; i < 10000 && !done; ++i) { // returns at once; 10 s if it blocked
        timespec pause{0, 1000000};
        nanosleep(&pause, nullptr);
    }
    bool returned = done.load();
    // Unblock it if it did block, so the test ends either way.
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    while (read(p[0], fill, sizeof fill) > 0) {
    }
    t.join();
    CHECK(returned);
    while (read(p[0], fill, sizeof fill) > 0) {
    }
    log::warn("room again");
    dup2(saved, 2);
    close(saved);
    close(p[1]);
    std::string out;
    ssize_t n;
    while ((n = read(p[0], fill, sizeof fill)) > 0)
        out.append(fill, size_t(n));
    close(p[0]);
    CHECK(out.find("into a full pipe") == std::string::npos);
    CHECK(not_shown(out) >= 1);
    CHECK(lines_with(out, "room again") == 1);
}
