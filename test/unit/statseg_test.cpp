#include "engine/base/fdtable.hpp"
#include "engine/base/statseg.hpp"
#include "tools/procnet.hpp"

#include "test/unit/stats_dir.hpp"

#include <catch2/catch.hpp>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace usmc;

TEST_CASE("a segment is created, found alive, and removed") {
    test::StatsDir dir{"statseg"};
    char path[PATH_MAX];
    statseg::Header* h = statseg::create("unit-test", 1024, path, sizeof path);
    REQUIRE(h != nullptr);
    CHECK(std::string(path) ==
          dir.path + "/usmc-live." + std::to_string(getuid()) + "." + std::to_string(getpid()));
    CHECK(h->pid == getpid());
    CHECK(h->start_time == statseg::process_start_time(getpid()));
    CHECK(h->start_time != 0);
    h->counters[counters::conn_tcp].store(7);
    statseg::slots_of(h)[5].store(0x0201);
    h->fd_high.store(6);

    auto views = statseg::open_all(dir.path, true);
    REQUIRE(views.size() == 1);
    CHECK(views[0].alive);
    CHECK(std::string(views[0].header->program) == "unit-test");
    CHECK(views[0].header->counters[counters::conn_tcp].load() == 7);
    CHECK(views[0].slots()[5].load() == 0x0201);
    statseg::close_all(views);

    // A second create in the same process replaces the file (an exec'd image).
    char path2[PATH_MAX];
    statseg::Header* h2 = statseg::create("unit-test-2", 1024, path2, sizeof path2);
    REQUIRE(h2 != nullptr);
    CHECK(std::string(path2) == path);
    munmap(h, statseg::segment_bytes(1024));
    munmap(h2, statseg::segment_bytes(1024));
    unlink(path2);
}

TEST_CASE("counters of dead processes move to the retired totals, once") {
    test::StatsDir dir{"statseg"};
    pid_t child = fork();
    if (child == 0) {
        char p[PATH_MAX];
        statseg::Header* h = statseg::create("short-lived", 1024, p, sizeof p);
        if (!h) _exit(1);
        h->counters[counters::conn_tcp].store(5);
        _exit(0); // no destructor: as if it crashed
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WEXITSTATUS(status) == 0);
    std::string stale =
        dir.path + "/usmc-live." + std::to_string(getuid()) + "." + std::to_string(child);
    REQUIRE(access(stale.c_str(), F_OK) == 0);

    auto views = statseg::open_all(dir.path, false); // look, do not touch
    REQUIRE(views.size() == 1);
    CHECK_FALSE(views[0].alive);
    CHECK(views[0].header->counters[counters::conn_tcp].load() == 5);
    statseg::close_all(views);
    CHECK(access(stale.c_str(), F_OK) == 0);

    for (int round = 0; round < 2; ++round) { // cleaning twice must not count twice
        views = statseg::open_all(dir.path, true);
        REQUIRE(views.size() == 1);
        CHECK(views[0].totals);
        CHECK(views[0].header->counters[counters::conn_tcp].load() == 5);
        statseg::close_all(views);
        CHECK(access(stale.c_str(), F_OK) != 0);
    }

    // A process that exits cleanly retires its own counters.
    char path[PATH_MAX];
    statseg::Header* h = statseg::create("clean-exit", 1024, path, sizeof path);
    REQUIRE(h != nullptr);
    h->counters[counters::conn_tcp].store(2);
    statseg::retire(h);
    statseg::retire(h); // idempotent
    views = statseg::open_all(dir.path, true);
    uint64_t live = 0, retired = 0;
    for (auto& v : views)
        (v.totals ? retired : live) += v.header->counters[counters::conn_tcp].load();
    CHECK(retired == 7);
    CHECK(live == 0); // a retired segment is not counted again while it lingers
    statseg::close_all(views);
    munmap(h, statseg::segment_bytes(1024));
    unlink(path);

    CHECK(statseg::reset_retired(dir.path) == 1);
    views = statseg::open_all(dir.path, true);
    CHECK(views.empty());
}

TEST_CASE("a forked child's segment is private, then its own file with what it counted") {
    test::StatsDir dir{"statseg"};
    char path[PATH_MAX];
    statseg::Header* h = statseg::create("parent", 1024, path, sizeof path);
    REQUIRE(h != nullptr);
    h->counters[counters::conn_tcp].store(3);
    statseg::slots_of(h)[7].store(0x0201);
    h->fd_high.store(8);
    std::string parent_path = path;

    pid_t child = fork();
    if (child == 0) {
        int bad = 0;
        if (!statseg::privatise_in_child(h)) _exit(10);
        if (h->pid != getpid()) bad |= 2;
        if (h->counters[counters::conn_tcp].load() != 0) bad |= 4;
        if (statseg::slots_of(h)[7].load() != 0)
            bad |= 8;                          // mirror starts empty, rebuilt by FdTable
        statseg::slots_of(h)[9].store(0x0201); // must not reach the parent
        if (statseg::counted_anything(h)) bad |= 16;
        h->counters[counters::conn_tcp].store(5); // counted before it is published
        if (!statseg::counted_anything(h)) bad |= 32;
        path[0] = 0;
        if (!statseg::publish_in_child(h, path, sizeof path)) _exit(11);
        if (parent_path == path || !path[0]) bad |= 1;
        if (h->counters[counters::conn_tcp].load() != 5 || h->start_time == 0) bad |= 64;
        // The file is what readers see: the count is there.
        auto views = statseg::open_all(dir.path, false);
        bool seen = false;
        for (auto& v : views)
            if (v.header->pid == getpid())
                seen = v.header->counters[counters::conn_tcp].load() == 5;
        statseg::close_all(views);
        if (!seen) bad |= 128;
        statseg::slots_of(h)[9].store(0x0201); // nor this
        unlink(path);
        _exit(bad);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(statseg::slots_of(h)[9].load() == 0);
    CHECK(statseg::slots_of(h)[7].load() == 0x0201);
    CHECK(h->counters[counters::conn_tcp].load() == 3);
    munmap(h, statseg::segment_bytes(1024));
    unlink(parent_path.c_str());
}

TEST_CASE("/proc/net/tcp addresses decode") {
    CHECK(tools::decode_proc_address("0100007F:1F90") == "127.0.0.1:8080");
    CHECK(tools::decode_proc_address("00000000:0000") == "0.0.0.0:0");
    CHECK(tools::decode_proc_address("00000000000000000000000001000000:0050") == "[::1]:80");
    CHECK(tools::decode_proc_address("0000000000000000FFFF00000100007F:0016") ==
          "[::ffff:127.0.0.1]:22");
}

TEST_CASE("a reader copies segments: one shrunk under it cannot fault it, and another user's "
          "dead segment is not folded into the reader's totals") {
    test::StatsDir dir{"statseg"};
    char path[PATH_MAX];
    statseg::Header* h = statseg::create("shrinks", 1024, path, sizeof path);
    REQUIRE(h != nullptr);
    h->counters[counters::conn_tcp].store(3);
    auto views = statseg::open_all(dir.path, false);
    REQUIRE(views.size() == 1);
    REQUIRE(truncate(path, 0) == 0); // what another user with write access could do
    CHECK(views[0].header->counters[counters::conn_tcp].load() == 3); // a copy: no SIGBUS
    CHECK(views[0].owner == geteuid());
    statseg::close_all(views);
    munmap(h, statseg::segment_bytes(1024));
    unlink(path);

    if (geteuid() != 0) {
        WARN(
            "not root: the other-user half is skipped (it needs to own a segment as another user)");
        return;
    }
    pid_t child = fork();
    if (child == 0) {
        char p[PATH_MAX];
        statseg::Header* d = statseg::create("other-user", 1024, p, sizeof p);
        if (!d || chown(p, 65534, 65534) != 0) _exit(1);
        d->counters[counters::conn_tcp].store(4);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WEXITSTATUS(status) == 0);
    std::string stale =
        dir.path + "/usmc-live." + std::to_string(getuid()) + "." + std::to_string(child);
    views = statseg::open_all(dir.path, true);
    REQUIRE(views.size() == 1);
    CHECK_FALSE(views[0].totals); // counted as it is, not retired into ours
    CHECK(views[0].owner == 65534);
    CHECK(views[0].header->counters[counters::conn_tcp].load() == 4);
    statseg::close_all(views);
    CHECK(access(stale.c_str(), F_OK) == 0);
    CHECK(access((dir.path + "/usmc-retired." + std::to_string(geteuid())).c_str(), F_OK) != 0);
    unlink(stale.c_str());
}
