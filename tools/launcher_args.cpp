// SPDX-License-Identifier: MIT
#include "tools/launcher_args.hpp"

#include "config/config.hpp"
#include "config/size.hpp"

#include <getopt.h>

namespace usmc::tools {

namespace {

using Action = LauncherArgs::Action;

LauncherArgs fail(LauncherArgs a, std::string message) {
    a.action = Action::Error;
    a.error = std::move(message);
    return a;
}

// What getopt_long returns for the long options: above every character.
enum LongOption : int {
    kSmcd = 256,
    kSmcr,
    kTcp,
    kLimitHs,
    kNoLimitHs,
    kConfig,
    kIgnoreConfigErrors,
    kVerbose,
    kHelp,
    kVersion,
};

constexpr option kLongOptions[] = {
    {"smcd", no_argument, nullptr, kSmcd},
    {"smcr", no_argument, nullptr, kSmcr},
    {"tcp", no_argument, nullptr, kTcp},
    {"limit-hs", no_argument, nullptr, kLimitHs},
    {"no-limit-hs", no_argument, nullptr, kNoLimitHs},
    {"config", required_argument, nullptr, kConfig},
    {"ignore-config-errors", no_argument, nullptr, kIgnoreConfigErrors},
    {"verbose", no_argument, nullptr, kVerbose},
    {"help", no_argument, nullptr, kHelp},
    {"version", no_argument, nullptr, kVersion},
    {nullptr, 0, nullptr, 0},
};

std::string long_name(int code) {
    for (const option& o : kLongOptions)
        if (o.name && o.val == code) return o.name;
    return "?";
}

// '+': options end at the first non-option, as getopts (and POSIXLY_CORRECT)
// has it; ':' (after it): a missing value is told apart from an unknown option.
constexpr const char* kShortOptions = "+:dhr:t:v";

} // namespace

bool valid_buffer_size(std::string_view text) {
    // Well formed is enough: a size beyond the range is clamped where it is
    // used (runtime::parse_env_size), as smc_run leaves it to the kernel.
    bool too_large = false;
    return config::parse_size(text, &too_large) || too_large;
}

LauncherArgs parse_launcher_args(int argc, const char* const* argv) {
    LauncherArgs a;
    // getopt_long keeps its state in globals: optind 0 starts afresh (glibc),
    // opterr 0 keeps its own messages to itself.
    optind = 0;
    opterr = 0;
    // With '+' getopt_long permutes nothing: argv is only read.
    auto* words = const_cast<char* const*>(argv);
    for (int c; (c = getopt_long(argc, words, kShortOptions, kLongOptions, nullptr)) != -1;) {
        switch (c) {
        case 'd':
            a.debug = true;
            break;
        case 'h':
        case kHelp:
            a.action = Action::Help; // acts where it stands: what follows is not looked at
            return a;
        case 'v':
        case kVersion:
            a.action = Action::Version;
            return a;
        case 'r':
        case 't':
            if (!valid_buffer_size(optarg))
                return fail(std::move(a),
                            "Invalid buffer size specified: '" + std::string(optarg) + "'");
            (c == 'r' ? a.rcvbuf : a.sndbuf) = optarg;
            break;
        case kSmcd:
            a.smcd = true;
            break;
        case kSmcr:
            a.smcr = true;
            break;
        case kTcp:
            a.tcp = true;
            break;
        case kLimitHs:
            a.limit_hs = true;
            break;
        case kNoLimitHs:
            a.no_limit_hs = true;
            break;
        case kVerbose:
            a.verbose = true;
            break;
        case kIgnoreConfigErrors:
            a.ignore_config_errors = true;
            break;
        case kConfig:
            if (!*optarg) return fail(std::move(a), "Option --config requires an argument");
            a.config_file = optarg;
            break;
        case ':': // a value missing at the end of the line
            if (optopt < kSmcd)
                return fail(std::move(a),
                            std::string("Option -") + char(optopt) + " requires an argument");
            return fail(std::move(a), "Option --" + long_name(optopt) + " requires an argument");
        default: // '?': an unknown option, or a value given to one that takes none
            if (optopt >= kSmcd)
                return fail(std::move(a), "Option --" + long_name(optopt) + " takes no argument");
            if (optopt) return fail(std::move(a), std::string("Invalid option: -") + char(optopt));
            // An unknown or ambiguous long option: getopt_long has passed it.
            return fail(std::move(a), "Invalid option: " + std::string(argv[optind - 1]));
        }
    }
    if (a.tcp && (a.smcd || a.smcr))
        return fail(std::move(a), "--tcp cannot be combined with --smcd or --smcr");
    if (a.limit_hs && a.no_limit_hs)
        return fail(std::move(a), "--limit-hs cannot be combined with --no-limit-hs");
    for (int i = optind; i < argc; ++i)
        a.command.emplace_back(argv[i]);
    if (a.command.empty()) return fail(std::move(a), "Missing command parameter");
    return a;
}

std::string launcher_usage() {
    return "Usage: usmc-run [ OPTIONS ] COMMAND\n"
           "Run COMMAND using SMC for TCP sockets (usmc: SMC-D between processes of this\n"
           "host, plain TCP otherwise)\n"
           "   -d         enable debug mode\n"
           "   -h         display this message\n"
           "   -r <SIZE>  request receive buffer size in Bytes\n"
           "   -t <SIZE>  request transmit buffer size in Bytes\n"
           "   -v         display version info\n"
           "usmc's own options:\n"
           "   --smcd           allow SMC-D (shared memory, same host)\n"
           "   --smcr           allow SMC-R (RDMA; not implemented: such sockets use TCP)\n"
           "   --tcp            plain TCP only: intercept, count, change nothing\n"
           "   --limit-hs       SMC_LIMIT_HS on for new sockets (overrides limit_smc_hs)\n"
           "   --no-limit-hs    SMC_LIMIT_HS off for new sockets\n"
           "   --config FILE    usmc.toml to use (default: $USMC_CONFIG, " USMC_SYSTEM_CONFIG ")\n"
           "   --ignore-config-errors\n"
           "                    start COMMAND even if the configuration has errors (every\n"
           "                    socket then runs as plain TCP); without it usmc-run lists\n"
           "                    the errors and exits 1\n"
           "   --verbose        say what usmc-run and usmc do on stderr\n"
           "   --help, --version\n"
           "SIZE is a number of bytes with an optional unit, in any case: k, KiB (x1024),\n"
           "m, MiB (x1048576), g, GiB; usmc takes 16k..1M and clamps others to that range.\n"
           "Options end at COMMAND or after \"--\". Without --smcd/--smcr/--tcp the\n"
           "configuration decides; they narrow what it allows, they never widen a rule\n"
           "that says tcp.\n";
}

} // namespace usmc::tools
