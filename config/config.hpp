// SPDX-License-Identifier: MIT
#pragma once
// usmc.toml: global knobs (the kernel's net.smc sysctls and netlink switch,
// plus usmc's own) and [[policy]] rules. Every error names the file, the line
// and the key; unknown keys and wrong types are errors, never ignored, and a
// file is read to its end so that all its errors are told at once (but for a
// TOML syntax error, which ends the reading).
#include "config/policy.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace usmc::config {

enum class LogLevel : uint8_t { Error, Warn, Info, Debug };

// rmem and wmem bounds (the kernel's for SMC-D: SMC_BUF_MIN_SIZE .. 1 MiB).
inline constexpr uint64_t kBufMin = 16 << 10;
inline constexpr uint64_t kBufMax = 1 << 20;
const char* log_level_name(LogLevel level);

// The testonly_* keys (delays and timeouts the integration tests and the
// benchmarks set) are taken only by builds with USMC_TESTONLY_KNOBS (CMake,
// on with the tests); elsewhere they are unknown keys like any other.
#ifdef USMC_TESTONLY_KNOBS
inline constexpr bool kTestonlyKnobs = true;
#else
inline constexpr bool kTestonlyKnobs = false;
#endif

struct Config {
    // Kernel knobs (net.smc.* sysctls / netlink), same names and defaults.
    bool limit_smc_hs = false;
    uint64_t rmem = 64 * 1024;
    uint64_t wmem = 64 * 1024;
    uint64_t autocorking_size = 64 * 1024;
    // SMC-R's sysctls, same ranges: read and checked so that a file written
    // after the kernel's knobs is taken as it is; nothing uses them until
    // usmc has SMC-R.
    uint32_t smcr_buf_type = 0;            // 0 physically, 1 virtually contiguous, 2 either
    uint32_t smcr_testlink_time = 30;      // seconds of link inactivity before TEST_LINK; 0 off
    uint32_t smcr_max_links_per_lgr = 2;   // 1..2
    uint32_t smcr_max_conns_per_lgr = 255; // 16..255
    uint32_t smcr_max_send_wr = 16;        // send work-request buffers per link, 2..2048
    uint32_t smcr_max_recv_wr = 48;        // receive work-request buffers per link, 2..2048
    // usmc's own.
    ModeSet mode = kModeAuto;            // transports allowed when no policy rule matches
    uint32_t clc_detect_timeout_ms = 50; // server: wait this long for a CLC Proposal
    // Bounded spin before sleeping (recv/send, epoll_wait/poll/select on SMC
    // fds); 0 = never spin. 20 us outlasts a cross-core wake-up through the
    // kernel, so a reply that comes that soon is caught without one, at
    // little CPU.
    uint32_t busy_poll_us = 20;
    bool busy_poll_adaptive = true; // false: every wait spins busy_poll_us (spin.hpp)
    bool autotune_dmb = true;       // 1 MiB DMBs while memory is plentiful (ism::Device::size_for)
    uint64_t max_dmb_memory = 256ull << 20; // per-process cap on DMB memory
    uint32_t hs_workers = 2;                // handshake workers per process and role
    // Handshake congestion (SMC_LIMIT_HS) lasts this long past the last time
    // it was seen: clients see it a round trip late, and a connection storm
    // must not get back in with every burst.
    uint32_t hs_congestion_hold_ms = 100;
    // Sleeps this long before every server handshake: creates handshake
    // congestion on demand for tests and the short-lived benchmark. Never a
    // tuning knob (the name says so; usmc-run warns of it).
    uint32_t testonly_server_handshake_delay_ms = 0;
    // How long a handshake waits for the peer's next CLC message (0: the
    // kernel's CLC_WAIT_TIME, 6 s). For tests that make a client give up
    // (CLCWAIT) without waiting seconds; never a tuning knob.
    uint32_t testonly_clc_timeout_ms = 0;
    // Learn per listener and per destination whether SMC-D pays for the
    // connections seen, and run those that would not as plain TCP
    // (engine/sock/learn.hpp). Only where the mode is "auto": an explicit smcd
    // (policy, global mode, launcher) always tries SMC-D. false: every
    // connection tries SMC-D, as the kernel does.
    bool learn_smc = true;
    // How long a learned TCP decision holds unrenewed (0: learn::kHoldNs,
    // 2 s). For tests that must not race that clock; never a tuning knob.
    uint32_t testonly_learn_hold_ms = 0;
    // The least time between two probes of a learner (0: learn::kProbeGapNs,
    // 250 ms). For tests that count connections to the next probe.
    uint32_t testonly_learn_probe_gap_ms = 0;
    LogLevel log_level = LogLevel::Warn;
    std::vector<uint32_t> trusted_uids; // registry entries of these users are believed too
    std::vector<PolicyRule> policies;

    std::string source = "<built-in defaults>"; // file the values came from
};

struct LoadError {
    std::string message;           // the first: "FILE:LINE:COL: key 'x': what is wrong"
    std::vector<std::string> more; // the others, in the order of the file
};

using LoadResult = std::variant<Config, LoadError>;

struct ParseOptions {
    bool testonly_knobs = kTestonlyKnobs; // take the testonly_* keys
};

// Parses TOML text; `source_name` is used in messages.
LoadResult parse_config(std::string_view text, std::string_view source_name,
                        ParseOptions options = {});
// Reads and parses a file.
LoadResult load_config_file(const std::string& path);

// The system-wide file: <sysconfdir>/usmc/usmc.toml of the prefix usmc was
// configured for (/etc/usmc/usmc.toml for /usr).
const char* system_config_path();

// CMake passes <sysconfdir>/usmc/usmc.toml of the configured prefix; help
// texts name it as a literal.
#ifndef USMC_SYSTEM_CONFIG
#define USMC_SYSTEM_CONFIG "/etc/usmc/usmc.toml"
#endif
// Where the configuration comes from: $USMC_CONFIG, else system_config_path()
// if it exists, else "" (built-in defaults).
std::string default_config_path();
// Loads default_config_path(), or returns the defaults when there is none.
LoadResult load_default_config();

// The effective settings as TOML text (what `usmc config check` prints).
std::string describe(const Config& cfg);

// The testonly_* keys that change something in `cfg`, as "key = value".
std::vector<std::string> testonly_in_effect(const Config& cfg);

} // namespace usmc::config
