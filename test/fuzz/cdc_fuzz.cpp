// SPDX-License-Identifier: MIT
// CDC control lines as a hostile peer writes them into shared memory, fed
// through the real receive and send paths (rx.cpp, tx.cpp, close.cpp): a
// connection whose DMBs are heap buffers of their exact size (so AddressSanitizer
// sees any access past a ring), whose peer is the fuzz input. Between our
// calls the "peer" produces, consumes, or writes any word of either control
// line (the peer owns the memory of its own DMB and can scribble on ours).
//
// Input layout (missing bytes read as 0):
//   0..63     the control line of our DMB (the peer's cursors and flags)
//   64..127   the control line of the peer's DMB (ours; the peer may change it)
//   128, 129  ring sizes of our DMB and the peer's (ring_size() below)
//   130..137  our consumer cursor (packed), 138..145 our producer cursor
//   146..149  a ring size for the cursor arithmetic on its own
//   150       epoll_watched
//   151...    operations: an opcode (low nibble: which, high bits: how;
//             10: the peer sends urgent data, 11: recv(MSG_OOB)/SIOCATMARK),
//             then 3 bytes of arguments (11 for writing a raw word)
//
// Blocking calls use timeout 0 and busy_poll_us 0: they take the blocking
// paths (MSG_WAITALL loops, deadline checks) but never sleep.
#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/conn.hpp"
#include "engine/conn/tx.hpp"
#include "engine/sock/runtime.hpp"
#include "test/fuzz/fuzz_check.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace usmc;

using core::Cursor;

namespace {

struct Reader {
    const uint8_t* data;
    size_t size;
    size_t pos = 0;
    uint8_t u8() { return pos < size ? data[pos++] : 0; }
    uint16_t u16() { return uint16_t(u8() | u8() << 8); }
    uint32_t u32() { return uint32_t(u16()) | uint32_t(u16()) << 16; }
    uint64_t u64() { return uint64_t(u32()) | uint64_t(u32()) << 32; }
    void bytes(void* out, size_t n) {
        auto* o = static_cast<uint8_t*>(out);
        for (size_t i = 0; i < n; ++i)
            o[i] = u8();
    }
    bool more() const { return pos < size; }
};

// The DMB sizes a handshake can agree on (16 KiB << code, code 0..6), and
// small odd rings for the wrap-around edges.
uint32_t ring_size(uint8_t sel) {
    if (sel < 128) return (uint32_t{16384} << (sel % 7)) - smcd::kControlBytes;
    return 1 + uint32_t(sel - 128) * 13;
}

uint8_t pattern(uint32_t i) {
    return uint8_t(i ^ (i >> 8) ^ (i >> 16) ^ 0x5a);
}

// One DMB (control line + ring) of exactly its size, 64-byte aligned as
// mmap'ed DMBs are. Large ones are kept across inputs (their rx pattern
// is written once); small ones are made per input.
struct Buffer {
    uint8_t* base = nullptr;
    uint32_t size = 0;
    explicit Buffer(uint32_t n) : size(n) {
        void* p = nullptr;
        if (posix_memalign(&p, 64, n) != 0) std::abort();
        base = static_cast<uint8_t*>(p);
        for (uint32_t i = 0; i < n - smcd::kControlBytes; ++i)
            base[smcd::kControlBytes + i] = pattern(i);
    }
    ~Buffer() { std::free(base); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
};

Buffer& dmb_buffer(int side, uint32_t ring, std::unique_ptr<Buffer>& scratch) {
    if (ring < 4096) {
        scratch = std::make_unique<Buffer>(ring + smcd::kControlBytes);
        return *scratch;
    }
    static std::map<std::pair<int, uint32_t>, std::unique_ptr<Buffer>> kept;
    auto& b = kept[{side, ring}];
    if (!b) b = std::make_unique<Buffer>(ring + smcd::kControlBytes);
    return *b;
}

// The wake-up socket only carries wake-ups, and rx.cpp/tx.cpp ignore what
// its sends and receives return: stand-ins (no system call per operation)
// keep the target fast and every run independent of the last. No socket
// can be made: no waker, sink or bell (wake-ups and fills are then skipped,
// as when descriptors run out), so nothing outlives a run.
// (Negative: a system call that reaches it anyway fails with EBADF.)
constexpr int kSig = -101;

int fake_recvmmsg(int fd, mmsghdr*, unsigned, int, timespec*) {
    if (fd != kSig) std::abort(); // nothing else is read
    errno = EAGAIN;               // drained
    return -1;
}

ssize_t fake_sendto(int, const void*, size_t n, int, const sockaddr*, socklen_t) {
    return static_cast<ssize_t>(n);
}

int no_socket(int, int, int) {
    errno = EMFILE;
    return -1;
}

void setup_once() {
    static const bool done = [] {
        log::set_level(log::LogLevel::Error); // broken cursors are logged as warnings
        sys::resolve();
        sys::g_table.recvmmsg = fake_recvmmsg;
        sys::g_table.sendto = fake_sendto;
        sys::g_table.socket = no_socket;
        return true;
    }();
    (void)done;
}

// A peer that leaves kWakingData set in our wait word makes the reader spin
// up to 2 ms (bounded by the clock); that path is time, not validation.
uint64_t without_waking(uint64_t w) {
    return w & ~uint64_t{smcd::kWakingData};
}

// The cursor arithmetic alone, on any ring size and any cursors.
void check_arithmetic(uint64_t w1, uint64_t w2, uint32_t size, uint32_t n) {
    Cursor a = smcd::unpack_prod(w1), b = smcd::unpack_cons(w2);
    FUZZ_CHECK(smcd::pack_prod(a) == (w1 & 0xffffffffffffull));
    FUZZ_CHECK(smcd::unpack_cons(smcd::pack_cons(b, uint8_t(w1), uint8_t(w2))) == b);
    FUZZ_CHECK(smcd::prod_flags_of(smcd::pack_cons(b, uint8_t(w1), 0)) == uint8_t(w1));
    FUZZ_CHECK(smcd::conn_flags_of(smcd::pack_cons(b, 0, uint8_t(w2))) == uint8_t(w2));
    auto d = core::distance(a, b, size);
    if (d) {
        // What a bounds check relies on: both inside the ring, at most one
        // ring apart, and `older` advanced by the distance is `newer`.
        FUZZ_CHECK(*d <= size);
        FUZZ_CHECK(core::valid(a, size) && core::valid(b, size));
        FUZZ_CHECK(core::advance(a, *d, size) == b);
    } else {
        FUZZ_CHECK(!core::valid(a, size) || !core::valid(b, size) ||
                   (b.wrap != a.wrap && b.wrap != uint16_t(a.wrap + 1)) ||
                   (b.wrap == a.wrap && b.count < a.count) ||
                   (b.wrap == uint16_t(a.wrap + 1) && b.count > a.count));
    }
    if (core::valid(a, size)) {
        uint32_t k = n % (size + uint64_t{1});
        Cursor next = core::advance(a, k, size);
        FUZZ_CHECK(core::valid(next, size));
        auto back = core::distance(a, next, size);
        FUZZ_CHECK(back && *back == k);
    }
    uint32_t limit = core::update_limit(size);
    FUZZ_CHECK(limit >= 2304 && limit >= size / 10);
}

struct Fixture {
    SmcConn c;
    uint32_t rx_ring, tx_ring;
    bool cursors_ours = true; // rx_cons/tx_prod came from this side's arithmetic
};

void check_state(Fixture& f) {
    SmcConn& c = f.c;
    if (f.cursors_ours) {
        FUZZ_CHECK(core::valid(c.rx_cons.load(), f.rx_ring));
        FUZZ_CHECK(core::valid(c.tx_prod.load(), f.tx_ring));
    }
    FUZZ_CHECK(smc_rx_available(c) <= f.rx_ring);
    FUZZ_CHECK(smc_tx_unconsumed(c) <= f.tx_ring);
    short ev = smc_poll_events(c);
    // An impossible cursor is an error, and reads as one.
    if (!core::distance(c.rx_cons.load(), smcd::unpack_prod(c.transport.smcd().rx.control()->prod.load()),
                        f.rx_ring))
        FUZZ_CHECK(ev & POLLERR);
}

// Whether `n` bytes of the ring from `pos` on (wrapping at its end) are
// `bytes`. (memcmp, not a loop of checks: coverage tracing per byte would
// cost most of the target's time.)
bool ring_matches(const uint8_t* ring, uint32_t ring_size, uint32_t pos, const uint8_t* bytes,
                  size_t n) {
    size_t first = std::min<size_t>(n, ring_size - pos);
    if (std::memcmp(ring + pos, bytes, first) != 0) return false;
    for (size_t done = first; done < n; done += ring_size) {
        size_t part = std::min<size_t>(n - done, ring_size);
        if (std::memcmp(ring, bytes + done, part) != 0) return false;
    }
    return true;
}

void do_recv(Fixture& f, Reader& in, uint8_t op) {
    SmcConn& c = f.c;
    uint16_t len = in.u16();
    uint8_t split = in.u8();
    bool peek = op & 0x10, blocking = op & 0x20, waitall = op & 0x40;
    static uint8_t out[2 * 65536];
    size_t first = size_t(len) * split / 255;
    iovec iov[2] = {{out, first}, {out + first, len - first}};
    Cursor before = c.rx_cons.load();
    uint64_t prod_word = c.transport.smcd().rx.control()->prod.load();
    auto avail = core::distance(before, smcd::unpack_prod(prod_word), f.rx_ring);
    bool was_broken = smc_broken(c);
    // Urgent data about (a new urgent count, or a mark that stands): the
    // read may leave urgent bytes out of the stream (consumed, or passed
    // over by a peek) and stops at the mark.
    bool urgent = smcd::urg_count_of(prod_word) != c.rx_urg_key.load();
    int flags = (peek ? MSG_PEEK : 0) | (waitall ? MSG_WAITALL : 0);
    ssize_t r = smc_recv(c, iov, 2, flags, !blocking, blocking ? 0 : -1);
    // (Our cursor may be outside the ring after adopting a forged one: it
    // must not move then.)
    Cursor after = c.rx_cons.load();
    auto moved =
        after == before ? std::optional<uint32_t>(0) : core::distance(before, after, f.rx_ring);
    FUZZ_CHECK(moved);
    uint32_t skipped = *moved - (r > 0 && !peek ? uint32_t(r) : 0);
    // (Two: the reader stood at an old mark, whose byte a newer mark drops,
    // and the newer mark's byte is next.)
    FUZZ_CHECK(skipped == 0 || (urgent && skipped <= 2));
    if (r > 0) {
        FUZZ_CHECK(!was_broken && avail);
        FUZZ_CHECK(size_t(r) + skipped <= len + skipped && size_t(r) + skipped <= *avail);
        // (The rx ring still holds pattern(), which nothing of ours writes.)
        uint32_t at = core::advance(before, skipped, f.rx_ring).count;
        bool same = ring_matches(c.transport.smcd().rx.ring(), f.rx_ring, at, out, size_t(r));
        if (!same && urgent && peek) // passed over the urgent byte at the mark
            same = ring_matches(c.transport.smcd().rx.ring(), f.rx_ring, (at + 1) % f.rx_ring, out,
                                size_t(r));
        FUZZ_CHECK(same);
    }
    if (!avail) FUZZ_CHECK(smc_broken(c) && r == -ECONNRESET);
}

// recv(MSG_OOB) and SIOCATMARK. (The urgent byte is read from our ring:
// AddressSanitizer sees a read past it, the DMBs being exact-size buffers.)
void do_urgent(SmcConn& c, Reader& in, uint8_t op) {
    in.u16(), in.u8();
    uint8_t b = 0;
    ssize_t r = smc_recv_urgent(c, &b, op & 0x10 ? 0 : 1, op & 0x20);
    FUZZ_CHECK(r == 0 || r == 1 || r == -EINVAL || r == -EAGAIN || r == -ECONNRESET);
    (void)smc_at_mark(c);
}

// The peer sends urgent data as it should: bytes, then the mark, then the
// producer word with the new count.
void peer_urgent(Fixture& f, Reader& in) {
    SmcConn& c = f.c;
    uint64_t w = c.transport.smcd().rx.control()->prod.load();
    Cursor p = smcd::unpack_prod(w);
    uint32_t n = 1 + in.u16() % f.rx_ring;
    in.u8();
    if (!core::valid(p, f.rx_ring)) return;
    auto used = core::distance(c.rx_cons.load(), p, f.rx_ring);
    if (!used || *used + n > f.rx_ring) return;
    Cursor end = core::advance(p, n, f.rx_ring);
    uint16_t count = uint16_t(smcd::urg_count_of(w) + 1);
    c.transport.smcd().rx.control()->urg.store(smcd::pack_prod(end, count));
    c.transport.smcd().rx.control()->prod.store(smcd::pack_prod(end, count));
}

void do_send(Fixture& f, Reader& in, uint8_t op) {
    SmcConn& c = f.c;
    uint16_t len = in.u16();
    uint8_t seed = in.u8();
    bool blocking = op & 0x10;
    static const auto* source = [] {
        auto* b = new uint8_t[65536 + 256];
        for (uint32_t i = 0; i < 65536 + 256; ++i)
            b[i] = uint8_t(i * 31 + (i >> 9));
        return b;
    }();
    const uint8_t* src = source + seed;
    iovec iov{const_cast<uint8_t*>(src), len};
    Cursor before = c.tx_prod.load();
    uint64_t cons_word = c.transport.smcd().rx.control()->cons.load();
    Cursor peer_cons = smcd::unpack_cons(cons_word);
    auto used = core::distance(peer_cons, before, f.tx_ring);
    // As TCP, the first write after the peer closed is taken whole, and
    // nothing of it reaches the ring. The peer's flags count as the close
    // state has them: a word it wrote before (a reset, say) is not undone
    // by what it writes now.
    constexpr uint8_t kEnded =
        core::kPeerDoneWriting | core::kPeerConnClosed | core::kPeerConnAbort;
    core::CloseState state =
        core::with_peer_flags(c.close_state.load(), smcd::conn_flags_of(cons_word));
    bool taken_unsent = len > 0 && !(c.conn_flags.load() & kEnded) &&
                        core::send_gate(state) == core::SendGate::TakeOnce &&
                        !c.sent_after_peer_close.load();
    bool urgent = op & 0x20;
    uint16_t count = c.tx_urg_count;
    ssize_t r = smc_send(c, &iov, 1, !blocking, blocking ? 0 : -1, false, urgent);
    // A move to TCP in the peer's flags: the caller takes it, nothing is written.
    if (smcd::conn_flags_of(cons_word) & core::kMovedFlags) {
        FUZZ_CHECK(r == kSmcMoved);
        FUZZ_CHECK(c.tx_prod.load() == before);
        return;
    }
    if (urgent && r > 0 && !taken_unsent) {
        // The mark is at the end of what was sent, with the count published.
        uint64_t mark = c.transport.smcd().tx.control()->urg.load();
        FUZZ_CHECK(smcd::urg_count_of(mark) != count);
        FUZZ_CHECK(mark == smcd::pack_prod(c.tx_prod.load(), c.tx_urg_count));
    }
    if (taken_unsent) {
        FUZZ_CHECK(r == len);
        FUZZ_CHECK(c.tx_prod.load() == before);
    } else if (r > 0) {
        // Never past the peer's consumer cursor: unconsumed bytes stay.
        FUZZ_CHECK(used && size_t(r) <= f.tx_ring - *used);
        FUZZ_CHECK(size_t(r) <= len);
        FUZZ_CHECK(ring_matches(c.transport.smcd().tx.ring(), f.tx_ring, before.count, src, size_t(r)));
        Cursor after = core::advance(before, uint32_t(r), f.tx_ring);
        FUZZ_CHECK(c.tx_prod.load() == after);
        // Not corked: published, for the peer to see (with our urgent count).
        FUZZ_CHECK(c.transport.smcd().tx.control()->prod.load() == smcd::pack_prod(after, c.tx_urg_count));
    } else {
        FUZZ_CHECK(c.tx_prod.load() == before);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    setup_once();
    Reader in{data, size};
    uint8_t rx_line[smcd::kControlBytes], tx_line[smcd::kControlBytes];
    in.bytes(rx_line, sizeof rx_line);
    in.bytes(tx_line, sizeof tx_line);

    auto f = std::make_unique<Fixture>();
    f->rx_ring = ring_size(in.u8());
    f->tx_ring = ring_size(in.u8());
    std::unique_ptr<Buffer> rx_scratch, tx_scratch;
    Buffer& rxb = dmb_buffer(0, f->rx_ring, rx_scratch);
    Buffer& txb = dmb_buffer(1, f->tx_ring, tx_scratch);
    std::memcpy(rxb.base, rx_line, sizeof rx_line);
    std::memcpy(txb.base, tx_line, sizeof tx_line);

    SmcConn& c = f->c;
    c.transport.smcd().rx.base = rxb.base;
    c.transport.smcd().rx.size = c.transport.smcd().rx.file_size = rxb.size;
    c.transport.smcd().tx.base = txb.base;
    c.transport.smcd().tx.size = c.transport.smcd().tx.file_size = txb.size;
    c.transport.smcd().tx.control()->waiting.store(
        without_waking(c.transport.smcd().tx.control()->waiting.load()));
    c.sig = kSig;
    c.tcp_fd = -1; // no TCP connection: a dead peer shows only in shared memory
    c.busy_poll_us = 0;
    c.autocorking_size = 0;
    // Our own cursors: anywhere in the ring, any wrap.
    Cursor rx_cons = smcd::unpack_prod(in.u64()), tx_prod = smcd::unpack_prod(in.u64());
    rx_cons.count %= f->rx_ring;
    tx_prod.count %= f->tx_ring;
    c.rx_cons.store(rx_cons);
    c.rx_cons_announced = rx_cons;
    c.tx_prod.store(tx_prod);
    uint32_t arith_size = in.u32();
    c.epoll_watched.store(in.u8() & 1);

    check_arithmetic(c.transport.smcd().rx.control()->prod.load(), c.transport.smcd().rx.control()->cons.load(),
                     arith_size, uint32_t(c.transport.smcd().tx.control()->prod.load()));
    check_arithmetic(c.transport.smcd().rx.control()->cons.load(), c.transport.smcd().rx.control()->prod.load(),
                     f->rx_ring, arith_size);
    check_state(*f);

    for (int steps = 0; in.more() && steps < 64; ++steps) {
        uint8_t op = in.u8();
        int kind = (op & 0x0f) % 12;
        switch (kind) {
        case 0:
            do_recv(*f, in, op);
            break;
        case 1:
            do_send(*f, in, op);
            break;
        case 2: { // the peer produces as it should
            Cursor p = smcd::unpack_prod(c.transport.smcd().rx.control()->prod.load());
            uint32_t n = in.u16() % (f->rx_ring + 1);
            in.u8();
            if (core::valid(p, f->rx_ring))
                c.transport.smcd().rx.control()->prod.store(
                    smcd::pack_prod(core::advance(p, n, f->rx_ring)));
            break;
        }
        case 3: { // the peer consumes as it should, flags kept
            uint64_t w = c.transport.smcd().rx.control()->cons.load();
            Cursor k = smcd::unpack_cons(w);
            uint32_t n = in.u16() % (f->tx_ring + 1);
            in.u8();
            if (core::valid(k, f->tx_ring))
                c.transport.smcd().rx.control()->cons.store(
                    smcd::pack_cons(core::advance(k, n, f->tx_ring), smcd::prod_flags_of(w),
                                    smcd::conn_flags_of(w)));
            break;
        }
        case 4:
        case 5: { // the peer writes any word of either control line
            uint8_t word = in.u8() % 8;
            in.u16();
            uint64_t v = in.u64();
            auto* line = reinterpret_cast<std::atomic<uint64_t>*>(kind == 4 ? c.transport.smcd().rx.base
                                                                            : c.transport.smcd().tx.base);
            if (kind == 5 && word == 4) v = without_waking(v); // `waiting`
            line[word].store(v);
            break;
        }
        case 6: { // the peer's connection flags
            uint64_t w = c.transport.smcd().rx.control()->cons.load();
            uint8_t flags = in.u8();
            in.u16();
            c.transport.smcd().rx.control()->cons.store((w & 0x00ffffffffffffffull) | uint64_t{flags}
                                                                                   << 56);
            break;
        }
        case 7: // fork: take what all processes published in shared memory
            in.u8(), in.u16();
            c.adopt_published();
            f->cursors_ours = false;
            break;
        case 8: { // poll and epoll readiness
            uint8_t want = in.u8();
            in.u16();
            short ready = smc_arm(c, short(want & 1 ? POLLIN : 0) | short(want & 2 ? POLLOUT : 0) |
                                         short(want & 4 ? POLLPRI : 0));
            (void)ready;
            break;
        }
        case 9: // shutdown(SHUT_WR), close or abort
            switch (in.u8() % 3) {
            case 0:
                smc_shutdown_write(c);
                break;
            case 1:
                smc_close(c, false);
                break;
            default:
                smc_close(c, true);
                break;
            }
            in.u16();
            break;
        case 10:
            peer_urgent(*f, in);
            break;
        case 11:
            do_urgent(f->c, in, op);
            break;
        }
        check_state(*f);
    }
    return 0;
}
