#pragma once
// usmc-run's command line: smc_run's short options with their meanings
// (getopts "dhr:t:v"), usmc's own choices as long options only.
//
//   -d  -h  -r SIZE  -t SIZE  -v             smc_run's, getopts rules: clusters
//                                            (-dv), attached values (-r1M), the
//                                            next word as value even if it starts
//                                            with '-', options end at the first
//                                            non-option or after "--"
//   --smcd --smcr --tcp --limit-hs --no-limit-hs --config FILE|--config=FILE
//   --verbose --help --version               usmc's, anywhere among the short ones
//
// Hand-written rather than CLI11: CLI11 takes "-r -d" as -r without a value
// followed by -d, where getopts gives -r the value "-d" (and smc_run then
// rejects it as a size); and it cannot print smc_run's messages.
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
    std::string config_file;

    std::vector<std::string> command; // PROGRAM [ARGS...]
};

// argv[0] is the launcher's own name and is skipped.
LauncherArgs parse_launcher_args(int argc, const char* const* argv);

// smc_run's size syntax: ^[0-9]+[kKmM]?$
bool valid_buffer_size(std::string_view text);

// The -h/--help text.
std::string launcher_usage();

} // namespace usmc::tools
