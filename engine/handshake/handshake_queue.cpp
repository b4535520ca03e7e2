// SPDX-License-Identifier: MIT
#include "engine/handshake/handshake_queue.hpp"

#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"

#include <algorithm>
#include <thread>

namespace usmc {

using sys::mono_ns;

HandshakeQueue::HandshakeQueue(unsigned workers, uint32_t hold_ms, OnCongestion on_congestion,
                               unsigned inflight_limit, const char* name)
    : name_(name), workers_(workers ? workers : 1), inflight_limit_(inflight_limit),
      hold_ns_(uint64_t{hold_ms ? hold_ms : 1} * 1000000), on_congestion_(std::move(on_congestion)),
      cur_hold_ns_(hold_ns_) {}

bool HandshakeQueue::congested() const {
    return mono_ns() < until_ns_.load(std::memory_order_relaxed);
}

void HandshakeQueue::begin() {
    inflight_.fetch_add(1, std::memory_order_relaxed);
    update_congestion();
}

void HandshakeQueue::end() {
    inflight_.fetch_sub(1, std::memory_order_relaxed);
}

bool HandshakeQueue::submit(std::function<void()> job) {
    {
        std::lock_guard lock(mu_);
        if (started_ < workers_ && started_ < running_.load() + jobs_.size() + 1) {
            if (sys::start_thread([this] { work(); })) {
                ++started_;
            } else {
                log::warn("cannot start a handshake worker");
                if (started_ == 0) return false;
            }
        }
        jobs_.push_back(std::move(job));
        waiting_.fetch_add(1, std::memory_order_relaxed);
    }
    cv_.notify_one();
    update_congestion();
    return true;
}

void HandshakeQueue::work() {
    sys::name_this_thread(name_);
    while (true) {
        std::function<void()> job;
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [this] { return !jobs_.empty(); });
            job = std::move(jobs_.front());
            jobs_.pop_front();
            waiting_.fetch_sub(1, std::memory_order_relaxed);
            running_.fetch_add(1, std::memory_order_relaxed);
        }
        update_congestion();
        job();
        running_.fetch_sub(1, std::memory_order_relaxed);
    }
}

void HandshakeQueue::update_congestion() {
    if (waiting_.load(std::memory_order_relaxed) < workers_ &&
        (!inflight_limit_ || inflight_.load(std::memory_order_relaxed) < inflight_limit_))
        return;
    uint64_t now = mono_ns();
    uint64_t old = until_ns_.load(std::memory_order_relaxed);
    uint64_t hold = cur_hold_ns_.load(std::memory_order_relaxed);
    if (old <= now) {
        // A new congestion. Back within one hold of the last one's end: the
        // clients' bursts are what keeps bringing it back; hold longer.
        hold =
            old != 0 && now - old < hold ? std::min(2 * hold, kMaxHoldFactor * hold_ns_) : hold_ns_;
        cur_hold_ns_.store(hold, std::memory_order_relaxed);
    }
    uint64_t until = now + hold;
    // Extended at most every quarter hold: the callback walks the listeners.
    if (old > now && until - old < hold / 4) return;
    if (until_ns_.compare_exchange_strong(old, until) && on_congestion_)
        on_congestion_(until, old <= now);
}

} // namespace usmc
