// SPDX-License-Identifier: MIT
#pragma once
// `usmc check`: whether SMC-D works on this host (a wrapped pair of this
// binary moves data, and what it needs is tested directly), or what a
// wrapped client here would get from a server at ADDRESS PORT; in the
// spirit of smc-tools' smc_chk. One line per check (ok / FAIL with the
// reason and what to do), then a verdict; exit 0 when SMC-D works, 1 when
// it does not.
#include <memory>
#include <string>
#include <vector>

// Only usmc.cpp and check.cpp parse the command line; the checks themselves
// need nothing of CLI11 (the heaviest header the tools include).
namespace CLI {
class App;
}

namespace usmc::tools::check {

struct Options {
    std::vector<std::string> target; // empty, {ADDRESS:PORT} or {ADDRESS, PORT}
    bool json = false;
    bool no_connect = false; // ADDRESS PORT: predict only
    std::string program;     // the client program the policy is asked for
    unsigned kib = 256;      // the pair's data, each way
    unsigned timeout_s = 20; // the whole run, at most
};

struct Command {
    CLI::App* check = nullptr;
    CLI::App* peer = nullptr; // hidden: the wrapped pair's ends
    Options opt;
    std::vector<std::string> peer_args;
};

// Registers `check` and its hidden helper on `app`.
std::unique_ptr<Command> add_command(CLI::App& app);
// Runs whichever of them was parsed: true (and *rc) if one was.
bool run_command(const Command& cmd, const std::string& stats_dir, int* rc);

// The parts (check_host.cpp, check_dest.cpp, check_peer.cpp).
int run_host(const Options& opt, const std::string& stats_dir);
int run_destination(const Options& opt, const std::string& stats_dir);
int run_peer(const std::vector<std::string>& args);

} // namespace usmc::tools::check
