// SPDX-License-Identifier: MIT
// `usmc check` without a target: what SMC-D needs here, tested directly,
// then a wrapped pair (this binary under usmc-run, check_peer.cpp) that
// moves data both ways; the pair's sockets say which transport they got
// and why (their stats segments), the kernel's TCP counters whether the
// data went around TCP.
#include "engine/base/fallback.hpp"
#include "tools/check.hpp"
#include "tools/check_probes.hpp"
#include "tools/check_report.hpp"
#include "tools/check_spawn.hpp"
#include "tools/reasons.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace usmc::tools::check {

namespace {

// What one end of the pair said and was.
struct End {
    bool started = false;
    std::string preload;             // "PRELOAD" line: the library's path, or "none"
    std::optional<std::string> done; // its "DONE ..." line
    std::optional<SocketState> sock; // its connection, from its stats segment
    bool segment = false;            // it had a live segment in the pair's directory
    std::string errors;              // its standard error
    int status = -1;
};

struct Pair {
    End server, client;
    uint16_t port = 0;
    std::string failure; // why it did not get as far as moving data
};

std::optional<SocketState> connection_of(const std::string& dir, pid_t pid, SockRole role,
                                         bool* segment) {
    auto socks = sockets_of(dir, pid);
    *segment = socks.has_value();
    if (!socks) return std::nullopt;
    for (const auto& s : *socks)
        if (s.role == role) return s;
    return std::nullopt;
}

std::string last_line(const std::string& text) {
    std::string t = text;
    while (!t.empty() && t.back() == '\n')
        t.pop_back();
    size_t nl = t.rfind('\n');
    return nl == std::string::npos ? t : t.substr(nl + 1);
}

Pair run_pair(const std::string& launcher, const std::string& dir, unsigned kib,
              Clock::time_point deadline) {
    Pair p;
    std::string self = self_path();
    std::vector<std::pair<std::string, std::string>> env = {{"USMC_STATS_DIR", dir}};
    Child server =
        Child::start({launcher, "--", self, "__check-peer", "server", std::to_string(kib)}, env);
    p.server.started = server.pid() > 0;
    if (!p.server.started) {
        p.failure = fmt::format("cannot start {}: {}", launcher, std::strerror(errno));
        return p;
    }
    if (auto l = server.line_with("PRELOAD ", deadline)) p.server.preload = l->substr(8);
    auto ready = server.line_with("READY ", deadline);
    if (!ready) {
        server.stop();
        p.server.errors = server.errors();
        p.failure =
            fmt::format("the server did not start listening: {}", last_line(p.server.errors));
        return p;
    }
    p.port = uint16_t(std::atoi(ready->c_str() + 6));
    Child client = Child::start({launcher, "--", self, "__check-peer", "client",
                                 std::to_string(p.port), std::to_string(kib)},
                                env);
    p.client.started = client.pid() > 0;
    if (p.client.started) {
        if (auto l = client.line_with("PRELOAD ", deadline)) p.client.preload = l->substr(8);
        p.client.done = client.line_with("DONE ", deadline);
        p.server.done = server.line_with("DONE ", deadline);
        // Both hold their connections now: their sockets as usmc sees them.
        p.client.sock = connection_of(dir, client.pid(), SockRole::Client, &p.client.segment);
        p.server.sock = connection_of(dir, server.pid(), SockRole::Server, &p.server.segment);
    } else {
        p.failure = fmt::format("cannot start {}: {}", launcher, std::strerror(errno));
    }
    p.client.status = client.stop();
    p.server.status = server.stop();
    p.client.errors = client.errors();
    p.server.errors = server.errors();
    if (p.failure.empty() && (!p.client.done || !p.server.done))
        p.failure = fmt::format("no answer in time (client: {}; server: {})",
                                p.client.done ? "done" : last_line(p.client.errors),
                                p.server.done ? "done" : last_line(p.server.errors));
    return p;
}

// "DONE ok GOT BAD TCP_RX TCP_ACKED FD"
struct Done {
    bool ok = false;
    unsigned long long got = 0, bad = 0;
    long long tcp_rx = -1, tcp_acked = -1;
};

Done parse_done(const std::optional<std::string>& line) {
    Done d;
    if (!line) return d;
    std::istringstream in(line->substr(5));
    std::string word;
    in >> word >> d.got >> d.bad >> d.tcp_rx >> d.tcp_acked;
    d.ok = word == "ok" && !in.fail();
    return d;
}

void remove_tree(const std::string& dir) {
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d))
            if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, ".."))
                unlink((dir + "/" + e->d_name).c_str());
        closedir(d);
    }
    rmdir(dir.c_str());
}

// Which rule or setting chose TCP for one end of the pair (`role` on
// 127.0.0.1:`port`, program "usmc").
std::string policy_source(const std::optional<config::Config>& cfg, config::Role role,
                          uint16_t port) {
    if (!cfg) return {};
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    config::MatchInput in;
    in.exe_name = "usmc";
    in.argv0_name = "usmc";
    in.role = role;
    in.endpoint = config::Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&a), sizeof a);
    int line = 0;
    config::ModeSet modes = config::match_policy(cfg->policies, in, cfg->mode, &line);
    if (line && !modes) return fmt::format(" (the rule at {}:{})", cfg->source, line);
    if (!line && !modes) return fmt::format(" (mode = \"tcp\" in {})", cfg->source);
    if (!(environment_modes() & config::kModeSmcD)) return " (USMC_MODES)";
    return {};
}

// One end's connection as a line; true if it is SMC-D.
bool report_end(Report& r, const char* name, const End& e, const std::string& policy) {
    std::string what = fmt::format("test pair {}", name);
    if (!e.segment) {
        r.info(what, "its socket cannot be seen (it has no stats segment: see the stats "
                     "directory above)");
        return false;
    }
    if (!e.sock) {
        r.fail(what, "usmc did not track its connection", 0,
               "run usmc check again; if it repeats, report it with the output of usmc-run -v");
        return false;
    }
    if (e.sock->mode == SockMode::SmcD) {
        r.ok(what, "SMC-D");
        return true;
    }
    if (e.sock->reason)
        r.fail(what,
               fmt::format("plain TCP: {}{}", fallback::description_of(e.sock->reason),
                           e.sock->reason == fallback::POLICY ? policy : std::string()),
               e.sock->reason);
    else
        r.fail(what, "plain TCP without a reason: usmc could not start SMC-D in the process", 0,
               fmt::format("see the FAIL lines above and its log: {}", last_line(e.errors)));
    return false;
}

} // namespace

int run_host(const Options& opt, const std::string& stats_dir) {
    Report r;
    auto deadline = Clock::now() + std::chrono::seconds(opt.timeout_s);
    std::string launcher = find_launcher();
    if (launcher.empty())
        r.fail("launcher", "usmc-run is neither beside usmc nor on $PATH", 0,
               "install usmc-run (it comes with usmc) or put its directory on $PATH");
    else
        r.ok("launcher", launcher);
    const char* lib = std::getenv("USMC_PRELOAD_LIB");
    bool lib_set = lib && *lib;
    if (lib_set && access(lib, R_OK) != 0)
        r.fail("preload library", fmt::format("USMC_PRELOAD_LIB={}: {}", lib, std::strerror(errno)),
               0,
               "unset USMC_PRELOAD_LIB (usmc-run finds its library) or point it at "
               "libusmc-preload.so");
    bool lib_failed = lib_set && access(lib, R_OK) != 0;
    auto cfg = check_configuration(r, true);
    bool dir_ok = check_stats_dir(r, stats_dir);
    check_system(r);
    if (launcher.empty())
        return r.finish(false, "SMC-D cannot be tried: usmc-run is missing", opt.json);

    // The pair publishes and counts in a directory of its own inside the
    // stats directory: the same file system and permissions, and nothing of
    // it left in the user's counters. Where none can be made, the stats
    // directory itself, as programs would.
    std::string pair_dir = stats_dir + "/usmc-check.XXXXXX";
    bool own_dir = dir_ok && mkdtemp(pair_dir.data()) != nullptr;
    if (!own_dir) pair_dir = stats_dir;
    Pair p = run_pair(launcher, pair_dir, opt.kib, deadline);
    // A loaded machine can make the client's Proposal later than the
    // server's clc_detect_timeout_ms: both ends then run TCP (PEERNOSMC),
    // correctly. That once is no verdict on the host: try again.
    bool late = p.server.sock && p.server.sock->reason == fallback::PEERNOSMC && p.client.sock &&
                p.client.sock->reason == fallback::PEERNOSMC;
    if (late && Clock::now() < deadline) {
        r.info("test pair", "the first try ran TCP (PEERNOSMC both ends: a late Proposal on a "
                            "busy machine); trying once more");
        p = run_pair(launcher, pair_dir, opt.kib, deadline);
    }
    if (own_dir) remove_tree(pair_dir);

    if (!p.client.preload.empty() && p.client.preload != "none")
        r.ok("preload library", fmt::format("{} (loaded in the test pair)", p.client.preload));
    else if ((p.client.started || p.server.started) && !lib_failed) {
        std::string why = last_line(p.client.errors.empty() ? p.server.errors : p.client.errors);
        r.fail("preload library",
               fmt::format("not loaded in the test pair{}", why.empty() ? "" : ": " + why), 0,
               lib_set ? "unset USMC_PRELOAD_LIB (usmc-run finds its library) or point it at "
                         "libusmc-preload.so"
                       : "reinstall usmc (libusmc-preload.so belongs beside usmc-run's lib "
                         "directory), or set USMC_PRELOAD_LIB to it");
    }
    if (!p.failure.empty()) {
        r.fail("test pair", p.failure, 0,
               "run the pair by hand to see more: usmc-run -v -- usmc __check-peer server 64");
        return r.finish(false, "SMC-D does not work on this host: the test pair did not run",
                        opt.json);
    }
    Done c = parse_done(p.client.done), s = parse_done(p.server.done);
    uint64_t bytes = uint64_t{opt.kib} << 10;
    bool data = c.ok && s.ok;
    if (data)
        r.ok("test pair data", fmt::format("{} KiB each way, checked byte for byte", opt.kib));
    else
        r.fail("test pair data",
               fmt::format("client got {} of {} bytes ({} wrong), server got {} ({} wrong)", c.got,
                           bytes, c.bad, s.got, s.bad),
               0, "report it, with the output of usmc-run -v -- usmc __check-peer server 64");
    bool smc_client =
        report_end(r, "client", p.client, policy_source(cfg, config::Role::Client, p.port));
    bool smc_server =
        report_end(r, "server", p.server, policy_source(cfg, config::Role::Server, p.port));
    bool around_tcp = c.tcp_rx >= 0 && uint64_t(c.tcp_rx) < bytes / 2;
    if (c.tcp_rx < 0)
        r.info("data path", "the kernel's TCP counters cannot be read (TCP_INFO)");
    else if (around_tcp)
        r.ok("data path",
             fmt::format("TCP carried {} bytes to the client (the handshake): the data went "
                         "through shared memory",
                         c.tcp_rx));
    else
        r.fail("data path", fmt::format("TCP carried the data ({} bytes to the client)", c.tcp_rx),
               smc_client ? 0u : r.first_reason(),
               r.failed() ? "follow the advice above"
                          : "report it, with the output of usmc-run -v "
                            "-- usmc __check-peer server 64");

    bool works = data && smc_client && smc_server && (c.tcp_rx < 0 || around_tcp) && !r.failed();
    std::string verdict;
    if (works)
        verdict = fmt::format("SMC-D works on this host: a wrapped client and server moved {} KiB "
                              "each way through shared memory",
                              opt.kib);
    else if (uint32_t why = r.first_reason())
        verdict = fmt::format("SMC-D does not work on this host: {} ({})", fallback::name_of(why),
                              reasons::plain(reasons::advice_of(fallback::Code(why)).meaning));
    else
        verdict = "SMC-D does not work on this host: " + r.first_failure();
    return r.finish(works, verdict, opt.json);
}

} // namespace usmc::tools::check
