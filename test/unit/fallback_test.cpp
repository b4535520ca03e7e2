// SPDX-License-Identifier: MIT
#include "engine/base/counters.hpp"
#include "engine/base/fallback.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <string>

using namespace usmc;

TEST_CASE("fallback codes carry the kernel's values and names") {
    CHECK(fallback::PEERNOSMC == 0x03010000u);
    CHECK(fallback::MEM == 0x01010000u);
    CHECK(fallback::PEERDECL == 0x05000000u);
    CHECK(std::string(fallback::name_of(0x03010000)) == "PEERNOSMC");
    CHECK(std::string(fallback::name_of(0x12345678)) == "UNKNOWN");
    CHECK_FALSE(fallback::index_of(0x12345678));
    std::set<uint32_t> codes;
    for (unsigned i = 0; i < fallback::kCount; ++i) {
        uint32_t code = fallback::code_at(static_cast<fallback::Index>(i));
        CHECK(codes.insert(code).second); // unique
        CHECK(fallback::index_of(code) == static_cast<fallback::Index>(i));
    }
}

TEST_CASE("counter names are unique") {
    std::set<std::string> names;
    for (unsigned i = 0; i < counters::kCount; ++i)
        CHECK(names.insert(counters::name_of(static_cast<counters::Id>(i))).second);
}
