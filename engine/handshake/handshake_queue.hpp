// SPDX-License-Identifier: MIT
#pragma once
// Where CLC handshakes run (the kernel's smc_hs_wq): a small pool of threads
// per process, one queue per role. accept() and nonblocking connect() only
// hand connections over; they never wait behind a handshake in progress
// (the short-lived-connection series, patch 1).
//
// Handshake steps run on a worker thread; waits for a peer's first bytes,
// its Accept and its Confirm happen in the connect watch's epoll set, so a
// silent peer holds no worker. A peer that stalls inside a CLC frame holds
// one worker for at most CLC_WAIT_TIME. Server and client queues are separate: in one process
// a client handshake waits for a server handshake, and a shared pool full of
// waiting clients would starve the servers they wait for.
//
// Congestion (patch 3, smc_hs_congested): handshakes waiting for a worker,
// not yet started, reach the number of workers. It then lasts `hold_ms` past
// the last time that was seen (hs_congestion_hold_ms): clients learn of it
// through the registry before their connect, a round trip late, and a flag
// that ended as soon as the queue drained let every new burst of a connection
// storm in again (see docs/DESIGN-NOTES.md). Congestion that comes back
// within one hold of its end is a storm, not a spike: the hold doubles (up to
// kMaxHoldFactor times hs_congestion_hold_ms), and starts over from the
// configured value after a quiet hold. Listeners with SMC_LIMIT_HS advertise
// it, and clients then connect as plain TCP.
//
// A client's handshakes mostly wait for their server outside the queue (the
// Accept is awaited in the connect watch, not on a worker), so for the
// client the queue alone no longer congests. Handshakes in flight, from
// connect() to their end wherever they wait, count too: congestion also
// starts when they reach `inflight_limit` (0: only the queue counts).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

namespace usmc {

// Lives as long as the process: its threads are detached and never stop.
class HandshakeQueue {
  public:
    // `on_congestion(until_ns, onset)` runs (on the submitting or working
    // thread) when congestion starts (onset) or is seen again and extends it
    // (at most every quarter of the hold); until_ns is CLOCK_MONOTONIC.
    using OnCongestion = std::function<void(uint64_t until_ns, bool onset)>;
    // `name`: its workers' thread name (sys::name_this_thread).
    HandshakeQueue(unsigned workers, uint32_t hold_ms, OnCongestion on_congestion,
                   unsigned inflight_limit = 0, const char* name = "usmc-handshake");
    HandshakeQueue(const HandshakeQueue&) = delete;
    HandshakeQueue& operator=(const HandshakeQueue&) = delete;

    // Never blocks. Threads are started on first use; false when not even
    // one could be (the caller goes on with plain TCP).
    bool submit(std::function<void()> job);

    // A handshake started (begin) or ended (end), wherever it waits.
    void begin();
    void end();

    unsigned waiting() const { return waiting_.load(std::memory_order_relaxed); }
    unsigned in_flight() const { return inflight_.load(std::memory_order_relaxed); }
    unsigned running() const { return running_.load(std::memory_order_relaxed); }
    bool congested() const;
    // CLOCK_MONOTONIC ns until which the queue counts as congested (0: never was).
    uint64_t congested_until() const { return until_ns_.load(std::memory_order_relaxed); }
    unsigned workers() const { return workers_; }
    // The hold the current (or last) congestion got.
    uint64_t hold_ns() const { return cur_hold_ns_.load(std::memory_order_relaxed); }
    static constexpr uint64_t kMaxHoldFactor = 16;

  private:
    void work();
    void update_congestion();

    const char* name_;
    const unsigned workers_;
    const unsigned inflight_limit_;
    const uint64_t hold_ns_;
    OnCongestion on_congestion_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    unsigned started_ = 0;
    std::atomic<unsigned> waiting_{0}, running_{0}, inflight_{0};
    std::atomic<uint64_t> until_ns_{0};
    std::atomic<uint64_t> cur_hold_ns_;
};

} // namespace usmc
