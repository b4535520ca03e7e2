// Diagnostics (engine/base/log.hpp): what a peer that makes us log over and
// over gets on our stderr.
#include "engine/base/log.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <string>
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
    // next second, that second's lines go out too.)
    size_t shown = lines_with(burst, "peer made us say");
    CHECK(shown >= log::kLinesPerSecond);
    CHECK(shown <= 2 * log::kLinesPerSecond);
    CHECK(burst.find("peer made us say 0\n") != std::string::npos);
    next_second();
    std::string after = stderr_of([] { log::warn("later"); });
    std::string notice = std::to_string(100 - shown) + " lines not shown";
    CHECK(after.find(notice) != std::string::npos);
    CHECK(lines_with(after, "later") == 1);
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
