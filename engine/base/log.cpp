// SPDX-License-Identifier: MIT
#include "engine/base/log.hpp"

#include "engine/base/sys.hpp"

#include <atomic>
#include <ctime>
#include <poll.h>
#include <unistd.h>

namespace usmc::log {

static std::atomic<int> g_level{static_cast<int>(LogLevel::Warn)};

void set_level(LogLevel level) {
    g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool enabled(LogLevel level) {
    return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

namespace {
// A peer can make us log (a handshake it breaks on purpose, over and over),
// and stderr may be a pipe nobody drains, where write() would block: at
// most kLinesPerSecond lines a second go out (a line asked for at debug
// level always does), none while stderr has no room, and the next one that
// goes says how many did not. The second and the count in it share one word.
std::atomic<uint64_t> g_window{0};
std::atomic<uint64_t> g_dropped{0};

bool take_line() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    uint64_t sec = static_cast<uint64_t>(ts.tv_sec) & 0xffffffff;
    uint64_t w = g_window.load(std::memory_order_relaxed);
    for (;;) {
        // (A window another thread moved past our second is counted in,
        // not reset.)
        uint64_t next = (w >> 32) >= sec ? w + 1 : (sec << 32 | 1);
        if ((next & 0xffffffff) > kLinesPerSecond) return false;
        if (g_window.compare_exchange_weak(w, next, std::memory_order_relaxed)) return true;
    }
}

// Whether a line fits in stderr without blocking: a pipe or socket polls
// writable while it has room for one (a line is far below PIPE_BUF).
bool room_on_stderr() {
    pollfd p{2, POLLOUT, 0};
    return sys::real().poll(&p, 1, 0) == 1 && (p.revents & (POLLOUT | POLLNVAL)) == POLLOUT;
}
} // namespace

void on_fork_child() {
    g_dropped.store(0, std::memory_order_relaxed);
}

void emit(LogLevel level, const char* text, size_t len) {
    if ((level != LogLevel::Debug && !take_line()) || !room_on_stderr()) {
        g_dropped.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    char line[700];
    size_t n = 0;
    if (uint64_t dropped = g_dropped.exchange(0, std::memory_order_relaxed)) {
        auto res = fmt::format_to_n(
            line, 100,
            "usmc[{}]: {} lines not shown (at most {} a second; none while stderr is full)\n",
            getpid(), dropped, kLinesPerSecond);
        n = res.size < 100 ? res.size : 100;
    }
    auto res = fmt::format_to_n(line + n, sizeof line - 1 - n, "usmc[{}]: {}", getpid(),
                                std::string_view(text, len));
    n += res.size < sizeof line - 1 - n ? res.size : sizeof line - 1 - n;
    line[n++] = '\n';
    // One write() so lines of concurrent processes do not interleave.
    ssize_t rc = sys::real().write(2, line, n);
    (void)rc;
}

} // namespace usmc::log
