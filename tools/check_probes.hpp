// SPDX-License-Identifier: MIT
#pragma once
// What SMC-D needs on this host, tested directly by `usmc check`, and what
// the check reads about the processes it starts.
#include "config/config.hpp"
#include "engine/base/fdtable.hpp"
#include "tools/check_report.hpp"

#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace usmc::tools::check {

// usmc-run beside this binary, else on $PATH ("" if neither).
std::string find_launcher();
// This binary (/proc/self/exe).
std::string self_path();

// The configuration as a wrapped program loads it, with USMC_MODES from
// the environment applied; adds its lines to `r`. nullopt when it is
// unusable (every socket TCP). `judge_mode`: a global mode without SMC-D
// fails (for one destination, its policy line judges instead).
std::optional<config::Config> check_configuration(Report& r, bool judge_mode);
// USMC_MODES as the environment gives it to wrapped programs (auto if unset).
config::ModeSet environment_modes();

// The stats directory: there, and writable by this user (the registry's
// entries live there). Adds a line to `r`; true if usable.
bool check_stats_dir(Report& r, const std::string& dir);
// Sealed memfds mapped shared (DMBs), descriptor passing over an abstract
// AF_UNIX socket (the endpoint), pidfds (the registry's liveness check),
// /proc (start times, TCP tables), and no seccomp filter.
void check_system(Report& r);

// One tracked socket of a live usmc process, from its stats segment.
struct SocketState {
    int fd = -1;
    SockRole role = SockRole::None;
    SockMode mode = SockMode::Tcp;
    uint32_t reason = 0;
};
// The tracked sockets of process `pid` in `dir`; nullopt if it has no live
// segment there.
std::optional<std::vector<SocketState>> sockets_of(const std::string& dir, pid_t pid);

} // namespace usmc::tools::check
