// SPDX-License-Identifier: MIT
#pragma once
// [[policy]] rules: which transport a socket may use, chosen by program name,
// role, address prefix and port range. First match wins (the libvma.conf
// model); sockets accepted from a listener follow the listener's decision.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct sockaddr;

namespace usmc::config {

// A set of transports. Empty = plain TCP only.
enum ModeBits : uint8_t { kModeSmcD = 1, kModeSmcR = 2, kModeAuto = kModeSmcD | kModeSmcR };
using ModeSet = uint8_t;

std::optional<ModeSet> parse_mode(std::string_view name); // auto|smcd|smcr|tcp
const char* mode_name(ModeSet modes);

enum class Role : uint8_t { Any, Server, Client };
std::optional<Role> parse_role(std::string_view name);
const char* role_name(Role role);

struct Prefix {
    int family = 0;        // AF_INET or AF_INET6
    uint8_t addr[16] = {}; // network byte order, only the first 4 bytes for AF_INET
    unsigned length = 0;   // prefix length in bits
    static std::optional<Prefix> parse(std::string_view text); // "10.0.0.0/8", "::1", "127.0.0.1"
    std::string to_string() const;
};

struct PortRange {
    uint16_t low = 0, high = 65535;
    std::string to_string() const;
};

// A socket address reduced to what rules match on: IPv4-mapped IPv6
// addresses are folded to IPv4 so a rule for 127.0.0.1 also matches
// ::ffff:127.0.0.1.
struct Endpoint {
    int family = 0;
    uint8_t addr[16] = {};
    uint16_t port = 0; // host byte order
    static std::optional<Endpoint> from_sockaddr(const sockaddr* sa, unsigned len);
};

struct PolicyRule {
    std::string program; // fnmatch glob; empty matches every program
    Role role = Role::Any;
    std::optional<Prefix> address;
    std::optional<PortRange> port;
    ModeSet modes = kModeAuto;
    int line = 0; // where the rule starts in its file, for diagnostics
};

struct MatchInput {
    std::string_view exe_name;        // basename of /proc/self/exe
    std::string_view argv0_name;      // basename of argv[0] as the program started
    Role role = Role::Any;            // Server for listeners, Client for connects
    std::optional<Endpoint> endpoint; // local address (server) or peer (client)
};

bool rule_matches(const PolicyRule& rule, const MatchInput& in);

// The first matching rule's modes, or `fallback` when none matches.
// `matched_line` receives the rule's line (0 when none matched).
ModeSet match_policy(const std::vector<PolicyRule>& rules, const MatchInput& in, ModeSet fallback,
                     int* matched_line = nullptr);

} // namespace usmc::config
