// SPDX-License-Identifier: MIT
#pragma once
// A private stats directory for one test case: USMC_STATS_DIR names it while
// the case runs, and it is removed afterwards.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace usmc::test {

struct StatsDir {
    std::string path;
    // mode 01777 for cases whose processes change user, as /dev/shm is.
    explicit StatsDir(const std::string& name, mode_t mode = 0) {
        std::string tmpl = "/tmp/usmc-" + name + "-XXXXXX";
        path = mkdtemp(tmpl.data());
        if (mode) chmod(path.c_str(), mode);
        setenv("USMC_STATS_DIR", path.c_str(), 1);
    }
    ~StatsDir() {
        unsetenv("USMC_STATS_DIR");
        CHECK(std::system(("rm -rf " + path).c_str()) == 0);
    }
    StatsDir(const StatsDir&) = delete;
    StatsDir& operator=(const StatsDir&) = delete;
};

} // namespace usmc::test
