// SPDX-License-Identifier: MIT
#include "tools/elfcheck.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace usmc::tools;

TEST_CASE("dynamic and static executables are told apart") {
    auto self = inspect_executable("/proc/self/exe");
    CHECK(self.kind == ExecKind::DynamicElf);
    CHECK_FALSE(self.setid);
    CHECK_FALSE(self.go);
    auto probe = inspect_executable(USMC_STATIC_PROBE);
    CHECK(probe.kind == ExecKind::StaticElf);
}

TEST_CASE("scripts, other files, missing files, set-id bits") {
    char path[] = "/tmp/usmc-elf-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    std::ofstream(path) << "#!/bin/sh\necho hi\n";
    CHECK(inspect_executable(path).kind == ExecKind::Script);
    std::ofstream(path) << "just some text that is long enough";
    CHECK(inspect_executable(path).kind == ExecKind::Other);
    chmod(path, 04755);
    CHECK(inspect_executable(path).setid);
    chmod(path, 02755);
    CHECK(inspect_executable(path).setid);
    chmod(path, 0755);
    CHECK_FALSE(inspect_executable(path).setid);
    unlink(path);
    CHECK(inspect_executable(path).kind == ExecKind::Unreadable);
}

TEST_CASE("programs are found like execvp finds them") {
    CHECK(find_program("sh", "/nonexistent:/bin") == "/bin/sh");
    CHECK(find_program("no-such-program-usmc", "/bin:/usr/bin").empty());
    CHECK(find_program("/bin/sh", "") == "/bin/sh");
    CHECK(find_program("/no/such/file", "/bin").empty());
    CHECK(find_program("", "/bin").empty());
}
