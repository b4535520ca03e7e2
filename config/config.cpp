// SPDX-License-Identifier: MIT
#include "config/config.hpp"

#include "config/size.hpp"
#include "config/toml_guard.hpp"

#include <fmt/format.h>
// toml++ is compiled here (header-only, root CMakeLists.txt). GCC 12 at -O3
// with fortify warns inside its table.h (array-bounds through a downcast it
// cannot follow): a false positive in code not ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#include <toml++/toml.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <tuple>

namespace usmc::config {

const char* log_level_name(LogLevel level) {
    switch (level) {
    case LogLevel::Error:
        return "error";
    case LogLevel::Warn:
        return "warn";
    case LogLevel::Info:
        return "info";
    default:
        return "debug";
    }
}

namespace {

// One error, where it is in the file; thrown inside the reading of one key
// and collected by Reader::guard.
struct ConfigError {
    size_t line = 0;
    size_t column = 0;
    std::string message;
};

class Reader {
  public:
    explicit Reader(std::string_view source) : source_(source) {}

    [[noreturn]] void fail(const toml::node& node, std::string_view key,
                           std::string_view what) const {
        const auto& where = node.source().begin;
        throw ConfigError{
            where.line, where.column,
            fmt::format("{}:{}:{}: key '{}': {}", source_, where.line, where.column, key, what)};
    }

    // Runs `read` (the reading of one key or one value) and keeps its error,
    // if any, so that the reading goes on to the next.
    template <class F>
    void guard(F&& read) const {
        try {
            read();
        } catch (const ConfigError& e) {
            errors_.push_back(e);
        }
    }
    void add(ConfigError e) const { errors_.push_back(std::move(e)); }

    // The kernel's sysctls write booleans as 0 and 1; TOML as false and true.
    bool boolean(const toml::node& node, std::string_view key) const {
        if (auto v = node.value_exact<bool>()) return *v;
        auto i = node.value_exact<int64_t>();
        if (i && (*i == 0 || *i == 1)) return *i == 1;
        fail(node, key,
             fmt::format("expected a boolean (true/false or 1/0), got {}",
                         i ? std::to_string(*i) : std::string(type_name(node))));
    }

    int64_t integer(const toml::node& node, std::string_view key, int64_t min, int64_t max) const {
        auto v = node.value_exact<int64_t>();
        if (!v) fail(node, key, fmt::format("expected an integer, got {}", type_name(node)));
        if (*v < min || *v > max)
            fail(node, key, fmt::format("must be between {} and {} (got {})", min, max, *v));
        return *v;
    }

    uint32_t u32(const toml::node& node, std::string_view key, uint32_t min, uint32_t max) const {
        return static_cast<uint32_t>(integer(node, key, min, max));
    }

    uint64_t size(const toml::node& node, std::string_view key, uint64_t min, uint64_t max) const {
        uint64_t bytes = 0;
        if (auto i = node.value_exact<int64_t>()) {
            if (*i < 0) fail(node, key, fmt::format("must not be negative (got {})", *i));
            bytes = static_cast<uint64_t>(*i);
        } else if (auto s = node.value_exact<std::string>()) {
            bool too_large = false;
            auto parsed = parse_size(*s, &too_large);
            if (too_large)
                fail(node, key,
                     fmt::format("must be between {} and {} (got '{}')", format_size(min),
                                 format_size(max), *s));
            if (!parsed)
                fail(node, key,
                     fmt::format("'{}' is not a size (bytes, or with a unit: 64k, 64KiB, 1m, "
                                 "1MiB, 1g; any case)",
                                 *s));
            bytes = *parsed;
        } else {
            fail(node, key,
                 fmt::format("expected a size (integer or \"64K\"), got {}", type_name(node)));
        }
        if (bytes < min || bytes > max)
            fail(node, key,
                 fmt::format("must be between {} and {} (got {})", format_size(min),
                             format_size(max), format_size(bytes)));
        return bytes;
    }

    std::string string(const toml::node& node, std::string_view key) const {
        if (auto v = node.value_exact<std::string>()) return *v;
        fail(node, key, fmt::format("expected a string, got {}", type_name(node)));
    }

    static std::string_view type_name(const toml::node& node) {
        switch (node.type()) {
        case toml::node_type::table:
            return "a table";
        case toml::node_type::array:
            return "an array";
        case toml::node_type::string:
            return "a string";
        case toml::node_type::integer:
            return "an integer";
        case toml::node_type::floating_point:
            return "a float";
        case toml::node_type::boolean:
            return "a boolean";
        default:
            return "a date/time";
        }
    }

    const std::string& source() const { return source_; }

    // Every error so far, in the order of the file (toml++ hands a table's
    // keys over sorted by name).
    std::vector<ConfigError> errors() const {
        auto sorted = errors_;
        std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
            return std::tie(a.line, a.column) < std::tie(b.line, b.column);
        });
        return sorted;
    }

  private:
    std::string source_;
    mutable std::vector<ConfigError> errors_;
};

PolicyRule read_policy(const Reader& r, const toml::table& tbl) {
    PolicyRule rule;
    rule.line = static_cast<int>(tbl.source().begin.line);
    bool have_mode = false;
    for (auto&& [k, node] : tbl) {
        std::string key = "policy." + std::string(k.str());
        r.guard([&, &k = k, &node = node] {
            if (k == "mode") {
                have_mode = true;
                auto m = parse_mode(r.string(node, key));
                if (!m) r.fail(node, key, "must be one of auto, smcd, smcr, tcp");
                rule.modes = *m;
            } else if (k == "program") {
                rule.program = r.string(node, key);
                if (rule.program.empty())
                    r.fail(node, key, "must not be empty (omit it to match every program)");
            } else if (k == "role") {
                auto role = parse_role(r.string(node, key));
                if (!role) r.fail(node, key, "must be one of server, client, any");
                rule.role = *role;
            } else if (k == "address") {
                auto text = r.string(node, key);
                auto p = Prefix::parse(text);
                if (!p)
                    r.fail(node, key,
                           fmt::format("'{}' is not an IPv4/IPv6 address or prefix", text));
                rule.address = *p;
            } else if (k == "port") {
                PortRange range;
                if (node.is_integer()) {
                    auto port = static_cast<uint16_t>(r.integer(node, key, 0, 65535));
                    range = {port, port};
                } else if (node.is_string()) {
                    auto text = r.string(node, key);
                    unsigned lo = 0, hi = 0;
                    char dash = 0, extra = 0;
                    int n = std::sscanf(text.c_str(), "%u%c%u%c", &lo, &dash, &hi, &extra);
                    if (n != 3 || dash != '-' || lo > hi || hi > 65535)
                        r.fail(node, key,
                               fmt::format("'{}' is not a port range like \"8000-8099\"", text));
                    range = {static_cast<uint16_t>(lo), static_cast<uint16_t>(hi)};
                } else {
                    r.fail(node, key,
                           fmt::format("expected a port number or a \"low-high\" string, got {}",
                                       Reader::type_name(node)));
                }
                rule.port = range;
            } else {
                r.fail(node, key,
                       "unknown key in [[policy]] (known: program, role, address, port, mode)");
            }
        });
    }
    if (!have_mode) {
        const auto& where = tbl.source().begin;
        r.add({where.line, where.column,
               fmt::format("{}:{}:{}: key 'policy.mode': missing; every [[policy]] needs "
                           "a mode (auto, smcd, smcr or tcp)",
                           r.source(), where.line, where.column)});
    }
    return rule;
}

// A global key: its name and how its value is read into a Config.
struct Key {
    std::string_view name;
    void (*read)(const Reader& r, const toml::node& node, const std::string& key, Config& cfg);
    bool testonly = false;
};
using R = const Reader&;
using N = const toml::node&;
using K = const std::string&;

LogLevel read_log_level(R r, N node, K key) {
    auto s = r.string(node, key);
    for (LogLevel l : {LogLevel::Error, LogLevel::Warn, LogLevel::Info, LogLevel::Debug})
        if (s == log_level_name(l)) return l;
    r.fail(node, key, "must be one of error, warn, info, debug");
}

void read_trusted_uids(R r, N node, K key, Config& c) {
    auto* arr = node.as_array();
    if (!arr)
        r.fail(node, key,
               fmt::format("expected an array of uids, got {}", Reader::type_name(node)));
    for (auto&& uid : *arr)
        r.guard([&] { c.trusted_uids.push_back(r.u32(uid, key, 0, 0xfffffffe)); });
}

void read_policies(R r, N node, K key, Config& c) {
    auto* arr = node.as_array();
    if (!arr || !arr->is_array_of_tables())
        r.fail(node, key, "must be written as [[policy]] tables");
    for (auto&& entry : *arr)
        c.policies.push_back(read_policy(r, *entry.as_table()));
}

// In the order `unknown key` lists them.
constexpr Key kKeys[] = {
    // The kernel's.
    {"limit_smc_hs", [](R r, N n, K k, Config& c) { c.limit_smc_hs = r.boolean(n, k); }},
    {"rmem", [](R r, N n, K k, Config& c) { c.rmem = r.size(n, k, kBufMin, kBufMax); }},
    {"wmem", [](R r, N n, K k, Config& c) { c.wmem = r.size(n, k, kBufMin, kBufMax); }},
    {"autocorking_size",
     [](R r, N n, K k, Config& c) { c.autocorking_size = r.size(n, k, 0, 1 << 30); }},
    {"smcr_buf_type", [](R r, N n, K k, Config& c) { c.smcr_buf_type = r.u32(n, k, 0, 2); }},
    // The kernel's handler takes seconds up to INT_MAX jiffies; this bound
    // holds for every HZ up to 1000.
    {"smcr_testlink_time",
     [](R r, N n, K k, Config& c) { c.smcr_testlink_time = r.u32(n, k, 0, 2147483); }},
    {"smcr_max_links_per_lgr",
     [](R r, N n, K k, Config& c) { c.smcr_max_links_per_lgr = r.u32(n, k, 1, 2); }},
    {"smcr_max_conns_per_lgr",
     [](R r, N n, K k, Config& c) { c.smcr_max_conns_per_lgr = r.u32(n, k, 16, 255); }},
    {"smcr_max_send_wr",
     [](R r, N n, K k, Config& c) { c.smcr_max_send_wr = r.u32(n, k, 2, 2048); }},
    {"smcr_max_recv_wr",
     [](R r, N n, K k, Config& c) { c.smcr_max_recv_wr = r.u32(n, k, 2, 2048); }},
    // usmc's own.
    {"autotune_dmb", [](R r, N n, K k, Config& c) { c.autotune_dmb = r.boolean(n, k); }},
    {"mode",
     [](R r, N n, K k, Config& c) {
         auto m = parse_mode(r.string(n, k));
         if (!m) r.fail(n, k, "must be one of auto, smcd, smcr, tcp");
         c.mode = *m;
     }},
    {"clc_detect_timeout_ms",
     [](R r, N n, K k, Config& c) { c.clc_detect_timeout_ms = r.u32(n, k, 0, 10000); }},
    {"busy_poll_us", [](R r, N n, K k, Config& c) { c.busy_poll_us = r.u32(n, k, 0, 100000); }},
    {"busy_poll_adaptive",
     [](R r, N n, K k, Config& c) { c.busy_poll_adaptive = r.boolean(n, k); }},
    {"max_dmb_memory",
     [](R r, N n, K k, Config& c) {
         c.max_dmb_memory = r.size(n, k, 16 << 10, uint64_t{64} << 30);
     }},
    {"hs_workers", [](R r, N n, K k, Config& c) { c.hs_workers = r.u32(n, k, 1, 64); }},
    {"hs_congestion_hold_ms",
     [](R r, N n, K k, Config& c) { c.hs_congestion_hold_ms = r.u32(n, k, 1, 60000); }},
    {"learn_smc", [](R r, N n, K k, Config& c) { c.learn_smc = r.boolean(n, k); }},
    {"log_level", [](R r, N n, K k, Config& c) { c.log_level = read_log_level(r, n, k); }},
    {"trusted_uids", read_trusted_uids},
    {"policy", read_policies},
    // Tests' and benchmarks' only.
    {"testonly_server_handshake_delay_ms",
     [](R r, N n, K k, Config& c) { c.testonly_server_handshake_delay_ms = r.u32(n, k, 0, 5000); },
     true},
    {"testonly_clc_timeout_ms",
     [](R r, N n, K k, Config& c) { c.testonly_clc_timeout_ms = r.u32(n, k, 0, 60000); }, true},
    {"testonly_learn_hold_ms",
     [](R r, N n, K k, Config& c) { c.testonly_learn_hold_ms = r.u32(n, k, 0, 3'600'000); }, true},
    {"testonly_learn_probe_gap_ms",
     [](R r, N n, K k, Config& c) { c.testonly_learn_probe_gap_ms = r.u32(n, k, 0, 3'600'000); },
     true},
};

// The keys a user is told of: never the test-only ones, even where they are
// taken (they are for usmc's tests, not for tuning).
std::string known_keys() {
    std::string list;
    for (const Key& key : kKeys) {
        if (key.testonly) continue;
        if (!list.empty()) list += ", ";
        list += key.name == "policy" ? "[[policy]]" : std::string(key.name);
    }
    return list;
}

Config read_config(const Reader& r, const toml::table& root, std::string_view source,
                   const ParseOptions& options) {
    Config cfg;
    cfg.source = std::string(source);
    for (auto&& [k, node] : root) {
        std::string key(k.str());
        r.guard([&, &node = node] {
            for (const Key& known : kKeys)
                if (known.name == key && (!known.testonly || options.testonly_knobs))
                    return known.read(r, node, key, cfg);
            r.fail(node, key, fmt::format("unknown key (known: {})", known_keys()));
        });
    }
    return cfg;
}

LoadError load_error(const std::vector<ConfigError>& errors) {
    LoadError e{errors.front().message, {}};
    for (size_t i = 1; i < errors.size(); ++i)
        e.more.push_back(errors[i].message);
    return e;
}

} // namespace

LoadResult parse_config(std::string_view text, std::string_view source_name, ParseOptions options) {
    GuardedText guarded = guard_for_toml(text);
    if (guarded.refused.line)
        return LoadError{fmt::format("{}:{}:{}: syntax error: a character usmc's configuration "
                                     "does not take outside a comment (U+00A1 to U+0499, U+2C5E "
                                     "to U+3057, U+FB26 to U+FEFE)",
                                     source_name, guarded.refused.line, guarded.refused.column),
                         {}};
    try {
        toml::table root = toml::parse(guarded.text, source_name);
        Reader reader(source_name);
        Config cfg = read_config(reader, root, source_name, options);
        auto errors = reader.errors();
        if (!errors.empty()) return load_error(errors);
        return cfg;
    } catch (const toml::parse_error& e) {
        const auto& where = e.source().begin;
        return LoadError{fmt::format("{}:{}:{}: syntax error: {}", source_name, where.line,
                                     where.column, e.description()),
                         {}};
    }
}

LoadResult load_config_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return LoadError{fmt::format("{}: cannot open: {}", path, std::strerror(errno)), {}};
    std::stringstream buf;
    buf << in.rdbuf();
    if (in.bad()) return LoadError{fmt::format("{}: read error", path), {}};
    return parse_config(buf.str(), path);
}

const char* system_config_path() {
    return USMC_SYSTEM_CONFIG;
}

std::string default_config_path() {
    if (const char* env = std::getenv("USMC_CONFIG"); env && *env) return env;
    struct stat st;
    if (::stat(system_config_path(), &st) == 0) return system_config_path();
    return {};
}

LoadResult load_default_config() {
    std::string path = default_config_path();
    if (path.empty()) return Config{};
    return load_config_file(path);
}

namespace {
// A string as TOML writes it (quoted, escaped): a program glob may hold
// quotes, backslashes or control characters. Always one basic string:
// toml++ would otherwise choose a multi-line one for a newline, and a
// newline right after its opening quotes is dropped when it is read back.
std::string toml_string(const std::string& s) {
    std::ostringstream out;
    out << toml::toml_formatter{toml::value<std::string>(s),
                                toml::format_flags::allow_unicode_strings};
    return out.str();
}
} // namespace

std::string describe(const Config& cfg) {
    std::string out = fmt::format("# effective usmc settings (from {})\n", cfg.source);
    out += fmt::format("limit_smc_hs = {}\n", cfg.limit_smc_hs);
    out += fmt::format("rmem = \"{}\"\n", format_size(cfg.rmem));
    out += fmt::format("wmem = \"{}\"\n", format_size(cfg.wmem));
    out += fmt::format("autotune_dmb = {}\n", cfg.autotune_dmb);
    out += fmt::format("autocorking_size = \"{}\"\n", format_size(cfg.autocorking_size));
    out += fmt::format("mode = \"{}\"\n", mode_name(cfg.mode));
    out += fmt::format("clc_detect_timeout_ms = {}\n", cfg.clc_detect_timeout_ms);
    out += fmt::format("busy_poll_us = {}\n", cfg.busy_poll_us);
    out += fmt::format("busy_poll_adaptive = {}\n", cfg.busy_poll_adaptive);
    out += fmt::format("max_dmb_memory = \"{}\"\n", format_size(cfg.max_dmb_memory));
    out += fmt::format("hs_workers = {}\n", cfg.hs_workers);
    out += fmt::format("hs_congestion_hold_ms = {}\n", cfg.hs_congestion_hold_ms);
    out += fmt::format("learn_smc = {}\n", cfg.learn_smc);
    out += fmt::format("log_level = \"{}\"\n", log_level_name(cfg.log_level));
    for (const auto& line : testonly_in_effect(cfg))
        out += line + " # TESTING ONLY\n";
    out += "trusted_uids = [";
    for (size_t i = 0; i < cfg.trusted_uids.size(); ++i)
        out += fmt::format("{}{}", i ? ", " : "", cfg.trusted_uids[i]);
    out += "]\n";
    out += "# SMC-R's (no effect until usmc has SMC-R)\n";
    out += fmt::format("smcr_buf_type = {}\n", cfg.smcr_buf_type);
    out += fmt::format("smcr_testlink_time = {}\n", cfg.smcr_testlink_time);
    out += fmt::format("smcr_max_links_per_lgr = {}\n", cfg.smcr_max_links_per_lgr);
    out += fmt::format("smcr_max_conns_per_lgr = {}\n", cfg.smcr_max_conns_per_lgr);
    out += fmt::format("smcr_max_send_wr = {}\n", cfg.smcr_max_send_wr);
    out += fmt::format("smcr_max_recv_wr = {}\n", cfg.smcr_max_recv_wr);
    for (const auto& rule : cfg.policies) {
        out += fmt::format("\n[[policy]] # line {}\n", rule.line);
        if (!rule.program.empty()) out += fmt::format("program = {}\n", toml_string(rule.program));
        if (rule.role != Role::Any) out += fmt::format("role = \"{}\"\n", role_name(rule.role));
        if (rule.address) out += fmt::format("address = \"{}\"\n", rule.address->to_string());
        // A single port is read back only as a number ("22" is no range).
        if (rule.port && rule.port->low == rule.port->high)
            out += fmt::format("port = {}\n", rule.port->low);
        else if (rule.port)
            out += fmt::format("port = \"{}\"\n", rule.port->to_string());
        out += fmt::format("mode = \"{}\"\n", mode_name(rule.modes));
    }
    return out;
}

std::vector<std::string> testonly_in_effect(const Config& cfg) {
    std::vector<std::string> out;
    auto add = [&](std::string_view key, uint32_t value) {
        if (value) out.push_back(fmt::format("{} = {}", key, value));
    };
    add("testonly_server_handshake_delay_ms", cfg.testonly_server_handshake_delay_ms);
    add("testonly_clc_timeout_ms", cfg.testonly_clc_timeout_ms);
    add("testonly_learn_hold_ms", cfg.testonly_learn_hold_ms);
    add("testonly_learn_probe_gap_ms", cfg.testonly_learn_probe_gap_ms);
    return out;
}

} // namespace usmc::config
