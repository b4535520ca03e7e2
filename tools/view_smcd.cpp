// SPDX-License-Identifier: MIT
// usmc linkgroup and usmc device (smcd linkgroup, smcd device): each usmc
// process is an SMC-D device of its own (a GID, DMB segments under a memory
// cap) with a link group per peer process, as its stats segment publishes
// them (statseg::Header::Device, statseg::LgrRecord).
#include "config/size.hpp"
#include "engine/base/counters.hpp"
#include "engine/base/statseg.hpp"
#include "tools/observe.hpp"
#include "tools/views.hpp"

#include <fmt/format.h>

namespace usmc::tools {

namespace {

uint64_t device_gid(const statseg::View& v) {
    const auto* d = statseg::device_of(v);
    return d ? d->gid.load(std::memory_order_relaxed) : 0;
}

// The live process of `pid` whose device is `gid`: a pid alone may have
// been reused, and a forked child's device is not its parent's.
const statseg::View* process_of(const std::vector<statseg::View>& views, pid_t pid, uint64_t gid) {
    for (const auto& v : views)
        if (v.alive && v.header->pid == pid && device_gid(v) == gid) return &v;
    return nullptr;
}

std::string or_dash(const std::string& s) {
    return s.empty() ? "-" : s;
}

} // namespace

int cmd_linkgroup(const std::string& dir, bool json) {
    auto views = statseg::open_all(dir, true);
    Json groups = Json::array();
    std::vector<std::vector<std::string>> rows;
    for (const auto& v : views) {
        if (!v.alive) continue;
        auto lgrs = statseg::live_groups(v);
        if (lgrs.empty()) continue;
        auto recs = statseg::live_records(v);
        for (const auto& g : lgrs) {
            size_t conns = 0;
            for (const auto& r : recs)
                conns += r.peer_gid == g.peer_gid;
            const statseg::View* peer = process_of(views, g.peer_pid, g.peer_gid);
            std::string peer_program = peer ? program_of(peer->header) : "";
            Json j{{"pid", v.header->pid},
                   {"program", program_of(v.header)},
                   {"id", g.id},
                   {"gid", hex64(device_gid(v))},
                   {"peer_pid", g.peer_pid},
                   {"peer_uid", g.peer_uid},
                   {"peer_program", peer ? Json(peer_program) : Json()},
                   {"peer_gid", hex64(g.peer_gid)},
                   {"peer_segments", g.their_segments},
                   {"our_segments", g.our_segments},
                   {"connections", conns}};
            groups.push_back(std::move(j));
            rows.push_back({std::to_string(v.header->pid), program_of(v.header),
                            fmt::format("{:08x}", g.id), hex64(device_gid(v)),
                            std::to_string(g.peer_pid), or_dash(peer_program), hex64(g.peer_gid),
                            fmt::format("{}/{}", g.our_segments, g.their_segments),
                            std::to_string(conns)});
        }
    }
    statseg::close_all(views);
    if (json) {
        fmt::print("{}\n", dump(Json{{"schema", kJsonSchema}, {"link_groups", std::move(groups)}}));
        return 0;
    }
    std::vector<Column> cols{{"PID", 8},         {"Program", 16, false, true},
                             {"LG-ID", 8},       {"GID", 16},
                             {"Peer-PID", 8},    {"Peer-Program", 16, false, true},
                             {"Peer-GID", 16},   {"Segs(our/peer)", 14, true},
                             {"#Conns", 6, true}};
    for (const auto& l : table_lines(cols, rows, false))
        fmt::print("{}\n", l);
    return 0;
}

int cmd_device(const std::string& dir, bool json) {
    auto views = statseg::open_all(dir, true);
    Json devices = Json::array();
    std::vector<std::vector<std::string>> rows;
    size_t without = 0;
    for (const auto& v : views) {
        if (!v.alive) continue;
        const auto* d = statseg::device_of(v);
        if (!d) {
            ++without;
            continue;
        }
        auto gauge = [&](counters::Id id) {
            return v.header->counters[id].load(std::memory_order_relaxed);
        };
        uint64_t used = gauge(counters::dmb_bytes), spare = gauge(counters::dmb_spare_bytes);
        uint64_t cap = d->max_dmb_memory.load(std::memory_order_relaxed);
        size_t conns = statseg::live_records(v).size();
        Json j{{"pid", v.header->pid},
               {"program", program_of(v.header)},
               {"gid", hex64(d->gid.load(std::memory_order_relaxed))},
               {"dmb_bytes", used},
               {"dmb_spare_bytes", spare},
               {"max_dmb_memory", cap},
               {"segments", d->segments.load(std::memory_order_relaxed)},
               {"peer_maps", d->peer_maps.load(std::memory_order_relaxed)},
               {"link_groups", d->link_groups.load(std::memory_order_relaxed)},
               {"connections", conns}};
        devices.push_back(std::move(j));
        rows.push_back(
            {std::to_string(v.header->pid), program_of(v.header),
             hex64(d->gid.load(std::memory_order_relaxed)),
             std::to_string(d->segments.load(std::memory_order_relaxed)),
             std::to_string(d->peer_maps.load(std::memory_order_relaxed)),
             std::to_string(d->link_groups.load(std::memory_order_relaxed)), std::to_string(conns),
             config::format_size(used), config::format_size(spare), config::format_size(cap),
             fmt::format("{:.1f}%", cap ? 100.0 * double(used + spare) / double(cap) : 0.0)});
    }
    statseg::close_all(views);
    if (json) {
        fmt::print("{}\n", dump(Json{{"schema", kJsonSchema},
                                     {"devices", std::move(devices)},
                                     {"processes_without_device", without}}));
        return 0;
    }
    std::vector<Column> cols{{"PID", 8},
                             {"Program", 16, false, true},
                             {"GID", 16},
                             {"Segments", 8, true},
                             {"PeerMaps", 8, true},
                             {"LinkGroups", 10, true},
                             {"#Conns", 6, true},
                             {"DMB-Used", 10, true},
                             {"Spare", 10, true},
                             {"Cap", 10, true},
                             {"Cap-Used", 8, true}};
    for (const auto& l : table_lines(cols, rows, false))
        fmt::print("{}\n", l);
    if (without)
        fmt::print("({} live process{} without an SMC-D device: none made yet, or an older usmc)\n",
                   without, without == 1 ? "" : "es");
    return 0;
}

} // namespace usmc::tools
