#include "config/size.hpp"

#include <catch2/catch.hpp>

using usmc::config::format_size;
using usmc::config::parse_size;

TEST_CASE("sizes parse with binary suffixes like smc_run") {
    CHECK(parse_size("65536") == 65536u);
    CHECK(parse_size("64K") == 65536u);
    CHECK(parse_size("64k") == 65536u);
    CHECK(parse_size("64KiB") == 65536u);
    CHECK(parse_size("64KB") == 65536u);
    CHECK(parse_size("1M") == 1048576u);
    CHECK(parse_size(" 2 MiB ") == 2097152u);
    CHECK(parse_size("1G") == 1073741824u);
    CHECK(parse_size("0") == 0u);
}

TEST_CASE("malformed sizes are rejected") {
    CHECK_FALSE(parse_size(""));
    CHECK_FALSE(parse_size("K"));
    CHECK_FALSE(parse_size("-1"));
    CHECK_FALSE(parse_size("12X"));
    CHECK_FALSE(parse_size("12Kb"));
    CHECK_FALSE(parse_size("1.5M"));
    CHECK_FALSE(parse_size("99999999999999999999"));
    CHECK_FALSE(parse_size("17179869184G")); // overflows 64 bits
}

TEST_CASE("sizes format in the largest exact unit") {
    CHECK(format_size(65536) == "64KiB");
    CHECK(format_size(1 << 20) == "1MiB");
    CHECK(format_size(3ull << 30) == "3GiB");
    CHECK(format_size(1000) == "1000");
    CHECK(format_size(0) == "0");
}
