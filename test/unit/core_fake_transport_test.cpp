// SPDX-License-Identifier: MIT
// The connection core driven through a fake transport, without shared
// memory: two ends whose CDC messages travel as a queue the test delivers,
// one at a time, as SMC-R's SENDs do (a receive sees only what was posted
// and delivered, never the peer's latest words), and whose post can be
// busy (a bounded number of send slots) until the progress hook reaps
// their completions.
#include "engine/core/cdc_recv.hpp"
#include "engine/core/cork.hpp"
#include "engine/core/data_path.hpp"

#include <catch2/catch.hpp>

#include <deque>
#include <string>
#include <utility>
#include <vector>

using namespace usmc;
using core::Cursor;
using core::PeerCdc;
using core::Posted;

namespace {

class FakeTransport;

// What one end sent that is not yet delivered: the whole CDC as sent then,
// and the urgent mark that rides with it.
struct InFlight {
    PeerCdc cdc;
    core::UrgentMark mark;
};

class FakeTransport final {
  public:
    FakeTransport(std::vector<uint8_t>& rx, std::vector<uint8_t>& tx) : rx_(rx), tx_(tx) {}
    FakeTransport* peer = nullptr;
    uint32_t slots = 1000;  // posts allowed before the completions are reaped
    uint32_t in_flight = 0; // posted, completion not yet reaped
    uint32_t reaped = 0;
    std::deque<InFlight> wire; // ours, towards the peer

    bool attached() const { return true; }
    uint32_t rx_ring_size() const { return uint32_t(rx_.size()); }
    const uint8_t* rx_ring() const { return rx_.data(); }
    uint32_t tx_ring_size() const { return uint32_t(tx_.size()); }
    uint8_t* tx_ring() { return tx_.data(); }

    PeerCdc receive() const { return inbox_; }
    core::UrgentMark receive_urgent_mark() const { return mark_in_; }
    Posted post_prod(Cursor prod, uint16_t urg) {
        if (in_flight == slots) return Posted::Busy;
        sent_.prod = prod;
        sent_.urg_count = urg;
        send();
        return Posted::Done;
    }
    void progress() {
        reaped += in_flight;
        in_flight = 0;
    }
    void send_urgent_mark(Cursor after, uint16_t urg) { mark_out_ = {after, urg}; }
    void send_cons(Cursor cons, uint8_t flags) {
        sent_.cons = cons;
        sent_.conn_flags = flags;
        ++in_flight;
        wire.push_back({sent_, mark_out_});
    }
    PeerCdc sent() const { return sent_; }
    // The CDC message is the wake-up: nothing more to send.
    bool notify_reader(Cursor) { return false; }
    bool writer_waits() const { return false; }
    bool notify_writer() { return false; }
    // Our waits: noted only; the delivered CDC is the wake-up (SMC-R's way).
    bool wanted_data = false, wanted_space = false;
    void want_data() { wanted_data = true; }
    bool unwant_data() { return std::exchange(wanted_data, false); }
    bool wants_data() const { return wanted_data; }
    bool data_wake_coming() const { return false; }
    void want_space() { wanted_space = true; }
    void name_space_bell(uint64_t) {}
    core::Requests take_all_requests() { return {}; }
    void wake_reader() const {}
    void ring_data_bell(uint64_t) const {}
    void wake_writer() const {}
    void release_wakers() {}
    uint8_t peer_conn_flags() const { return inbox_.conn_flags; }
    uint8_t sent_conn_flags() const { return sent_.conn_flags; }
    bool send_move(Cursor cons, uint8_t flags, uint8_t move) {
        send_cons(cons, uint8_t(flags | move));
        return true;
    }

    // The test's wire: the oldest message of ours arrives at the peer.
    bool deliver() {
        if (wire.empty()) return false;
        peer->inbox_ = wire.front().cdc;
        peer->mark_in_ = wire.front().mark;
        wire.pop_front();
        return true;
    }
    // A message of the peer's own making (a lie or a scribble).
    void arrive(const PeerCdc& m) { inbox_ = m; }

  private:
    void send() {
        ++in_flight;
        wire.push_back({sent_, mark_out_});
    }
    std::vector<uint8_t>& rx_;
    std::vector<uint8_t>& tx_;
    PeerCdc inbox_;
    PeerCdc sent_;
    core::UrgentMark mark_in_, mark_out_;
};
static_assert(core::ConnTransport<FakeTransport>);

// One end: the core's state and its transport.
struct End {
    End(std::vector<uint8_t>& rx, std::vector<uint8_t>& tx) : t(rx, tx) {}
    core::ConnState k;
    FakeTransport t;

    core::Received look() { return core::receive(k, t); }
    // Copies what fits and posts it (no cork): what was copied.
    uint32_t write(const std::string& s) {
        auto space = look().space.value_or(0);
        iovec v{const_cast<char*>(s.data()), s.size()};
        uint32_t n = core::copy_in(k, t, &v, 1, 0, std::min<uint32_t>(space, uint32_t(s.size())));
        core::produce(k, t, n);
        core::post(k, t);
        return n;
    }
    // Reads everything readable and announces the consumer cursor if due.
    std::string read(size_t max = 1 << 20) {
        auto avail = look().readable.value_or(0);
        std::string out(std::min<size_t>(avail, max), '\0');
        iovec v{out.data(), out.size()};
        uint32_t n = core::copy_out(k, t, &v, 1, 0, 0, uint32_t(out.size()));
        core::consume(k, t, n);
        announce(n == avail);
        return out;
    }
    void announce(bool ring_empty) {
        uint32_t unannounced =
            core::distance(k.rx_cons_announced, k.rx_cons.load(), t.rx_ring_size()).value_or(0);
        if (!core::cons_update_due(unannounced, t.rx_ring_size(), ring_empty, false, false)) return;
        k.rx_cons_announced = k.rx_cons.load();
        t.send_cons(k.rx_cons_announced, k.conn_flags.load());
    }
    void tell(uint8_t flag) {
        k.conn_flags.fetch_or(flag);
        core::close_event(k, core::CloseEvent::WeDoneWriting);
        t.send_cons(k.rx_cons_announced, k.conn_flags.load());
    }
};

struct Pair {
    explicit Pair(uint32_t ring)
        : a_to_b(ring), b_to_a(ring), a(b_to_a, a_to_b), b(a_to_b, b_to_a) {
        a.t.peer = &b.t;
        b.t.peer = &a.t;
    }
    std::vector<uint8_t> a_to_b, b_to_a;
    End a, b;
};

} // namespace

TEST_CASE("core: data goes through post and one receive action, which says whom to wake") {
    Pair p(4096);
    // Nothing posted yet: nothing to read, nobody to wake.
    auto r = p.b.look();
    CHECK(r.readable == 0u);
    CHECK_FALSE(r.wake.any());

    REQUIRE(p.a.write("hello") == 5);
    // Posted but not delivered: the receiver sees only what arrived.
    CHECK(p.b.look().readable == 0u);
    REQUIRE(p.a.t.deliver());
    r = p.b.look();
    CHECK(r.readable == 5u);
    CHECK(r.wake.reader);
    CHECK_FALSE(r.wake.writer);
    CHECK_FALSE(r.wake.closer);
    // The same CDC again wakes nobody (SMC-D looks at the same words often).
    CHECK_FALSE(p.b.look().wake.any());

    CHECK(p.b.read() == "hello");
    // Read empty: the consumer cursor is announced, and the writer's side is
    // woken for the space.
    REQUIRE(p.b.t.deliver());
    r = p.a.look();
    CHECK(r.space == 4096u);
    CHECK(r.wake.writer);
    CHECK_FALSE(r.wake.reader);
}

TEST_CASE("core: bytes cross the ring's end intact, and a full ring takes no more") {
    Pair p(100);
    std::string first(70, 'x');
    REQUIRE(p.a.write(first) == 70);
    p.a.t.deliver();
    CHECK(p.b.read() == first);
    p.b.t.deliver();
    std::string second;
    for (int i = 0; i < 100; ++i)
        second += char('a' + i % 26);
    // 100 bytes from offset 70: 30 to the end, 70 from the start.
    REQUIRE(p.a.write(second + "more") == 100);
    CHECK(p.a.look().space == 0u);
    p.a.t.deliver();
    CHECK(p.b.look().readable == 100u);
    CHECK(p.b.read() == second);
}

TEST_CASE("core: window updates go out at the update limit, or when the ring is read empty") {
    constexpr uint32_t kRing = 64 * 1024;
    uint32_t limit = core::update_limit(kRing);
    Pair p(kRing);
    REQUIRE(p.a.write(std::string(kRing, 'w')) == kRing);
    p.a.t.deliver();
    CHECK(p.a.look().space == 0u);
    // Reads below the limit, the ring not empty: no update travels.
    CHECK(p.b.read(limit - 1).size() == limit - 1);
    CHECK(p.b.t.wire.empty());
    // One more byte reaches the limit: the update goes.
    CHECK(p.b.read(1).size() == 1);
    REQUIRE(p.b.t.deliver());
    auto r = p.a.look();
    CHECK(r.space == limit);
    CHECK(r.wake.writer);
    // The rest, read to empty (still below the limit apart from that): it goes.
    CHECK(p.b.read().size() == kRing - limit);
    REQUIRE(p.b.t.deliver());
    CHECK(p.a.look().space == kRing);
}

TEST_CASE("core: an urgent mark travels with the CDC that carries its count") {
    Pair p(1000);
    iovec v{const_cast<char*>("abc!"), 4};
    uint32_t n = core::copy_in(p.a.k, p.a.t, &v, 1, 0, 4);
    core::produce(p.a.k, p.a.t, n);
    core::mark_urgent(p.a.k, p.a.t);
    core::post(p.a.k, p.a.t);
    REQUIRE(p.a.t.deliver());
    auto r = p.b.look();
    CHECK(r.wake.reader);
    PeerCdc m = p.b.t.receive();
    CHECK(m.urg_count == 1);
    core::UrgentMark mark = p.b.t.receive_urgent_mark();
    CHECK(mark.count == 1);
    CHECK(mark.after == Cursor{0, 4});
    // The urgent byte is the one just before the mark.
    CHECK(p.a_to_b[mark.after.count - 1] == '!');
    // A new urgent count alone (no new bytes) wakes the reader too.
    core::mark_urgent(p.a.k, p.a.t);
    core::post(p.a.k, p.a.t);
    REQUIRE(p.a.t.deliver());
    r = p.b.look();
    CHECK(r.readable == 4u);
    CHECK(r.wake.reader);
}

TEST_CASE("core: corked bytes stay unposted until the cork's limit, then go in one post") {
    constexpr uint32_t kRing = 1000, kAutocork = 300;
    Pair p(kRing);
    auto corked_write = [&](const std::string& s) {
        iovec v{const_cast<char*>(s.data()), s.size()};
        uint32_t free = p.a.look().space.value_or(0);
        uint32_t n = core::copy_in(p.a.k, p.a.t, &v, 1, 0, uint32_t(s.size()));
        core::produce(p.a.k, p.a.t, n);
        if (core::cork_hold(p.a.k.tx_held, n, kRing, kAutocork, true, false, free - n)) {
            p.a.k.tx_held += n;
            return false;
        }
        core::post(p.a.k, p.a.t);
        return true;
    };
    CHECK_FALSE(corked_write(std::string(200, 'c')));
    CHECK(p.a.k.tx_held == 200);
    CHECK(p.a.t.wire.empty()); // nothing posted: the reader neither sees nor wakes
    CHECK(p.b.look().readable == 0u);
    // Past min(ring / 2, autocorking size): posted, the held bytes with it.
    CHECK(corked_write(std::string(101, 'd')));
    CHECK(p.a.k.tx_held == 0);
    REQUIRE(p.a.t.deliver());
    CHECK(p.b.look().readable == 301u);
    CHECK(p.b.read() == std::string(200, 'c') + std::string(101, 'd'));
}

TEST_CASE(
    "core: half-close: the peer's done-writing ends our reads after its data, not our writes") {
    Pair p(1000);
    p.a.write("last");
    p.a.tell(core::kPeerDoneWriting);
    REQUIRE(p.a.t.deliver()); // the data
    REQUIRE(p.a.t.deliver()); // the flags
    auto r = p.b.look();
    CHECK(r.readable == 4u);
    CHECK(r.ending == core::kPeerDoneWriting);
    CHECK(r.wake.reader);
    CHECK(r.wake.writer);
    CHECK(r.wake.closer);
    CHECK(p.b.k.close_state.load() == core::CloseState::PeerDoneWriting);
    CHECK(p.b.read() == "last");
    CHECK(core::recv_at_end(p.b.k.close_state.load()) == core::AtEnd::Eof);
    // Our direction still works: the peer reads what we send.
    CHECK(core::send_gate(p.b.k.close_state.load()) == core::SendGate::Go);
    p.b.t.wire.clear(); // (the consumer update the read sent)
    REQUIRE(p.b.write("reply") == 5);
    REQUIRE(p.b.t.deliver());
    CHECK(p.a.read() == "reply");
    CHECK(p.a.k.close_state.load() == core::CloseState::WeDoneWriting);
}

TEST_CASE("core: the peer's abort resets the stream and stops our writes") {
    Pair p(1000);
    p.a.tell(core::kPeerConnAbort);
    REQUIRE(p.a.t.deliver());
    auto r = p.b.look();
    CHECK(r.wake.reader);
    CHECK(r.wake.writer);
    CHECK(r.wake.closer);
    CHECK(p.b.k.close_state.load() == core::CloseState::Reset);
    CHECK(core::recv_at_end(p.b.k.close_state.load()) == core::AtEnd::Reset);
    // A write reports the reset once (ECONNRESET), then fails with EPIPE.
    CHECK(core::send_gate(p.b.k.close_state.load()) == core::SendGate::Reset);
    core::close_event(p.b.k, core::CloseEvent::ErrorTaken);
    CHECK(core::send_gate(p.b.k.close_state.load()) == core::SendGate::Pipe);
}

TEST_CASE("core: a busy post is completed by the progress hook, with the newest cursors") {
    Pair p(1000);
    p.a.t.slots = 1;
    REQUIRE(p.a.write("one") == 3); // takes the only slot
    // No slot: the bytes are in the ring, their post waits.
    iovec v{const_cast<char*>("two"), 3};
    core::produce(p.a.k, p.a.t, core::copy_in(p.a.k, p.a.t, &v, 1, 0, 3));
    CHECK(core::post(p.a.k, p.a.t) == Posted::Busy);
    CHECK(p.a.k.post_pending.load());
    // The writer goes on behind it: a later post is busy too.
    iovec w{const_cast<char*>("six"), 3};
    core::produce(p.a.k, p.a.t, core::copy_in(p.a.k, p.a.t, &w, 1, 0, 3));
    CHECK(core::post(p.a.k, p.a.t) == Posted::Busy);
    REQUIRE(p.a.t.deliver());
    CHECK_FALSE(p.a.t.deliver()); // only the first went out
    CHECK(p.b.read() == "one");
    // The progress hook reaps the completion and posts what waited: one
    // message with the newest producer cursor.
    CHECK(core::progress(p.a.k, p.a.t));
    CHECK(p.a.t.reaped == 1);
    CHECK_FALSE(p.a.k.post_pending.load());
    REQUIRE(p.a.t.deliver());
    CHECK_FALSE(p.a.t.deliver());
    CHECK(p.b.read() == "twosix");
    // Nothing pending: progress posts nothing.
    CHECK_FALSE(core::progress(p.a.k, p.a.t));
    CHECK(p.a.t.wire.empty());
}

TEST_CASE("core: an impossible CDC from the peer breaks what uses it and wakes everyone") {
    Pair p(1000);
    PeerCdc lie;
    lie.prod = Cursor{0, 999};
    lie.cons = Cursor{0, 0};
    p.b.t.arrive(lie);
    auto r = p.b.look();
    CHECK(r.readable == 999u); // (one ring ahead at most: possible)
    lie.prod = Cursor{1, 999}; // more than a ring ahead of our consumer cursor
    p.b.t.arrive(lie);
    r = p.b.look();
    CHECK_FALSE(r.readable);
    CHECK(r.space == 1000u); // (the other direction alone is still sound)
    CHECK(r.wake.reader);
    CHECK(r.wake.writer);
    CHECK(r.wake.closer);
    // A reserved flag bit ends nothing and wakes nobody.
    PeerCdc reserved;
    reserved.conn_flags = 0x01;
    p.a.t.arrive(reserved);
    r = p.a.look();
    CHECK(r.ending == 0);
    CHECK_FALSE(r.wake.any());
    CHECK(p.a.k.close_state.load() == core::CloseState::Open);
}
