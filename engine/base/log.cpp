#include "engine/base/log.hpp"

#include "engine/base/sys.hpp"

#include <atomic>
#include <unistd.h>

namespace usmc::log {

static std::atomic<int> g_level{static_cast<int>(LogLevel::Warn)};

void set_level(LogLevel level) {
    g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool enabled(LogLevel level) {
    return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void emit(LogLevel, const char* text, size_t len) {
    char line[600];
    auto res = fmt::format_to_n(line, sizeof line - 1, "usmc[{}]: {}", getpid(),
                                std::string_view(text, len));
    size_t n = res.size < sizeof line - 1 ? res.size : sizeof line - 1;
    line[n++] = '\n';
    // One write() so lines of concurrent processes do not interleave.
    ssize_t rc = sys::real().write(2, line, n);
    (void)rc;
}

} // namespace usmc::log
