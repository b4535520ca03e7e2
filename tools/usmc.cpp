// usmc: look at and steer usmc from the outside.
//   usmc stats        counters summed over live processes (like `smcd stats`)
//   usmc ss           sockets with their mode and fallback reason (like `smcss`)
//   usmc config check validate a usmc.toml and print the effective settings
#include "config/config.hpp"
#include "config/knob.hpp"
#include "tools/smc_netlink.hpp"
#include "engine/counters.hpp"
#include "engine/fallback.hpp"
#include "engine/fdtable.hpp"
#include "engine/statseg.hpp"
#include "tools/procnet.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <variant>

using namespace usmc;

namespace {

struct Totals {
    uint64_t counters[counters::kCount] = {};
    uint64_t fallbacks[fallback::kCount] = {};
    size_t processes = 0; // live ones
};

Totals sum(const std::vector<statseg::View>& views, bool live_only) {
    Totals t;
    for (const auto& v : views) {
        if (live_only && !v.alive) continue;
        if (v.alive) ++t.processes;
        for (unsigned i = 0; i < counters::kCount; ++i)
            t.counters[i] += v.header->counters[i].load(std::memory_order_relaxed);
        for (unsigned i = 0; i < fallback::kCount; ++i)
            t.fallbacks[i] += v.header->fallbacks[i].load(std::memory_order_relaxed);
    }
    return t;
}

int cmd_stats(const std::string& dir, bool json, bool live_only) {
    auto views = statseg::open_all(dir, true);
    Totals t = sum(views, live_only);
    statseg::close_all(views);
    using namespace counters;
    uint64_t smc = t.counters[conn_smcd] + t.counters[conn_smcr];
    uint64_t total = smc + t.counters[conn_tcp] + t.counters[handshake_errors];
    if (json) {
        fmt::print("{{\"processes\":{},\"total_connections\":{}", t.processes, total);
        for (unsigned i = 0; i < kCount; ++i)
            fmt::print(",\"{}\":{}", name_of(static_cast<Id>(i)), t.counters[i]);
        fmt::print(",\"fallback_reasons\":{{");
        bool first = true;
        for (unsigned i = 0; i < fallback::kCount; ++i) {
            if (!t.fallbacks[i]) continue;
            uint32_t code = fallback::code_at(static_cast<fallback::Index>(i));
            fmt::print("{}\"{}\":{}", first ? "" : ",", fallback::name_of(code), t.fallbacks[i]);
            first = false;
        }
        fmt::print("}}}}\n");
        return 0;
    }
    fmt::print("usmc statistics: {} live process{}{} (segments in {})\n\n", t.processes,
               t.processes == 1 ? "" : "es",
               live_only ? "" : " and exited ones since the last reset", dir);
    fmt::print("Connections Summary\n");
    fmt::print("  {:<34}{:>12}\n", "Total connections handled", total);
    fmt::print("  {:<34}{:>12}\n", "SMC-D connections", t.counters[conn_smcd]);
    fmt::print("  {:<34}{:>12}\n", "SMC-R connections", t.counters[conn_smcr]);
    fmt::print("  {:<34}{:>12}\n", "TCP connections", t.counters[conn_tcp]);
    fmt::print("    {:<32}{:>12}\n", "client (connect)", t.counters[client_connects]);
    fmt::print("    {:<32}{:>12}\n", "server (accept)", t.counters[server_accepts]);
    fmt::print("  {:<34}{:>12}\n", "Handshake errors", t.counters[handshake_errors]);
    fmt::print("  {:<34}{:>12}\n", "TCP fallback (with a reason)", t.counters[fallbacks]);
    for (unsigned i = 0; i < fallback::kCount; ++i) {
        if (!t.fallbacks[i]) continue;
        uint32_t code = fallback::code_at(static_cast<fallback::Index>(i));
        fmt::print("    {:<12} 0x{:08x} {:>10}  {}\n", fallback::name_of(code), code,
                   t.fallbacks[i], fallback::description_of(code));
    }
    fmt::print("\nCounters\n");
    for (unsigned i = 0; i < kCount; ++i)
        fmt::print("  {:<24}{:>12}  {}\n", name_of(static_cast<Id>(i)), t.counters[i],
                   description_of(static_cast<Id>(i)));
    return 0;
}

int cmd_ss(const std::string& dir, bool all, bool listening) {
    auto views = statseg::open_all(dir, true);
    fmt::print("{:<8} {:<16} {:>5} {:<12} {:<24} {:<24} {:<7} {:<5} {}\n", "PID", "Program", "Fd",
               "State", "Local Address", "Peer Address", "Role", "Mode", "Fallback");
    for (const auto& v : views) {
        if (!v.alive) continue;
        pid_t pid = v.header->pid;
        auto table = tools::read_tcp_table(pid);
        uint32_t high = v.header->fd_high.load(std::memory_order_relaxed);
        if (high > v.header->fd_capacity) high = v.header->fd_capacity;
        for (uint32_t fd = 0; fd < high; ++fd) {
            SockInfo s = SockInfo::unpack(v.slots()[fd].load(std::memory_order_relaxed));
            if (!s.tracked()) continue;
            bool is_listener = s.role == SockRole::Listener;
            if (!all && listening != is_listener) continue;
            uint64_t inode = tools::socket_inode(pid, static_cast<int>(fd));
            auto it = inode ? table.find(inode) : table.end();
            tools::TcpEntry e = it != table.end()
                                    ? it->second
                                    : tools::TcpEntry{"-", "-", inode ? "UNCONN" : "gone"};
            std::string reason =
                s.reason ? fmt::format("{} 0x{:08x}", fallback::name_of(s.reason), s.reason) : "-";
            fmt::print("{:<8} {:<16.16} {:>5} {:<12} {:<24} {:<24} {:<7} {:<5} {}{}\n", pid,
                       v.header->program, fd, e.state, e.local, e.peer, role_name(s.role),
                       mode_name(s.mode), reason, s.has(kFlagLimitHs) ? " limit_hs" : "");
        }
    }
    statseg::close_all(views);
    return 0;
}

int cmd_config_check(const std::string& file) {
    auto loaded = file.empty() ? config::load_default_config() : config::load_config_file(file);
    if (auto* err = std::get_if<config::LoadError>(&loaded)) {
        fmt::print(stderr, "usmc: {}\n", err->message);
        return 1;
    }
    fmt::print("{}", config::describe(std::get<config::Config>(loaded)));
    return 0;
}

// usmc limit-hs: usmc's knob (limit_smc_hs in the configuration file, which
// running programs re-read) and, where the kernel has SMC, the kernel's.
int cmd_limit_hs(const std::string& action, std::string file) {
    if (file.empty()) file = config::default_config_path();
    if (file.empty()) file = "/etc/usmc/usmc.toml";
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
    std::string dir = statseg::stats_dir();
    app.add_option("--stats-dir", dir,
                   "where processes publish their stats (default $USMC_STATS_DIR or /dev/shm)");

    auto* stats = app.add_subcommand("stats", "connection and fallback counters of usmc processes");
    bool json = false, live_only = false;
    stats->add_flag("-j,--json", json, "print JSON");
    stats->add_flag("--live", live_only, "live processes only (default: exited ones too)");
    auto* reset = stats->add_subcommand("reset", "forget the counters of exited processes");

    auto* ss = app.add_subcommand("ss", "list sockets of usmc processes (connections by default)");
    bool all = false, listening = false;
    ss->add_flag("-a,--all", all, "connections and listeners");
    ss->add_flag("-l,--listening", listening, "listeners only");

    auto* cfg = app.add_subcommand("config", "configuration");
    cfg->require_subcommand(1);
    auto* check =
        cfg->add_subcommand("check", "validate a usmc.toml and print the effective settings");
    std::string file;
    check->add_option("FILE", file, "file to check (default: $USMC_CONFIG or /etc/usmc/usmc.toml)");

    auto* limit = app.add_subcommand(
        "limit-hs", "the global SMC handshake-limitation knob (limit_smc_hs): enable, disable, show");
    std::string action = "show", knob_file;
    limit->add_option("ACTION", action, "enable | disable | show (default)")
        ->check(CLI::IsMember({"enable", "disable", "show"}));
    limit->add_option("-c,--config", knob_file,
                      "configuration file (default: $USMC_CONFIG, else /etc/usmc/usmc.toml)");

    CLI11_PARSE(app, argc, argv);
    if (limit->parsed()) return cmd_limit_hs(action, knob_file);
    if (reset->parsed()) {
        fmt::print("removed {} retired-counter file(s) from {}\n", statseg::reset_retired(dir),
                   dir);
        return 0;
    }
    if (stats->parsed()) return cmd_stats(dir, json, live_only);
    if (ss->parsed()) return cmd_ss(dir, all, listening);
    if (check->parsed()) return cmd_config_check(file);
    return 1;
}
