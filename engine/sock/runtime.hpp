// SPDX-License-Identifier: MIT
#pragma once
// Process-wide state of the shim: the configuration, the launcher's options,
// the stats segment and the fd table. Cheap parts are set up when the
// library loads; the rest on first use by a TCP socket.
#include "config/config.hpp"
#include "engine/base/count.hpp"
#include "engine/base/counters.hpp"
#include "engine/base/fallback.hpp"
#include "engine/base/statseg.hpp"
#include <atomic>

#include <climits>
#include <sys/socket.h>

namespace usmc::runtime {

// What usmc-run passed through the environment (or the user set there).
struct Options {
    config::ModeSet modes = config::kModeAuto; // USMC_MODES: auto|smcd|smcr|tcp
    int limit_hs = -1;                         // USMC_LIMIT_HS: 0/1, -1 = use the config
    bool verbose = false;                      // USMC_VERBOSE, or SMC_DEBUG
    uint64_t rmem = 0; // SMC_RCVBUF (read on first use by TCP), 0 = use the config
    uint64_t wmem = 0; // SMC_SNDBUF, likewise
};

// smc-tools' SMC_RCVBUF / SMC_SNDBUF: a size as config::parse_size reads it
// (smc_run's digits with an optional k/K/m/M suffix among them); they
// replace the config's rmem / wmem, within the same bounds.
struct EnvSize {
    enum Status { Unset, Ok, Clamped, Malformed };
    Status status = Unset; // Unset: absent or empty
    uint64_t bytes = 0;    // Ok, Clamped: the size to use
};
EnvSize parse_env_size(const char* text);
// smc-tools' SMC_DEBUG: on when set and its first character is not '0'
// (an empty value counts as off).
bool smc_debug_on(const char* text);

struct State {
    config::Config cfg;
    bool config_ok = true;
    Options opts;
    char exe_name[64] = {};
    char argv0_name[64] = {};
    statseg::Header* seg = nullptr;
    char seg_path[PATH_MAX] = {};
};

// The engine above the runtime (the socket layer, engine/af_smc): what the
// runtime calls once it is set up, around fork and at exit, so that the
// runtime includes nothing above it. `engine_hooks` is defined there,
// constant-initialised: nothing has to run before the runtime's first use
// (another library's constructor may make the process's first socket
// before ours runs). A program without the engine (tools/usmc) has none.
// Read in a fork child and in _exit: plain function pointers.
struct EngineHooks {
    void (*init)(uint32_t capacity, uint32_t busy_poll_us);
    void (*before_fork)();
    void (*after_fork_parent)(); // glibc's parent handler: success or not
    void (*fork_returned)(bool failed);
    void (*on_fork_child)();
    bool (*holds_connections)();
    void (*on_exit)();
};
extern const EngineHooks engine_hooks __attribute__((weak));

// fork() returned in the parent (the shim's fork, preload/init.cpp): if
// it failed, what the prepare handler did for the child that never came is
// undone (glibc runs its parent handler either way and tells it nothing).
void fork_returned(bool failed);

// Called from the library constructor: copies argv[0], reads the environment.
void early_init(int argc, char** argv);

// Parses the launcher's environment (exposed for tests).
Options parse_options(const char* modes, const char* limit_hs, const char* verbose, bool* ok);

// The fully initialised state (config loaded, segment mapped); initialises on
// first call. Safe to call from several threads.
State& get();
bool initialised();

// A forked child's stats stay private until it makes a socket call of its
// own (runtime.cpp, on_fork_child): the engine's socket, connect, listen and
// accept paths call this first.
extern std::atomic<int> g_seg_deferred;
void publish_own_stats_slow();
inline void publish_own_stats() {
    if (__builtin_expect(g_seg_deferred.load(std::memory_order_relaxed) == 1, 0))
        publish_own_stats_slow();
}

// limit_smc_hs default for new sockets: the launcher's flag, else the config.
bool default_limit_hs();

// The transports policy allows for a socket in `role` at `addr` (local
// address for listeners, peer address for clients). When the result is
// empty, `reason` says why (POLICY or CONFIG).
config::ModeSet decide(config::Role role, const sockaddr* addr, socklen_t len, uint32_t* reason);

// Adds this process's counters to the retired totals and removes its
// segment file (library destructor).
void shutdown();
// This process installed a seccomp filter (af_smc::before_sandbox): at its
// exit the segment is left as a killed process leaves it (`usmc stats`
// retires it): the filter may kill on the open and unlink that retiring
// takes (OpenSSH's does). It logs errors only from then on.
void note_sandboxed();
// This process set up an io_uring (af_smc::before_io_uring): its new
// connections are TCP.
void note_io_uring();
// _exit: the connections only (see af_smc::on_exit); the segment is left as
// a killed process leaves it.
void quick_exit_conns();

} // namespace usmc::runtime
