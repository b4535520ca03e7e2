// usmc: look at and steer usmc from the outside.
//   usmc stats        counters summed over live processes (like `smcd stats`)
//   usmc ss           sockets with their mode and fallback reason (like `smcss`);
//                     -d buffers and cursors, -D SMC-D GIDs and tokens
//   usmc config check validate a usmc.toml and print the effective settings
//   usmc check        does SMC-D work here, or from ADDRESS PORT (like smc_chk)
#include "config/config.hpp"
#include "config/knob.hpp"
#include "engine/base/counters.hpp"
#include "engine/base/fallback.hpp"
#include "engine/base/fdtable.hpp"
#include "engine/base/statseg.hpp"
#include "tools/check.hpp"
#include "tools/observe.hpp"
#include "tools/peer_reasons.hpp"
#include "tools/procnet.hpp"
#include "tools/smc_netlink.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <variant>

using namespace usmc;

namespace {

struct Totals {
    uint64_t counters[counters::kCount] = {};
    uint64_t fallbacks[fallback::kCount] = {};
    uint64_t traffic[2][counters::kTrafficCount] = {};
    size_t processes = 0; // live ones
};

Totals sum(const std::vector<statseg::View>& views, bool live_only) {
    Totals t;
    for (const auto& v : views) {
        if (live_only && !v.alive) continue;
        if (v.alive) ++t.processes;
        // A gauge is what a live process holds now: a dead one's (not yet
        // retired: another user's) holds nothing any more.
        for (unsigned i = 0; i < counters::kCount; ++i)
            if (v.alive || !counters::is_gauge(counters::Id(i)))
                t.counters[i] += v.header->counters[i].load(std::memory_order_relaxed);
        for (unsigned i = 0; i < fallback::kCount; ++i)
            t.fallbacks[i] += v.header->fallbacks[i].load(std::memory_order_relaxed);
        for (unsigned d = 0; d < 2; ++d)
            for (unsigned i = 0; i < counters::kTrafficCount; ++i)
                t.traffic[d][i] += v.header->traffic[d][i].load(std::memory_order_relaxed);
    }
    return t;
}

// One direction of `usmc stats` (smcd stats's RX and TX sections).
struct DirStats {
    uint64_t bytes = 0, with_data = 0, no_data = 0, buf_full = 0, buf_full_peer = 0,
             too_small_peer = 0, reuse = 0, downgrade = 0;
    uint64_t reqs[counters::kBuckets] = {}, bufs[counters::kBuckets] = {};
    uint64_t requests() const { return with_data + no_data; }
};

DirStats dir_stats(const Totals& t, counters::Dir dir) {
    using namespace counters;
    const uint64_t* tr = t.traffic[dir];
    DirStats d;
    d.bytes = t.counters[dir == kRx ? smcd_bytes_rx : smcd_bytes_tx];
    for (unsigned b = 0; b < kBuckets; ++b) {
        d.reqs[b] = tr[kReqs + b];
        d.bufs[b] = tr[kBufs + b];
        d.with_data += d.reqs[b];
    }
    d.no_data = tr[kNoData];
    d.buf_full = tr[kBufFull];
    d.buf_full_peer = tr[kBufFullPeer];
    d.too_small_peer = tr[kTooSmallPeer];
    // RX: our DMBs reused; TX: the peer's DMBs found mapped already.
    d.reuse = t.counters[dir == kRx ? dmb_reused : peer_maps_reused];
    // RX: our DMBs made smaller than configured; TX has no buffer to shrink.
    d.downgrade = dir == kRx ? t.counters[dmb_downgraded] : 0;
    return d;
}

std::string dir_json(const DirStats& d, counters::Dir dir) {
    using namespace counters;
    std::string s = fmt::format("{{\"bytes\":{},\"requests\":{},\"requests_with_data\":{},"
                                "\"requests_no_data\":{}",
                                d.bytes, d.requests(), d.with_data, d.no_data);
    if (dir == kRx)
        s += fmt::format(",\"buffer_full\":{}", d.buf_full);
    else
        s += fmt::format(",\"buffer_full_remote\":{},\"buffer_too_small_remote\":{}",
                         d.buf_full_peer, d.too_small_peer);
    s += fmt::format(",\"buffer_reuse\":{},\"buffer_downgrade\":{}", d.reuse, d.downgrade);
    for (auto [key, arr] : {std::pair{"reqs_by_size", d.reqs}, std::pair{"bufs_by_size", d.bufs}}) {
        s += fmt::format(",\"{}\":{{", key);
        for (unsigned b = 0; b < kBuckets; ++b)
            s += fmt::format("{}\"{}\":{}", b ? "," : "", bucket_name(b), arr[b]);
        s += "}";
    }
    return s + "}";
}

double percent(uint64_t part, uint64_t whole) {
    return whole ? 100.0 * double(part) / double(whole) : 0.0;
}

void print_dir(const DirStats& d, counters::Dir dir) {
    using namespace counters;
    fmt::print("\n{} Stats\n", dir == kRx ? "RX" : "TX");
    fmt::print("  {:<34}{:>12}\n", "Data transmitted (Bytes)", d.bytes);
    fmt::print("  {:<34}{:>12}\n", "Total requests", d.requests());
    fmt::print("    {:<32}{:>12}\n", "with data", d.with_data);
    fmt::print("    {:<32}{:>12}\n", "without (EAGAIN, EOF, errors)", d.no_data);
    if (dir == kRx) {
        fmt::print("  {:<34}{:>12} ({:.2f}%)\n", "Buffer full", d.buf_full,
                   percent(d.buf_full, d.requests()));
    } else {
        fmt::print("  {:<34}{:>12}  (no send buffer: the peer's DMB is it)\n", "Buffer full",
                   "n/a");
        fmt::print("  {:<34}{:>12} ({:.2f}%)\n", "Buffer full (remote)", d.buf_full_peer,
                   percent(d.buf_full_peer, d.requests()));
        fmt::print("  {:<34}{:>12}  (no send buffer)\n", "Buffer too small", "n/a");
        fmt::print("  {:<34}{:>12} ({:.2f}%)\n", "Buffer too small (remote)", d.too_small_peer,
                   percent(d.too_small_peer, d.requests()));
    }
    if (dir == kRx)
        fmt::print("  {:<34}{:>12}  (DMBs below the configured size: a crowd shares the cap)\n",
                   "Buffer downgrades", d.downgrade);
    else
        fmt::print("  {:<34}{:>12}  (no send buffer)\n", "Buffer downgrades", "n/a");
    fmt::print("  {:<34}{:>12}  ({})\n", "Buffer reuses", d.reuse,
               dir == kRx ? "our DMBs reused" : "peer DMBs found mapped already");
    fmt::print("       ");
    for (unsigned b = 0; b < kBuckets; ++b)
        fmt::print(" {:>8}", bucket_name(b));
    fmt::print("\n  Bufs ");
    for (unsigned b = 0; b < kBuckets; ++b)
        fmt::print(" {:>8}", d.bufs[b]);
    fmt::print("\n  Reqs ");
    for (unsigned b = 0; b < kBuckets; ++b)
        fmt::print(" {:>8}", d.reqs[b]);
    fmt::print("\n");
}

int cmd_stats(const std::string& dir, bool json, bool live_only) {
    auto views = statseg::open_all(dir, true);
    Totals t = sum(views, live_only);
    using namespace counters;
    // The gauges of each live process: the sums above do not say which
    // process holds what (a forking server's parent and its children).
    std::string gauges;
    for (const auto& v : views) {
        if (!v.alive) continue;
        gauges += fmt::format(
            "{}{{\"pid\":{},\"program\":{}", gauges.empty() ? "" : ",", v.header->pid,
            tools::json_string(std::string_view(
                v.header->program, strnlen(v.header->program, sizeof v.header->program))));
        for (unsigned i = 0; i < kCount; ++i)
            if (is_gauge(static_cast<Id>(i)))
                gauges += fmt::format(",\"{}\":{}", name_of(static_cast<Id>(i)),
                                      v.header->counters[i].load(std::memory_order_relaxed));
        gauges += "}";
    }
    statseg::close_all(views);
    uint64_t smc = t.counters[conn_smcd] + t.counters[conn_smcr];
    uint64_t total = smc + t.counters[conn_tcp] + t.counters[handshake_errors];
    if (json) {
        fmt::print("{{\"processes\":{},\"total_connections\":{}", t.processes, total);
        for (unsigned i = 0; i < kCount; ++i)
            fmt::print(",\"{}\":{}", name_of(static_cast<Id>(i)), t.counters[i]);
        fmt::print(",\"gauges_by_process\":[{}]", gauges);
        fmt::print(",\"fallback_reasons\":{{");
        bool first = true;
        for (unsigned i = 0; i < fallback::kCount; ++i) {
            if (!t.fallbacks[i]) continue;
            uint32_t code = fallback::code_at(static_cast<fallback::Index>(i));
            fmt::print("{}\"{}\":{}", first ? "" : ",", fallback::name_of(code), t.fallbacks[i]);
            first = false;
        }
        fmt::print("}},\"rx\":{},\"tx\":{}}}\n", dir_json(dir_stats(t, kRx), kRx),
                   dir_json(dir_stats(t, kTx), kTx));
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
    print_dir(dir_stats(t, kRx), kRx);
    print_dir(dir_stats(t, kTx), kTx);
    fmt::print("\nCounters\n");
    for (unsigned i = 0; i < kCount; ++i)
        fmt::print("  {:<24}{:>12}  {}\n", name_of(static_cast<Id>(i)), t.counters[i],
                   description_of(static_cast<Id>(i)));
    return 0;
}

struct SsOptions {
    bool all = false, listening = false;
    bool details = false; // -d: buffers, cursors, flags
    bool smcd = false;    // -D: GIDs and tokens, SMC-D connections only
    bool json = false;
};

// The details of one SMC-D connection: its record (by the descriptor it was
// made on), and copies of its two control lines (ours, and the peer's from
// the peer process's record). Unknown parts stay unknown.
struct Observed {
    std::optional<tools::Located> mine, peer;
    tools::Detail detail;
};

Observed observe(pid_t pid, int fd,
                 const std::map<std::pair<pid_t, int>, statseg::ConnRecord>& by_fd,
                 const std::vector<tools::Located>& all) {
    Observed o;
    auto it = by_fd.find({pid, fd});
    if (it == by_fd.end()) return o;
    o.mine = tools::Located{pid, it->second};
    o.peer = tools::find_peer(it->second, all);
    auto own = tools::read_control(pid, it->second);
    std::optional<tools::ControlWords> peers;
    if (o.peer) peers = tools::read_control(o.peer->pid, o.peer->rec);
    o.detail = tools::detail_of(it->second, own, peers);
    return o;
}

std::string cursor_json(const std::optional<core::Cursor>& c) {
    return c ? fmt::format("{{\"wrap\":{},\"count\":{}}}", c->wrap, c->count) : "null";
}
std::string byte_json(const std::optional<uint8_t>& b) {
    return b ? std::to_string(*b) : "null";
}

std::string details_json(const Observed& o) {
    if (!o.mine) return "null";
    const auto& d = o.detail;
    return fmt::format("{{\"shutdown\":{},\"rcvbuf\":{},\"peerbuf\":{},\"sndbuf\":null,"
                       "\"rx_prod\":{},\"rx_cons\":{},\"rx_prod_flags\":{},\"rx_conn_flags\":{},"
                       "\"tx_prod\":{},\"tx_cons\":{},\"tx_prod_flags\":{},\"tx_conn_flags\":{},"
                       "\"rx_consistent\":{},\"tx_consistent\":{}}}",
                       tools::json_string(tools::shutdown_text(d)), d.rcvbuf, d.peerbuf,
                       cursor_json(d.rx_prod), cursor_json(d.rx_cons), byte_json(d.rx_pflags),
                       byte_json(d.rx_flags), cursor_json(d.tx_prod), cursor_json(d.tx_cons),
                       byte_json(d.tx_pflags), byte_json(d.tx_flags), d.rx_ok, d.tx_ok);
}

std::string smcd_json(const Observed& o) {
    if (!o.mine) return "null";
    const auto& r = o.mine->rec;
    return fmt::format("{{\"gid\":\"{}\",\"token\":\"{}\",\"peer_gid\":\"{}\","
                       "\"peer_token\":\"{}\",\"dmb_size\":{},\"peer_dmb_size\":{},"
                       "\"peer_pid\":{},\"peer_fd\":{}}}",
                       tools::hex64(r.gid), tools::hex64(r.token), tools::hex64(r.peer_gid),
                       tools::hex64(r.peer_token), r.dmb_size, r.peer_dmb_size,
                       o.peer ? std::to_string(o.peer->pid) : "null",
                       o.peer ? std::to_string(o.peer->rec.fd) : "null");
}

// The columns after the fallback reason pad to their width; the line ends
// without trailing blanks.
void print_trimmed(std::string line) {
    while (!line.empty() && line.back() == ' ')
        line.pop_back();
    fmt::print("{}\n", line);
}

int cmd_ss(const std::string& dir, const SsOptions& opt) {
    auto views = statseg::open_all(dir, true);
    auto client_reasons = tools::ClientReasons::collect(views);
    bool want_records = opt.details || opt.smcd;
    std::map<std::pair<pid_t, int>, statseg::ConnRecord> by_fd;
    std::vector<tools::Located> all;
    if (want_records) {
        for (const auto& v : views) {
            if (!v.alive) continue;
            for (const auto& r : statseg::live_records(v)) {
                if (!tools::record_plausible(r)) continue;
                by_fd.emplace(std::pair{v.header->pid, r.fd}, r);
                all.push_back({v.header->pid, r});
            }
        }
    }
    if (!opt.json) {
        fmt::print("{:<8} {:<16} {:>5} {:<12} {:<24} {:<24} {:<7} {:<5} ", "PID", "Program", "Fd",
                   "State", "Local Address", "Peer Address", "Role", "Mode");
        if (!want_records)
            fmt::print("Fallback\n");
        else {
            std::string line;
            line += fmt::format("{:<24}", "Fallback");
            if (opt.details)
                line += fmt::format(
                    " {:<5} {:<16} {:>8} {:>8} {:<13} {:<13} {:<7} {:<13} {:<13} {:<7}", "Shutd",
                    "Token", "Rcvbuf", "Peerbuf", "rxprod-Cursor", "rxcons-Cursor", "rxFlags",
                    "txprod-Cursor", "txcons-Cursor", "txFlags");
            if (opt.smcd)
                line += fmt::format(" {:<16} {:<16} {:<16} {:<16}", "GID", "Token", "Peer-GID",
                                    "Peer-Token");
            print_trimmed(line);
        }
    } else {
        fmt::print("[");
    }
    bool first = true;
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
            if (!opt.all && opt.listening != is_listener) continue;
            if (opt.smcd && s.mode != SockMode::SmcD) continue; // as smcss -D
            uint64_t inode = tools::socket_inode(pid, static_cast<int>(fd));
            auto it = inode ? table.find(inode) : table.end();
            tools::TcpEntry e = it != table.end()
                                    ? it->second
                                    : tools::TcpEntry{"-", "-", inode ? "UNCONN" : "gone"};
            std::string reason =
                s.reason ? fmt::format("{} 0x{:08x}", fallback::name_of(s.reason), s.reason) : "-";
            uint32_t client_reason = client_reasons.for_server(s, e);
            reason = tools::with_client_reason(reason, client_reason);
            Observed o;
            if (want_records && s.mode == SockMode::SmcD)
                o = observe(pid, static_cast<int>(fd), by_fd, all);
            if (opt.json) {
                std::string fb =
                    s.reason
                        ? fmt::format("{{\"name\":{},\"code\":{}}}",
                                      tools::json_string(fallback::name_of(s.reason)), s.reason)
                        : "null";
                fmt::print("{}{{\"pid\":{},\"program\":{},\"fd\":{},\"state\":{},\"local\":{},"
                           "\"peer\":{},\"role\":{},\"mode\":{},\"fallback\":{},\"limit_hs\":{}",
                           first ? "" : ",", pid, tools::json_string(v.header->program), fd,
                           tools::json_string(e.state), tools::json_string(e.local),
                           tools::json_string(e.peer), tools::json_string(role_name(s.role)),
                           tools::json_string(mode_name(s.mode)), fb, s.has(kFlagLimitHs));
                fmt::print(",\"client_fallback\":{}", tools::reason_json(client_reason));
                if (opt.details) fmt::print(",\"details\":{}", details_json(o));
                if (opt.smcd) fmt::print(",\"smcd\":{}", smcd_json(o));
                fmt::print("}}");
                first = false;
                continue;
            }
            std::string tail = reason + (s.has(kFlagLimitHs) ? " limit_hs" : "");
            fmt::print("{:<8} {:<16.16} {:>5} {:<12} {:<24} {:<24} {:<7} {:<5} ", pid,
                       v.header->program, fd, e.state, e.local, e.peer, role_name(s.role),
                       mode_name(s.mode));
            if (!want_records) {
                fmt::print("{}\n", tail);
                continue;
            }
            std::string line;
            line += fmt::format("{:<24}", tail);
            if (s.mode == SockMode::SmcD && o.mine) {
                const auto& d = o.detail;
                if (opt.details)
                    line += fmt::format(
                        " {:<5} {:<16} {:08x} {:08x} {:<13} {:<13} {:<7} {:<13} {:<13} {:<7}",
                        tools::shutdown_text(d), tools::hex64(o.mine->rec.token), d.rcvbuf,
                        d.peerbuf, tools::cursor_text(d.rx_prod), tools::cursor_text(d.rx_cons),
                        tools::flags_text(d.rx_pflags, d.rx_flags), tools::cursor_text(d.tx_prod),
                        tools::cursor_text(d.tx_cons), tools::flags_text(d.tx_pflags, d.tx_flags));
                if (opt.smcd)
                    line += fmt::format(
                        " {:<16} {:<16} {:<16} {:<16}", tools::hex64(o.mine->rec.gid),
                        tools::hex64(o.mine->rec.token), tools::hex64(o.mine->rec.peer_gid),
                        tools::hex64(o.mine->rec.peer_token));
            } else if (s.mode == SockMode::SmcD) {
                line += fmt::format(" (no record: see usmc ss --help)");
            }
            print_trimmed(line);
        }
    }
    if (opt.json) fmt::print("]\n");
    statseg::close_all(views);
    return 0;
}

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
    std::string dir = statseg::stats_dir();
    app.add_option("--stats-dir", dir,
                   "where processes publish their stats (default $USMC_STATS_DIR or /dev/shm)");

    auto* stats = app.add_subcommand(
        "stats", "connection, fallback and SMC-D RX/TX counters of usmc processes");
    bool json = false, live_only = false;
    stats->add_flag("-j,--json", json, "print JSON");
    stats->add_flag("--live", live_only, "live processes only (default: exited ones too)");
    auto* reset = stats->add_subcommand("reset", "forget the counters of exited processes");

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
    SsOptions ss_opt;
    ss->add_flag("-a,--all", ss_opt.all, "connections and listeners");
    ss->add_flag("-l,--listening", ss_opt.listening, "listeners only");
    ss->add_flag("-d,--details", ss_opt.details,
                 "SMC-D buffer sizes, cursors and shutdown flags (like smcss -d)");
    ss->add_flag("-D,--smcd", ss_opt.smcd,
                 "SMC-D connections only, with GIDs and DMB tokens (like smcss -D)");
    ss->add_flag("-j,--json", ss_opt.json, "print JSON (an array of sockets)");

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

    CLI11_PARSE(app, argc, argv);
    if (int rc = 0; tools::check::run_command(*check_cmd, dir, &rc)) return rc;
    if (limit->parsed()) return cmd_limit_hs(action, knob_file);
    if (reset->parsed()) {
        fmt::print("removed {} retired-counter file(s) from {}\n", statseg::reset_retired(dir),
                   dir);
        return 0;
    }
    if (stats->parsed()) return cmd_stats(dir, json, live_only);
    if (ss->parsed()) return cmd_ss(dir, ss_opt);
    if (check->parsed()) return cmd_config_check(file);
    return 1;
}
