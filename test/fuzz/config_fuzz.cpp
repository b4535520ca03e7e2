// SPDX-License-Identifier: MIT
// usmc.toml as anyone who can write a config file (or set USMC_CONFIG)
// writes it: parse_config() must answer with a Config or a LoadError that
// names the file, never crash or throw. What parses must survive
// describe(): `usmc config check` prints the effective settings as TOML,
// and that text must parse back to the same settings.
#include "config/config.hpp"
#include "test/fuzz/fuzz_check.hpp"

#include <cstring>
#include <string_view>

using namespace usmc::config;

namespace {

bool same_prefix(const std::optional<Prefix>& a, const std::optional<Prefix>& b) {
    if (a.has_value() != b.has_value()) return false;
    if (!a) return true;
    return a->family == b->family && a->length == b->length &&
           std::memcmp(a->addr, b->addr, sizeof a->addr) == 0;
}

bool same_port(const std::optional<PortRange>& a, const std::optional<PortRange>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a || (a->low == b->low && a->high == b->high);
}

// Everything but where the values came from (source, rule lines).
bool same(const Config& a, const Config& b) {
    if (a.policies.size() != b.policies.size()) return false;
    for (size_t i = 0; i < a.policies.size(); ++i) {
        const PolicyRule &x = a.policies[i], &y = b.policies[i];
        if (x.program != y.program || x.role != y.role || !same_prefix(x.address, y.address) ||
            !same_port(x.port, y.port) || x.modes != y.modes)
            return false;
    }
    return a.limit_smc_hs == b.limit_smc_hs && a.rmem == b.rmem && a.wmem == b.wmem &&
           a.autocorking_size == b.autocorking_size && a.mode == b.mode &&
           a.clc_detect_timeout_ms == b.clc_detect_timeout_ms && a.busy_poll_us == b.busy_poll_us &&
           a.max_dmb_memory == b.max_dmb_memory && a.hs_workers == b.hs_workers &&
           a.hs_congestion_hold_ms == b.hs_congestion_hold_ms &&
           a.testonly_server_handshake_delay_ms == b.testonly_server_handshake_delay_ms &&
           a.testonly_learn_hold_ms == b.testonly_learn_hold_ms &&
           a.testonly_learn_probe_gap_ms == b.testonly_learn_probe_gap_ms &&
           a.testonly_clc_timeout_ms == b.testonly_clc_timeout_ms && a.log_level == b.log_level &&
           a.trusted_uids == b.trusted_uids && a.smcr_buf_type == b.smcr_buf_type &&
           a.smcr_testlink_time == b.smcr_testlink_time &&
           a.smcr_max_links_per_lgr == b.smcr_max_links_per_lgr &&
           a.smcr_max_conns_per_lgr == b.smcr_max_conns_per_lgr &&
           a.smcr_max_send_wr == b.smcr_max_send_wr && a.smcr_max_recv_wr == b.smcr_max_recv_wr &&
           a.autotune_dmb == b.autotune_dmb && a.busy_poll_adaptive == b.busy_poll_adaptive &&
           a.learn_smc == b.learn_smc;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto r = parse_config(text, "fuzz.toml");
    if (auto* e = std::get_if<LoadError>(&r)) {
        FUZZ_CHECK(e->message.rfind("fuzz.toml:", 0) == 0);
        for (const auto& more : e->more)
            FUZZ_CHECK(more.rfind("fuzz.toml:", 0) == 0);
        return 0;
    }
    const Config& cfg = std::get<Config>(r);
    FUZZ_CHECK(cfg.source == "fuzz.toml");
    std::string described = describe(cfg);
    auto again = parse_config(described, "described.toml");
    if (auto* e = std::get_if<LoadError>(&again)) {
        std::fprintf(stderr, "describe() printed what does not parse:\n%s\n%s\n", described.c_str(),
                     e->message.c_str());
        std::abort();
    }
    FUZZ_CHECK(same(cfg, std::get<Config>(again)));
    return 0;
}
