// SPDX-License-Identifier: MIT
// usmc: look at and steer usmc from the outside.
//   usmc stats        counters summed over live processes (like `smcd stats`),
//                     per process (-p, -n) and per interval (like `vma_stats`)
//   usmc ss           sockets with their mode and fallback reason (like `smcss`);
//                     -d buffers and cursors, -D SMC-D GIDs and tokens
//   usmc linkgroup    link groups with peer processes (like `smcd linkgroup`)
//   usmc device       each process's SMC-D device (like `smcd device`)
//   usmc config check validate a usmc.toml and print the effective settings
//   usmc check        does SMC-D work here, or from ADDRESS PORT (like smc_chk)
//
// Exit codes: 0 done, 1 an error (the view could not be made, a file not
// valid), 2 the command line was not understood.
#include "config/config.hpp"
#include "config/knob.hpp"
#include "engine/base/statseg.hpp"
#include "tools/check.hpp"
#include "tools/smc_netlink.hpp"
#include "tools/views.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>
#include <variant>

using namespace usmc;

namespace {

constexpr int kExitUsage = 2;

int cmd_config_check(const std::string& file) {
    auto loaded = file.empty() ? config::load_default_config() : config::load_config_file(file);
    if (auto* err = std::get_if<config::LoadError>(&loaded)) {
        fmt::print(stderr, "usmc: {}\n", err->message);
        for (const auto& more : err->more)
            fmt::print(stderr, "usmc: {}\n", more);
        return 1;
    }
    fmt::print("{}", config::describe(std::get<config::Config>(loaded)));
    return 0;
}

// usmc limit-hs: usmc's knob (limit_smc_hs in the configuration file, which
// running programs re-read) and, where the kernel has SMC, the kernel's.
int cmd_limit_hs(const std::string& action, std::string file) {
    if (file.empty()) file = config::default_config_path();
    if (file.empty()) file = config::system_config_path();
    int rc = 0;
    if (action != "show") {
        bool on = action == "enable";
        std::string err = config::write_limit_smc_hs(file, on);
        if (!err.empty()) {
            fmt::print(stderr, "usmc: {}\n", err);
            return 1;
        }
        auto k = tools::kernel_hs_limitation_set(on);
        if (!k.available)
            fmt::print("kernel: no SMC generic netlink family ({}): the kernel's SMC is not "
                       "loaded here; only usmc's knob was changed\n",
                       "SMC_GEN_NETLINK");
        else if (!k.error.empty()) {
            fmt::print(stderr, "usmc: kernel handshake limitation: {}\n", k.error);
            rc = 1;
        }
    }
    auto loaded = config::load_config_file(file);
    if (auto* err = std::get_if<config::LoadError>(&loaded)) {
        if (action == "show" && access(file.c_str(), F_OK) != 0)
            fmt::print("usmc: limit_smc_hs = false (no {}; built-in default)\n", file);
        else {
            fmt::print(stderr, "usmc: {}\n", err->message);
            return 1;
        }
    } else {
        fmt::print("usmc: limit_smc_hs = {} ({})\n", std::get<config::Config>(loaded).limit_smc_hs,
                   file);
    }
    auto k = tools::kernel_hs_limitation_show();
    if (!k.available)
        fmt::print("kernel: handshake limitation not available (no SMC_GEN_NETLINK family)\n");
    else if (k.enabled)
        fmt::print("kernel: handshake limitation {}\n", *k.enabled ? "enabled" : "disabled");
    else
        fmt::print("kernel: handshake limitation unknown ({})\n", k.error);
    return rc;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"usmc: inspect and control the usmc SMC runtime", "usmc"};
    app.require_subcommand(1);
    app.set_version_flag("-v,--version", "usmc " USMC_VERSION);
    std::string dir = statseg::stats_dir();
    app.add_option("--stats-dir", dir,
                   "where processes publish their stats (default $USMC_STATS_DIR or /dev/shm)");

    auto* stats = app.add_subcommand(
        "stats", "connection, fallback and SMC-D RX/TX counters of usmc processes");
    tools::StatsOptions st;
    stats->add_flag("-j,--json", st.json, "print JSON (one document per interval with --interval)");
    stats->add_flag("--live", st.live_only, "live processes only (default: exited ones too)");
    stats->add_option("-p,--pid", st.sel.pids, "only this process (repeatable; live ones)")
        ->allow_extra_args(false);
    stats
        ->add_option("-n,--name", st.sel.names,
                     "only processes of this program name, as `usmc ss` shows it (repeatable)")
        ->allow_extra_args(false);
    auto* interval = stats
                         ->add_option("-i,--interval", st.interval,
                                      "print what changed every SECONDS (Ctrl-C ends it)")
                         ->check(CLI::PositiveNumber);
    stats->add_option("-c,--count", st.count, "with --interval: this many intervals, then exit")
        ->check(CLI::Range(1u, 1u << 30))
        ->needs(interval);
    auto* reset = stats->add_subcommand(
        "reset", "zero the counters of live processes and forget those of exited ones");

    auto* ss = app.add_subcommand("ss", "list sockets of usmc processes (connections by default)");
    ss->footer(
        "-d adds, per SMC-D connection: Shutd (R: the peer ended its sending, W: we ended ours), "
        "Token (our DMB's), Rcvbuf (our DMB's ring: the peer writes into it), Peerbuf (the "
        "peer's DMB's ring: we write into it; usmc has no send buffer, so there is no Sndbuf), "
        "and the cursors wrap:count with the flags (producer:connection) beside the consumer "
        "cursor, as published in the two DMBs' control lines (consumer cursors as last "
        "announced to the writer). Our DMB's are read through /proc/<pid>/fd, the peer's "
        "through the peer process's: '-' where that may not be read (another user's process) "
        "or has changed. -D shows SMC-D connections only, with both GIDs and both DMB tokens. "
        "A connection reached only through a dup()ed descriptor shows its details under the "
        "descriptor it was made on.");
    tools::SsOptions ss_opt;
    ss->add_flag("-a,--all", ss_opt.all, "connections and listeners");
    ss->add_flag("-l,--listening", ss_opt.listening, "listeners only");
    ss->add_flag("-d,--details", ss_opt.details,
                 "SMC-D buffer sizes, cursors and shutdown flags (like smcss -d)");
    ss->add_flag("-D,--smcd", ss_opt.smcd,
                 "SMC-D connections only, with GIDs and DMB tokens (like smcss -D)");
    ss->add_flag("-W,--wide", ss_opt.wide,
                 "columns as wide as their content: addresses and names not cut (like smcss -W)");
    ss->add_flag("-j,--json", ss_opt.json, "print JSON (an object with the sockets in an array)");

    auto* lgr = app.add_subcommand(
        "linkgroup", "SMC-D link groups: each process's peer processes (like smcd linkgroup)");
    lgr->alias("lgr");
    bool lgr_json = false;
    lgr->add_flag("-j,--json", lgr_json, "print JSON");

    auto* device = app.add_subcommand(
        "device", "each process's SMC-D device: GID, segments, DMB memory and its cap");
    bool device_json = false;
    device->add_flag("-j,--json", device_json, "print JSON");

    auto* cfg = app.add_subcommand("config", "configuration");
    cfg->require_subcommand(1);
    auto* check =
        cfg->add_subcommand("check", "validate a usmc.toml and print the effective settings");
    std::string file;
    check->add_option("FILE", file,
                      "file to check (default: $USMC_CONFIG or " USMC_SYSTEM_CONFIG ")");

    auto* limit = app.add_subcommand(
        "limit-hs",
        "the global SMC handshake-limitation knob (limit_smc_hs): enable, disable, show");
    std::string action = "show", knob_file;
    limit->add_option("ACTION", action, "enable | disable | show (default)")
        ->check(CLI::IsMember({"enable", "disable", "show"}));
    limit->add_option("-c,--config", knob_file,
                      "configuration file (default: $USMC_CONFIG, else " USMC_SYSTEM_CONFIG ")");

    auto check_cmd = tools::check::add_command(app);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help and --version are "errors" of exit code 0 to CLI11; the rest
        // are usage errors, whatever number CLI11 gives them.
        int rc = app.exit(e);
        return rc == 0 ? 0 : kExitUsage;
    }
    if (int rc = 0; tools::check::run_command(*check_cmd, dir, &rc)) return rc;
    if (limit->parsed()) return cmd_limit_hs(action, knob_file);
    if (reset->parsed()) return tools::cmd_stats_reset(dir);
    if (stats->parsed()) return tools::cmd_stats(dir, st);
    if (ss->parsed()) return tools::cmd_ss(dir, ss_opt);
    if (lgr->parsed()) return tools::cmd_linkgroup(dir, lgr_json);
    if (device->parsed()) return tools::cmd_device(dir, device_json);
    if (check->parsed()) return cmd_config_check(file);
    return 1;
}
