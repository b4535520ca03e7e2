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

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

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

// Thrown inside the parser only; turned into a LoadError at the boundary.
struct ConfigError {
    std::string message;
};

class Reader {
  public:
    explicit Reader(std::string_view source) : source_(source) {}

    [[noreturn]] void fail(const toml::node& node, std::string_view key,
                           std::string_view what) const {
        const auto& where = node.source().begin;
        throw ConfigError{
            fmt::format("{}:{}:{}: key '{}': {}", source_, where.line, where.column, key, what)};
    }

    bool boolean(const toml::node& node, std::string_view key) const {
        if (auto v = node.value_exact<bool>()) return *v;
        fail(node, key, fmt::format("expected a boolean (true/false), got {}", type_name(node)));
    }

    int64_t integer(const toml::node& node, std::string_view key, int64_t min, int64_t max) const {
        auto v = node.value_exact<int64_t>();
        if (!v) fail(node, key, fmt::format("expected an integer, got {}", type_name(node)));
        if (*v < min || *v > max)
            fail(node, key, fmt::format("must be between {} and {} (got {})", min, max, *v));
        return *v;
    }

    uint64_t size(const toml::node& node, std::string_view key, uint64_t min, uint64_t max) const {
        uint64_t bytes = 0;
        if (auto i = node.value_exact<int64_t>()) {
            if (*i < 0) fail(node, key, fmt::format("must not be negative (got {})", *i));
            bytes = static_cast<uint64_t>(*i);
        } else if (auto s = node.value_exact<std::string>()) {
            auto parsed = parse_size(*s);
            if (!parsed)
                fail(node, key,
                     fmt::format("'{}' is not a size (use bytes, or K/M/G suffixes)", *s));
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

  private:
    std::string source_;
};

PolicyRule read_policy(const Reader& r, const toml::table& tbl) {
    PolicyRule rule;
    rule.line = static_cast<int>(tbl.source().begin.line);
    bool have_mode = false;
    for (auto&& [k, node] : tbl) {
        std::string key = "policy." + std::string(k.str());
        if (k == "mode") {
            auto m = parse_mode(r.string(node, key));
            if (!m) r.fail(node, key, "must be one of auto, smcd, smcr, tcp");
            rule.modes = *m;
            have_mode = true;
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
                r.fail(node, key, fmt::format("'{}' is not an IPv4/IPv6 address or prefix", text));
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
    }
    if (!have_mode) {
        const auto& where = tbl.source().begin;
        throw ConfigError{
            fmt::format("{}:{}:{}: key 'policy.mode': missing; every [[policy]] needs "
                        "a mode (auto, smcd, smcr or tcp)",
                        r.source(), where.line, where.column)};
    }
    return rule;
}

Config read_config(const Reader& r, const toml::table& root, std::string_view source) {
    Config cfg;
    cfg.source = std::string(source);
    for (auto&& [k, node] : root) {
        std::string key(k.str());
        if (key == "limit_smc_hs") {
            cfg.limit_smc_hs = r.boolean(node, key);
        } else if (key == "learn_smc") {
            cfg.learn_smc = r.boolean(node, key);
        } else if (key == "rmem") {
            cfg.rmem = r.size(node, key, kBufMin, kBufMax);
        } else if (key == "wmem") {
            cfg.wmem = r.size(node, key, kBufMin, kBufMax);
        } else if (key == "autocorking_size") {
            cfg.autocorking_size = r.size(node, key, 0, 1 << 30);
        } else if (key == "mode") {
            auto m = parse_mode(r.string(node, key));
            if (!m) r.fail(node, key, "must be one of auto, smcd, smcr, tcp");
            cfg.mode = *m;
        } else if (key == "clc_detect_timeout_ms") {
            cfg.clc_detect_timeout_ms = static_cast<uint32_t>(r.integer(node, key, 0, 10000));
        } else if (key == "busy_poll_us") {
            cfg.busy_poll_us = static_cast<uint32_t>(r.integer(node, key, 0, 100000));
        } else if (key == "autotune_dmb") {
            cfg.autotune_dmb = r.boolean(node, key);
        } else if (key == "busy_poll_adaptive") {
            cfg.busy_poll_adaptive = r.boolean(node, key);
        } else if (key == "max_dmb_memory") {
            cfg.max_dmb_memory = r.size(node, key, 16 << 10, uint64_t{64} << 30);
        } else if (key == "hs_workers") {
            cfg.hs_workers = static_cast<uint32_t>(r.integer(node, key, 1, 64));
        } else if (key == "hs_congestion_hold_ms") {
            cfg.hs_congestion_hold_ms = static_cast<uint32_t>(r.integer(node, key, 1, 60000));
        } else if (key == "testonly_server_handshake_delay_ms") {
            cfg.testonly_server_handshake_delay_ms =
                static_cast<uint32_t>(r.integer(node, key, 0, 5000));
        } else if (key == "testonly_clc_timeout_ms") {
            cfg.testonly_clc_timeout_ms = static_cast<uint32_t>(r.integer(node, key, 0, 60000));
        } else if (key == "testonly_learn_hold_ms") {
            cfg.testonly_learn_hold_ms = static_cast<uint32_t>(r.integer(node, key, 0, 3'600'000));
        } else if (key == "testonly_learn_probe_gap_ms") {
            cfg.testonly_learn_probe_gap_ms =
                static_cast<uint32_t>(r.integer(node, key, 0, 3'600'000));
        } else if (key == "log_level") {
            auto s = r.string(node, key);
            if (s == "error")
                cfg.log_level = LogLevel::Error;
            else if (s == "warn")
                cfg.log_level = LogLevel::Warn;
            else if (s == "info")
                cfg.log_level = LogLevel::Info;
            else if (s == "debug")
                cfg.log_level = LogLevel::Debug;
            else
                r.fail(node, key, "must be one of error, warn, info, debug");
        } else if (key == "trusted_uids") {
            auto* arr = node.as_array();
            if (!arr)
                r.fail(node, key,
                       fmt::format("expected an array of uids, got {}", Reader::type_name(node)));
            for (auto&& uid : *arr)
                cfg.trusted_uids.push_back(
                    static_cast<uint32_t>(r.integer(uid, key, 0, 0xfffffffe)));
        } else if (key == "policy") {
            auto* arr = node.as_array();
            if (!arr || !arr->is_array_of_tables())
                r.fail(node, key, "must be written as [[policy]] tables");
            for (auto&& entry : *arr)
                cfg.policies.push_back(read_policy(r, *entry.as_table()));
        } else {
            r.fail(node, key,
                   "unknown key (known: limit_smc_hs, rmem, wmem, autotune_dmb, autocorking_size, "
                   "mode, "
                   "clc_detect_timeout_ms, busy_poll_us, busy_poll_adaptive, max_dmb_memory, "
                   "hs_workers, hs_congestion_hold_ms, learn_smc, log_level, trusted_uids, "
                   "testonly_server_handshake_delay_ms, testonly_clc_timeout_ms, "
                   "testonly_learn_hold_ms, "
                   "testonly_learn_probe_gap_ms, [[policy]])");
        }
    }
    return cfg;
}

} // namespace

LoadResult parse_config(std::string_view text, std::string_view source_name) {
    GuardedText guarded = guard_for_toml(text);
    if (guarded.refused.line)
        return LoadError{fmt::format("{}:{}:{}: syntax error: a character usmc's configuration "
                                     "does not take outside a comment (U+00A1 to U+0499, U+2C5E "
                                     "to U+3057, U+FB26 to U+FEFE)",
                                     source_name, guarded.refused.line, guarded.refused.column)};
    try {
        toml::table root = toml::parse(guarded.text, source_name);
        Reader reader(source_name);
        return read_config(reader, root, source_name);
    } catch (const toml::parse_error& e) {
        const auto& where = e.source().begin;
        return LoadError{fmt::format("{}:{}:{}: syntax error: {}", source_name, where.line,
                                     where.column, e.description())};
    } catch (const ConfigError& e) {
        return LoadError{e.message};
    }
}

LoadResult load_config_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return LoadError{fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
    std::stringstream buf;
    buf << in.rdbuf();
    if (in.bad()) return LoadError{fmt::format("{}: read error", path)};
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
    if (cfg.testonly_server_handshake_delay_ms)
        out += fmt::format("testonly_server_handshake_delay_ms = {} # TESTING ONLY: slows every "
                           "server handshake\n",
                           cfg.testonly_server_handshake_delay_ms);
    if (cfg.testonly_clc_timeout_ms)
        out += fmt::format("testonly_clc_timeout_ms = {} # TESTING ONLY: how long a handshake "
                           "waits for a CLC message\n",
                           cfg.testonly_clc_timeout_ms);
    if (cfg.testonly_learn_hold_ms)
        out += fmt::format("testonly_learn_hold_ms = {} # TESTING ONLY: how long a learned TCP "
                           "decision holds\n",
                           cfg.testonly_learn_hold_ms);
    if (cfg.testonly_learn_probe_gap_ms)
        out += fmt::format("testonly_learn_probe_gap_ms = {} # TESTING ONLY: the least time "
                           "between two probes\n",
                           cfg.testonly_learn_probe_gap_ms);
    out += "trusted_uids = [";
    for (size_t i = 0; i < cfg.trusted_uids.size(); ++i)
        out += fmt::format("{}{}", i ? ", " : "", cfg.trusted_uids[i]);
    out += "]\n";
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

} // namespace usmc::config
