// SPDX-License-Identifier: MIT
#pragma once
// Diagnostics on stderr as "usmc[pid]: message". Formats into a stack buffer
// and writes with the real write(), so logging never allocates or re-enters
// the shim.
#include "config/config.hpp"

#include <fmt/format.h>

namespace usmc::log {

using config::LogLevel;

// Lines a second a process writes at most (debug lines aside): see emit().
constexpr uint64_t kLinesPerSecond = 20;

void set_level(LogLevel level);
// A forked child: the lines its parent held back are the parent's to tell.
void on_fork_child();
bool enabled(LogLevel level);
void emit(LogLevel level, const char* text, size_t len);

template <typename... Args>
void print(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
    if (!enabled(level)) return;
    char buf[512];
    auto res = fmt::format_to_n(buf, sizeof buf, format, std::forward<Args>(args)...);
    emit(level, buf, res.size < sizeof buf ? res.size : sizeof buf);
}

template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... a) {
    print(LogLevel::Error, f, std::forward<Args>(a)...);
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
    print(LogLevel::Warn, f, std::forward<Args>(a)...);
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
    print(LogLevel::Info, f, std::forward<Args>(a)...);
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) {
    print(LogLevel::Debug, f, std::forward<Args>(a)...);
}

} // namespace usmc::log
