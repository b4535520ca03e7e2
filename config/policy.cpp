// SPDX-License-Identifier: MIT
#include "config/policy.hpp"

#include <arpa/inet.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <charconv>
#include <cstring>

namespace usmc::config {

std::optional<ModeSet> parse_mode(std::string_view name) {
    if (name == "auto") return kModeAuto;
    if (name == "smcd") return kModeSmcD;
    if (name == "smcr") return kModeSmcR;
    if (name == "tcp") return ModeSet{0};
    return std::nullopt;
}

const char* mode_name(ModeSet modes) {
    switch (modes & kModeAuto) {
    case kModeAuto:
        return "auto";
    case kModeSmcD:
        return "smcd";
    case kModeSmcR:
        return "smcr";
    default:
        return "tcp";
    }
}

std::optional<Role> parse_role(std::string_view name) {
    if (name == "any") return Role::Any;
    if (name == "server") return Role::Server;
    if (name == "client") return Role::Client;
    return std::nullopt;
}

const char* role_name(Role role) {
    switch (role) {
    case Role::Server:
        return "server";
    case Role::Client:
        return "client";
    default:
        return "any";
    }
}

std::optional<Prefix> Prefix::parse(std::string_view text) {
    Prefix p;
    std::string addr(text.substr(0, text.find('/')));
    if (inet_pton(AF_INET, addr.c_str(), p.addr) == 1) {
        p.family = AF_INET;
        p.length = 32;
    } else if (inet_pton(AF_INET6, addr.c_str(), p.addr) == 1) {
        p.family = AF_INET6;
        p.length = 128;
    } else {
        return std::nullopt;
    }
    if (auto slash = text.find('/'); slash != std::string_view::npos) {
        std::string_view len = text.substr(slash + 1);
        unsigned n = 0;
        auto [end, ec] = std::from_chars(len.data(), len.data() + len.size(), n);
        if (ec != std::errc() || end != len.data() + len.size() || len.empty() || n > p.length)
            return std::nullopt;
        p.length = n;
    }
    // Fold an IPv4-mapped prefix (::ffff:a.b.c.d/n, n >= 96) to IPv4 so it
    // matches the folded endpoints.
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (p.family == AF_INET6 && p.length >= 96 && std::memcmp(p.addr, mapped, 12) == 0) {
        std::memmove(p.addr, p.addr + 12, 4);
        std::memset(p.addr + 4, 0, 12);
        p.family = AF_INET;
        p.length -= 96;
    }
    return p;
}

std::string Prefix::to_string() const {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(family, addr, buf, sizeof buf);
    return std::string(buf) + "/" + std::to_string(length);
}

std::string PortRange::to_string() const {
    if (low == high) return std::to_string(low);
    return std::to_string(low) + "-" + std::to_string(high);
}

std::optional<Endpoint> Endpoint::from_sockaddr(const sockaddr* sa, unsigned len) {
    if (!sa) return std::nullopt;
    Endpoint e;
    if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
        auto* in = reinterpret_cast<const sockaddr_in*>(sa);
        e.family = AF_INET;
        std::memcpy(e.addr, &in->sin_addr, 4);
        e.port = ntohs(in->sin_port);
        return e;
    }
    if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
        auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
        e.port = ntohs(in6->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            e.family = AF_INET;
            std::memcpy(e.addr, in6->sin6_addr.s6_addr + 12, 4);
        } else {
            e.family = AF_INET6;
            std::memcpy(e.addr, in6->sin6_addr.s6_addr, 16);
        }
        return e;
    }
    return std::nullopt;
}

static bool prefix_contains(const Prefix& p, const Endpoint& e) {
    if (p.family != e.family) return false;
    unsigned full = p.length / 8, rest = p.length % 8;
    if (std::memcmp(p.addr, e.addr, full) != 0) return false;
    if (rest == 0) return true;
    uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
    return (p.addr[full] & mask) == (e.addr[full] & mask);
}

static bool glob_matches(const std::string& glob, std::string_view name) {
    if (name.empty()) return false;
    std::string n(name);
    return fnmatch(glob.c_str(), n.c_str(), 0) == 0;
}

bool rule_matches(const PolicyRule& rule, const MatchInput& in) {
    if (!rule.program.empty() && !glob_matches(rule.program, in.exe_name) &&
        !glob_matches(rule.program, in.argv0_name))
        return false;
    if (rule.role != Role::Any && rule.role != in.role) return false;
    if (rule.address) {
        if (!in.endpoint || !prefix_contains(*rule.address, *in.endpoint)) return false;
    }
    if (rule.port) {
        if (!in.endpoint || in.endpoint->port < rule.port->low ||
            in.endpoint->port > rule.port->high)
            return false;
    }
    return true;
}

ModeSet match_policy(const std::vector<PolicyRule>& rules, const MatchInput& in, ModeSet fallback,
                     int* matched_line) {
    for (const auto& rule : rules) {
        if (rule_matches(rule, in)) {
            if (matched_line) *matched_line = rule.line;
            return rule.modes;
        }
    }
    if (matched_line) *matched_line = 0;
    return fallback;
}

} // namespace usmc::config
