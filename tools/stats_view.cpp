// SPDX-License-Identifier: MIT
#include "tools/stats_view.hpp"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

namespace usmc::tools {

std::string dump(const Json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string program_of(const statseg::Header* h) {
    return std::string(h->program, strnlen(h->program, sizeof h->program));
}

bool Selection::matches(pid_t pid, std::string_view program) const {
    return all() || std::find(pids.begin(), pids.end(), pid) != pids.end() ||
           std::find(names.begin(), names.end(), program) != names.end();
}

Totals sum(const std::vector<statseg::View>& views, bool live_only, const Selection& sel) {
    Totals t;
    for (const auto& v : views) {
        if ((live_only || !sel.all()) && !v.alive) continue;
        if (!sel.all() && !sel.matches(v.header->pid, program_of(v.header))) continue;
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

namespace {
uint64_t since(uint64_t before, uint64_t after) {
    return after >= before ? after - before : after;
}
} // namespace

Totals delta(const Totals& before, const Totals& after) {
    Totals d = after;
    for (unsigned i = 0; i < counters::kCount; ++i)
        if (!counters::is_gauge(counters::Id(i)))
            d.counters[i] = since(before.counters[i], after.counters[i]);
    for (unsigned i = 0; i < fallback::kCount; ++i)
        d.fallbacks[i] = since(before.fallbacks[i], after.fallbacks[i]);
    for (unsigned dir = 0; dir < 2; ++dir)
        for (unsigned i = 0; i < counters::kTrafficCount; ++i)
            d.traffic[dir][i] = since(before.traffic[dir][i], after.traffic[dir][i]);
    return d;
}

namespace {

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

Json dir_json(const DirStats& d, counters::Dir dir) {
    using namespace counters;
    Json j;
    j["bytes"] = d.bytes;
    j["requests"] = d.requests();
    j["requests_with_data"] = d.with_data;
    j["requests_no_data"] = d.no_data;
    if (dir == kRx) {
        j["buffer_full"] = d.buf_full;
    } else {
        j["buffer_full_remote"] = d.buf_full_peer;
        j["buffer_too_small_remote"] = d.too_small_peer;
    }
    j["buffer_reuse"] = d.reuse;
    j["buffer_downgrade"] = d.downgrade;
    for (auto [key, arr] : {std::pair{"reqs_by_size", d.reqs}, std::pair{"bufs_by_size", d.bufs}}) {
        Json& by = j[key] = Json::object();
        for (unsigned b = 0; b < kBuckets; ++b)
            by[bucket_name(b)] = arr[b];
    }
    return j;
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

uint64_t total_connections(const Totals& t) {
    using namespace counters;
    return t.counters[conn_smcd] + t.counters[conn_smcr] + t.counters[conn_tcp] +
           t.counters[handshake_errors];
}

} // namespace

Json process_gauges(const statseg::View& v) {
    using namespace counters;
    Json p;
    p["pid"] = v.header->pid;
    p["program"] = program_of(v.header);
    for (unsigned i = 0; i < kCount; ++i)
        if (is_gauge(static_cast<Id>(i)))
            p[name_of(static_cast<Id>(i))] = v.header->counters[i].load(std::memory_order_relaxed);
    return p;
}

void stats_json(Json& out, const Totals& t, Json gauges_by_process) {
    using namespace counters;
    out["processes"] = t.processes;
    out["total_connections"] = total_connections(t);
    for (unsigned i = 0; i < kCount; ++i)
        out[name_of(static_cast<Id>(i))] = t.counters[i];
    out["gauges_by_process"] = std::move(gauges_by_process);
    Json& reasons = out["fallback_reasons"] = Json::object();
    for (unsigned i = 0; i < fallback::kCount; ++i)
        if (t.fallbacks[i])
            reasons[fallback::name_of(fallback::code_at(static_cast<fallback::Index>(i)))] =
                t.fallbacks[i];
    out["rx"] = dir_json(dir_stats(t, kRx), kRx);
    out["tx"] = dir_json(dir_stats(t, kTx), kTx);
}

void print_stats(const Totals& t, const std::string& title) {
    using namespace counters;
    fmt::print("{}\n\n", title);
    fmt::print("Connections Summary\n");
    fmt::print("  {:<34}{:>12}\n", "Total connections handled", total_connections(t));
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
}

} // namespace usmc::tools
