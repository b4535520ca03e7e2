// SPDX-License-Identifier: MIT
#include "tools/peer_reasons.hpp"
#include "tools/reasons.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

using namespace usmc;
namespace reasons = usmc::tools::reasons;

TEST_CASE("every fallback reason has a meaning and a remedy") {
    for (unsigned i = 0; i < fallback::kCount; ++i) {
        uint32_t code = fallback::code_at(static_cast<fallback::Index>(i));
        INFO(fallback::name_of(code));
        const auto& a = reasons::advice_of(static_cast<fallback::Code>(code));
        CHECK(std::string(a.meaning).size() > 10);
        CHECK(std::string(a.remedy).size() > 10);
        CHECK(reasons::advice_for(code).has_value());
        // Markup the man page and the terminal both read: pairs of stars.
        std::string both = std::string(a.meaning) + a.remedy;
        CHECK(std::count(both.begin(), both.end(), '*') % 2 == 0);
    }
    CHECK_FALSE(reasons::advice_for(0x12345678));
}

TEST_CASE("the terminal's text has no markup and names the reason") {
    CHECK(reasons::plain("set *learn_smc = false* in *usmc.toml*(5)") ==
          "set learn_smc = false in usmc.toml(5)");
    std::string e = reasons::explain(fallback::LEARNED);
    CHECK(e.starts_with("LEARNED (0x0a0a0000): "));
    CHECK(e.find("What to do: ") != std::string::npos);
    CHECK(e.find('*') == std::string::npos);
    CHECK(reasons::explain(0x12345678).starts_with("UNKNOWN"));
}

TEST_CASE("usmc(8) lists every reason with the table's text") {
    std::ifstream f(USMC_MAN_PAGE);
    REQUIRE(f);
    std::stringstream page;
    page << f.rdbuf();
    std::string section = reasons::man_section();
    INFO("docs/man/usmc.8.scd's FALLBACK REASONS must hold reasons::man_section() verbatim");
    CHECK(page.str().find(section) != std::string::npos);
    for (unsigned i = 0; i < fallback::kCount; ++i) {
        uint32_t code = fallback::code_at(static_cast<fallback::Index>(i));
        CHECK(section.find(std::string("*") + fallback::name_of(code) + "* 0x") !=
              std::string::npos);
    }
    // No line of it breaks scdoc's bold markup across lines.
    std::istringstream lines(section);
    for (std::string line; std::getline(lines, line);)
        CHECK(std::count(line.begin(), line.end(), '*') % 2 == 0);
}

TEST_CASE("usmc ss joins a connection's ends across address families") {
    CHECK(tools::unmapped("[::ffff:127.0.0.1]:8080") == "127.0.0.1:8080");
    CHECK(tools::unmapped("127.0.0.1:8080") == "127.0.0.1:8080");
    CHECK(tools::unmapped("[::1]:8080") == "[::1]:8080");
    CHECK(tools::with_client_reason("PEERNOSMC 0x03010000", fallback::LEARNED) ==
          "PEERNOSMC 0x03010000 client:LEARNED");
    CHECK(tools::with_client_reason("-", 0) == "-");
    CHECK(tools::reason_json(0).dump() == "null");
    CHECK(tools::reason_json(fallback::EPOLLEARLY).dump() ==
          "{\"name\":\"EPOLLEARLY\",\"code\":168493056}");
}
