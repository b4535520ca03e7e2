// SPDX-License-Identifier: MIT
#include "config/config.hpp"

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <netinet/in.h>

using namespace usmc::config;

namespace {

std::vector<PolicyRule> rules_of(const std::string& text) {
    auto r = parse_config(text, "p.toml");
    REQUIRE(std::holds_alternative<Config>(r));
    return std::get<Config>(r).policies;
}

Endpoint v4(const char* ip, uint16_t port) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, ip, &sa.sin_addr);
    return *Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&sa), sizeof sa);
}

Endpoint v6(const char* ip, uint16_t port) {
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(port);
    inet_pton(AF_INET6, ip, &sa.sin6_addr);
    return *Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&sa), sizeof sa);
}

MatchInput input(const char* exe, Role role, Endpoint ep, const char* argv0 = "") {
    MatchInput in;
    in.exe_name = exe;
    in.argv0_name = argv0;
    in.role = role;
    in.endpoint = ep;
    return in;
}

} // namespace

TEST_CASE("no rule matches: the default applies") {
    int line = -1;
    CHECK(match_policy({}, input("nginx", Role::Server, v4("127.0.0.1", 80)), kModeSmcD, &line) ==
          kModeSmcD);
    CHECK(line == 0);
}

TEST_CASE("first match wins") {
    auto rules = rules_of(R"(
[[policy]]
port = 22
mode = "tcp"
[[policy]]
mode = "smcd"
)");
    int line = 0;
    CHECK(match_policy(rules, input("ssh", Role::Client, v4("127.0.0.1", 22)), kModeAuto, &line) ==
          0);
    CHECK(line == 2);
    CHECK(match_policy(rules, input("curl", Role::Client, v4("127.0.0.1", 80)), kModeAuto, &line) ==
          kModeSmcD);
    CHECK(line == 5);
}

TEST_CASE("program globs match the executable or argv[0]") {
    auto rules = rules_of("[[policy]]\nprogram = \"redis-*\"\nmode = \"tcp\"\n");
    CHECK(match_policy(rules, input("redis-server", Role::Server, v4("127.0.0.1", 6379)),
                       kModeAuto) == 0);
    CHECK(match_policy(rules,
                       input("python3.11", Role::Server, v4("127.0.0.1", 6379), "redis-benchmark"),
                       kModeAuto) == 0);
    CHECK(match_policy(rules, input("nginx", Role::Server, v4("127.0.0.1", 6379)), kModeAuto) ==
          kModeAuto);
}

TEST_CASE("roles") {
    auto rules = rules_of("[[policy]]\nrole = \"client\"\nmode = \"tcp\"\n");
    CHECK(match_policy(rules, input("x", Role::Client, v4("1.2.3.4", 1)), kModeAuto) == 0);
    CHECK(match_policy(rules, input("x", Role::Server, v4("1.2.3.4", 1)), kModeAuto) == kModeAuto);
}

TEST_CASE("address prefixes, IPv4, IPv6 and IPv4-mapped") {
    auto rules = rules_of(R"(
[[policy]]
address = "10.1.0.0/17"
mode = "smcr"
[[policy]]
address = "fd00::/8"
mode = "smcd"
[[policy]]
address = "::ffff:192.168.0.0/112"
mode = "tcp"
)");
    CHECK(match_policy(rules, input("x", Role::Client, v4("10.1.127.255", 1)), kModeAuto) ==
          kModeSmcR);
    CHECK(match_policy(rules, input("x", Role::Client, v4("10.1.128.0", 1)), kModeAuto) ==
          kModeAuto);
    CHECK(match_policy(rules, input("x", Role::Client, v6("::ffff:10.1.0.9", 1)), kModeAuto) ==
          kModeSmcR);
    CHECK(match_policy(rules, input("x", Role::Client, v6("fdab::1", 1)), kModeAuto) == kModeSmcD);
    CHECK(match_policy(rules, input("x", Role::Client, v6("fe80::1", 1)), kModeAuto) == kModeAuto);
    CHECK(match_policy(rules, input("x", Role::Client, v4("192.168.4.4", 1)), kModeAuto) == 0);
}

TEST_CASE("port ranges are inclusive") {
    auto rules = rules_of("[[policy]]\nport = \"8000-8099\"\nmode = \"tcp\"\n");
    CHECK(match_policy(rules, input("x", Role::Server, v4("0.0.0.0", 8000)), kModeAuto) == 0);
    CHECK(match_policy(rules, input("x", Role::Server, v4("0.0.0.0", 8099)), kModeAuto) == 0);
    CHECK(match_policy(rules, input("x", Role::Server, v4("0.0.0.0", 8100)), kModeAuto) ==
          kModeAuto);
    CHECK(match_policy(rules, input("x", Role::Server, v4("0.0.0.0", 7999)), kModeAuto) ==
          kModeAuto);
}

TEST_CASE("a rule with an address or port never matches a socket without an address") {
    auto rules = rules_of("[[policy]]\nport = 80\nmode = \"tcp\"\n");
    MatchInput in;
    in.exe_name = "x";
    in.role = Role::Server;
    CHECK(match_policy(rules, in, kModeAuto) == kModeAuto);
}

TEST_CASE("mode names") {
    CHECK(parse_mode("auto") == kModeAuto);
    CHECK(parse_mode("tcp") == ModeSet{0});
    CHECK_FALSE(parse_mode("SMCD"));
    CHECK(std::string(mode_name(kModeSmcD)) == "smcd");
    CHECK(std::string(mode_name(0)) == "tcp");
}
