#include "engine/handshake_queue.hpp"

#include "engine/log.hpp"

#include <thread>

namespace usmc {

HandshakeQueue::HandshakeQueue(unsigned workers, std::function<void(bool)> on_congestion)
    : workers_(workers ? workers : 1), on_congestion_(std::move(on_congestion)) {}

bool HandshakeQueue::submit(std::function<void()> job) {
    {
        std::lock_guard lock(mu_);
        if (started_ < workers_ && started_ < running_.load() + jobs_.size() + 1) {
            try {
                std::thread([this] { work(); }).detach();
                ++started_;
            } catch (const std::system_error& e) {
                log::warn("cannot start a handshake worker: {}", e.what());
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
    unsigned w = waiting_.load(std::memory_order_relaxed);
    bool was = congested_.load(std::memory_order_relaxed);
    bool now = was ? w > 0 : w >= workers_;
    if (now != was && congested_.compare_exchange_strong(was, now) && on_congestion_)
        on_congestion_(now);
}

} // namespace usmc
