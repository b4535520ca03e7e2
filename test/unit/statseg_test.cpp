// SPDX-License-Identifier: MIT
#include "engine/base/fdtable.hpp"
#include "engine/base/statseg.hpp"
#include "tools/procnet.hpp"

#include "test/unit/stats_dir.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

TEST_CASE("/proc/net/tcp addresses decode (processes in another network namespace)") {
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

TEST_CASE("reset zeroes a live segment's counters, gauges aside, and skips what it may not "
          "write") {
    test::StatsDir dir{"statseg", 01777}; // (another user's reader, below, must list it)
    char path[PATH_MAX];
    statseg::Header* h = statseg::create("resets", 1024, path, sizeof path);
    REQUIRE(h != nullptr);
    h->counters[counters::conn_smcd].store(9);
    h->counters[counters::dmb_bytes].store(1 << 20); // a gauge: what is held now
    h->fallbacks[2].store(4);
    h->traffic[counters::kRx][counters::kBufFull].store(3);
    std::vector<pid_t> skipped;
    CHECK(statseg::zero_live(dir.path, &skipped) == 1);
    CHECK(skipped.empty());
    // The process's own mapping sees it: the file was written, not a copy.
    CHECK(h->counters[counters::conn_smcd].load() == 0);
    CHECK(h->counters[counters::dmb_bytes].load() == (1 << 20));
    CHECK(h->fallbacks[2].load() == 0);
    CHECK(h->traffic[counters::kRx][counters::kBufFull].load() == 0);
    // Counting goes on from zero.
    h->counters[counters::conn_smcd].fetch_add(1);
    auto views = statseg::open_all(dir.path, false);
    REQUIRE(views.size() == 1);
    CHECK(views[0].header->counters[counters::conn_smcd].load() == 1);
    statseg::close_all(views);

    if (geteuid() == 0) {
        // Another user may not write ours (0644): skipped, and named.
        pid_t child = fork();
        if (child == 0) {
            if (setuid(65534) != 0) _exit(9);
            std::vector<pid_t> s;
            int n = statseg::zero_live(dir.path, &s);
            _exit(n == 0 && s.size() == 1 && s[0] == getppid() ? 0 : 1);
        }
        int status = 0;
        REQUIRE(waitpid(child, &status, 0) == child);
        CHECK(WEXITSTATUS(status) == 0);
        CHECK(h->counters[counters::conn_smcd].load() == 1);
    }
    munmap(h, statseg::segment_bytes(1024));
    unlink(path);
}

TEST_CASE("the device and link groups are published beside the counters, and an older "
          "segment has none") {
    test::StatsDir dir{"statseg"};
    char path[PATH_MAX];
    statseg::Header* h = statseg::create("groups", 1024, path, sizeof path);
    REQUIRE(h != nullptr);
    CHECK(h->revision == statseg::kRevision);
    statseg::claim_device(h, 0xabc, 256 << 20);
    statseg::publish_device(h, 0xabc, 3, 2);
    statseg::publish_device(h, 0xdef, 99, 99); // not the device that claimed it: ignored
    statseg::publish_link_groups(h, 0xabc, 2);
    statseg::LgrRecord g{};
    g.id = 1;
    g.peer_pid = 4242;
    g.peer_uid = 1000;
    g.peer_gid = 0x1234;
    g.their_segments = 1;
    int a = statseg::publish_group(h, -1, g);
    g.id = 2;
    g.peer_gid = 0x5678;
    int b = statseg::publish_group(h, -1, g);
    REQUIRE(a >= 0);
    REQUIRE(b >= 0);
    CHECK(a != b);
    g.our_segments = 5; // a group that gained a segment: rewritten in place
    CHECK(statseg::publish_group(h, b, g) == b);

    auto views = statseg::open_all(dir.path, false);
    REQUIRE(views.size() == 1);
    const auto* d = statseg::device_of(views[0]);
    REQUIRE(d != nullptr);
    CHECK(d->gid.load() == 0xabc);
    CHECK(d->max_dmb_memory.load() == (256u << 20));
    CHECK(d->segments.load() == 3);
    CHECK(d->peer_maps.load() == 2);
    CHECK(d->link_groups.load() == 2);
    auto groups = statseg::live_groups(views[0]);
    REQUIRE(groups.size() == 2);
    CHECK(groups[0].peer_pid == 4242);
    CHECK(groups[size_t(b > a)].our_segments == 5);
    statseg::close_all(views);

    statseg::withdraw_group(h, a);
    views = statseg::open_all(dir.path, false);
    groups = statseg::live_groups(views[0]);
    REQUIRE(groups.size() == 1);
    CHECK(groups[0].id == 2);
    statseg::close_all(views);

    // A segment of an older usmc (revision 0: zeros where these fields are)
    // is read as before, with no device and no groups; one claiming more
    // group slots than its file holds has none either.
    h->revision = 0;
    views = statseg::open_all(dir.path, false);
    REQUIRE(views.size() == 1);
    CHECK(statseg::device_of(views[0]) == nullptr);
    CHECK(views[0].groups == 0);
    CHECK(statseg::live_groups(views[0]).empty());
    statseg::close_all(views);
    h->revision = statseg::kRevision;
    h->lgr_slots = statseg::kMaxLgrSlots;
    views = statseg::open_all(dir.path, false);
    REQUIRE(views.size() == 1);
    CHECK(views[0].groups == 0);
    statseg::close_all(views);
    h->lgr_slots = statseg::kLgrSlots;

    // A forked child starts with neither: its device is made afresh.
    pid_t child = fork();
    if (child == 0) {
        if (!statseg::privatise_in_child(h)) _exit(10);
        _exit(h->device.gid.load() == 0 && statseg::groups_of(h)[b].gen == 0 ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WEXITSTATUS(status) == 0);
    munmap(h, statseg::segment_bytes(1024));
    unlink(path);
}

TEST_CASE("sock_diag answers decode to the addresses /proc would show") {
    // An inet_diag_msg as the kernel sends it: IPv6 loopback, port 8080 to
    // 40000, ESTABLISHED, inode 4711.
    alignas(NLMSG_ALIGNTO) unsigned char buf[NLMSG_SPACE(sizeof(inet_diag_msg))] = {};
    auto* nlh = reinterpret_cast<nlmsghdr*>(buf);
    nlh->nlmsg_len = NLMSG_LENGTH(sizeof(inet_diag_msg));
    nlh->nlmsg_type = TCPDIAG_GETSOCK;
    auto* m = reinterpret_cast<inet_diag_msg*>(NLMSG_DATA(nlh));
    m->idiag_family = AF_INET6;
    m->idiag_state = 1;
    m->id.idiag_sport = htons(8080);
    m->id.idiag_dport = htons(40000);
    m->id.idiag_src[3] = htonl(1);
    m->id.idiag_dst[3] = htonl(1);
    m->idiag_inode = 4711;
    auto e = tools::parse_diag(nlh);
    REQUIRE(e);
    CHECK(e->first == 4711);
    CHECK(e->second.local == "[::1]:8080");
    CHECK(e->second.peer == "[::1]:40000");
    CHECK(e->second.state == "ESTABLISHED");

    m->idiag_family = AF_INET;
    m->idiag_state = 10;
    m->id.idiag_src[0] = htonl(0x7f000001);
    m->id.idiag_dst[0] = 0;
    m->id.idiag_dport = 0;
    e = tools::parse_diag(nlh);
    REQUIRE(e);
    CHECK(e->second.local == "127.0.0.1:8080");
    CHECK(e->second.peer == "0.0.0.0:0");
    CHECK(e->second.state == "LISTEN");
}

TEST_CASE("sock_diag finds this process's own sockets by inode") {
    int s = socket(AF_INET6, SOCK_STREAM, 0);
    REQUIRE(s >= 0);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    REQUIRE(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(s, 1) == 0);
    socklen_t len = sizeof a;
    REQUIRE(getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    uint64_t inode = tools::socket_inode(getpid(), s);
    REQUIRE(inode != 0);
    auto got = tools::tcp_sockets({{getpid(), {inode}}});
    REQUIRE(got.count(inode) == 1);
    CHECK(got[inode].local == "[::1]:" + std::to_string(ntohs(a.sin6_port)));
    CHECK(got[inode].state == "LISTEN");
    CHECK(got.size() == 1); // only the inodes asked for
    close(s);
}
