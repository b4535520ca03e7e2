// SPDX-License-Identifier: MIT
#pragma once
// usmc-run's command line: smc_run's short options with their meanings
// (getopts "dhr:t:v"), usmc's own choices as long options only, read by
// glibc's getopt_long with "+" first, whose rules are getopts': clusters
// (-dv), attached values (-r1M), the next word as a value even if it starts
// with '-', options end at the first non-option or after "--".
//
//   -d  -h  -r SIZE  -t SIZE  -v             smc_run's
//   --smcd --smcr --tcp --limit-hs --no-limit-hs --config FILE|--config=FILE
//   --ignore-config-errors --verbose --help --version
//                                            usmc's, anywhere among the short
//                                            ones (a unique prefix will do)
//
// The messages are smc_run's ("Invalid option: -x"), not getopt's.
#include <string>
#include <string_view>
#include <vector>

namespace usmc::tools {

struct LauncherArgs {
    enum class Action { Run, Help, Version, Error };
    Action action = Action::Run;
    std::string error; // Action::Error: the message, without "usmc-run: Error: "

    // smc_run's
    bool debug = false; // -d: SMC_DEBUG=1
    std::string rcvbuf; // -r SIZE as given, empty if not set
    std::string sndbuf; // -t SIZE
    // usmc's
    bool smcd = false, smcr = false, tcp = false;
    bool limit_hs = false, no_limit_hs = false;
    bool verbose = false;
    bool ignore_config_errors = false; // run with a bad configuration (every socket TCP)
    std::string config_file;

    std::vector<std::string> command; // PROGRAM [ARGS...]
};

// argv[0] is the launcher's own name and is skipped. Uses getopt_long's
// globals (resets them first): one parse at a time.
LauncherArgs parse_launcher_args(int argc, const char* const* argv);

// A size as the file and the environment take it (config/size.hpp): smc_run's
// digits with an optional k/K/m/M suffix, and more units.
bool valid_buffer_size(std::string_view text);

// The -h/--help text.
std::string launcher_usage();

} // namespace usmc::tools
