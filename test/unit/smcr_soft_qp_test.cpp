// SPDX-License-Identifier: MIT
// The soft device's RC queue pair (engine/smcr/soft_qp): two of them joined
// back to back by a pump in the test, no sockets. Ordering, completion after
// placement, receiver-not-ready, the rkey and bounds check, malformed frames
// and the port going away.
#include "engine/smcr/soft_qp.hpp"

#include "engine/base/wire_be.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

using namespace usmc;
using namespace usmc::smcr::soft;

namespace {

// Moves bytes both ways until neither side has any, `chunk` bytes at a
// time (0: all at once). Bounded: a loop that never settles fails the test.
void pump(Qp& a, Qp& b, size_t chunk = 0) {
    for (int round = 0; round < 100000; ++round) {
        std::vector<uint8_t> ab, ba;
        a.take_output(ab);
        b.take_output(ba);
        if (ab.empty() && ba.empty()) return;
        auto feed = [&](Qp& q, const std::vector<uint8_t>& bytes) {
            size_t step = chunk ? chunk : std::max<size_t>(bytes.size(), 1);
            for (size_t off = 0; off < bytes.size(); off += step)
                q.on_input(bytes.data() + off, std::min(step, bytes.size() - off));
        };
        feed(b, ab);
        feed(a, ba);
    }
    FAIL("the pump never settled");
}

std::vector<Completion> drain(Qp& q) {
    std::vector<Completion> all;
    Completion c[8];
    while (size_t n = q.poll(c, 8))
        all.insert(all.end(), c, c + n);
    return all;
}

} // namespace

TEST_CASE("soft QP: a WRITE lands, then the SEND after it; completions after placement") {
    Qp a, b;
    std::vector<uint8_t> rmb(4096, 0);
    Qp::Region r = b.reg_mr(rmb.data(), rmb.size());
    REQUIRE(r.rkey != 0);
    char cdc[44];
    REQUIRE(b.post_recv(7, cdc, sizeof cdc));

    std::string data = "hello, ring";
    REQUIRE(a.post_write(1, data.data(), uint32_t(data.size()), r.rkey, r.vaddr + 100, true));
    REQUIRE(a.post_send(2, "cursor", 6, true));
    CHECK(drain(a).empty()); // nothing placed yet: no completion

    pump(a, b);
    CHECK(std::memcmp(rmb.data() + 100, data.data(), data.size()) == 0);
    auto rc = drain(b);
    REQUIRE(rc.size() == 1);
    CHECK(rc[0].wr_id == 7);
    CHECK(rc[0].opcode == IBV_WC_RECV);
    CHECK(rc[0].byte_len == 6);
    CHECK(std::memcmp(cdc, "cursor", 6) == 0);
    auto sc = drain(a);
    REQUIRE(sc.size() == 2);
    CHECK(sc[0].wr_id == 1);
    CHECK(sc[0].opcode == IBV_WC_RDMA_WRITE);
    CHECK(sc[0].byte_len == data.size());
    CHECK(sc[1].wr_id == 2);
    CHECK(sc[1].status == IBV_WC_SUCCESS);
}

TEST_CASE("soft QP: a SEND without a posted receive waits, and holds what follows") {
    Qp a, b;
    std::vector<uint8_t> rmb(256, 0);
    Qp::Region r = b.reg_mr(rmb.data(), rmb.size());
    REQUIRE(a.post_write(1, "A", 1, r.rkey, r.vaddr, true));
    REQUIRE(a.post_send(2, "s", 1, true));
    REQUIRE(a.post_write(3, "B", 1, r.rkey, r.vaddr + 1, true));
    pump(a, b);
    CHECK(rmb[0] == 'A');
    CHECK(rmb[1] == 0); // behind the waiting SEND: not yet
    auto sc = drain(a);
    REQUIRE(sc.size() == 1); // only the first WRITE is acknowledged
    CHECK(sc[0].wr_id == 1);
    CHECK_FALSE(a.in_error());
    CHECK_FALSE(b.in_error());

    char buf[8];
    REQUIRE(b.post_recv(9, buf, sizeof buf)); // the receiver is ready now
    pump(a, b);
    CHECK(rmb[1] == 'B');
    sc = drain(a);
    REQUIRE(sc.size() == 2);
    CHECK(sc[0].wr_id == 2);
    CHECK(sc[1].wr_id == 3);
}

TEST_CASE("soft QP: unsignalled requests complete silently, a WRITE larger than a frame once") {
    Qp a, b;
    std::vector<uint8_t> rmb(200 * 1024);
    Qp::Region r = b.reg_mr(rmb.data(), rmb.size());
    std::vector<uint8_t> big(rmb.size());
    std::iota(big.begin(), big.end(), uint8_t(3));
    REQUIRE(a.post_write(1, big.data(), uint32_t(big.size()), r.rkey, r.vaddr, true));
    REQUIRE(a.post_write(2, "x", 1, r.rkey, r.vaddr, false));
    pump(a, b, 1000); // and in odd pieces
    CHECK(rmb[0] == 'x');
    CHECK(std::equal(big.begin() + 1, big.end(), rmb.begin() + 1));
    auto sc = drain(a);
    REQUIRE(sc.size() == 1);
    CHECK(sc[0].byte_len == big.size());
}

TEST_CASE("soft QP: a WRITE outside its rkey's region is an access error for both sides") {
    struct Case {
        const char* what;
        int64_t offset;
        uint32_t len;
        bool wrong_key;
        bool deregistered;
    };
    for (Case k :
         {Case{"past the end", 4000, 200, false, false},
          Case{"before the start", -1, 1, false, false},
          Case{"a key never given", 0, 1, true, false}, Case{"a key taken back", 0, 1, false, true},
          Case{"huge length", 0, 64 * 1024, false, false}}) {
        INFO(k.what);
        Qp a, b;
        std::vector<uint8_t> rmb(4096, 0), guard(4096, 0);
        Qp::Region r = b.reg_mr(rmb.data(), rmb.size());
        b.reg_mr(guard.data(), guard.size()); // the next region: never written through r
        char buf[8];
        REQUIRE(b.post_recv(5, buf, sizeof buf));
        if (k.deregistered) b.dereg_mr(r.rkey);
        std::vector<uint8_t> src(k.len, 0xEE);
        uint32_t key = k.wrong_key ? r.rkey + 1 : r.rkey;
        REQUIRE(a.post_write(1, src.data(), k.len, key, r.vaddr + k.offset, true));
        REQUIRE(a.post_send(2, "late", 4, true));
        pump(a, b);
        CHECK(b.in_error());
        CHECK(a.in_error());
        CHECK(b.access_errors() == 1);
        CHECK(std::all_of(rmb.begin(), rmb.end(), [](uint8_t v) { return v == 0; }));
        CHECK(std::all_of(guard.begin(), guard.end(), [](uint8_t v) { return v == 0; }));
        auto sc = drain(a);
        REQUIRE(sc.size() == 2);
        CHECK(sc[0].status == IBV_WC_REM_ACCESS_ERR);
        CHECK(sc[1].status == IBV_WC_WR_FLUSH_ERR);
        auto rc = drain(b);
        REQUIRE(rc.size() == 1);
        CHECK(rc[0].status == IBV_WC_WR_FLUSH_ERR); // its receive, never used
        CHECK_FALSE(a.post_send(3, "x", 1, true));
        CHECK_FALSE(b.post_recv(6, buf, sizeof buf));
    }
}

TEST_CASE("soft QP: a SEND longer than the receive is an error on both sides") {
    Qp a, b;
    char buf[4];
    REQUIRE(b.post_recv(5, buf, sizeof buf));
    REQUIRE(a.post_send(1, "too long", 8, true));
    pump(a, b);
    auto rc = drain(b);
    REQUIRE(rc.size() == 1);
    CHECK(rc[0].status == IBV_WC_LOC_LEN_ERR);
    auto sc = drain(a);
    REQUIRE(sc.size() == 1);
    CHECK(sc[0].status == IBV_WC_REM_INV_REQ_ERR);
    CHECK(a.in_error());
    CHECK_FALSE(a.post_send(2, "x", 9000, true)); // (and too long for any SEND)
}

TEST_CASE("soft QP: malformed frames put the QP in error, without waiting for a payload") {
    auto header = [](uint8_t type, uint32_t psn, uint32_t len) {
        std::vector<uint8_t> h(kHeaderLen, 0);
        h[0] = type;
        be::put32(&h[4], psn);
        be::put32(&h[12], len);
        return h;
    };
    struct Case {
        const char* what;
        std::vector<uint8_t> bytes;
    };
    std::vector<Case> cases = {
        {"an unknown type", header(9, 1, 0)},
        {"a WRITE longer than a frame", header(kWrite, 1, kMaxPayload + 1)},
        {"a SEND longer than any", header(kSend, 1, kMaxSend + 1)},
        {"an ACK with a payload", header(kAck, 0, 4)},
        {"a frame out of sequence", header(kSend, 2, 0)},
        {"an ACK for nothing sent", header(kAck, 1, 0)},
    };
    for (auto& k : cases) {
        INFO(k.what);
        Qp q;
        char buf[8];
        REQUIRE(q.post_recv(1, buf, sizeof buf));
        q.on_input(k.bytes.data(), k.bytes.size());
        CHECK(q.in_error());
        auto c = drain(q);
        REQUIRE(c.size() == 1);
        CHECK(c[0].status == IBV_WC_WR_FLUSH_ERR);
    }
}

TEST_CASE("soft QP: the port going away flushes every request") {
    Qp a, b;
    std::vector<uint8_t> rmb(64);
    Qp::Region r = b.reg_mr(rmb.data(), rmb.size());
    char buf[8];
    REQUIRE(a.post_recv(10, buf, sizeof buf));
    REQUIRE(a.post_write(1, "abc", 3, r.rkey, r.vaddr, true));
    REQUIRE(a.post_send(2, "d", 1, false));
    a.fail(); // carrier lost before anything was acknowledged
    CHECK(a.in_error());
    auto c = drain(a);
    REQUIRE(c.size() == 3);
    for (auto& x : c)
        CHECK(x.status == IBV_WC_WR_FLUSH_ERR);
    std::vector<uint8_t> out;
    a.take_output(out);                 // (frames made before the failure may still be sent)
    a.on_input(out.data(), out.size()); // and nothing acts any more
    CHECK(drain(a).empty());
}

TEST_CASE("soft QP: what was acted on is dropped, however the stream is split") {
    Qp a, b;
    std::vector<uint8_t> rmb(4096);
    Qp::Region r = b.reg_mr(rmb.data(), rmb.size());
    std::vector<uint8_t> bytes;
    for (int i = 0; i < 1000; ++i) { // (within the default send queue)
        REQUIRE(a.post_write(uint64_t(i), "0123456789", 10, r.rkey, r.vaddr, false));
        a.take_output(bytes);
    }
    // Reads of 35 bytes against frames of 34: a read rarely ends on a frame
    // boundary, and what was acted on must not stay behind.
    size_t most = 0;
    for (size_t off = 0; off < bytes.size(); off += 35) {
        b.on_input(bytes.data() + off, std::min<size_t>(35, bytes.size() - off));
        most = std::max(most, b.input_buffered());
    }
    CHECK_FALSE(b.in_error());
    CHECK(most < 2 * (kHeaderLen + 10) + 35); // never more than the frame in hand
    CHECK(std::string(reinterpret_cast<char*>(rmb.data()), 10) == "0123456789");
}

TEST_CASE("soft QP: the send queue is bounded; completions make room") {
    Qp::Options o;
    o.max_send_wr = 3;
    o.max_unacked_bytes = 100;
    Qp a(o), b;
    char buf[8][16];
    for (auto& x : buf)
        REQUIRE(b.post_recv(0, x, sizeof x));
    REQUIRE(a.post_send(1, "a", 1, true));
    REQUIRE(a.post_send(2, "b", 1, true));
    REQUIRE(a.post_send(3, "c", 1, true));
    CHECK_FALSE(a.post_send(4, "d", 1, true)); // three outstanding: full
    pump(a, b);
    CHECK(drain(a).size() == 3);
    REQUIRE(a.post_send(4, "d", 1, true));
    std::vector<uint8_t> big(101);
    CHECK_FALSE(a.post_write(5, big.data(), uint32_t(big.size()), 1, 0, true)); // bytes bound
    CHECK_FALSE(a.in_error());
}

TEST_CASE("soft QP: PSNs wrap through 0 and are still acknowledged") {
    Qp::Options oa, ob;
    oa.first_psn = 0xFFFFFFFEu;
    ob.peer_first_psn = 0xFFFFFFFEu;
    Qp a(oa), b(ob);
    char buf[4][8];
    for (auto& x : buf)
        REQUIRE(b.post_recv(0, x, sizeof x));
    REQUIRE(a.post_send(1, "x", 1, true)); // PSN 0xFFFFFFFE
    REQUIRE(a.post_send(2, "y", 1, true)); // 0xFFFFFFFF
    pump(a, b);
    REQUIRE(a.post_send(3, "z", 1, true)); // 0: the last of its batch
    pump(a, b);
    auto c = drain(a);
    REQUIRE(c.size() == 3);
    CHECK(c[2].wr_id == 3);
    REQUIRE(a.post_send(4, "w", 1, true)); // 1
    pump(a, b);
    CHECK(drain(a).size() == 1);
}

TEST_CASE("soft QP: a NAK for a forged frame fails only what was not placed") {
    Qp a, b;
    std::vector<uint8_t> rmb(64);
    Qp::Region r = b.reg_mr(rmb.data(), rmb.size());
    REQUIRE(a.post_write(1, "ok", 2, r.rkey, r.vaddr, true));
    REQUIRE(a.post_write(2, "no", 2, r.rkey, r.vaddr + 8, true));
    std::vector<uint8_t> bytes;
    a.take_output(bytes);
    // The second frame's PSN changed on the way (as a forger would).
    be::put32(&bytes[kHeaderLen + 2 + 4], 77);
    b.on_input(bytes.data(), bytes.size());
    CHECK(b.in_error());
    CHECK(rmb[0] == 'o');
    CHECK(rmb[8] == 0);
    std::vector<uint8_t> back;
    b.take_output(back);
    a.on_input(back.data(), back.size());
    auto c = drain(a);
    REQUIRE(c.size() == 2);
    CHECK(c[0].wr_id == 1);
    CHECK(c[0].status == IBV_WC_SUCCESS); // it was placed
    CHECK(c[1].wr_id == 2);
    CHECK(c[1].status == IBV_WC_REM_INV_REQ_ERR);
}
