// SPDX-License-Identifier: MIT
#include "tools/check.hpp"

#include <CLI/CLI.hpp>

namespace usmc::tools::check {

std::unique_ptr<Command> add_command(CLI::App& app) {
    auto cmd = std::make_unique<Command>();
    Options& o = cmd->opt;
    cmd->check = app.add_subcommand(
        "check", "does SMC-D work here (no argument), or what would a wrapped client get from "
                 "ADDRESS PORT, and why");
    cmd->check->add_option("TARGET", o.target, "ADDRESS PORT, or ADDRESS:PORT")->expected(0, 2);
    cmd->check->add_flag("-j,--json", o.json, "print JSON");
    cmd->check->add_flag("--no-connect", o.no_connect,
                         "ADDRESS PORT: predict only, make no connection");
    cmd->check->add_option("--program", o.program,
                           "ADDRESS PORT: the client program policy rules are matched against");
    cmd->check->add_option("--kib", o.kib, "KiB the test pair moves each way (default 256)")
        ->check(CLI::Range(1u, 65536u));
    cmd->check
        ->add_option("--timeout", o.timeout_s, "seconds the whole check may take (default 20)")
        ->check(CLI::Range(1u, 600u));
    cmd->check->footer(
        "Without a target: tests what SMC-D needs on this host and runs a wrapped client and "
        "server of this binary (under usmc-run) that move data both ways. With ADDRESS PORT: "
        "reads the configuration's policy and the listener's registry entry as a wrapped "
        "client's connect() would, then makes one connection under usmc-run that sends nothing "
        "(--no-connect: none). Exit status 0 when SMC-D works, 1 when it does not.");
    // The pair's ends: usmc itself under usmc-run (check_peer.cpp).
    cmd->peer = app.add_subcommand("__check-peer", "");
    cmd->peer->group("");
    cmd->peer->add_option("ARGS", cmd->peer_args)->expected(0, 4);
    return cmd;
}

bool run_command(const Command& cmd, const std::string& stats_dir, int* rc) {
    if (cmd.peer->parsed()) {
        *rc = run_peer(cmd.peer_args);
        return true;
    }
    if (!cmd.check->parsed()) return false;
    *rc =
        cmd.opt.target.empty() ? run_host(cmd.opt, stats_dir) : run_destination(cmd.opt, stats_dir);
    return true;
}

} // namespace usmc::tools::check
