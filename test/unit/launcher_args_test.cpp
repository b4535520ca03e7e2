// SPDX-License-Identifier: MIT
#include "tools/launcher_args.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>

#include <initializer_list>
#include <string>
#include <vector>

using usmc::tools::LauncherArgs;
using usmc::tools::parse_launcher_args;
using Action = LauncherArgs::Action;

namespace {

LauncherArgs parse(std::initializer_list<const char*> words) {
    std::vector<const char*> argv{"usmc-run"};
    argv.insert(argv.end(), words);
    return parse_launcher_args(static_cast<int>(argv.size()), argv.data());
}

using Words = std::vector<std::string>;

} // namespace

TEST_CASE("launcher: smc_run's short options") {
    auto a = parse({"-d", "-r", "256k", "-t", "64K", "prog", "x"});
    CHECK(a.action == Action::Run);
    CHECK(a.debug);
    CHECK(a.rcvbuf == "256k");
    CHECK(a.sndbuf == "64K");
    CHECK(a.command == Words{"prog", "x"});

    a = parse({"prog"});
    CHECK(a.action == Action::Run);
    CHECK_FALSE(a.debug);
    CHECK(a.rcvbuf.empty());
    CHECK(a.sndbuf.empty());

    // Clusters and attached values, as getopts.
    a = parse({"-dr1M", "-t16384", "prog"});
    CHECK(a.action == Action::Run);
    CHECK(a.debug);
    CHECK(a.rcvbuf == "1M");
    CHECK(a.sndbuf == "16384");
    a = parse({"-dt", "2m", "prog"});
    CHECK(a.debug);
    CHECK(a.sndbuf == "2m");
    CHECK(a.command == Words{"prog"});
}

TEST_CASE("launcher: options end at the first non-option or after --") {
    auto a = parse({"-d", "prog", "-r", "1k", "--tcp"});
    CHECK(a.action == Action::Run);
    CHECK(a.rcvbuf.empty());
    CHECK_FALSE(a.tcp);
    CHECK(a.command == Words{"prog", "-r", "1k", "--tcp"});

    a = parse({"--", "-d"});
    CHECK(a.action == Action::Run);
    CHECK_FALSE(a.debug);
    CHECK(a.command == Words{"-d"});

    a = parse({"-d", "--", "--", "x"});
    CHECK(a.command == Words{"--", "x"});

    a = parse({"-", "x"}); // a lone "-" is no option
    CHECK(a.command == Words{"-", "x"});
}

TEST_CASE("launcher: help and version act where they stand") {
    CHECK(parse({"-h"}).action == Action::Help);
    CHECK(parse({"-v"}).action == Action::Version);
    CHECK(parse({"-dh", "prog"}).action == Action::Help);
    CHECK(parse({"--help"}).action == Action::Help);
    CHECK(parse({"--version"}).action == Action::Version);
    CHECK(parse({"-x", "-h"}).action == Action::Error); // getopts stops at -x
    CHECK(parse({"-h", "-x"}).action == Action::Help);
    CHECK(parse({"prog", "-h"}).action == Action::Run);
}

TEST_CASE("launcher: errors in smc_run's words") {
    auto a = parse({"-x", "prog"});
    CHECK(a.action == Action::Error);
    CHECK(a.error == "Invalid option: -x");
    a = parse({"-dq", "prog"});
    CHECK(a.error == "Invalid option: -q");
    // usmc's old short options are gone.
    CHECK(parse({"-c", "f.toml", "prog"}).error == "Invalid option: -c");

    a = parse({});
    CHECK(a.action == Action::Error);
    CHECK(a.error == "Missing command parameter");
    CHECK(parse({"-d", "--"}).error == "Missing command parameter");

    a = parse({"-r", "12x", "prog"});
    CHECK(a.action == Action::Error);
    CHECK(a.error == "Invalid buffer size specified: '12x'");
    CHECK(parse({"-t", "1.5M", "prog"}).error == "Invalid buffer size specified: '1.5M'");
    CHECK(parse({"-t64Ki", "prog"}).error == "Invalid buffer size specified: '64Ki'");
    CHECK(parse({"-r", "", "prog"}).error == "Invalid buffer size specified: ''");
    // getopts takes the next word as the value, whatever it looks like.
    CHECK(parse({"-r", "-d", "prog"}).error == "Invalid buffer size specified: '-d'");
    CHECK(parse({"-r"}).error == "Option -r requires an argument");
    CHECK(parse({"-dt"}).error == "Option -t requires an argument");
}

TEST_CASE("launcher: usmc's long options") {
    auto a = parse({"--smcd", "--limit-hs", "--verbose", "--config", "u.toml", "-d", "prog"});
    CHECK(a.action == Action::Run);
    CHECK(a.smcd);
    CHECK(a.limit_hs);
    CHECK(a.verbose);
    CHECK(a.debug);
    CHECK(a.config_file == "u.toml");
    CHECK(a.command == Words{"prog"});

    a = parse({"--config=/x/y.toml", "--smcr", "--no-limit-hs", "--tcp", "prog"});
    CHECK(a.action == Action::Error);
    CHECK(a.error == "--tcp cannot be combined with --smcd or --smcr");

    a = parse({"--config=/x/y.toml", "--smcd", "--smcr", "--no-limit-hs", "prog"});
    CHECK(a.action == Action::Run);
    CHECK(a.config_file == "/x/y.toml");
    CHECK((a.smcd && a.smcr && a.no_limit_hs));

    CHECK(parse({"--tcp", "prog"}).tcp);
    CHECK(parse({"--limit-hs", "--no-limit-hs", "prog"}).error ==
          "--limit-hs cannot be combined with --no-limit-hs");
    CHECK(parse({"--bogus", "prog"}).error == "Invalid option: --bogus");
    CHECK(parse({"--smcd=1", "prog"}).error == "Option --smcd takes no argument");
    CHECK(parse({"--config"}).error == "Option --config requires an argument");
    CHECK(parse({"--config=", "prog"}).error == "Option --config requires an argument");
    CHECK(parse({"--config", "-weird.toml", "prog"}).config_file == "-weird.toml");
}

TEST_CASE("launcher: sizes in the file's grammar, smc_run's among them") {
    using usmc::tools::valid_buffer_size;
    // smc_run's ^[0-9]+[kKmM]?$
    for (const char* ok : {"0", "16384", "64k", "64K", "1m", "1M", "007"})
        CHECK(valid_buffer_size(ok));
    // and the file's units, in any case; out of range is for the shim to clamp.
    for (const char* ok : {"64KiB", "64kib", "1MiB", "1mb", "1G", "1 k", "99999999999999999999"})
        CHECK(valid_buffer_size(ok));
    for (const char* bad : {"", "k", "1.5M", "-1", "1kk", "0x10", "1Ki", "lots"})
        CHECK_FALSE(valid_buffer_size(bad));
    auto a = parse({"-r", "64kib", "-t1MiB", "prog"});
    CHECK(a.action == Action::Run);
    CHECK(a.rcvbuf == "64kib");
    CHECK(a.sndbuf == "1MiB");
}

TEST_CASE("launcher: getopt_long's rules, smc_run's messages") {
    // Parsed again and again: getopt_long's state starts afresh each time.
    for (int round = 0; round < 3; ++round) {
        auto a = parse({"-dr", "64k", "--verbose", "-t", "-d", "prog"});
        CHECK(a.error == "Invalid buffer size specified: '-d'");
        a = parse({"-dv"});
        CHECK(a.action == Action::Version);
        CHECK(parse({"--smcd", "prog"}).smcd);
    }
    // A unique prefix of a long option is the option (getopt_long's rule);
    // an ambiguous one is no option.
    auto a = parse({"--conf", "u.toml", "--no-limit", "prog"});
    CHECK(a.config_file == "u.toml");
    CHECK(a.no_limit_hs);
    CHECK(parse({"--ver", "prog"}).error == "Invalid option: --ver");
    CHECK(parse({"--sm", "prog"}).error == "Invalid option: --sm");
    // Long options carry their own names in the messages.
    CHECK(parse({"--verbose=yes", "prog"}).error == "Option --verbose takes no argument");
    CHECK(parse({"--help=1"}).error == "Option --help takes no argument");
    CHECK(parse({"--bogus=1", "prog"}).error == "Invalid option: --bogus=1");
    // POSIXLY_CORRECT or not, options end at the command.
    setenv("POSIXLY_CORRECT", "1", 1);
    CHECK(parse({"prog", "-d"}).command == Words{"prog", "-d"});
    unsetenv("POSIXLY_CORRECT");
    CHECK(parse({"prog", "--smcd"}).command == Words{"prog", "--smcd"});
}

TEST_CASE("launcher: --ignore-config-errors") {
    CHECK_FALSE(parse({"prog"}).ignore_config_errors);
    auto a = parse({"--ignore-config-errors", "-d", "prog"});
    CHECK(a.action == Action::Run);
    CHECK(a.ignore_config_errors);
    CHECK(a.debug);
    CHECK(parse({"--ignore-config-errors=1", "prog"}).error ==
          "Option --ignore-config-errors takes no argument");
    CHECK(parse({"--ignore", "prog"}).ignore_config_errors);
}
