// SPDX-License-Identifier: MIT
#include "engine/base/sys.hpp"
#include "engine/sock/runtime.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

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

    o = runtime::parse_options(nullptr, "yes", nullptr, &ok);
    CHECK_FALSE(ok);
    CHECK(o.modes == 0); // a bad USMC_LIMIT_HS alone: plain TCP too

    o = runtime::parse_options("smcd", "2", nullptr, &ok);
    CHECK_FALSE(ok);
    CHECK(o.modes == 0);
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

    // The file's grammar (config/size.hpp): any case, KiB/MiB/GiB.
    CHECK(parse_env_size("64KiB").bytes == 64 * 1024);
    CHECK(parse_env_size("64kib").bytes == 64 * 1024);
    CHECK(parse_env_size("1MiB").status == EnvSize::Ok);
    e = parse_env_size("1G");
    CHECK(e.status == EnvSize::Clamped);
    CHECK(e.bytes == config::kBufMax);

    // Malformed: the caller keeps the configuration's value.
    for (const char* bad : {"abc", "1.5M", "12X", "-1", "k", "0x4000", "64Ki"})
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

namespace {
std::string comm_of(pid_t tid) {
    std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/comm");
    std::string name;
    std::getline(f, name);
    return name;
}
std::atomic<pid_t> g_loop_tid{0};
void note_tid(int epfd) {
    g_loop_tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
    // Served for the rest of the process, as the watchers are.
    epoll_event ev;
    while (true)
        epoll_wait(epfd, &ev, 1, -1);
}
} // namespace

TEST_CASE("usmc's threads are named: top -H and perf tell them from the application's") {
    std::thread t([] {
        usmc::sys::name_this_thread("usmc-test");
        CHECK(comm_of(static_cast<pid_t>(syscall(SYS_gettid))) == "usmc-test");
    });
    t.join();
    int epfd = usmc::sys::start_epoll_thread(note_tid, "usmc-testwatch");
    REQUIRE(epfd >= 0);
    for (int i = 0; i < 2000 && g_loop_tid.load() == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(g_loop_tid.load() != 0);
    CHECK(comm_of(g_loop_tid.load()) == "usmc-testwatch");
}
