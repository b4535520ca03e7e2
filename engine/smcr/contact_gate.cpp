// SPDX-License-Identifier: MIT
#include "engine/smcr/contact_gate.hpp"

namespace usmc::smcr {

ContactGate::Turn ContactGate::enter(const PeerKey& key, const std::function<bool()>& try_reuse,
                                     std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu_);
    while (true) {
        if (!in_flight_.count(key)) {
            if (try_reuse()) return Turn::Reuse;
            in_flight_.insert(key);
            return Turn::First;
        }
        // (One condition for every peer: a finish wakes all waiters, and
        // each looks at its own peer again.)
        ++waiting_;
        bool timed_out = cv_.wait_until(lock, deadline) == std::cv_status::timeout;
        --waiting_;
        if (timed_out && in_flight_.count(key)) return Turn::TimedOut;
    }
}

void ContactGate::finish(const PeerKey& key) {
    {
        std::lock_guard lock(mu_);
        in_flight_.erase(key);
    }
    cv_.notify_all();
}

size_t ContactGate::waiting() const {
    std::lock_guard lock(mu_);
    return waiting_;
}

size_t ContactGate::in_flight() const {
    std::lock_guard lock(mu_);
    return in_flight_.size();
}

} // namespace usmc::smcr
