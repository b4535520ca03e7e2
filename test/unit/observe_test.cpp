// SPDX-License-Identifier: MIT
// What `usmc ss -d/-D` and `usmc stats` compute from what processes publish:
// size buckets, cursor and flag texts, control-line copies, the records of
// the stats segment, and finding a connection's other end.
#include "engine/base/counters.hpp"
#include "engine/base/statseg.hpp"
#include "engine/smcd/ism.hpp"
#include "engine/sock/diag.hpp"
#include "tools/observe.hpp"
#include "tools/stats_view.hpp"
#include "tools/table.hpp"

#include "test/unit/stats_dir.hpp"

#include <catch2/catch.hpp>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

using namespace usmc;

namespace {

statseg::ConnRecord record(uint64_t gid, uint64_t token, uint64_t peer_gid, uint64_t peer_token,
                           uint64_t ino, uint64_t peer_ino) {
    statseg::ConnRecord r{};
    r.gen = 2;
    r.fd = 5;
    r.dmb_fd = 900;
    r.dmb_size = 64 << 10;
    r.peer_dmb_size = 64 << 10;
    r.gid = gid;
    r.token = token;
    r.peer_gid = peer_gid;
    r.peer_token = peer_token;
    r.dmb_ino = ino;
    r.peer_dmb_ino = peer_ino;
    return r;
}

} // namespace

TEST_CASE("requests and buffers fall in the kernel's size buckets") {
    using counters::bucket_of;
    CHECK(bucket_of(0) == 0);
    CHECK(bucket_of(1) == 0);
    CHECK(bucket_of(8192) == 0);
    CHECK(bucket_of(8193) == 1);
    CHECK(bucket_of(16384) == 1);
    CHECK(bucket_of(16385) == 2);
    CHECK(bucket_of(40000) == 3);
    CHECK(bucket_of(65536) == 3);
    CHECK(bucket_of(65537) == 4);
    CHECK(bucket_of(512 << 10) == 6);
    CHECK(bucket_of(1 << 20) == 7);
    CHECK(bucket_of((1 << 20) + 1) == 8);
    CHECK(bucket_of(uint64_t(1) << 40) == 8);
    CHECK(std::string(counters::bucket_name(0)) == "8KB");
    CHECK(std::string(counters::bucket_name(7)) == "1024KB");
    CHECK(std::string(counters::bucket_name(8)) == ">1024KB");
    CHECK(std::string(counters::bucket_name(9)) == "?");
}

TEST_CASE("cursors, flags and shutdown read as smcss writes them") {
    CHECK(tools::cursor_text(core::Cursor{1, 0xfa00}) == "0001:0000fa00");
    CHECK(tools::cursor_text(std::nullopt) == "-");
    CHECK(tools::flags_text(uint8_t{0}, uint8_t{0x80}) == "00:80");
    CHECK(tools::flags_text(std::nullopt, uint8_t{0}) == "-");
    CHECK(tools::hex64(0xabc) == "0000000000000abc");
    CHECK(tools::cursor_bytes(core::Cursor{2, 100}, 1000) == 2100);

    tools::Detail d;
    CHECK(tools::shutdown_text(d) == "?-?");
    d.rx_flags = 0;
    d.tx_flags = 0;
    CHECK(tools::shutdown_text(d) == "<->");
    d.rx_flags = core::kPeerDoneWriting;
    CHECK(tools::shutdown_text(d) == "R->");
    d.tx_flags = core::kPeerConnClosed;
    CHECK(tools::shutdown_text(d) == "R-W");
}

TEST_CASE("JSON is valid UTF-8 whatever a program's name holds") {
    using tools::Json;
    // UTF-8 passes as it is (not byte by byte as \u00XX, which read back
    // as "cafÃ©"); quotes and control bytes are escaped.
    CHECK(tools::dump(Json{{"program", "caf\xc3\xa9"}}) == "{\"program\":\"caf\xc3\xa9\"}");
    CHECK(tools::dump(Json("a\"b\\c\n\x01")) == "\"a\\\"b\\\\c\\n\\u0001\"");
    // A name that is not UTF-8 (a truncated sequence, a stray byte) is
    // printed with U+FFFD in their place, never an exception.
    std::string bad = tools::dump(Json{{"program", std::string("x\xff\xc3", 3)}});
    CHECK(bad == "{\"program\":\"x\xef\xbf\xbd\xef\xbf\xbd\"}");
    CHECK(Json::parse(bad)["program"] == "x\xef\xbf\xbd\xef\xbf\xbd");
    // A segment's name field without its terminator is cut at the field.
    statseg::Header* h = statseg::create_anonymous("", 16);
    REQUIRE(h != nullptr);
    std::memset(h->program, 'a', sizeof h->program);
    CHECK(tools::program_of(h) == std::string(sizeof h->program, 'a'));
    munmap(h, statseg::segment_bytes(16));
}

TEST_CASE("an interval's counts are differences, gauges as they are now") {
    tools::Totals before, after;
    before.counters[counters::conn_smcd] = 10;
    after.counters[counters::conn_smcd] = 15;
    before.counters[counters::dmb_bytes] = 1 << 20; // a gauge
    after.counters[counters::dmb_bytes] = 64 << 10;
    before.traffic[counters::kTx][counters::kReqs + 2] = 3;
    after.traffic[counters::kTx][counters::kReqs + 2] = 7;
    before.fallbacks[1] = 4;
    after.fallbacks[1] = 4;
    // Zeroed meanwhile (usmc stats reset): counted from zero.
    before.counters[counters::conn_tcp] = 100;
    after.counters[counters::conn_tcp] = 2;
    after.processes = 3;
    auto d = tools::delta(before, after);
    CHECK(d.counters[counters::conn_smcd] == 5);
    CHECK(d.counters[counters::dmb_bytes] == (64 << 10));
    CHECK(d.traffic[counters::kTx][counters::kReqs + 2] == 4);
    CHECK(d.fallbacks[1] == 0);
    CHECK(d.counters[counters::conn_tcp] == 2);
    CHECK(d.processes == 3);
}

TEST_CASE("stats of the processes asked for: by pid or by program name, live ones only") {
    auto make = [](const char* program, pid_t pid, uint64_t conns, bool alive) {
        statseg::View v;
        auto* h = statseg::create_anonymous(program, 16);
        REQUIRE(h != nullptr);
        h->pid = pid;
        h->counters[counters::conn_smcd].store(conns);
        h->counters[counters::accept_queue].store(1); // a gauge
        v.header = h;
        v.bytes = statseg::segment_bytes(16);
        v.alive = alive;
        return v;
    };
    std::vector<statseg::View> views{make("nginx", 100, 1, true), make("nginx", 101, 2, true),
                                     make("curl", 102, 4, true), make("curl", 103, 8, false)};
    tools::Selection all;
    auto t = tools::sum(views, false, all);
    CHECK(t.counters[counters::conn_smcd] == 15);   // the dead one's counts too
    CHECK(t.counters[counters::accept_queue] == 3); // not its gauge
    CHECK(t.processes == 3);
    tools::Selection by_name{{}, {"nginx"}};
    t = tools::sum(views, false, by_name);
    CHECK(t.counters[counters::conn_smcd] == 3);
    CHECK(t.processes == 2);
    tools::Selection by_pid{{102, 103}, {}};
    t = tools::sum(views, false, by_pid);
    CHECK(t.counters[counters::conn_smcd] == 4);
    tools::Selection both{{100}, {"curl"}};
    CHECK(tools::sum(views, false, both).counters[counters::conn_smcd] == 5);
    tools::Json j;
    tools::stats_json(j, tools::sum(views, true, all), tools::Json::array());
    CHECK(j["conn_smcd"] == 7);
    CHECK(j["total_connections"] == 7);
    CHECK(j["rx"]["reqs_by_size"].size() == counters::kBuckets);
    CHECK(tools::process_gauges(views[0])["pid"] == 100);
    CHECK(tools::process_gauges(views[0])["accept_queue"] == 1);
    for (auto& v : views)
        munmap(const_cast<statseg::Header*>(v.header), v.bytes);
}

TEST_CASE("tables: smcss's fixed widths, or as wide as their content") {
    std::vector<tools::Column> cols{
        {"PID", 5}, {"Program", 7, false, true}, {"Fd", 3, true}, {"Local Address", 8}};
    std::vector<std::vector<std::string>> rows{{"1", "nginx-worker", "7", "[2001:db8::1]:8080"},
                                               {"22", "sh", "10", "-"}};
    auto fixed = tools::table_lines(cols, rows, false);
    REQUIRE(fixed.size() == 3);
    CHECK(fixed[0] == "PID   Program  Fd Local Address");
    CHECK(fixed[1] == "1     nginx-w   7 [2001:db8::1]:8080"); // cut; the address pushes on
    CHECK(fixed[2] == "22    sh       10 -");
    auto wide = tools::table_lines(cols, rows, true);
    CHECK(wide[0] == "PID Program      Fd Local Address");
    CHECK(wide[1] == "1   nginx-worker  7 [2001:db8::1]:8080");
    CHECK(wide[2] == "22  sh           10 -");
    // Characters, not bytes: "café" is four columns, and is never cut
    // inside its "é".
    rows = {{"3", "caf\xc3\xa9-caf\xc3\xa9", "1", "-"}};
    auto utf8 = tools::table_lines(cols, rows, false);
    CHECK(utf8[1] == "3     caf\xc3\xa9-ca   1 -");
    cols[1].width = 4;
    CHECK(tools::table_lines(cols, rows, false)[1] == "3     caf\xc3\xa9   1 -");
    CHECK(tools::table_lines(cols, rows, true)[1] == "3   caf\xc3\xa9-caf\xc3\xa9  1 -");
    // What a program calls itself reaches the terminal harmless.
    CHECK(tools::printable("\x1b]0;owned\x07ok") == "?]0;owned?ok");
    CHECK(tools::printable(std::string("bad\xff\xc3", 5)) == "bad\xef\xbf\xbd\xef\xbf\xbd");
    CHECK(tools::printable("caf\xc3\xa9") == "caf\xc3\xa9");
}

TEST_CASE("a control line copy is taken only with the CDC type and whole") {
    uint8_t line[smcd::kControlBytes] = {};
    CHECK_FALSE(tools::parse_control(line, sizeof line)); // not a control line
    line[0] = smcd::kCdcType;
    uint64_t prod = smcd::pack_prod(core::Cursor{1, 10});
    uint64_t cons = smcd::pack_cons(core::Cursor{1, 4}, 0, core::kPeerDoneWriting);
    std::memcpy(line + 8, &prod, 8);
    std::memcpy(line + 16, &cons, 8);
    CHECK_FALSE(tools::parse_control(line, sizeof line - 1));
    auto w = tools::parse_control(line, sizeof line);
    REQUIRE(w);
    CHECK(w->prod == prod);
    CHECK(w->cons == cons);
}

TEST_CASE("details come from both control lines, and impossible cursors are flagged") {
    auto mine = record(1, 11, 2, 22, 100, 200);
    uint32_t ring = (64 << 10) - smcd::kControlBytes;
    tools::ControlWords own; // our DMB: the peer's producer cursor, its consumer cursor + flags
    own.prod = smcd::pack_prod(core::Cursor{0, 500});
    own.cons = smcd::pack_cons(core::Cursor{0, 300}, 0, 0);
    tools::ControlWords peers; // the peer's: ours
    peers.prod = smcd::pack_prod(core::Cursor{0, 300});
    peers.cons = smcd::pack_cons(core::Cursor{0, 500}, 0, core::kPeerDoneWriting);
    auto d = tools::detail_of(mine, own, peers);
    CHECK(d.rcvbuf == ring);
    CHECK(d.peerbuf == ring);
    CHECK(*d.rx_prod == core::Cursor{0, 500});
    CHECK(*d.rx_cons == core::Cursor{0, 500});
    CHECK(*d.tx_prod == core::Cursor{0, 300});
    CHECK(*d.tx_cons == core::Cursor{0, 300});
    CHECK(*d.tx_flags == core::kPeerDoneWriting);
    CHECK(*d.rx_flags == 0);
    CHECK(d.rx_ok);
    CHECK(d.tx_ok);
    CHECK(tools::shutdown_text(d) == "<-W");

    // The peer's line unknown: only our side's half.
    auto half = tools::detail_of(mine, own, std::nullopt);
    CHECK(half.rx_prod);
    CHECK_FALSE(half.rx_cons);
    CHECK_FALSE(half.tx_prod);

    // A consumer ahead of its producer is shown, and flagged.
    own.cons =
        smcd::pack_cons(core::Cursor{0, 400}, 0, 0); // the peer consumed more than we produced
    CHECK_FALSE(tools::detail_of(mine, own, peers).tx_ok);
    own.cons = smcd::pack_cons(core::Cursor{0, ring + 5}, 0, 0); // outside the ring
    CHECK_FALSE(tools::detail_of(mine, own, peers).tx_ok);

    // Implausible records give nothing.
    auto bad = mine;
    bad.dmb_size = 1000;
    CHECK_FALSE(tools::record_plausible(bad));
    CHECK(tools::detail_of(bad, own, peers).rcvbuf == 0);
}

TEST_CASE("the other end is the record with our GIDs and tokens swapped") {
    auto a = record(1, 11, 2, 22, 100, 200);
    auto b = record(2, 22, 1, 11, 200, 100);
    auto stranger = record(2, 22, 3, 33, 200, 300); // same GID and token, another peer
    std::vector<tools::Located> all = {{10, a}, {20, stranger}, {20, b}};
    auto found = tools::find_peer(a, all);
    REQUIRE(found);
    CHECK(found->pid == 20);
    CHECK(found->rec.peer_gid == 1);
    auto back = tools::find_peer(b, all);
    REQUIRE(back);
    CHECK(back->pid == 10);
    // A record naming another file than the one we write into is not our peer.
    auto forged = b;
    forged.dmb_ino = 999;
    CHECK_FALSE(tools::find_peer(a, {{20, forged}}));
}

TEST_CASE("connection records are published, read twice, and freed") {
    test::StatsDir dir{"observe"};
    char path[PATH_MAX];
    statseg::Header* h = statseg::create("observe-test", 1024, path, sizeof path);
    REQUIRE(h != nullptr);
    REQUIRE(h->conn_slots == statseg::kConnSlots);

    auto dmb = ism::create_dmb(64 << 10);
    REQUIRE(dmb);
    CHECK(dmb->ino != 0);
    SmcConn c;
    c.transport.smcd().rx = *dmb;
    c.transport.smcd().tx.size = 32 << 10;
    c.transport.smcd().tx.ino = 4242;
    c.gid = 0x1111;
    c.peer_gid = 0x2222;
    c.token = 0x3333;
    c.peer_token = 0x4444;
    diag::publish(h, c, 7);
    CHECK(c.diag_slot >= 0);
    int slot = c.diag_slot;
    diag::publish(h, c, 7); // idempotent
    CHECK(c.diag_slot == slot);

    auto views = statseg::open_all(dir.path, false);
    REQUIRE(views.size() == 1);
    auto recs = statseg::live_records(views[0]);
    REQUIRE(recs.size() == 1);
    CHECK(recs[0].fd == 7);
    CHECK(recs[0].dmb_fd == dmb->fd);
    CHECK(recs[0].dmb_size == (64u << 10));
    CHECK(recs[0].peer_dmb_size == (32u << 10));
    CHECK(recs[0].gid == 0x1111);
    CHECK(recs[0].peer_token == 0x4444);
    CHECK(recs[0].peer_dmb_ino == 4242);

    // The observer's copy of our control line, through /proc/<pid>/fd.
    dmb->control()->prod.store(smcd::pack_prod(core::Cursor{3, 77}));
    auto w = tools::read_control(getpid(), recs[0]);
    REQUIRE(w);
    CHECK(smcd::unpack_prod(w->prod) == core::Cursor{3, 77});
    // A record naming another inode (the descriptor was reused) is not read.
    auto moved = recs[0];
    moved.dmb_ino += 1;
    CHECK_FALSE(tools::read_control(getpid(), moved));
    moved = recs[0];
    moved.dmb_fd = 0; // stdin: not that file
    CHECK_FALSE(tools::read_control(getpid(), moved));
    statseg::close_all(views);

    diag::withdraw(h, c);
    CHECK(c.diag_slot == -1);
    views = statseg::open_all(dir.path, false);
    REQUIRE(views.size() == 1);
    CHECK(statseg::live_records(views[0]).empty());
    statseg::close_all(views);

    // A record being written (odd generation) is not read.
    statseg::records_of(h)[0] = statseg::ConnRecord{};
    statseg::records_of(h)[0].gen = 5;
    statseg::records_of(h)[0].fd = 3;
    views = statseg::open_all(dir.path, false);
    CHECK(statseg::live_records(views[0]).empty());
    statseg::close_all(views);

    c.transport.smcd().rx = ism::Dmb{};
    ism::Dmb own = *dmb;
    ism::unmap(own);
    statseg::retire(h);
    unlink(path);
    munmap(h, statseg::segment_bytes(1024));
}

TEST_CASE("RX/TX counters are added to the retired totals") {
    test::StatsDir dir{"observe"};
    char path[PATH_MAX];
    statseg::Header* h = statseg::create("observe-retire", 1024, path, sizeof path);
    REQUIRE(h != nullptr);
    h->traffic[counters::kTx][counters::kReqs + 3].store(5);
    h->traffic[counters::kRx][counters::kBufFull].store(2);
    statseg::retire(h);
    unlink(path);
    munmap(h, statseg::segment_bytes(1024));
    auto views = statseg::open_all(dir.path, false);
    REQUIRE(views.size() == 1);
    CHECK(views[0].totals);
    CHECK(views[0].header->traffic[counters::kTx][counters::kReqs + 3].load() == 5);
    CHECK(views[0].header->traffic[counters::kRx][counters::kBufFull].load() == 2);
    CHECK(views[0].records == 0);
    statseg::close_all(views);
}
