// SPDX-License-Identifier: MIT
#pragma once
// The views of the usmc CLI, one command each; each returns its exit code
// (tools/usmc.cpp: 0 ok, 1 an error).
#include "tools/stats_view.hpp"
#include "tools/table.hpp"

#include <string>

namespace usmc::tools {

struct StatsOptions {
    bool json = false;
    bool live_only = false;
    Selection sel;
    double interval = 0; // seconds between snapshots (0: one look at the totals)
    unsigned count = 0;  // intervals to print (0: until interrupted)
};
int cmd_stats(const std::string& dir, const StatsOptions& opt);
// `usmc stats reset`: live processes' counters zeroed, retired totals removed.
int cmd_stats_reset(const std::string& dir);

struct SsOptions {
    bool all = false, listening = false;
    bool details = false; // -d: buffers, cursors, flags
    bool smcd = false;    // -D: GIDs and tokens, SMC-D connections only
    bool wide = false;    // -W: columns as wide as their content
    bool json = false;
};
int cmd_ss(const std::string& dir, const SsOptions& opt);

int cmd_linkgroup(const std::string& dir, bool json);
int cmd_device(const std::string& dir, bool json);

} // namespace usmc::tools
