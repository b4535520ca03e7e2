// SPDX-License-Identifier: MIT
#include "config/size.hpp"

#include <catch2/catch.hpp>

using usmc::config::format_size;
using usmc::config::parse_size;

TEST_CASE("sizes: digits and a unit in any case, powers of 1024") {
    CHECK(parse_size("65536") == 65536u);
    for (const char* text : {"64k", "64K", "64KiB", "64kib", "64KIB", "64kB", "64KB", "64kb",
                             "64Kb", "64 KiB", " 64k ", "65536B", "65536b"})
        CHECK(parse_size(text) == 65536u);
    for (const char* text : {"1m", "1M", "1MiB", "1mib", "1MB", "1mb", "1 M"})
        CHECK(parse_size(text) == 1048576u);
    CHECK(parse_size(" 2 MiB ") == 2097152u);
    CHECK(parse_size("1G") == 1073741824u);
    CHECK(parse_size("1gib") == 1073741824u);
    CHECK(parse_size("0") == 0u);
    CHECK(parse_size("007k") == 7168u);
}

TEST_CASE("smc_run's sizes are sizes here too") {
    // smc_run's grammar, ^[0-9]+[kKmM]?$: every word of it parses the same.
    CHECK(parse_size("16384") == 16384u);
    CHECK(parse_size("256k") == 262144u);
    CHECK(parse_size("256K") == 262144u);
    CHECK(parse_size("2m") == 2097152u);
    CHECK(parse_size("2M") == 2097152u);
}

TEST_CASE("malformed sizes are rejected") {
    bool too_large = true;
    for (const char* bad : {"", " ", "K", "KiB", "-1", "+1", "12X", "12Ki", "12KiBB", "12iB",
                            "12bk", "1.5M", "0x4000", "1e3", "1 2k", "12 k b", "k12"}) {
        CHECK_FALSE(parse_size(bad, &too_large));
        CHECK_FALSE(too_large);
    }
}

TEST_CASE("sizes beyond 64 bits are well formed but too large") {
    bool too_large = false;
    CHECK_FALSE(parse_size("99999999999999999999", &too_large));
    CHECK(too_large);
    CHECK_FALSE(parse_size("17179869184G", &too_large)); // overflows 64 bits
    CHECK(too_large);
    CHECK_FALSE(parse_size("17179869184gib")); // without the flag: nullopt all the same
    CHECK(parse_size("17179869183G", &too_large) == (17179869183ull << 30));
    CHECK_FALSE(too_large);
}

TEST_CASE("sizes format in the largest exact unit") {
    CHECK(format_size(65536) == "64KiB");
    CHECK(format_size(1 << 20) == "1MiB");
    CHECK(format_size(3ull << 30) == "3GiB");
    CHECK(format_size(1000) == "1000");
    CHECK(format_size(0) == "0");
}
