// SPDX-License-Identifier: MIT
// usmc stats: the counters of usmc processes (smcd stats), all of them or
// those named (-p, -n), once or per interval (vma_stats), and reset.
#include "engine/base/statseg.hpp"
#include "tools/views.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>

namespace usmc::tools {

namespace {

volatile std::sig_atomic_t g_stop = 0;

void on_stop(int) {
    g_stop = 1;
}

// SIGINT and SIGTERM end the interval loop between two snapshots: no
// SA_RESTART, so the sleep returns at once.
void catch_stop() {
    struct sigaction sa = {};
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

// Sleeps `seconds`, or less if told to stop.
void pause_for(double seconds) {
    timespec left;
    left.tv_sec = static_cast<time_t>(seconds);
    left.tv_nsec = static_cast<long>((seconds - double(left.tv_sec)) * 1e9);
    while (!g_stop && nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

struct Snapshot {
    Totals totals;
    Json gauges = Json::array();
};

Snapshot take(const std::string& dir, const StatsOptions& opt) {
    auto views = statseg::open_all(dir, true);
    Snapshot s;
    s.totals = sum(views, opt.live_only, opt.sel);
    // The gauges of each live process: the sums do not say which process
    // holds what (a forking server's parent and its children).
    for (const auto& v : views)
        if (v.alive && opt.sel.matches(v.header->pid, program_of(v.header)))
            s.gauges.push_back(process_gauges(v));
    statseg::close_all(views);
    return s;
}

std::string who(const StatsOptions& opt, const Totals& t) {
    std::string s = fmt::format("{} live process{}", t.processes, t.processes == 1 ? "" : "es");
    if (!opt.sel.all()) {
        std::vector<std::string> named;
        for (pid_t p : opt.sel.pids)
            named.push_back("pid " + std::to_string(p));
        for (const auto& n : opt.sel.names)
            named.push_back(n);
        s += fmt::format(" of {}", fmt::join(named, ", "));
    }
    return s;
}

Json selection_json(const Selection& sel) {
    return Json{{"pids", sel.pids}, {"names", sel.names}};
}

} // namespace

int cmd_stats(const std::string& dir, const StatsOptions& opt) {
    if (opt.interval <= 0) {
        Snapshot s = take(dir, opt);
        if (opt.json) {
            Json j{{"schema", kJsonSchema}};
            if (!opt.sel.all()) j["selection"] = selection_json(opt.sel);
            stats_json(j, s.totals, std::move(s.gauges));
            fmt::print("{}\n", dump(j));
            return 0;
        }
        bool exited = opt.sel.all() && !opt.live_only;
        print_stats(s.totals,
                    fmt::format("usmc statistics: {}{} (segments in {})", who(opt, s.totals),
                                exited ? " and exited ones since the last reset" : "", dir));
        return 0;
    }
    // vmstat's way: the totals first (interval 0), then what changed in
    // each interval, so the first line and the differences add up to the
    // totals at every line.
    catch_stop();
    Snapshot before = take(dir, opt);
    for (unsigned i = 0; !g_stop && (opt.count == 0 || i <= opt.count); ++i) {
        Snapshot now;
        Totals shown;
        if (i == 0) {
            shown = before.totals;
            now.gauges = before.gauges;
        } else {
            pause_for(opt.interval);
            if (g_stop) break;
            now = take(dir, opt);
            shown = delta(before.totals, now.totals);
        }
        if (opt.json) {
            Json j{{"schema", kJsonSchema}, {"interval", i}, {"seconds", i ? opt.interval : 0.0}};
            if (!opt.sel.all()) j["selection"] = selection_json(opt.sel);
            stats_json(j, shown, now.gauges);
            fmt::print("{}\n", dump(j));
        } else if (i == 0) {
            print_stats(shown, fmt::format("usmc statistics: {} (totals; then every {} s what "
                                           "changed)",
                                           who(opt, shown), opt.interval));
        } else {
            print_stats(shown, fmt::format("\nusmc statistics: interval {}{}, the last {} s: {} "
                                           "(differences; gauges as they are now)",
                                           i, opt.count ? fmt::format(" of {}", opt.count) : "",
                                           opt.interval, who(opt, now.totals)));
        }
        std::fflush(stdout);
        if (i) before = std::move(now);
    }
    return 0;
}

int cmd_stats_reset(const std::string& dir) {
    // Live first: a process that exits meanwhile adds what it counted since
    // to the retired totals, which go next.
    std::vector<pid_t> skipped;
    int zeroed = statseg::zero_live(dir, &skipped);
    int removed = statseg::reset_retired(dir);
    fmt::print("zeroed the counters of {} process segment{} and removed {} retired-counter "
               "file(s) in {}\n",
               zeroed, zeroed == 1 ? "" : "s", removed, dir);
    for (pid_t p : skipped)
        fmt::print(stderr,
                   "usmc: pid {}: another user's segment, not zeroed (its user or root may)\n", p);
    return 0;
}

} // namespace usmc::tools
