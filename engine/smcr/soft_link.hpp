// SPDX-License-Identifier: MIT
#pragma once
// The soft device's link: one soft::Qp (soft_qp.hpp) carried over a
// connected TCP socket, with a completion channel: an eventfd that is
// readable while completions wait, as an ibv_comp_channel's descriptor is
// after ibv_req_notify_cq. The engine's loop watches the socket and calls
// service(); application threads post and poll. One lock orders the two
// (the QP is a plain state machine).
//
// The socket's end is the port's: EOF, a reset, or TCP_USER_TIMEOUT (data
// unacknowledged that long: the peer host or the path gone) puts the QP in
// the error state, and every outstanding request completes flushed.
//
// Known limit: the peer's ACKs and NAKs travel in the same stream as its
// requests, so while one of its SENDs waits for a receive here, the answers
// behind it wait too (our completions come late, never wrong). SMC-R posts
// its receives ahead (48 per link), so a wait is rare; the cure is
// receive credits the sender honours, so the receiver never waits.
#include "engine/smcr/soft_qp.hpp"

#include <cstdint>
#include <mutex>
#include <vector>

namespace usmc::smcr::soft {

class Link {
  public:
    explicit Link(const Qp::Options& o = {}) : qp_(o) {}
    // Takes `fd` (a connected stream socket; closed with the link). Sets it
    // nonblocking, with TCP_NODELAY and TCP_USER_TIMEOUT `user_timeout_ms`
    // where it is TCP (0: the kernel's default). False if the completion
    // channel cannot be made (the link is then in error).
    bool open(int fd, uint32_t user_timeout_ms);
    ~Link();

    Qp::Region reg_mr(void* base, size_t len);
    void dereg_mr(uint32_t rkey);
    bool post_write(uint64_t wr_id, const void* src, uint32_t len, uint32_t rkey,
                    uint64_t remote_addr, bool signaled);
    bool post_send(uint64_t wr_id, const void* src, uint32_t len, bool signaled);
    bool post_recv(uint64_t wr_id, void* buf, uint32_t len);
    size_t poll(Completion* out, size_t max);

    // Reads what the peer sent, acts on it, writes what is pending. Call
    // when the socket is readable or writable (or at any time: it never
    // blocks). False once the link is in error.
    bool service();
    // Whether bytes wait for the socket to take them (watch it for
    // writability too).
    bool wants_write() const;

    int fd() const { return fd_; }
    // Readable while completions wait (level: drained by poll()).
    int channel_fd() const { return channel_; }
    bool in_error() const;

  private:
    void flush_locked();  // write what the QP produced, as far as the socket takes it
    void signal_locked(); // the channel follows whether completions wait

    mutable std::mutex mu_;
    Qp qp_;
    int fd_ = -1;
    int channel_ = -1;
    bool signalled_ = false;
    std::vector<uint8_t> out_; // bytes the socket has not taken yet
    size_t out_off_ = 0;
    std::vector<Completion> ready_; // taken from the QP, not yet polled
};

} // namespace usmc::smcr::soft
