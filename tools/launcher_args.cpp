#include "tools/launcher_args.hpp"

#include "config/config.hpp"

namespace usmc::tools {

namespace {

using Action = LauncherArgs::Action;

LauncherArgs fail(LauncherArgs a, std::string message) {
    a.action = Action::Error;
    a.error = std::move(message);
    return a;
}

// A long option: true when it was one of ours (`i` may move past its value).
bool long_option(LauncherArgs& a, std::string_view arg, int argc, const char* const* argv, int& i) {
    std::string_view name = arg.substr(2);
    std::string_view value;
    bool attached = false;
    if (auto eq = name.find('='); eq != std::string_view::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        attached = true;
    }
    struct Flag {
        std::string_view name;
        bool LauncherArgs::*field;
    };
    static constexpr Flag flags[] = {
        {"smcd", &LauncherArgs::smcd},
        {"smcr", &LauncherArgs::smcr},
        {"tcp", &LauncherArgs::tcp},
        {"limit-hs", &LauncherArgs::limit_hs},
        {"no-limit-hs", &LauncherArgs::no_limit_hs},
        {"verbose", &LauncherArgs::verbose},
    };
    for (const auto& f : flags)
        if (name == f.name) {
            if (attached) {
                a = fail(std::move(a), "Option --" + std::string(name) + " takes no argument");
                return true;
            }
            a.*f.field = true;
            return true;
        }
    if (name == "config") {
        if (!attached) {
            if (i + 1 >= argc) {
                a = fail(std::move(a), "Option --config requires an argument");
                return true;
            }
            value = argv[++i];
        }
        if (value.empty()) {
            a = fail(std::move(a), "Option --config requires an argument");
            return true;
        }
        a.config_file = std::string(value);
        return true;
    }
    if (name == "help" && !attached) {
        a.action = Action::Help;
        return true;
    }
    if (name == "version" && !attached) {
        a.action = Action::Version;
        return true;
    }
    return false;
}

} // namespace

bool valid_buffer_size(std::string_view text) {
    size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
        ++digits;
    if (digits == 0) return false;
    std::string_view rest = text.substr(digits);
    return rest.empty() || (rest.size() == 1 &&
                            (rest[0] == 'k' || rest[0] == 'K' || rest[0] == 'm' || rest[0] == 'M'));
}

LauncherArgs parse_launcher_args(int argc, const char* const* argv) {
    LauncherArgs a;
    int i = 1;
    for (; i < argc; ++i) {
        std::string_view arg(argv[i]);
        if (arg == "--") {
            ++i;
            break;
        }
        if (arg.size() < 2 || arg[0] != '-') break; // the first non-option: PROGRAM
        if (arg[1] == '-') {
            if (!long_option(a, arg, argc, argv, i))
                return fail(std::move(a), "Invalid option: " + std::string(arg));
            if (a.action != Action::Run) return a; // --help, --version, or an error
            continue;
        }
        // A cluster of short options, getopts "dhr:t:v": processed in order, so
        // -h and -v act (and errors stop) where they stand.
        for (size_t j = 1; j < arg.size(); ++j) {
            char c = arg[j];
            switch (c) {
            case 'd':
                a.debug = true;
                break;
            case 'h':
                a.action = Action::Help;
                return a;
            case 'v':
                a.action = Action::Version;
                return a;
            case 'r':
            case 't': {
                std::string value;
                if (j + 1 < arg.size()) {
                    value = std::string(arg.substr(j + 1));
                } else if (i + 1 < argc) {
                    value = argv[++i];
                } else {
                    return fail(std::move(a),
                                std::string("Option -") + c + " requires an argument");
                }
                if (!valid_buffer_size(value))
                    return fail(std::move(a), "Invalid buffer size specified: '" + value + "'");
                (c == 'r' ? a.rcvbuf : a.sndbuf) = std::move(value);
                j = arg.size(); // the rest of the cluster was the value
                break;
            }
            default:
                return fail(std::move(a), std::string("Invalid option: -") + c);
            }
        }
    }
    if (a.tcp && (a.smcd || a.smcr))
        return fail(std::move(a), "--tcp cannot be combined with --smcd or --smcr");
    if (a.limit_hs && a.no_limit_hs)
        return fail(std::move(a), "--limit-hs cannot be combined with --no-limit-hs");
    for (; i < argc; ++i)
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
           "   --verbose        say what usmc-run and usmc do on stderr\n"
           "   --help, --version\n"
           "SIZE is a number of bytes with an optional k/K or m/M suffix (x1024, x1048576);\n"
           "usmc takes 16k..1M and clamps others to that range. Options end at COMMAND or\n"
           "after \"--\". Without --smcd/--smcr/--tcp the configuration decides; they narrow\n"
           "what it allows, they never widen a rule that says tcp.\n";
}

} // namespace usmc::tools
