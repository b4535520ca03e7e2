// SPDX-License-Identifier: MIT
#pragma once
// What `usmc stats` computes from the stats segments: the sums over the
// processes it was asked about, the differences between two snapshots
// (--interval), and the JSON and text it prints. No I/O but printing, so
// the unit tests reach all of it.
#include "engine/base/counters.hpp"
#include "engine/base/fallback.hpp"
#include "engine/base/statseg.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace usmc::tools {

// The version of every JSON document usmc prints (its "schema" field):
// raised when a key changes meaning or goes; new keys do not raise it.
constexpr int kJsonSchema = 1;

// Insertion order kept: the documents read in the order a person expects.
using Json = nlohmann::ordered_json;

// One line of JSON, valid UTF-8 whatever the bytes in it: program names
// are what processes wrote, and invalid sequences become U+FFFD.
std::string dump(const Json& j);

// A process's program name from its segment, bounded by the field.
std::string program_of(const statseg::Header* h);

// The processes `usmc stats -p/-n` counts (none named: all of them).
struct Selection {
    std::vector<pid_t> pids;
    std::vector<std::string> names;
    bool all() const { return pids.empty() && names.empty(); }
    bool matches(pid_t pid, std::string_view program) const;
};

struct Totals {
    uint64_t counters[counters::kCount] = {};
    uint64_t fallbacks[fallback::kCount] = {};
    uint64_t traffic[2][counters::kTrafficCount] = {};
    size_t processes = 0; // live ones counted
};

// The sum over `views`: live processes and, unless `live_only` or a
// selection names processes, the counts of exited ones (retired totals,
// and dead segments not yet retired: their gauges aside).
Totals sum(const std::vector<statseg::View>& views, bool live_only, const Selection& sel);

// What happened between two snapshots: each counter's difference; gauges
// as they are in `after`. A count that went down (`usmc stats reset`, or
// a selected process that exited and left the sum) restarts from zero, so
// the difference is what `after` holds.
Totals delta(const Totals& before, const Totals& after);

// The keys of `usmc stats --json` for `t` (after "schema" and anything the
// caller puts first). `gauges_by_process`: an array, one object per live
// process (pid, program, its gauges).
void stats_json(Json& out, const Totals& t, Json gauges_by_process);
// The gauges of one live process, as stats_json's array holds them.
Json process_gauges(const statseg::View& v);

// The text view; `title` is its first line.
void print_stats(const Totals& t, const std::string& title);

} // namespace usmc::tools
