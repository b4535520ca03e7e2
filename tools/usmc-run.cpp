// SPDX-License-Identifier: MIT
// usmc-run: start a program with the usmc shim preloaded; a drop-in for
// smc-tools' smc_run (its -d/-h/-r/-t/-v), with usmc's own choices as long
// options (launcher_args.hpp). The options reach the shim through the
// environment.
#include "config/config.hpp"
#include "tools/elfcheck.hpp"
#include "tools/launcher_args.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <variant>

namespace {

constexpr const char* kPreloadName = "libusmc-preload.so";

// Where the shim is installed relative to this binary's directory (CMake:
// bin -> lib/x86_64-linux-gnu/usmc for prefix /usr), so any prefix works.
#ifndef USMC_BIN_TO_LIB
#define USMC_BIN_TO_LIB "../lib/usmc"
#endif

// The shim sits in its private directory under the installed library
// directory relative to this binary, or in ../lib (the build tree), or
// beside it; USMC_PRELOAD_LIB overrides.
std::string find_preload_library() {
    if (const char* env = std::getenv("USMC_PRELOAD_LIB"); env && *env) return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return {};
    exe[n] = 0;
    std::string dir(exe);
    dir.erase(dir.rfind('/'));
    for (const std::string& candidate :
         {dir + "/" USMC_BIN_TO_LIB "/" + kPreloadName, dir + "/../lib/" + kPreloadName,
          dir + "/" + kPreloadName}) {
        char resolved[PATH_MAX];
        if (realpath(candidate.c_str(), resolved)) return resolved;
    }
    return {};
}

// Appends the shim to LD_PRELOAD, keeping what is there (space or colon
// separated, as ld.so accepts), and not adding it twice.
std::string merged_preload(const char* existing, const std::string& lib) {
    std::string current = existing ? existing : "";
    if (current.find(lib) != std::string::npos) return current;
    return current.empty() ? lib : current + ":" + lib;
}

} // namespace

int main(int argc, char** argv) {
    using Action = usmc::tools::LauncherArgs::Action;
    auto args = usmc::tools::parse_launcher_args(argc, argv);
    switch (args.action) {
    case Action::Help:
        fmt::print("{}", usmc::tools::launcher_usage());
        return 0;
    case Action::Version:
        fmt::print("usmc-run utility, usmc-{}\n", USMC_VERSION);
        return 0;
    case Action::Error:
        fmt::print(stderr, "usmc-run: Error: {}\n", args.error);
        return 1; // as smc_run
    case Action::Run:
        break;
    }
    const std::string& config_file = args.config_file;
    std::vector<std::string>& command = args.command;

    if (!config_file.empty()) {
        char resolved[PATH_MAX];
        if (!realpath(config_file.c_str(), resolved)) {
            fmt::print(stderr, "usmc-run: {}: {}\n", config_file, std::strerror(errno));
            return 1;
        }
        setenv("USMC_CONFIG", resolved, 1);
    }
    // The configuration is checked here, where a mistake can still stop the
    // launch: every error is told and the program does not start, unless
    // told otherwise (then it runs as under a library that finds the same
    // errors: every socket plain TCP). A program already running never
    // stops for its configuration (runtime.cpp).
    auto loaded = usmc::config::load_default_config();
    if (auto* err = std::get_if<usmc::config::LoadError>(&loaded)) {
        if (args.ignore_config_errors) {
            fmt::print(stderr, "usmc-run: config error: {}{}; every socket will run as plain TCP\n",
                       err->message,
                       err->more.empty() ? "" : fmt::format(" (and {} more)", err->more.size()));
        } else {
            fmt::print(stderr, "usmc-run: {}\n", err->message);
            for (const auto& more : err->more)
                fmt::print(stderr, "usmc-run: {}\n", more);
            fmt::print(stderr,
                       "usmc-run: not starting {}: the configuration has {} error{} "
                       "(--ignore-config-errors starts it with every socket as plain TCP)\n",
                       command.front(), 1 + err->more.size(), err->more.empty() ? "" : "s");
            return 1;
        }
    } else {
        // Only a test build takes these keys; say so where a user would look.
        const auto& cfg = std::get<usmc::config::Config>(loaded);
        for (const auto& key : usmc::config::testonly_in_effect(cfg))
            fmt::print(stderr, "usmc-run: warning: test-only setting in effect: {} ({})\n", key,
                       cfg.source);
    }

    const std::string& program = command.front();
    std::string path = usmc::tools::find_program(program, std::getenv("PATH"));
    if (path.empty()) {
        fmt::print(stderr, "usmc-run: {}: command not found\n", program);
        return 127;
    }
    auto info = usmc::tools::inspect_executable(path);
    if (info.kind == usmc::tools::ExecKind::StaticElf)
        fmt::print(stderr,
                   "usmc-run: warning: {} is statically linked; usmc cannot take effect there "
                   "(it runs as plain TCP)\n",
                   path);
    else if (info.go)
        fmt::print(stderr,
                   "usmc-run: warning: {} is a Go program; Go makes socket calls without libc, "
                   "so usmc cannot take effect there (it runs as plain TCP)\n",
                   path);
    if (info.setid)
        fmt::print(stderr,
                   "usmc-run: warning: {} is set-user/group-ID; the loader ignores LD_PRELOAD "
                   "for it, so usmc cannot take effect there (it runs as plain TCP)\n",
                   path);

    std::string lib = find_preload_library();
    if (lib.empty()) {
        fmt::print(stderr,
                   "usmc-run: cannot find {} (looked in {}, ../lib and beside {}; set "
                   "USMC_PRELOAD_LIB)\n",
                   kPreloadName, USMC_BIN_TO_LIB, argv[0]);
        return 1;
    }
    setenv("LD_PRELOAD", merged_preload(std::getenv("LD_PRELOAD"), lib).c_str(), 1);
    // smc_run's: SMC_DEBUG always, the sizes as given. smc_run also raises
    // net.core.rmem_max/wmem_max so that its preload library's setsockopt is
    // not cut down; usmc's shim reads the sizes itself and sizes its DMBs
    // with them (they are no kernel socket buffers), so nothing is raised.
    setenv("SMC_DEBUG", args.debug ? "1" : "0", 1);
    if (!args.rcvbuf.empty()) setenv("SMC_RCVBUF", args.rcvbuf.c_str(), 1);
    if (!args.sndbuf.empty()) setenv("SMC_SNDBUF", args.sndbuf.c_str(), 1);
    if (args.tcp)
        setenv("USMC_MODES", "tcp", 1);
    else if (args.smcd && args.smcr)
        setenv("USMC_MODES", "auto", 1);
    else if (args.smcd)
        setenv("USMC_MODES", "smcd", 1);
    else if (args.smcr)
        setenv("USMC_MODES", "smcr", 1);
    if (args.limit_hs) setenv("USMC_LIMIT_HS", "1", 1);
    if (args.no_limit_hs) setenv("USMC_LIMIT_HS", "0", 1);
    if (args.verbose) {
        setenv("USMC_VERBOSE", "1", 1);
        fmt::print(stderr, "usmc-run: {} with {} (modes {}, limit_hs {})\n", path, lib,
                   std::getenv("USMC_MODES") ? std::getenv("USMC_MODES") : "from config",
                   std::getenv("USMC_LIMIT_HS") ? std::getenv("USMC_LIMIT_HS") : "from config");
    }

    std::vector<char*> exec_args;
    for (auto& a : command)
        exec_args.push_back(a.data());
    exec_args.push_back(nullptr);
    execv(path.c_str(), exec_args.data());
    int err = errno;
    fmt::print(stderr, "usmc-run: {}: {}\n", path, std::strerror(err));
    return err == ENOENT ? 127 : 126;
}
