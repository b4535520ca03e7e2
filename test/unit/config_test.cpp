// SPDX-License-Identifier: MIT
#include "config/config.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace usmc::config;

namespace {

Config parse_ok(const std::string& text) {
    auto r = parse_config(text, "test.toml");
    if (auto* e = std::get_if<LoadError>(&r)) FAIL("unexpected error: " << e->message);
    return std::get<Config>(r);
}

std::string parse_err(const std::string& text) {
    auto r = parse_config(text, "test.toml");
    auto* e = std::get_if<LoadError>(&r);
    REQUIRE(e != nullptr);
    return e->message;
}

// Every error of a file: the first, then the others.
std::vector<std::string> all_errors(const std::string& text, ParseOptions options = {}) {
    auto r = parse_config(text, "test.toml", options);
    auto* e = std::get_if<LoadError>(&r);
    REQUIRE(e != nullptr);
    std::vector<std::string> all{e->message};
    all.insert(all.end(), e->more.begin(), e->more.end());
    return all;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("an empty file gives the kernel's defaults") {
    Config c = parse_ok("");
    CHECK_FALSE(c.limit_smc_hs);
    CHECK(c.rmem == 65536);
    CHECK(c.wmem == 65536);
    CHECK(c.autocorking_size == 65536);
    CHECK(c.busy_poll_us == 20); // usmc's own default (the kernel has no such knob)
    CHECK(c.mode == kModeAuto);
    CHECK(c.policies.empty());
    CHECK(c.source == "test.toml");
}

TEST_CASE("every global key is read") {
    Config c = parse_ok(R"(
limit_smc_hs = true
rmem = "128K"
wmem = 32768
autocorking_size = 0
mode = "smcd"
clc_detect_timeout_ms = 20
busy_poll_us = 50
max_dmb_memory = "1G"
hs_workers = 4
log_level = "debug"
trusted_uids = [33, 1000]
)");
    CHECK(c.limit_smc_hs);
    CHECK(c.rmem == 128 * 1024);
    CHECK(c.wmem == 32768);
    CHECK(c.autocorking_size == 0);
    CHECK(c.mode == kModeSmcD);
    CHECK(c.clc_detect_timeout_ms == 20);
    CHECK(c.busy_poll_us == 50);
    CHECK(c.max_dmb_memory == (1ull << 30));
    CHECK(c.hs_workers == 4);
    CHECK(c.log_level == LogLevel::Debug);
    CHECK(c.trusted_uids == std::vector<uint32_t>{33, 1000});
}

TEST_CASE("policies are read in order with all their keys") {
    Config c = parse_ok(R"(
[[policy]]
program = "redis-*"
role = "server"
address = "127.0.0.0/8"
port = "6379-6380"
mode = "smcd"

[[policy]]
port = 22
mode = "tcp"
)");
    REQUIRE(c.policies.size() == 2);
    const auto& a = c.policies[0];
    CHECK(a.program == "redis-*");
    CHECK(a.role == Role::Server);
    REQUIRE(a.address);
    CHECK(a.address->to_string() == "127.0.0.0/8");
    REQUIRE(a.port);
    CHECK(a.port->low == 6379);
    CHECK(a.port->high == 6380);
    CHECK(a.modes == kModeSmcD);
    CHECK(a.line == 2);
    const auto& b = c.policies[1];
    CHECK(b.modes == 0);
    CHECK(b.port->low == 22);
    CHECK(b.port->high == 22);
    CHECK(b.line == 9);
}

TEST_CASE("errors name the file, the line and the key") {
    SECTION("syntax error") {
        auto m = parse_err("rmem = \n");
        CHECK(m.rfind("test.toml:1:", 0) == 0);
        CHECK(m.find("syntax error") != std::string::npos);
    }
    SECTION("characters toml++ 3.3 cannot take, outside comments") {
        // toml++ 3.3 reaches __builtin_unreachable on these (the fuzzer's finds).
        for (const char* text :
             {"\xEF\xBB\xBB", "rmem = 2\"5 \xCA\xB4 = \"smcr\"\n", "\"\"\"\\\\\\\xE3\x80\x94\\U0",
              "555lm = 1=\"-=5%\xEF\xBB\xB1\x02\n", "rmem = \"64K\"\n\xC3\xA9 = 1\n",
              "[[policy]]\nprogram = \"caf\xC3\xA9\"\nmode = 'tcp'\n"}) {
            auto m = parse_err(text);
            CHECK(m.rfind("test.toml:", 0) == 0);
            CHECK(m.find("does not take outside a comment") != std::string::npos);
        }
        CHECK(parse_err("rmem = \"64K\"\n\xC3\xA9 = 1\n").rfind("test.toml:2:1:", 0) == 0);
        // In comments they are blanked; other characters beyond ASCII pass.
        auto ok = parse_config("# caf\xC3\xA9 \xEF\xBB\xBB\n[[policy]] # \xC3\xA9 '\"\n"
                               "program = \"\xE4\xB8\xAD # \\\" \"\nmode = 'tcp' # \xD0\x96\n",
                               "test.toml");
        REQUIRE(std::holds_alternative<Config>(ok));
        CHECK(std::get<Config>(ok).policies.at(0).program == "\xE4\xB8\xAD # \" ");
        CHECK(std::holds_alternative<Config>(parse_config("\xEF\xBB\xBFrmem = \"64K\"\n", "t")));
    }
    SECTION("unknown key") {
        auto m = parse_err("\n\nrmme = 5\n");
        CHECK(m.rfind("test.toml:3:", 0) == 0);
        CHECK(m.find("key 'rmme'") != std::string::npos);
        CHECK(m.find("unknown key") != std::string::npos);
    }
    SECTION("wrong type") {
        auto m = parse_err("limit_smc_hs = \"yes\"\n");
        CHECK(m.find("test.toml:1:") == 0);
        CHECK(m.find("key 'limit_smc_hs'") != std::string::npos);
        CHECK(m.find("expected a boolean (true/false or 1/0), got a string") != std::string::npos);
        CHECK(parse_err("learn_smc = 2\n").find("expected a boolean (true/false or 1/0), got 2") !=
              std::string::npos);
    }
    SECTION("size below the kernel's minimum") {
        auto m = parse_err("rmem = 1000\n");
        CHECK(m.find("key 'rmem'") != std::string::npos);
        CHECK(m.find("between 16KiB and 1MiB") != std::string::npos);
    }
    SECTION("size above the SMC-D maximum") {
        CHECK(parse_err("wmem = \"2M\"").find("key 'wmem'") != std::string::npos);
    }
    SECTION("size that is not a size") {
        CHECK(parse_err("rmem = \"lots\"").find("'lots' is not a size") != std::string::npos);
    }
    SECTION("size of the wrong type") {
        CHECK(parse_err("rmem = 1.5").find("expected a size") != std::string::npos);
    }
    SECTION("negative size") {
        CHECK(parse_err("autocorking_size = -1").find("must not be negative") != std::string::npos);
    }
    SECTION("integer out of range") {
        CHECK(parse_err("hs_workers = 0").find("between 1 and 64") != std::string::npos);
        CHECK(parse_err("busy_poll_us = 1000000").find("key 'busy_poll_us'") != std::string::npos);
        CHECK(parse_err("clc_detect_timeout_ms = -5").find("key 'clc_detect_timeout_ms'") !=
              std::string::npos);
    }
    SECTION("bad enumerations") {
        CHECK(parse_err("mode = \"fast\"").find("auto, smcd, smcr, tcp") != std::string::npos);
        CHECK(parse_err("log_level = \"loud\"").find("error, warn, info, debug") !=
              std::string::npos);
    }
    SECTION("trusted_uids") {
        CHECK(parse_err("trusted_uids = 5").find("expected an array") != std::string::npos);
        CHECK(parse_err("trusted_uids = [\"www\"]").find("expected an integer") !=
              std::string::npos);
        CHECK(parse_err("trusted_uids = [-1]").find("key 'trusted_uids'") != std::string::npos);
    }
}

TEST_CASE("policy errors") {
    SECTION("missing mode") {
        auto m = parse_err("\n[[policy]]\nport = 80\n");
        CHECK(m.rfind("test.toml:2:", 0) == 0);
        CHECK(m.find("key 'policy.mode'") != std::string::npos);
    }
    SECTION("unknown key") {
        auto m = parse_err("[[policy]]\nmode = \"tcp\"\nprogramme = \"x\"\n");
        CHECK(m.rfind("test.toml:3:", 0) == 0);
        CHECK(m.find("key 'policy.programme'") != std::string::npos);
    }
    SECTION("bad values") {
        CHECK(parse_err("[[policy]]\nmode = \"quick\"").find("key 'policy.mode'") !=
              std::string::npos);
        CHECK(
            parse_err("[[policy]]\nmode = \"tcp\"\nrole = \"both\"").find("server, client, any") !=
            std::string::npos);
        CHECK(parse_err("[[policy]]\nmode = \"tcp\"\naddress = \"1.2.3\"").find("'1.2.3' is not") !=
              std::string::npos);
        CHECK(parse_err("[[policy]]\nmode = \"tcp\"\naddress = \"10.0.0.0/33\"")
                  .find("key 'policy.address'") != std::string::npos);
        CHECK(parse_err("[[policy]]\nmode = \"tcp\"\naddress = \"10.0.0.0/\"")
                  .find("key 'policy.address'") != std::string::npos);
        CHECK(parse_err("[[policy]]\nmode = \"tcp\"\nport = 70000").find("between 0 and 65535") !=
              std::string::npos);
        CHECK(parse_err("[[policy]]\nmode = \"tcp\"\nport = \"90-80\"").find("port range") !=
              std::string::npos);
        CHECK(parse_err("[[policy]]\nmode = \"tcp\"\nport = \"80-90x\"").find("port range") !=
              std::string::npos);
        CHECK(parse_err("[[policy]]\nmode = \"tcp\"\nport = \"80-70000\"").find("port range") !=
              std::string::npos);
        CHECK(parse_err("[[policy]]\nmode = \"tcp\"\nport = true").find("expected a port") !=
              std::string::npos);
        CHECK(parse_err("[[policy]]\nmode = \"tcp\"\nprogram = \"\"").find("must not be empty") !=
              std::string::npos);
    }
    SECTION("policy written as a plain table") {
        CHECK(parse_err("[policy]\nmode = \"tcp\"\n").find("[[policy]]") != std::string::npos);
    }
}

TEST_CASE("describe() prints settings that parse back to the same values") {
    Config c = parse_ok(R"(
limit_smc_hs = true
rmem = "256K"
mode = "smcr"
trusted_uids = [7]
[[policy]]
program = "nginx"
role = "server"
address = "::1"
port = "80-81"
mode = "smcd"
)");
    Config again = parse_ok(describe(c));
    CHECK(again.limit_smc_hs == c.limit_smc_hs);
    CHECK(again.rmem == c.rmem);
    CHECK(again.mode == c.mode);
    CHECK(again.trusted_uids == c.trusted_uids);
    REQUIRE(again.policies.size() == 1);
    CHECK(again.policies[0].program == "nginx");
    CHECK(again.policies[0].role == Role::Server);
    CHECK(again.policies[0].address->to_string() == "::1/128");
    CHECK(again.policies[0].port->to_string() == "80-81");
    CHECK(again.policies[0].modes == kModeSmcD);
}

TEST_CASE("describe() prints a single port as a number, which parses back") {
    Config c = parse_ok("[[policy]]\nport = 22\nmode = \"tcp\"\n");
    std::string text = describe(c);
    CHECK(text.find("port = 22\n") != std::string::npos);
    Config again = parse_ok(text);
    REQUIRE(again.policies.size() == 1);
    REQUIRE(again.policies[0].port);
    CHECK(again.policies[0].port->low == 22);
    CHECK(again.policies[0].port->high == 22);
}

TEST_CASE("describe() quotes a program glob with quotes, backslashes and control characters") {
    Config c = parse_ok(R"([[policy]]
program = "a\"b\\c\u001bd\n"
mode = "tcp"
)");
    REQUIRE(c.policies.size() == 1);
    CHECK(c.policies[0].program == "a\"b\\c\x1b"
                                   "d\n");
    Config again = parse_ok(describe(c));
    REQUIRE(again.policies.size() == 1);
    CHECK(again.policies[0].program == c.policies[0].program);
}

TEST_CASE("describe() keeps a program glob's leading newline") {
    Config c = parse_ok("[[policy]]\nprogram = \"\\nx\"\nmode = \"tcp\"\n");
    REQUIRE(c.policies.size() == 1);
    CHECK(c.policies[0].program == "\nx");
    Config again = parse_ok(describe(c));
    REQUIRE(again.policies.size() == 1);
    CHECK(again.policies[0].program == "\nx");
}

TEST_CASE("files: missing file and the USMC_CONFIG variable") {
    auto missing = load_config_file("/nonexistent/usmc.toml");
    REQUIRE(std::holds_alternative<LoadError>(missing));
    CHECK(std::get<LoadError>(missing).message.find("/nonexistent/usmc.toml: cannot open") == 0);

    char path[] = "/tmp/usmc-config-test-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    std::ofstream(path) << "rmem = \"32K\"\n";
    setenv("USMC_CONFIG", path, 1);
    CHECK(default_config_path() == path);
    auto loaded = load_default_config();
    REQUIRE(std::holds_alternative<Config>(loaded));
    CHECK(std::get<Config>(loaded).rmem == 32768);
    CHECK(std::get<Config>(loaded).source == path);
    unsetenv("USMC_CONFIG");
    unlink(path);
}

TEST_CASE("every error of a file is told, in the order of the file") {
    // toml++ hands keys over sorted by name; the errors come in file order.
    auto errors = all_errors("wmem = \"2M\"\nbusy_poll_us = -1\nmode = \"fast\"\n");
    REQUIRE(errors.size() == 3);
    CHECK(errors[0].rfind("test.toml:1:8: key 'wmem': must be between 16KiB and 1MiB", 0) == 0);
    CHECK(errors[1].rfind("test.toml:2:16: key 'busy_poll_us': must be between", 0) == 0);
    CHECK(errors[2].rfind("test.toml:3:8: key 'mode': must be one of", 0) == 0);

    // Errors inside [[policy]] tables and arrays count one by one, beside the
    // global ones; a good key between them changes nothing.
    errors = all_errors(R"(rmme = 1
hs_workers = 4
trusted_uids = [1, -1, "x"]
[[policy]]
port = 70000
mode = "warp"
[[policy]]
program = "x"
)");
    REQUIRE(errors.size() == 6);
    CHECK(contains(errors[0], "test.toml:1:8: key 'rmme': unknown key"));
    CHECK(contains(errors[1], "test.toml:3:20: key 'trusted_uids'"));
    CHECK(contains(errors[2], "test.toml:3:24: key 'trusted_uids': expected an integer"));
    CHECK(contains(errors[3], "test.toml:5:8: key 'policy.port'"));
    CHECK(contains(errors[4], "test.toml:6:8: key 'policy.mode'"));
    CHECK(contains(errors[5], "test.toml:7:1: key 'policy.mode': missing"));

    // One error: nothing more.
    auto r = parse_config("rmem = 1000\n", "test.toml");
    REQUIRE(std::holds_alternative<LoadError>(r));
    CHECK(std::get<LoadError>(r).more.empty());
    // A syntax error ends the reading: it is the only one told.
    CHECK(all_errors("rmem = 1000\nwmem = \n").size() == 1);
}

TEST_CASE("booleans take the kernel's 0 and 1 as well") {
    Config c = parse_ok("limit_smc_hs = 1\nautotune_dmb = 0\nbusy_poll_adaptive = 0\n"
                        "learn_smc = 0\n");
    CHECK(c.limit_smc_hs);
    CHECK_FALSE(c.autotune_dmb);
    CHECK_FALSE(c.busy_poll_adaptive);
    CHECK_FALSE(c.learn_smc);
    CHECK_FALSE(parse_ok("limit_smc_hs = 0\n").limit_smc_hs);
    CHECK(parse_ok("learn_smc = 1\n").learn_smc);
    for (const char* bad : {"limit_smc_hs = 2", "limit_smc_hs = -1", "limit_smc_hs = 1.0",
                            "limit_smc_hs = \"1\"", "learn_smc = \"true\""})
        CHECK(contains(parse_err(bad), "expected a boolean (true/false or 1/0)"));
}

TEST_CASE("the kernel's smcr_* sysctls are read and checked") {
    Config d = parse_ok("");
    CHECK(d.smcr_buf_type == 0);
    CHECK(d.smcr_testlink_time == 30);
    CHECK(d.smcr_max_links_per_lgr == 2);
    CHECK(d.smcr_max_conns_per_lgr == 255);
    CHECK(d.smcr_max_send_wr == 16);
    CHECK(d.smcr_max_recv_wr == 48);

    Config c = parse_ok(R"(smcr_buf_type = 2
smcr_testlink_time = 0
smcr_max_links_per_lgr = 1
smcr_max_conns_per_lgr = 16
smcr_max_send_wr = 2048
smcr_max_recv_wr = 2
)");
    CHECK(c.smcr_buf_type == 2);
    CHECK(c.smcr_testlink_time == 0);
    CHECK(c.smcr_max_links_per_lgr == 1);
    CHECK(c.smcr_max_conns_per_lgr == 16);
    CHECK(c.smcr_max_send_wr == 2048);
    CHECK(c.smcr_max_recv_wr == 2);
    Config again = parse_ok(describe(c));
    CHECK(again.smcr_buf_type == 2);
    CHECK(again.smcr_testlink_time == 0);
    CHECK(again.smcr_max_links_per_lgr == 1);
    CHECK(again.smcr_max_conns_per_lgr == 16);
    CHECK(again.smcr_max_send_wr == 2048);
    CHECK(again.smcr_max_recv_wr == 2);

    auto errors = all_errors(R"(smcr_buf_type = 3
smcr_testlink_time = -1
smcr_max_links_per_lgr = 3
smcr_max_conns_per_lgr = 15
smcr_max_send_wr = 1
smcr_max_recv_wr = 2049
)");
    REQUIRE(errors.size() == 6);
    CHECK(contains(errors[0], "key 'smcr_buf_type': must be between 0 and 2 (got 3)"));
    CHECK(contains(errors[1], "key 'smcr_testlink_time': must be between 0 and"));
    CHECK(contains(errors[2], "key 'smcr_max_links_per_lgr': must be between 1 and 2"));
    CHECK(contains(errors[3], "key 'smcr_max_conns_per_lgr': must be between 16 and 255"));
    CHECK(contains(errors[4], "key 'smcr_max_send_wr': must be between 2 and 2048"));
    CHECK(contains(errors[5], "key 'smcr_max_recv_wr': must be between 2 and 2048"));
}

TEST_CASE("sizes in the file: one grammar, any case") {
    for (const char* text :
         {"\"64k\"", "\"64K\"", "\"64KiB\"", "\"64kib\"", "\"64KB\"", "65536", "\"65536\""})
        CHECK(parse_ok(std::string("rmem = ") + text).rmem == 65536);
    CHECK(parse_ok("wmem = \"1m\"").wmem == 1 << 20);
    CHECK(parse_ok("wmem = \"1MiB\"").wmem == 1 << 20);
    CHECK(
        contains(parse_err("rmem = \"99999999999999999999k\""), "must be between 16KiB and 1MiB"));
}

TEST_CASE("testonly_* keys only where the build takes them") {
    const char* text = "testonly_server_handshake_delay_ms = 40\ntestonly_clc_timeout_ms = 300\n"
                       "testonly_learn_hold_ms = 7\ntestonly_learn_probe_gap_ms = 1\n";
    ParseOptions with{true}, without{false};

    auto r = parse_config(text, "test.toml", with);
    REQUIRE(std::holds_alternative<Config>(r));
    const Config& c = std::get<Config>(r);
    CHECK(c.testonly_server_handshake_delay_ms == 40);
    CHECK(c.testonly_clc_timeout_ms == 300);
    CHECK(c.testonly_learn_hold_ms == 7);
    CHECK(c.testonly_learn_probe_gap_ms == 1);
    CHECK(testonly_in_effect(c) ==
          std::vector<std::string>{"testonly_server_handshake_delay_ms = 40",
                                   "testonly_clc_timeout_ms = 300", "testonly_learn_hold_ms = 7",
                                   "testonly_learn_probe_gap_ms = 1"});
    CHECK(contains(describe(c), "testonly_clc_timeout_ms = 300 # TESTING ONLY\n"));
    CHECK(testonly_in_effect(parse_ok("testonly_clc_timeout_ms = 0\n")).empty());

    // Without: unknown keys, every one, and the known keys listed leave them out.
    auto errors = all_errors(text, without);
    REQUIRE(errors.size() == 4);
    for (const auto& e : errors) {
        CHECK(contains(e, "unknown key (known: limit_smc_hs, rmem, wmem"));
        CHECK_FALSE(contains(e.substr(e.find("(known:")), "testonly"));
    }
    CHECK(contains(errors[0], "key 'testonly_server_handshake_delay_ms': unknown key"));
    // The other keys' list names the smcr_* keys and [[policy]].
    CHECK(contains(errors[0], "smcr_buf_type"));
    CHECK(contains(errors[0], "[[policy]])"));

    // Where they are taken, they are still not among the keys a user is told of.
    auto m = parse_err("rmme = 1\n");
    CHECK(contains(m, "unknown key (known: "));
    CHECK_FALSE(contains(m, "testonly"));

    // This build (the tests') takes them by default.
    CHECK(kTestonlyKnobs);
    CHECK(std::holds_alternative<Config>(parse_config(text, "test.toml")));
}
