#include "engine/runtime.hpp"

#include <catch2/catch.hpp>

using namespace usmc;

TEST_CASE("launcher options from the environment") {
    bool ok = false;
    auto o = runtime::parse_options(nullptr, nullptr, nullptr, &ok);
    CHECK(ok);
    CHECK(o.modes == config::kModeAuto);
    CHECK(o.limit_hs == -1);
    CHECK_FALSE(o.verbose);

    o = runtime::parse_options("smcd", "1", "1", &ok);
    CHECK(ok);
    CHECK(o.modes == config::kModeSmcD);
    CHECK(o.limit_hs == 1);
    CHECK(o.verbose);

    o = runtime::parse_options("tcp", "0", "0", &ok);
    CHECK(ok);
    CHECK(o.modes == 0);
    CHECK(o.limit_hs == 0);
    CHECK_FALSE(o.verbose);

    o = runtime::parse_options("smcr,smcd", "", "", &ok);
    CHECK(ok);
    CHECK(o.modes == config::kModeAuto);

    o = runtime::parse_options("rdma", nullptr, nullptr, &ok);
    CHECK_FALSE(ok);
    CHECK(o.modes == 0); // unknown mode: plain TCP, the safe choice

    runtime::parse_options(nullptr, "yes", nullptr, &ok);
    CHECK_FALSE(ok);
}

TEST_CASE("SMC_RCVBUF / SMC_SNDBUF sizes") {
    using runtime::EnvSize;
    using runtime::parse_env_size;
    CHECK(parse_env_size(nullptr).status == EnvSize::Unset);
    CHECK(parse_env_size("").status == EnvSize::Unset);

    auto e = parse_env_size("256k");
    CHECK(e.status == EnvSize::Ok);
    CHECK(e.bytes == 256 * 1024);
    CHECK(parse_env_size("64K").bytes == 64 * 1024);
    CHECK(parse_env_size("1M").bytes == 1 << 20);
    CHECK(parse_env_size("1m").status == EnvSize::Ok);
    CHECK(parse_env_size("16384").bytes == 16384);

    // Out of range: the nearest bound.
    e = parse_env_size("4M");
    CHECK(e.status == EnvSize::Clamped);
    CHECK(e.bytes == config::kBufMax);
    e = parse_env_size("1k");
    CHECK(e.status == EnvSize::Clamped);
    CHECK(e.bytes == config::kBufMin);
    CHECK(parse_env_size("0").bytes == config::kBufMin);
    CHECK(parse_env_size("16383").status == EnvSize::Clamped);
    CHECK(parse_env_size("1048577").status == EnvSize::Clamped);
    e = parse_env_size("99999999999999999999999M"); // overflows: still the upper bound
    CHECK(e.status == EnvSize::Clamped);
    CHECK(e.bytes == config::kBufMax);

    // Malformed: the caller keeps the configuration's value.
    for (const char* bad : {"abc", "64KiB", "1G", "1.5M", " 64k", "64k ", "-1", "k", "0x4000"})
        CHECK(parse_env_size(bad).status == EnvSize::Malformed);
}

TEST_CASE("SMC_DEBUG") {
    CHECK_FALSE(runtime::smc_debug_on(nullptr));
    CHECK_FALSE(runtime::smc_debug_on(""));
    CHECK_FALSE(runtime::smc_debug_on("0"));
    CHECK_FALSE(runtime::smc_debug_on("01"));
    CHECK(runtime::smc_debug_on("1"));
    CHECK(runtime::smc_debug_on("yes"));
}
