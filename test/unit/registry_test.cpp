// SPDX-License-Identifier: MIT
#include "engine/base/sys.hpp"
#include "engine/discovery/registry.hpp"
#include "engine/smcd/ism.hpp"
#include "engine/smcd/ism_endpoint.hpp"
#include "engine/smcd/ism_wire.hpp"
#include "engine/smcd/lgr.hpp"

#include "test/unit/stats_dir.hpp"
#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <time.h>
#include <unistd.h>

using namespace usmc;

namespace {

sockaddr_in v4(const char* ip, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

const sockaddr* sa(const sockaddr_in& a) {
    return reinterpret_cast<const sockaddr*>(&a);
}

// A listener's process as clients see it: its endpoint shares the Pending
// announcements (the client side runs in this process too).
struct Publisher {
    ism::Device dev{1 << 24};
    ism::Endpoint* ep = ism::Endpoint::start(dev);
    ~Publisher() { delete ep; }
};

} // namespace

TEST_CASE("a published listener is found; withdrawn, it is gone") {
    test::StatsDir dir{"reg", 01777};
    auto addr = v4("127.0.0.1", 4242);
    CHECK_FALSE(registry::lookup(sa(addr), sizeof addr, {}));
    {
        auto l = registry::Listener::publish(sa(addr), sizeof addr, 0xabcdef, registry::kSmcD);
        REQUIRE(l.published());
        auto f = registry::lookup(sa(addr), sizeof addr, {});
        REQUIRE(f);
        CHECK(f->pid == getpid());
        CHECK(f->gid == 0xabcdef);
        CHECK(f->flags == registry::kSmcD);
        // Congestion is a time in the entry, reported only with SMC_LIMIT_HS.
        uint64_t now = sys::mono_ns();
        l.set_congested_until(now + 60'000'000'000ull);
        CHECK(registry::lookup(sa(addr), sizeof addr, {})->flags == registry::kSmcD);
        l.set_flag(registry::kLimitHs, true);
        CHECK(registry::lookup(sa(addr), sizeof addr, {})->flags ==
              (registry::kSmcD | registry::kLimitHs | registry::kCongested));
        l.set_congested_until(now); // over: passed already
        CHECK(registry::lookup(sa(addr), sizeof addr, {})->flags ==
              (registry::kSmcD | registry::kLimitHs));
        l.set_flag(registry::kCongested, true); // not stored: only the time counts
        CHECK_FALSE(registry::lookup(sa(addr), sizeof addr, {})->flags & registry::kCongested);
        auto other_port = v4("127.0.0.1", 4243);
        CHECK_FALSE(registry::lookup(sa(other_port), sizeof other_port, {}));
    }
    CHECK_FALSE(registry::lookup(sa(addr), sizeof addr, {})); // the destructor withdrew it
}

TEST_CASE("a wildcard listener answers for every local address of its port") {
    test::StatsDir dir{"reg", 01777};
    auto any = v4("0.0.0.0", 5000);
    auto l = registry::Listener::publish(sa(any), sizeof any, 1, registry::kSmcD);
    REQUIRE(l.published());
    auto dest = v4("127.0.0.1", 5000);
    CHECK(registry::lookup(sa(dest), sizeof dest, {}));
    sockaddr_in6 six{};
    six.sin6_family = AF_INET6;
    six.sin6_port = htons(5000);
    six.sin6_addr = in6addr_loopback;
    CHECK_FALSE(
        registry::lookup(reinterpret_cast<sockaddr*>(&six), sizeof six, {})); // other family
}

TEST_CASE("entries are believed only from trusted owners and live processes") {
    test::StatsDir dir{"reg", 01777};
    auto addr = v4("127.0.0.1", 6000);
    auto l = registry::Listener::publish(sa(addr), sizeof addr, 7, registry::kSmcD);
    REQUIRE(l.published());
    std::string file = dir.path + "/" + registry::entry_name(sa(addr), sizeof addr);
    if (geteuid() == 0) {
        // Another user's file: ignored unless that uid is trusted.
        REQUIRE(chown(file.c_str(), 12345, 12345) == 0);
        CHECK_FALSE(registry::lookup(sa(addr), sizeof addr, {}));
        uint32_t trusted[] = {12345};
        CHECK(registry::lookup(sa(addr), sizeof addr, trusted));
        REQUIRE(chown(file.c_str(), 0, 0) == 0);
        // A file's owner does not change behind its publisher's back, save
        // by root: an entry checked less than 200 ms ago is not asked again.
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    CHECK(registry::lookup(sa(addr), sizeof addr, {}));

    // An entry whose process has died is ignored.
    auto dead_addr = v4("127.0.0.1", 6001);
    pid_t child = fork();
    if (child == 0) {
        auto dl = registry::Listener::publish(sa(dead_addr), sizeof dead_addr, 8, registry::kSmcD);
        _exit(dl.published() ? 0 : 1); // no destructor: as if killed
    }
    int status = 0;
    waitpid(child, &status, 0);
    REQUIRE(WEXITSTATUS(status) == 0);
    CHECK(access((dir.path + "/" + registry::entry_name(sa(dead_addr), sizeof dead_addr)).c_str(),
                 F_OK) == 0);
    CHECK_FALSE(registry::lookup(sa(dead_addr), sizeof dead_addr, {}));

    // Garbage in a file of the right name: ignored.
    auto junk_addr = v4("127.0.0.1", 6002);
    std::ofstream(dir.path + "/" + registry::entry_name(sa(junk_addr), sizeof junk_addr))
        << std::string(40, 'x');
    CHECK_FALSE(registry::lookup(sa(junk_addr), sizeof junk_addr, {}));
}

TEST_CASE("a destination without an entry is remembered briefly, not for ever") {
    // (Published by this process right after a miss, an entry is found at
    // once: the first test of this file looks it up before publishing.)
    test::StatsDir dir{"reg", 01777};
    auto addr = v4("127.0.0.1", 6100);
    CHECK_FALSE(registry::lookup(sa(addr), sizeof addr, {}));
    // Published by another process: found once the miss has expired (50 ms).
    int ready[2], go[2];
    REQUIRE(pipe(ready) == 0);
    REQUIRE(pipe(go) == 0);
    pid_t child = fork();
    if (child == 0) {
        auto l = registry::Listener::publish(sa(addr), sizeof addr, 12, registry::kSmcD);
        char c = l.published() ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(2);
        _exit(0);
    }
    char c = 0;
    REQUIRE(read(ready[0], &c, 1) == 1);
    REQUIRE(c == 'y');
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    auto f = registry::lookup(sa(addr), sizeof addr, {});
    CHECK(f);
    if (f) CHECK(f->pid == child);
    REQUIRE(write(go[1], &c, 1) == 1);
    int status = 0;
    waitpid(child, &status, 0);
    for (int fd : {ready[0], ready[1], go[0], go[1]})
        close(fd);
}

TEST_CASE("pending connects: announced by clients, expire, never below zero") {
    test::StatsDir dir{"reg", 01777};
    Publisher pub;
    REQUIRE(pub.ep);
    auto addr = v4("127.0.0.1", 7000);
    auto l = registry::Listener::publish(sa(addr), sizeof addr, pub.dev.gid(), registry::kSmcD);
    REQUIRE(l.published());
    CHECK(l.pending_connects() == 0);
    REQUIRE(registry::lookup(sa(addr), sizeof addr, {})); // as connect() does first
    CHECK(registry::announce_pending(sa(addr), sizeof addr, true));
    registry::announce_pending(sa(addr), sizeof addr, true);
    CHECK(l.pending_connects() == 2);
    registry::announce_pending(sa(addr), sizeof addr, false);
    registry::announce_pending(sa(addr), sizeof addr, false);
    registry::announce_pending(sa(addr), sizeof addr, false);
    CHECK(l.pending_connects() == 0);
    auto nobody = v4("127.0.0.1", 7001);
    // Which connection: by client port, until finished.
    registry::announce_pending(sa(addr), sizeof addr, true);
    CHECK(l.unported_connects() == 1); // between connect() and the port
    registry::announce_pending(sa(addr), sizeof addr, true, 40001);
    CHECK(l.unported_connects() == 0);
    CHECK(l.pending_connects() == 1);
    CHECK(l.expects_port(40001));
    CHECK_FALSE(l.expects_port(40002));
    CHECK_FALSE(l.expects_port(40001 + 2048)); // same slot, other port
    registry::announce_pending(sa(addr), sizeof addr, false, 40001);
    CHECK_FALSE(l.expects_port(40001));
    CHECK(l.pending_connects() == 0);
    CHECK(l.unported_connects() == 0);
    // A connect that failed before its port was known leaves both counts.
    registry::announce_pending(sa(addr), sizeof addr, true);
    registry::announce_pending(sa(addr), sizeof addr, false);
    CHECK(l.pending_connects() == 0);
    CHECK(l.unported_connects() == 0);
    // No free slot for the port (8 probes, all taken by live ports): the
    // connect stays unported (servers give unknown ports their grace) until
    // it ends.
    for (uint16_t i = 0; i < 8; ++i) {
        registry::announce_pending(sa(addr), sizeof addr, true);
        registry::announce_pending(sa(addr), sizeof addr, true, uint16_t(41000 + i));
    }
    registry::announce_pending(sa(addr), sizeof addr, true);
    registry::announce_pending(sa(addr), sizeof addr, true, uint16_t(41000 + 2048));
    CHECK_FALSE(l.expects_port(41000 + 2048));
    CHECK(l.unported_connects() == 1);
    registry::announce_pending(sa(addr), sizeof addr, false, uint16_t(41000 + 2048));
    CHECK(l.unported_connects() == 0);
    for (uint16_t i = 0; i < 8; ++i)
        registry::announce_pending(sa(addr), sizeof addr, false, uint16_t(41000 + i));
    CHECK(l.pending_connects() == 0);
    CHECK_FALSE(registry::announce_pending(sa(nobody), sizeof nobody, true)); // no listener
}

TEST_CASE("pending connects: a port or an end never asks the publisher's endpoint (they run "
          "on the loop, which must not wait on another process)") {
    test::StatsDir dir{"reg", 01777};
    auto addr = v4("127.0.0.1", 7003);
    // An endpoint that never answers (a stopped or hostile publisher): a
    // bound socket nobody accepts on. A fetch would queue a link on it.
    constexpr uint64_t kGid = 0x5eed0007;
    sockaddr_un sun{};
    socklen_t slen = lgr::endpoint_address(kGid, sun);
    int mute = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    REQUIRE(mute >= 0);
    REQUIRE(bind(mute, reinterpret_cast<sockaddr*>(&sun), slen) == 0);
    REQUIRE(listen(mute, 8) == 0);
    auto l = registry::Listener::publish(sa(addr), sizeof addr, kGid, registry::kSmcD);
    REQUIRE(l.published());
    REQUIRE(registry::lookup(sa(addr), sizeof addr, {}));
    CHECK_FALSE(registry::announce_pending(sa(addr), sizeof addr, false));
    CHECK_FALSE(registry::announce_pending(sa(addr), sizeof addr, false, 40001));
    CHECK_FALSE(registry::announce_pending(sa(addr), sizeof addr, true, 40001));
    CHECK(accept4(mute, nullptr, nullptr, SOCK_CLOEXEC) < 0); // nobody linked
    CHECK(errno == EAGAIN);
    // The count's beginning does ask (and, unanswered, cannot announce).
    CHECK_FALSE(registry::announce_pending(sa(addr), sizeof addr, true));
    int link = accept4(mute, nullptr, nullptr, SOCK_CLOEXEC);
    CHECK(link >= 0);
    if (link >= 0) close(link);
    close(mute);
}

namespace {
// An entry's file as another process reads it: the token is there for
// anyone who can read the stats directory.
struct RawEntry {
    uint32_t magic, version;
    int32_t pid;
    uint32_t withdrawn;
    uint64_t start_time, gid;
    uint32_t flags, reserved;
    uint64_t congested_until_ns, pending_token;
};
RawEntry read_entry(const std::string& path) {
    RawEntry e{};
    std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&e), sizeof e);
    return e;
}
} // namespace

TEST_CASE("pending connects: the memory comes from the publisher's endpoint, sealed; without "
          "it a client cannot announce") {
    test::StatsDir dir{"reg", 01777};
    auto addr = v4("127.0.0.1", 7002);
    {
        // Published under a GID no endpoint serves: a client finds the entry
        // but cannot announce, so it must not send CLC.
        auto l = registry::Listener::publish(sa(addr), sizeof addr, 0x1234, registry::kSmcD);
        REQUIRE(l.published());
        REQUIRE(registry::lookup(sa(addr), sizeof addr, {}));
        CHECK_FALSE(registry::announce_pending(sa(addr), sizeof addr, true));
    }
    Publisher pub;
    REQUIRE(pub.ep);
    auto l = registry::Listener::publish(sa(addr), sizeof addr, pub.dev.gid(), registry::kSmcD);
    REQUIRE(l.published());
    // No file for it in the stats directory: only the entry.
    std::string name = registry::entry_name(sa(addr), sizeof addr);
    CHECK(access((dir.path + "/" + name + ".pending").c_str(), F_OK) != 0);
    // What another process gets: nobody can shrink it under its mappers.
    // (The token is in the entry; a wrong one gets nothing.)
    RawEntry e = read_entry(dir.path + "/" + name);
    REQUIRE(e.gid == pub.dev.gid());
    CHECK(ism::fetch_shared(e.gid, e.pending_token + 1, getpid(), sizeof(registry::Pending), 1000) <
          0);
    CHECK(ism::fetch_shared(e.gid, e.pending_token, getpid() + 1, sizeof(registry::Pending), 1000) <
          0); // not the entry's process
    int fd = ism::fetch_shared(e.gid, e.pending_token, getpid(), sizeof(registry::Pending), 1000);
    REQUIRE(fd >= 0);
    CHECK(ftruncate(fd, 0) != 0);
    CHECK(errno == EPERM);
    close(fd);
    REQUIRE(registry::lookup(sa(addr), sizeof addr, {}));
    CHECK(registry::announce_pending(sa(addr), sizeof addr, true));
    CHECK(l.pending_connects() == 1);
}

namespace {
// In a forked child, with system calls only (the parent has threads): as
// user `uid`, the Pending memory the endpoint at `sun` shares under
// `token`, mapped; nullptr if it gives none. `ino`: its inode.
registry::Pending* fetch_as(uid_t uid, const sockaddr_un& sun, socklen_t len, uint64_t token,
                            ino_t* ino) {
    if (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) return nullptr;
    int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (s < 0 || connect(s, reinterpret_cast<const sockaddr*>(&sun), len) != 0) return nullptr;
    ism::wire::Request req{ism::wire::kShareMagic, 0, token, 0, 0, 0, 0};
    if (send(s, &req, sizeof req, 0) != ssize_t(sizeof req)) return nullptr;
    ism::wire::Reply reply{};
    iovec iov{&reply, sizeof reply};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    if (recvmsg(s, &msg, 0) != ssize_t(sizeof reply) || reply.status != 0) return nullptr;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS) return nullptr;
    int fd;
    std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    struct stat st;
    if (fstat(fd, &st) != 0) return nullptr;
    *ino = st.st_ino;
    void* m = mmap(nullptr, sizeof(registry::Pending), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return m == MAP_FAILED ? nullptr : static_cast<registry::Pending*>(m);
}
} // namespace

TEST_CASE("each user announces in a Pending memory of its own: another user's zeros or forged "
          "counts never touch ours") {
    test::StatsDir dir{"reg", 01777};
    auto addr = v4("127.0.0.1", 7004);
    Publisher pub;
    REQUIRE(pub.ep);
    auto l = registry::Listener::publish(sa(addr), sizeof addr, pub.dev.gid(), registry::kSmcD);
    REQUIRE(l.published());
    std::string name = registry::entry_name(sa(addr), sizeof addr);
    RawEntry e = read_entry(dir.path + "/" + name);
    REQUIRE(e.pending_token != 0);
    // Our own client announces first (it fetches our user's memory).
    REQUIRE(registry::lookup(sa(addr), sizeof addr, {}));
    REQUIRE(registry::announce_pending(sa(addr), sizeof addr, true));
    REQUIRE(registry::announce_pending(sa(addr), sizeof addr, true, 40000));
    CHECK(l.pending_connects() == 1);
    CHECK(l.expects_port(40000));
    int ours = ism::fetch_shared(e.gid, e.pending_token, getpid(), sizeof(registry::Pending), 1000);
    REQUIRE(ours >= 0); // (the same user asking again: the same memory)
    struct stat ours_st;
    REQUIRE(fstat(ours, &ours_st) == 0);
    close(ours);

    sockaddr_un sun;
    socklen_t len = lgr::endpoint_address(e.gid, sun);
    // Users 60001.. each zero what they got, then claim 7 connects of their
    // own. The fourth user of the listener (root, then three) is the last
    // to get one; a fifth gets none.
    for (uid_t uid = 60001; uid <= 60004; ++uid) {
        int pipefd[2];
        REQUIRE(pipe(pipefd) == 0);
        pid_t child = fork();
        if (child == 0) {
            ino_t ino = 0;
            registry::Pending* p = fetch_as(uid, sun, len, e.pending_token, &ino);
            if (p) {
                std::memset(static_cast<void*>(p), 0, sizeof *p);
                timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                // The last one tries to wrap the sum around to 0.
                p->connects.store(uid == 60003 ? UINT64_MAX : 7);
                p->deadline_ns.store(uint64_t(now.tv_sec + 60) * 1000000000ull);
            }
            uint64_t got = p ? uint64_t(ino) : 0;
            _exit(write(pipefd[1], &got, sizeof got) == ssize_t(sizeof got) ? 0 : 1);
        }
        close(pipefd[1]);
        uint64_t ino = 0;
        CHECK(read(pipefd[0], &ino, sizeof ino) == ssize_t(sizeof ino));
        close(pipefd[0]);
        int status = 0;
        waitpid(child, &status, 0);
        INFO("user " << uid);
        if (uid < 60004) {
            CHECK(ino != 0);
            CHECK(ino != uint64_t(ours_st.st_ino));
        } else {
            CHECK(ino == 0); // every Pending memory has its user
        }
    }
    // Ours is as we left it: their zeros never reached it, their counts add.
    CHECK(l.expects_port(40000));
    CHECK(l.pending_connects() == UINT64_MAX); // (added without wrapping)
    REQUIRE(registry::announce_pending(sa(addr), sizeof addr, false, 40000));
    CHECK_FALSE(l.expects_port(40000));
}

TEST_CASE("a forked child does not withdraw its parent's entry") {
    test::StatsDir dir{"reg", 01777};
    auto addr = v4("127.0.0.1", 8000);
    auto l = registry::Listener::publish(sa(addr), sizeof addr, 10, registry::kSmcD);
    REQUIRE(l.published());
    pid_t child = fork();
    if (child == 0) {
        l.withdraw();
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(registry::lookup(sa(addr), sizeof addr, {}));
}
