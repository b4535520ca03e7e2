// SPDX-License-Identifier: MIT
#pragma once
// The soft device's reliable-connected queue pair: RC semantics between two
// engines that have no RDMA device, carried as frames over a byte stream
// (a TCP connection bound to the link's interface; the plumbing is the
// caller's). This is the state machine alone, without I/O: the caller feeds
// it the peer's bytes (on_input) and sends what it produces (take_output).
//
// What it guarantees, as an RC QP does:
// - Work requests act in the order posted; a WRITE lands before a later
//   SEND on the same QP is delivered.
// - A send-side completion comes only after the peer placed the data (the
//   peer's acknowledgement), in posting order, for signalled requests.
// - A SEND that finds no posted receive waits until one is posted (the
//   kernel's SMC-R sets infinite RNR retry), and holds everything behind it.
// - Every WRITE is checked against the rkey and the region's bounds on the
//   receiving side: outside, a remote access error, and both QPs go to the
//   error state (every outstanding request completes flushed).
// - A malformed frame, or the stream's end (carrier loss, TCP_USER_TIMEOUT:
//   the caller's fail()), is a port error: the QP goes to the error state.
// A peer is any process that can reach the link's port: every frame field
// is checked before it is used, and a frame's payload is bounded.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <infiniband/verbs.h>
#include <vector>

namespace usmc::smcr::soft {

// Frame header (24 bytes, network byte order): type, syndrome (NAK),
// reserved (2), PSN (32), rkey (32), payload length (32), remote address
// (64). The payload follows WRITE and SEND frames.
inline constexpr size_t kHeaderLen = 24;
inline constexpr uint32_t kMaxPayload = 64 * 1024; // a WRITE goes in frames of at most this
inline constexpr uint32_t kMaxSend = 8192;         // SMC-Rv2's largest LLC message
enum FrameType : uint8_t { kWrite = 1, kSend = 2, kAck = 3, kNak = 4 };
enum Syndrome : uint8_t { kRemoteAccess = 1, kRemoteInvalid = 2 };

struct Completion {
    uint64_t wr_id = 0;
    ibv_wc_status status = IBV_WC_SUCCESS;
    ibv_wc_opcode opcode = IBV_WC_SEND;
    uint32_t byte_len = 0;
};

class Qp {
  public:
    struct Options {
        uint32_t max_send_wr = 1024;          // requests posted and not yet acknowledged
        size_t max_unacked_bytes = 16u << 20; // their bytes (frames are built at post)
        uint32_t first_psn = 1;               // our first frame's PSN
        uint32_t peer_first_psn = 1;          // the peer's
    };
    Qp() : Qp(Options{}) {}
    explicit Qp(const Options& o);

    // A region the peer may WRITE into: its rkey and the address it is
    // named by (what CONFIRM RKEY carries), or 0 when the table is full.
    struct Region {
        uint32_t rkey = 0;
        uint64_t vaddr = 0;
    };
    Region reg_mr(void* base, size_t len);
    void dereg_mr(uint32_t rkey);

    // False when the QP is in the error state, or its send queue is full
    // (max_send_wr requests or max_unacked_bytes outstanding: the caller is
    // busy until completions come), and nothing is posted.
    bool post_write(uint64_t wr_id, const void* src, uint32_t len, uint32_t rkey,
                    uint64_t remote_addr, bool signaled);
    bool post_send(uint64_t wr_id, const void* src, uint32_t len, bool signaled);
    bool post_recv(uint64_t wr_id, void* buf, uint32_t len);

    // The peer's bytes, any split. Frames are acted on as they complete.
    void on_input(const uint8_t* p, size_t n);
    // Bytes for the peer since the last call, appended to `out`.
    void take_output(std::vector<uint8_t>& out);
    // Up to `max` completions, oldest first.
    size_t poll(Completion* out, size_t max);

    // The port went (the stream ended, or its timeout fired).
    void fail();
    bool in_error() const { return error_; }
    // Counted for tests and stats: WRITE frames refused by the rkey check.
    uint64_t access_errors() const { return access_errors_; }
    // The peer's bytes held and not yet acted on: a whole frame at most,
    // unless a SEND waits for a receive (the caller stops reading from the
    // peer above a bound, so its stream backs up, not our memory).
    size_t input_backlog() const { return in_.size() - in_off_; }
    size_t input_buffered() const { return in_.size(); } // (tests: consumed bytes are dropped)

  private:
    struct Mr {
        uint32_t rkey;
        uint64_t vaddr;
        uint8_t* base;
        size_t len;
    };
    struct SendWr { // posted, not yet acknowledged
        uint64_t wr_id;
        ibv_wc_opcode opcode;
        uint32_t byte_len;
        uint32_t last_psn; // acknowledged with this frame
        bool signaled;
    };
    struct RecvWr {
        uint64_t wr_id;
        uint8_t* buf;
        uint32_t len;
    };

    void frame(uint8_t type, uint8_t syndrome, uint32_t psn, uint32_t rkey, uint32_t len,
               uint64_t addr, const void* payload);
    bool act_on_frames(); // as many complete frames of in_ as can act now
    bool act(const uint8_t* h, const uint8_t* payload); // false: stop (RNR) or error
    void to_error(bool tell_peer, uint8_t syndrome, uint32_t psn);
    void acked(uint32_t psn);
    const Mr* region_for(uint32_t rkey, uint64_t addr, uint32_t len) const;

    bool room_for(uint32_t len) const;

    Options opt_;
    std::vector<Mr> mrs_;
    uint32_t next_rkey_ = 0x5a17;
    uint64_t next_vaddr_ = uint64_t{1} << 40;
    uint32_t next_psn_ = 1;
    uint32_t expect_psn_ = 1; // the peer's next frame
    size_t unacked_bytes_ = 0;
    std::deque<SendWr> unacked_;
    std::deque<RecvWr> recvs_;
    std::deque<Completion> done_;
    std::vector<uint8_t> in_; // the peer's bytes not yet acted on
    size_t in_off_ = 0;
    std::vector<uint8_t> out_;
    bool error_ = false;
    uint64_t access_errors_ = 0;
};

} // namespace usmc::smcr::soft
