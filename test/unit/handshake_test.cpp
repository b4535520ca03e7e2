// SPDX-License-Identifier: MIT
#include "engine/base/fallback.hpp"
#include "engine/base/loop.hpp"
#include "engine/clc/clc.hpp"
#include "engine/clc/clc_io.hpp"
#include "engine/handshake/handshake_ism.hpp"
#include "engine/smcd/cdc_line.hpp"
#include "engine/smcd/lgr.hpp"
#include "engine/smcd/link_group.hpp"
#include "test/unit/loopback.hpp"

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace usmc;

namespace {

using test::TcpPair;

int open_fds() {
    int n = 0;
    DIR* d = opendir("/proc/self/fd");
    while (readdir(d))
        ++n;
    closedir(d);
    return n;
}

// The count once the endpoint (on the loop thread) has closed its side of the last
// attach (it does so after answering, concurrently with the caller): waits
// up to a second for `want`.
int open_fds_settled(int want) {
    int n = open_fds();
    for (int i = 0; i < 100 && n != want; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        n = open_fds();
    }
    return n;
}

ssize_t send_str(SmcConn& c, const char* s) {
    iovec iov{const_cast<char*>(s), std::strlen(s)};
    return smc_send(c, &iov, 1, false, 2000);
}

std::string recv_str(SmcConn& c, size_t n) {
    std::string s(n, '\0');
    iovec iov{s.data(), n};
    ssize_t r = smc_recv(c, &iov, 1, MSG_WAITALL, false, 2000);
    s.resize(r > 0 ? size_t(r) : 0);
    return s;
}

} // namespace

TEST_CASE("classify: Proposal, other first bytes, silence, partial headers") {
    TcpPair t;
    CHECK(clc::classify(t.server, 30) == clc::FirstBytes::Nothing);
    REQUIRE(write(t.client, "GET / HTTP/1.1\r\n", 16) == 16);
    CHECK(clc::classify(t.server, 30) == clc::FirstBytes::Other);
    char sink[16];
    REQUIRE(read(t.server, sink, 16) == 16);

    auto prop = clc::encode(clc::Proposal{});
    REQUIRE(write(t.client, prop.data(), 3) == 3); // a partial eyecatcher: keep waiting
    ssize_t rest_written = 0; // checked here: Catch2's assertions are not thread-safe
    std::thread rest([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        rest_written = write(t.client, prop.data() + 3, prop.size() - 3);
    });
    CHECK(clc::classify(t.server, 1000) == clc::FirstBytes::Proposal);
    rest.join();
    REQUIRE(rest_written == ssize_t(prop.size() - 3));
    auto r = clc::read_message(t.server, 100);
    CHECK(r.status == clc::ReadStatus::Message);
    CHECK(r.bytes == prop); // exactly the message
    close(t.client);
    t.client = -1;
    CHECK(clc::classify(t.server, 100) == clc::FirstBytes::Closed);
}

namespace {

// Runs both sides of a handshake on `t` (the server in a thread) and
// requires SMC-D on both: returns the server's connection; `c` is the client's.
std::unique_ptr<SmcConn> handshake_pair(TcpPair& t, ism::Device& server_dev,
                                        ism::Device& client_dev, ism::Endpoint& ep, SmcConn& c,
                                        const HandshakeConfig& cfg = {}) {
    HandshakeResult server_result;
    auto first = clc::FirstBytes::Nothing; // checked here: Catch2's assertions are not thread-safe
    std::thread server([&] {
        first = clc::classify(t.server, 2000);
        if (first == clc::FirstBytes::Proposal)
            server_result = smc_listen_handshake(t.server, {&server_dev, &ep}, cfg);
    });
    REQUIRE(smc_conn_init_wakeups(c, false, ism::random64()));
    ConnectResult client_result = smc_connect_handshake(t.client, c, {&client_dev}, cfg);
    server.join();
    REQUIRE(first == clc::FirstBytes::Proposal);
    REQUIRE(std::holds_alternative<std::monostate>(client_result));
    REQUIRE(std::holds_alternative<std::unique_ptr<SmcConn>>(server_result));
    return std::move(std::get<std::unique_ptr<SmcConn>>(server_result));
}

} // namespace

TEST_CASE("handshake between two threads: SMC-D up, data both ways, TCP stream untouched") {
    TcpPair t;
    ism::Device server_dev(8 << 20), client_dev(8 << 20);
    ism::Endpoint* ep = ism::Endpoint::start(server_dev);
    REQUIRE(ep != nullptr);
    SmcConn c;
    auto server_conn = handshake_pair(t, server_dev, client_dev, *ep, c);
    auto& s = *server_conn;
    CHECK(send_str(c, "ping") == 4);
    CHECK(recv_str(s, 4) == "ping");
    CHECK(send_str(s, "pong!") == 5);
    CHECK(recv_str(c, 5) == "pong!");
    char b;
    CHECK(recv(t.client, &b, 1, MSG_DONTWAIT) == -1); // no CLC byte left behind
    CHECK(recv(t.server, &b, 1, MSG_DONTWAIT) == -1);
    smc_close(c, false);
    CHECK(recv_str(s, 1).empty()); // EOF
    smc_conn_release(c, client_dev, 0);
    smc_conn_release(s, server_dev, 0);
    delete ep;
}

TEST_CASE("a second connection between the same peers reuses both DMBs and their mappings") {
    ism::Device server_dev(8 << 20), client_dev(8 << 20);
    ism::Endpoint* ep = ism::Endpoint::start(server_dev);
    REQUIRE(ep != nullptr);
    uint8_t* server_rx[2] = {};
    uint8_t* client_rx[2] = {};
    uint8_t* client_tx[2] = {};
    for (int round = 0; round < 2; ++round) {
        TcpPair t;
        SmcConn c;
        auto server_conn = handshake_pair(t, server_dev, client_dev, *ep, c);
        auto& s = *server_conn;
        server_rx[round] = s.transport.smcd().rx.base;
        client_rx[round] = c.transport.smcd().rx.base;
        client_tx[round] = c.transport.smcd().tx.base;
        CHECK(s.peer_uid == getuid()); // from SO_PEERCRED at attach time
        const std::string msg = round == 0 ? "first" : "again";
        CHECK(send_str(c, msg.c_str()) == ssize_t(msg.size()));
        CHECK(recv_str(s, msg.size()) == msg);
        CHECK(send_str(s, msg.c_str()) == ssize_t(msg.size())); // and back
        CHECK(recv_str(c, msg.size()) == msg);
        smc_close(c, false);
        smc_close(s, false);
        smc_conn_release(c, client_dev, c.peer_uid);
        smc_conn_release(s, server_dev, s.peer_uid);
    }
    // The server took its DMB once the client's user was known, so the
    // second connection got the same one back (zeroed), as did the client.
    CHECK(server_rx[1] == server_rx[0]);
    CHECK(client_rx[1] == client_rx[0]);
    CHECK(client_tx[1] == client_tx[0]); // the server's DMB was still mapped: no mmap
    delete ep;
}

TEST_CASE("on a link group the Proposal names the client's DMB: the Accept takes it, no Confirm") {
    ism::Device server_dev(8 << 20), client_dev(8 << 20);
    ism::Endpoint* ep = ism::Endpoint::start(server_dev);
    REQUIRE(ep != nullptr);
    HandshakeConfig cfg;
    {
        TcpPair t; // the first contact: the link group, both ways
        SmcConn c;
        SmcConn none;
        REQUIRE(smc_conn_init_wakeups(none, false, ism::random64()));
        CHECK_FALSE(smc_name_dmb(none, client_dev, cfg, server_dev.gid())); // no group yet
        smc_close_wakeups(none);
        auto s = handshake_pair(t, server_dev, client_dev, *ep, c);
        smc_close(c, false);
        smc_close(*s, false);
        smc_conn_release(c, client_dev, c.peer_uid);
        smc_conn_release(*s, server_dev, s->peer_uid);
    }
    TcpPair t;
    SmcConn c;
    REQUIRE(smc_conn_init_wakeups(c, false, ism::random64()));
    auto named = smc_name_dmb(c, client_dev, cfg, server_dev.gid());
    REQUIRE(named);
    CHECK(named->secret == c.dmb_secret);
    CHECK(named->secret != c.token); // never the `sig`'s name, which anyone can read
    CHECK(c.transport.smcd().rx.control()->owner_sig.load() == c.token);
    CHECK(named->serial == c.transport.smcd().rx.serial);
    HandshakeResult server_result;
    bool complete = false;
    std::thread server([&] {
        uint64_t token = 0;
        if (clc::classify(t.server, 2000) == clc::FirstBytes::Proposal)
            server_result =
                smc_listen_begin(t.server, {&server_dev, ep}, cfg, &token, nullptr, &complete);
    });
    REQUIRE(smc_send_proposal(t.client, {&client_dev}, cfg, &*named));
    ConnectResult client_result = smc_connect_handshake(t.client, c, {&client_dev}, cfg, true);
    server.join();
    REQUIRE(std::holds_alternative<std::monostate>(client_result));
    REQUIRE(std::holds_alternative<std::unique_ptr<SmcConn>>(server_result));
    CHECK(complete); // up at the Accept
    auto& s = *std::get<std::unique_ptr<SmcConn>>(server_result);
    // The DMB the Proposal named (each side maps the other's segment where it may).
    CHECK(s.transport.smcd().tx.serial == c.transport.smcd().rx.serial);
    CHECK(s.transport.smcd().tx.offset == c.transport.smcd().rx.offset);
    CHECK(c.transport.smcd().tx.serial == s.transport.smcd().rx.serial);
    CHECK(c.transport.smcd().tx.offset == s.transport.smcd().rx.offset);
    CHECK(s.peer_token == c.token);
    char b;
    CHECK(recv(t.server, &b, 1, MSG_DONTWAIT) == -1); // no Confirm came
    CHECK(recv(t.client, &b, 1, MSG_DONTWAIT) == -1);
    CHECK(send_str(c, "named") == 5);
    CHECK(recv_str(s, 5) == "named");
    CHECK(send_str(s, "took!") == 5);
    CHECK(recv_str(c, 5) == "took!");
    smc_close(c, false);
    CHECK(recv_str(s, 1).empty()); // EOF
    smc_close(s, false);
    smc_conn_release(c, client_dev, c.peer_uid);
    smc_conn_release(s, server_dev, s.peer_uid);

    // A handshake that ends without coming up after its DMB was taken
    // leaves that DMB to the server until its close flags: never claimed
    // again before.
    SmcConn d;
    REQUIRE(smc_conn_init_wakeups(d, false, ism::random64()));
    auto taken = smc_name_dmb(d, client_dev, cfg, server_dev.gid());
    REQUIRE(taken);
    REQUIRE(smcd::take_named(*d.transport.smcd().rx.control(), d.dmb_secret)); // as the server does
    smc_connect_abandon(d, client_dev);
    CHECK_FALSE(d.transport.smcd().rx.valid());
    for (int i = 0; i < 8; ++i) {
        SmcConn e;
        REQUIRE(smc_conn_init_wakeups(e, false, ism::random64()));
        auto again = smc_name_dmb(e, client_dev, cfg, server_dev.gid());
        if (again) CHECK_FALSE((again->serial == taken->serial && again->slot == taken->slot));
        smc_connect_abandon(e, client_dev); // withdrawn: free at once
        smc_close_wakeups(e);
    }
    smc_close_wakeups(d);
    delete ep;
}

TEST_CASE("a named DMB is taken by the server or withdrawn by its owner, never both") {
    alignas(64) smcd::Control line{};
    constexpr uint64_t kToken = 0x1234567890abcdefull;
    line.owner_token.store(kToken);
    CHECK(smcd::take_named(line, kToken));
    CHECK_FALSE(smcd::withdraw_named(line, kToken)); // taken: the client must not decline
    CHECK_FALSE(smcd::take_named(line, kToken));     // and nobody takes it twice
    smcd::untake_named(line, kToken);                // the server could not use it after all
    CHECK(line.owner_token.load() == kToken);        // a Confirm may name it again
    CHECK(smcd::withdraw_named(line, kToken));
    CHECK_FALSE(smcd::take_named(line, kToken)); // withdrawn: the server leaves it
    CHECK(line.owner_token.load() == 0);
    smcd::untake_named(line, kToken); // not the server's to give back: unchanged
    CHECK(line.owner_token.load() == 0);
    // Whoever comes first wins, across threads.
    for (int round = 0; round < 200; ++round) {
        line.owner_token.store(kToken);
        bool took = false, withdrew = false;
        std::thread server([&] { took = smcd::take_named(line, kToken); });
        withdrew = smcd::withdraw_named(line, kToken);
        server.join();
        REQUIRE(took != withdrew);
    }
}

// A server's endpoint, ready to offer.
struct OfferingEndpoint {
    ism::Device dev{8 << 20, false}; // DMBs of their own: counted one by one
    ism::Endpoint* ep = nullptr;
    OfferingEndpoint() {
        lgr::close_all(); // links of earlier tests: descriptor counts start clean
        ep = ism::Endpoint::start(dev);
        REQUIRE(ep);
    }
    ~OfferingEndpoint() { delete ep; }
    void offer(uint64_t token) { ep->offer(token, {16384, std::nullopt}); }
};

TEST_CASE_METHOD(
    OfferingEndpoint,
    "the endpoint takes the server's DMB at attach time and gives it back when withdrawn") {
    offer(7);
    CHECK(dev.memory_in_use() == 0); // nothing taken before an attach
    auto mine = ism::create_dmb(16384);
    auto fds = [&](uid_t) -> std::optional<ism::Fds> { return ism::Fds{mine->fd, mine->size}; };
    auto got = ism::attach(dev.gid(), 7, fds, 500);
    REQUIRE(got);
    CHECK(dev.memory_in_use() == 16384); // taken for this attach
    ism::close_fds(got->fds);
    ep->withdraw(7); // the handshake failed after the attach: the DMB goes, never reused
    CHECK(dev.memory_in_use() == 0);
    CHECK(dev.spare_count() == 0);
    CHECK_FALSE(ep->wait_attached(7, 10));
    // An offer nobody attaches to: waiting ends at the timeout with nothing.
    offer(8);
    CHECK_FALSE(ep->wait_attached(8, 20));
    CHECK(dev.memory_in_use() == 0);
    {
        // The memory went elsewhere between the Accept and the attach: the
        // attach is refused (the client then declines), nothing leaks.
        ism::Device full(16384);
        ism::Endpoint* fep = ism::Endpoint::start(full);
        REQUIRE(fep);
        auto taken = full.allocate(16384, ism::kUnknownPeer);
        REQUIRE(taken);
        fep->offer(9, {16384, std::nullopt});
        int with_link = open_fds();
        lgr::close_all();
        int before = open_fds_settled(with_link - 2); // the link to `dev` closed on both sides
        REQUIRE(before == with_link - 2);
        CHECK_FALSE(ism::attach(full.gid(), 9, fds, 500));
        lgr::close_all(); // the link to `full` (kept otherwise)
        CHECK(open_fds_settled(before) == before);
        CHECK_FALSE(fep->wait_attached(9, 10));
        full.release(*taken, ism::kUnknownPeer);
        delete fep;
    }
    ism::unmap(*mine);
}

TEST_CASE_METHOD(OfferingEndpoint,
                 "a first contact's segment is in the server's link group once the attach is "
                 "answered, before its Confirm") {
    // The client counts its segment as the server's from the endpoint's
    // answer on, and its next connection may name a slot of it while this
    // one's Confirm is still on its way: the server must believe that name.
    constexpr uint64_t kClientGid = 0xc1;
    ism::Device client{8 << 20};
    auto mine = client.allocate(16384, getuid());
    REQUIRE(mine);
    REQUIRE(mine->serial != 0);
    ep->offer(7, {16384, std::nullopt, kClientGid});
    auto fds = [&](uid_t) -> std::optional<ism::Fds> {
        return ism::Fds{mine->fd, mine->size, mine->offset, mine->file_size, mine->serial};
    };
    auto got = ism::attach(dev.gid(), 7, fds, 500);
    REQUIRE(got);
    auto next = client.allocate(16384, getuid()); // the client's next connection
    REQUIRE(next);
    REQUIRE(next->serial == mine->serial);
    next->control()->owner_token.store(0x5ec);
    auto named = dev.groups().their_slot(kClientGid, next->serial, next->slot, 16384, 0x5ec);
    CHECK(named);
    if (named) dev.unmap_peer(*named);
    // The Confirm of the first: its DMB, mapped by the endpoint already.
    auto attached = ep->wait_attached(7, 500);
    REQUIRE(attached);
    CHECK(attached->peer.fds.dmb == -1);
    CHECK(attached->theirs.size == 16384);
    dev.unmap_peer(attached->theirs);
    dev.release(attached->ours, getuid());
    ism::close_fds(got->fds);
    client.release(*next, getuid());
    client.release(*mine, getuid());
}

TEST_CASE("the peer-mapping cache: a gone peer's file is unmapped, never kept idle") {
    ism::Device dev(64 << 20);
    auto own = ism::create_dmb(16384);
    REQUIRE(own);
    // Idle when its peer goes: unmapped at once.
    auto a = dev.map_peer(dup(own->fd), 16384);
    REQUIRE(a);
    uint64_t ino = a->ino;
    dev.unmap_peer(*a);
    CHECK(dev.idle_peer_maps() == 1);
    dev.forget_peer(ino);
    CHECK(dev.idle_peer_maps() == 0);
    // Still viewed when its peer goes: unmapped with the last view, not idled.
    auto b = dev.map_peer(dup(own->fd), 16384);
    auto c = dev.map_peer(dup(own->fd), 16384);
    REQUIRE(b);
    REQUIRE(c);
    dev.forget_peer(b->ino);
    b->ring()[0] = 1; // (still mapped for its views)
    dev.unmap_peer(*b);
    CHECK(c->ring()[0] == 1);
    dev.unmap_peer(*c);
    CHECK(dev.idle_peer_maps() == 0);
    dev.forget_peer(ino); // nothing mapped: harmless
    ism::unmap(*own);
}

TEST_CASE("the peer-mapping cache: same file mapped once, idle ones bounded, others refused") {
    ism::Device dev(64 << 20);
    auto own = ism::create_dmb(16384);
    REQUIRE(own);
    auto a = dev.map_peer(dup(own->fd), 16384);
    REQUIRE(a);
    auto b = dev.map_peer(dup(own->fd), 16384);
    REQUIRE(b);
    CHECK(a->base == b->base); // the same file: the mapping is shared
    dev.unmap_peer(*a);
    CHECK(dev.idle_peer_maps() == 0); // still used by b
    dev.unmap_peer(*b);
    CHECK(dev.idle_peer_maps() == 1);
    auto c = dev.map_peer(dup(own->fd), 16384);
    REQUIRE(c);
    CHECK(dev.idle_peer_maps() == 0);
    dev.unmap_peer(*c);
    // Many files: idle mappings stay bounded.
    std::vector<ism::Dmb> owned;
    for (size_t i = 0; i < ism::Device::kMaxIdlePeerMaps + 10; ++i) {
        auto d = ism::create_dmb(16384);
        REQUIRE(d);
        auto m = dev.map_peer(dup(d->fd), 16384);
        REQUIRE(m);
        dev.unmap_peer(*m);
        owned.push_back(*d);
    }
    CHECK(dev.idle_peer_maps() == ism::Device::kMaxIdlePeerMaps);
    for (auto& d : owned)
        ism::unmap(d);
    // A memfd whose size is not sealed could be truncated under our
    // mapping (SIGBUS on the next access): refused.
    int loose = memfd_create("loose", MFD_CLOEXEC);
    REQUIRE(ftruncate(loose, 16384) == 0);
    CHECK_FALSE(dev.map_peer(loose, 16384));
    CHECK_FALSE(ism::map_peer_dmb(loose, 16384));
    close(loose);
    ism::unmap(*own);
}

// [fork-threads]: the forked child starts threads (the event loop's, which
// serves its endpoint). Under ThreadSanitizer that works only if the parent
// has no other thread at the fork, so scripts/tsan.sh runs it in a process
// of its own.
TEST_CASE("handshake across processes, 8 MiB checksummed", "[fork-threads]") {
    TcpPair t;
    pid_t child = fork();
    if (child == 0) {          // the server process
        loop::on_fork_child(); // as the engine's fork handler does: the parent's loop is not ours
        ism::Device dev(8 << 20);
        ism::Endpoint* ep = ism::Endpoint::start(dev);
        if (!ep || clc::classify(t.server, 2000) != clc::FirstBytes::Proposal) _exit(2);
        auto r = smc_listen_handshake(t.server, {&dev, ep}, HandshakeConfig{});
        if (!std::holds_alternative<std::unique_ptr<SmcConn>>(r)) _exit(3);
        auto& s = *std::get<std::unique_ptr<SmcConn>>(r);
        std::vector<uint8_t> buf(65536);
        uint64_t sum = 0, total = 0;
        while (true) {
            iovec iov{buf.data(), buf.size()};
            ssize_t n = smc_recv(s, &iov, 1, 0, false, 5000);
            if (n <= 0) break;
            for (ssize_t i = 0; i < n; ++i)
                sum = sum * 31 + buf[size_t(i)];
            total += uint64_t(n);
        }
        uint64_t reply[2] = {total, sum};
        iovec iov{reply, sizeof reply};
        smc_send(s, &iov, 1, false, 5000);
        smc_close(s, false);
        _exit(0);
    }
    ism::Device dev(8 << 20);
    SmcConn c;
    REQUIRE(smc_conn_init_wakeups(c, false, ism::random64()));
    auto r = smc_connect_handshake(t.client, c, {&dev}, HandshakeConfig{});
    REQUIRE(std::holds_alternative<std::monostate>(r));
    std::vector<uint8_t> data(8u << 20);
    uint64_t sum = 0;
    for (size_t i = 0; i < data.size(); ++i) {
        data[i] = uint8_t(i * 7 + (i >> 11));
        sum = sum * 31 + data[i];
    }
    iovec out{data.data(), data.size()};
    size_t sent = 0;
    while (sent < data.size()) {
        out = {data.data() + sent, data.size() - sent};
        ssize_t n = smc_send(c, &out, 1, false, 5000);
        REQUIRE(n > 0);
        sent += size_t(n);
    }
    smc_shutdown_write(c);
    uint64_t reply[2] = {0, 0};
    iovec in{reply, sizeof reply};
    CHECK(smc_recv(c, &in, 1, MSG_WAITALL, false, 5000) == sizeof reply);
    CHECK(reply[0] == data.size());
    CHECK(reply[1] == sum);
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WEXITSTATUS(status) == 0);
    smc_conn_release(c, dev, 0);
}

TEST_CASE("an Accept without the secret (usmc before 56124c8: the public sig token) is declined, "
          "never attached to") {
    TcpPair t;
    ism::Device dev(8 << 20);
    SmcConn c;
    REQUIRE(smc_conn_init_wakeups(c, false, ism::random64()));
    REQUIRE(smc_send_proposal(t.client, {&dev}, HandshakeConfig{}));
    auto p = clc::read_message(t.server, 1000);
    REQUIRE(p.status == clc::ReadStatus::Message);
    clc::AcceptConfirmD a;
    a.type = clc::Type::Accept;
    a.first_contact = true;
    a.gid = 0x5151;
    a.token = 0x7777; // the server's `sig`, as an old server offered under it
    a.dmbe_size_code = 2;
    a.chid = clc::kChidEmulated;
    a.dmb_secret = 0;
    auto bytes = clc::encode(a);
    REQUIRE(write(t.server, bytes.data(), bytes.size()) == ssize_t(bytes.size()));
    auto r = smc_connect_handshake(t.client, c, {&dev}, HandshakeConfig{}, true);
    REQUIRE(std::holds_alternative<Fallback>(r));
    CHECK(std::get<Fallback>(r).reason == fallback::VERSMISMAT);
    auto d = clc::read_message(t.server, 1000);
    REQUIRE(d.status == clc::ReadStatus::Message);
    CHECK(std::get<clc::Decline>(clc::decode_decline(d.bytes)).diagnosis == fallback::VERSMISMAT);
    CHECK_FALSE(c.transport.has_buffers());
    smc_conn_release(c, dev, 0);
}

TEST_CASE("an Accept for a transport or version the Proposal did not offer is declined "
          "MODEUNSUPP (smc_connect_check_aclc)") {
    auto run = [](std::vector<uint8_t> accept) {
        TcpPair t;
        ism::Device dev(8 << 20);
        SmcConn c;
        REQUIRE(smc_conn_init_wakeups(c, false, ism::random64()));
        REQUIRE(smc_send_proposal(t.client, {&dev}, HandshakeConfig{}));
        auto p = clc::read_message(t.server, 1000);
        REQUIRE(p.status == clc::ReadStatus::Message);
        auto offered = std::get<clc::Proposal>(clc::decode_proposal(p.bytes));
        CHECK(offered.typev1 == clc::kTypeN); // SMC-Dv2 only
        CHECK(offered.typev2 == clc::kTypeD);
        // The server's answer, then the application's first bytes.
        accept.insert(accept.end(), {'h', 'i'});
        REQUIRE(write(t.server, accept.data(), accept.size()) == ssize_t(accept.size()));
        auto r = smc_connect_handshake(t.client, c, {&dev}, HandshakeConfig{}, true);
        REQUIRE(std::holds_alternative<Fallback>(r));
        CHECK(std::get<Fallback>(r).reason == fallback::MODEUNSUPP);
        auto d = clc::read_message(t.server, 1000);
        REQUIRE(d.status == clc::ReadStatus::Message);
        CHECK(std::get<clc::Decline>(clc::decode_decline(d.bytes)).diagnosis ==
              fallback::MODEUNSUPP);
        CHECK_FALSE(c.transport.has_buffers());
        char rest[2] = {};
        CHECK(read(t.client, rest, 2) == 2); // the TCP stream goes on right after it
        CHECK(std::string(rest, 2) == "hi");
        smc_conn_release(c, dev, 0);
    };
    SECTION("an SMC-R Accept, well formed") {
        clc::AcceptConfirmR a;
        a.first_contact = true;
        a.rmbe_size_code = 2;
        a.fce = clc::FirstContact{};
        run(clc::encode(a));
    }
    SECTION("an SMC-Dv1 Accept, when only v2 was offered") {
        clc::AcceptConfirmD a;
        a.version = 1;
        a.gid = 0x5151;
        a.token = 0x7777;
        a.dmbe_size_code = 2;
        run(clc::encode(a));
    }
    SECTION("a Confirm where the Accept belongs") {
        clc::AcceptConfirmD a;
        a.type = clc::Type::Confirm;
        a.gid = 0x5151;
        a.dmbe_size_code = 2;
        a.dmb_secret = 9;
        run(clc::encode(a));
    }
}

TEST_CASE("a Decline leaves the application's bytes behind it intact") {
    TcpPair t;
    ism::Device dev(8 << 20);
    ism::Endpoint* ep = ism::Endpoint::start(dev);
    REQUIRE(ep);
    clc::Proposal p; // offers nothing usmc's server can take
    p.typev2 = clc::kTypeN;
    auto bytes = clc::encode(p);
    REQUIRE(write(t.client, bytes.data(), bytes.size()) == ssize_t(bytes.size()));
    REQUIRE(write(t.client, "hello", 5) == 5);
    REQUIRE(clc::classify(t.server, 1000) == clc::FirstBytes::Proposal);
    auto r = smc_listen_handshake(t.server, {&dev, ep}, HandshakeConfig{});
    REQUIRE(std::holds_alternative<Fallback>(r));
    CHECK(std::get<Fallback>(r).reason == fallback::PEERNOSMC); // (the kernel's answer)
    char buf[8] = {};
    CHECK(read(t.server, buf, sizeof buf) == 5);
    CHECK(std::string(buf) == "hello");
    auto d = clc::read_message(t.client, 1000);
    REQUIRE(d.status == clc::ReadStatus::Message);
    CHECK(std::get<clc::Decline>(clc::decode_decline(d.bytes)).diagnosis == fallback::PEERNOSMC);
    delete ep;
}

TEST_CASE("the server's memory cap: Decline MAX_DMB, client falls back") {
    TcpPair t;
    ism::Device server_dev(1), client_dev(8 << 20); // the server cannot afford a DMB
    ism::Endpoint* ep = ism::Endpoint::start(server_dev);
    HandshakeResult server_result;
    std::thread server([&] {
        clc::classify(t.server, 2000);
        server_result = smc_listen_handshake(t.server, {&server_dev, ep}, HandshakeConfig{});
    });
    SmcConn c;
    REQUIRE(smc_conn_init_wakeups(c, false, ism::random64()));
    auto r = smc_connect_handshake(t.client, c, {&client_dev}, HandshakeConfig{});
    server.join();
    REQUIRE(std::holds_alternative<Fallback>(r));
    CHECK(std::get<Fallback>(r).reason == fallback::PEERDECL);
    CHECK(std::get<Fallback>(r).peer_diagnosis == fallback::MAX_DMB);
    CHECK(std::get<Fallback>(server_result).reason == fallback::MAX_DMB);
    // The TCP connection carries on.
    REQUIRE(write(t.client, "tcp", 3) == 3);
    char buf[4] = {};
    CHECK(read(t.server, buf, 3) == 3);
    delete ep;
}

TEST_CASE("late Proposal: the server already chose TCP and declines; server speaks first") {
    {
        TcpPair t;
        ism::Device dev(8 << 20);
        // Checked here: Catch2's assertions are not thread-safe.
        auto first = clc::FirstBytes::Nothing;
        std::thread server([&] {
            first = clc::classify(t.server, 2000);
            if (first == clc::FirstBytes::Proposal)
                smc_decline_late_proposal(t.server, fallback::PEERNOSMC);
        });
        auto t0 = std::chrono::steady_clock::now();
        SmcConn c;
        REQUIRE(smc_conn_init_wakeups(c, false, ism::random64()));
        auto r = smc_connect_handshake(t.client, c, {&dev}, HandshakeConfig{});
        server.join();
        REQUIRE(first == clc::FirstBytes::Proposal);
        REQUIRE(std::holds_alternative<Fallback>(r));
        CHECK(std::get<Fallback>(r).reason == fallback::PEERDECL);
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
    }
    {
        TcpPair t;
        ism::Device dev(8 << 20);
        REQUIRE(write(t.server, "220 ready\r\n", 11) == 11); // a server that speaks first, as TCP
        SmcConn c;
        REQUIRE(smc_conn_init_wakeups(c, false, ism::random64()));
        auto r = smc_connect_handshake(t.client, c, {&dev}, HandshakeConfig{});
        REQUIRE(std::holds_alternative<Fallback>(r));
        CHECK(std::get<Fallback>(r).reason == fallback::PEERNOSMC);
        char buf[12] = {};
        CHECK(read(t.client, buf, 11) == 11); // the banner is still there for the application
        CHECK(std::string(buf) == "220 ready\r\n");
    }
}

TEST_CASE_METHOD(OfferingEndpoint,
                 "the endpoint gives nothing for a wrong token and leaks no descriptor") {
    offer(42);
    int before = open_fds();
    auto other = ism::create_dmb(16384);
    uid_t asked_for = 12345;
    auto theirs = [&](uid_t uid) -> std::optional<ism::Fds> {
        asked_for = uid;
        return ism::Fds{other->fd, other->size};
    };
    CHECK_FALSE(ism::attach(dev.gid(), 43, theirs, 500));     // wrong token
    CHECK_FALSE(ism::attach(dev.gid() + 1, 42, theirs, 500)); // no such endpoint
    auto lying = [&](uid_t) -> std::optional<ism::Fds> {      // size does not match the file
        return ism::Fds{other->fd, 65536};
    };
    CHECK_FALSE(ism::attach(dev.gid(), 42, lying, 500));
    auto none = [](uid_t) -> std::optional<ism::Fds> { return std::nullopt; };
    CHECK_FALSE(ism::attach(dev.gid(), 42, none, 500)); // no DMB for us: nothing is sent
    asked_for = 12345;
    auto ok = ism::attach(dev.gid(), 42, theirs, 500);
    REQUIRE(ok);
    CHECK(asked_for == getuid()); // the endpoint owner's user, before our DMB went out
    CHECK(ok->uid == getuid());
    CHECK(ok->fds.dmb_size == 16384);
    CHECK(ok->pid == getpid());
    CHECK_FALSE(ism::attach(dev.gid(), 42, theirs, 500)); // single use
    // Every attach to this endpoint went over one link, kept open.
    CHECK(lgr::open_links() == 1);
    auto got = ep->wait_attached(42, 100);
    REQUIRE(got);
    CHECK(got->ours.size == 16384); // taken from the device when the attach came
    ism::close_fds(got->peer.fds);
    ism::close_fds(ok->fds);
    ism::unmap(*other);
    dev.release(got->ours, ism::kUnknownPeer);
    // Every descriptor that came in was closed or handed over; the link goes
    // on both sides when this process closes it.
    lgr::close_all();
    CHECK(open_fds_settled(before) == before);
}

TEST_CASE_METHOD(OfferingEndpoint,
                 "links: one per endpoint, replaced when the endpoint restarts, one per process "
                 "and user") {
    auto mine = ism::create_dmb(16384);
    REQUIRE(mine);
    auto fds = [&](uid_t) -> std::optional<ism::Fds> { return ism::Fds{mine->fd, mine->size}; };
    auto attach_ok = [&](uint64_t token) {
        auto got = ism::attach(dev.gid(), token, fds, 1000);
        if (got) ism::close_fds(got->fds);
        return got.has_value();
    };
    auto forget = [&](uint64_t token) {
        auto a = ep->wait_attached(token, 1000);
        if (!a) return ism::PeerFds{};
        ism::close_fds(a->peer.fds);
        dev.release(a->ours, ism::kUnknownPeer);
        return a->peer;
    };
    for (uint64_t token : {1, 2, 3}) {
        offer(token);
        CHECK(attach_ok(token));
        forget(token);
    }
    CHECK(lgr::open_links() == 1); // three attaches, one link

    // The endpoint went and came back under the same GID: the old link is
    // found closed when the request goes out, and a new one carries it.
    delete ep;
    ep = ism::Endpoint::start(dev);
    REQUIRE(ep);
    offer(4);
    CHECK(attach_ok(4));
    forget(4);
    CHECK(lgr::open_links() == 1);

    // A forked child does not use its parent's link: the endpoint learns
    // the child's pid from the child's own link.
    offer(5);
    pid_t child = fork();
    if (child == 0) {
        lgr::on_fork_child();
        _exit(attach_ok(5) ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(forget(5).pid == child);

    // A process that changed its effective user is not known by its old
    // link: it makes a new one, and the endpoint sees the new user.
    if (geteuid() == 0) {
        offer(6);
        child = fork();
        if (child == 0) _exit(seteuid(65534) == 0 && attach_ok(6) ? 0 : 1);
        REQUIRE(waitpid(child, &status, 0) == child);
        CHECK(WEXITSTATUS(status) == 0);
        CHECK(forget(6).uid == 65534);
    }
    ism::unmap(*mine);
}

namespace {
// A connected stream pair, closed at the end of the test: [0] writes, [1] reads.
struct StreamPair {
    int sv[2] = {-1, -1};
    StreamPair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0); }
    ~StreamPair() {
        close(sv[0]);
        close(sv[1]);
    }
    void put(const void* p, size_t n) const { REQUIRE(write(sv[0], p, n) == ssize_t(n)); }
    ssize_t rest() const { // what is left behind, taken
        char buf[2048];
        return recv(sv[1], buf, sizeof buf, MSG_DONTWAIT);
    }
};

std::vector<uint8_t> confirm_bytes() {
    clc::AcceptConfirmD m;
    m.type = clc::Type::Confirm;
    m.gid = 7;
    m.token = 9;
    m.chid = clc::kChidEmulated;
    return clc::encode(m);
}
} // namespace

TEST_CASE("take_whole_message: takes a CLC message only once it is whole, else nothing") {
    // (The connect watch finishes a handshake only then: a peer that sends
    // half a Confirm must not make that thread wait, nor lose its bytes.)
    StreamPair s;
    auto bytes = confirm_bytes();
    CHECK_FALSE(clc::take_whole_message(s.sv[1])); // nothing
    s.put(bytes.data(), 5);
    CHECK_FALSE(clc::take_whole_message(s.sv[1])); // part of the header
    s.put(bytes.data() + 5, bytes.size() - 6);
    CHECK_FALSE(clc::take_whole_message(s.sv[1])); // all but the last byte
    s.put(bytes.data() + bytes.size() - 1, 1);
    s.put("app", 3); // the application's, behind it
    auto r = clc::take_whole_message(s.sv[1]);
    REQUIRE(r);
    CHECK(r->status == clc::ReadStatus::Message);
    CHECK(r->bytes == bytes);
    CHECK(s.rest() == 3);
}

TEST_CASE("take_whole_message: bytes that only begin like CLC stay for read_message") {
    StreamPair s;
    auto bytes = confirm_bytes();
    bytes.back() ^= 0xff; // no trailer eyecatcher: not a CLC frame
    s.put(bytes.data(), bytes.size());
    CHECK_FALSE(clc::take_whole_message(s.sv[1]));
    CHECK(clc::read_message(s.sv[1], 0).status == clc::ReadStatus::NotClc);
    CHECK(s.rest() == ssize_t(bytes.size()));
}

TEST_CASE("read_message: a message longer than the first look, and the bytes behind it stay") {
    // (The first look peeks a few hundred bytes: a longer CLC frame is
    // peeked again whole before anything is taken.)
    StreamPair s;
    auto hdr = confirm_bytes(); // for its header: eyecatcher, type, version bits
    size_t len = 1000;
    std::vector<uint8_t> big(len, 0xab);
    std::copy(hdr.begin(), hdr.begin() + 8, big.begin());
    big[5] = uint8_t(len >> 8);
    big[6] = uint8_t(len);
    std::copy(hdr.begin(), hdr.begin() + 4, big.end() - 4); // the trailer eyecatcher
    CHECK_FALSE(clc::take_whole_message(s.sv[1]));
    s.put(big.data(), 600);
    CHECK_FALSE(clc::take_whole_message(s.sv[1]));
    CHECK(clc::read_message(s.sv[1], 0).status == clc::ReadStatus::Timeout);
    s.put(big.data() + 600, len - 600);
    s.put("app", 3); // the application's, behind it
    SECTION("read") {
        auto r = clc::read_message(s.sv[1], 0);
        CHECK(r.status == clc::ReadStatus::Message);
        CHECK(r.bytes == big);
    }
    SECTION("taken") {
        auto r = clc::take_whole_message(s.sv[1]);
        REQUIRE(r);
        CHECK(r->status == clc::ReadStatus::Message);
        CHECK(r->bytes == big);
    }
    CHECK(s.rest() == 3);
}

TEST_CASE("first_look: classifies as classify(fd, 0) does, and a take after it needs no new look") {
    // (The server's intake looks once at a connection's first bytes, tells
    // what they are and takes a whole Proposal from that same look.)
    StreamPair s;
    auto prop = clc::encode(clc::Proposal{});
    auto same = [&](clc::FirstBytes want) {
        clc::FirstLook look = clc::first_look(s.sv[1]);
        CHECK(clc::classify(look) == want);
        CHECK(clc::classify(s.sv[1], 0) == want);
        return look;
    };
    same(clc::FirstBytes::Nothing);
    SECTION("a Proposal, whole, with the application's bytes behind it") {
        s.put(prop.data(), prop.size());
        s.put("app", 3);
        clc::FirstLook look = same(clc::FirstBytes::Proposal);
        auto r = clc::take_whole_message(s.sv[1], look);
        REQUIRE(r);
        CHECK(r->bytes == prop);
        CHECK(s.rest() == 3);
    }
    SECTION("a Proposal's header only: a Proposal, not yet whole, nothing taken") {
        s.put(prop.data(), 8);
        clc::FirstLook look = same(clc::FirstBytes::Proposal);
        CHECK_FALSE(clc::take_whole_message(s.sv[1], look));
        CHECK(s.rest() == 8);
    }
    SECTION("part of an eyecatcher: other bytes, for a look that may not wait") {
        s.put(prop.data(), 3);
        same(clc::FirstBytes::Other);
        CHECK(s.rest() == 3);
    }
    SECTION("a plain client's bytes") {
        s.put("GET / HTTP/1.1\r\n", 16);
        clc::FirstLook look = same(clc::FirstBytes::Other);
        CHECK_FALSE(clc::take_whole_message(s.sv[1], look));
        CHECK(s.rest() == 16);
    }
    SECTION("another CLC message") {
        auto confirm = confirm_bytes();
        s.put(confirm.data(), confirm.size());
        same(clc::FirstBytes::OtherClc);
    }
    SECTION("the stream's end") {
        shutdown(s.sv[0], SHUT_WR);
        same(clc::FirstBytes::Closed);
    }
}
