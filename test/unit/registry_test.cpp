#include "engine/base/sys.hpp"
#include "engine/registry.hpp"
#include "engine/smcd/ism.hpp"
#include "engine/smcd/ism_endpoint.hpp"
#include "engine/smcd/lgr.hpp"

#include "test/unit/stats_dir.hpp"
#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <netinet/in.h>
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
    struct {
        uint32_t magic, version;
        int32_t pid;
        uint32_t withdrawn;
        uint64_t start_time, gid;
        uint32_t flags, reserved;
        uint64_t congested_until_ns, pending_token;
    } e{};
    std::ifstream(dir.path + "/" + name, std::ios::binary)
        .read(reinterpret_cast<char*>(&e), sizeof e);
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
