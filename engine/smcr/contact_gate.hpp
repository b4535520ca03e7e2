// SPDX-License-Identifier: MIT
#pragma once
// First contacts arbitrated per peer. Two connections to a peer with no
// link group yet must not both build one (the second would find none to
// reuse on the other side, or two groups would race); connections to other
// peers must not wait for either. The kernel serialises every SMC-R first
// contact of a host under one mutex (smc_client_lgr_pending /
// smc_server_lgr_pending), which is what made parallel SMC-R set-up slow
// (seed 001). Here a first contact holds only its own peer's key: later
// connections to that peer wait for it and then reuse what it built;
// everyone else goes on.
//
// A server enters with the Proposal's peer; a client, whose Accept names a
// group to reuse, enters with the Accept's peer before it looks for it.
// The table's mutex is held only for the lookup, never for a handshake.
#include "engine/smcr/lgr_match.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>

namespace usmc::smcr {

struct PeerKey {
    // Our role: a group is a client's or a server's, never both, and two
    // processes that connect to each other at once must not wait for each
    // other's first contacts (the kernel keeps two pending locks for this).
    Role role = Role::Client;
    SystemId peer{};
    uint32_t device = 0; // our device (a group is per pair of devices too)
    auto operator<=>(const PeerKey&) const = default;
};

class ContactGate {
  public:
    enum class Turn : uint8_t {
        Reuse,    // try_reuse found a group: join it
        First,    // this caller's first contact is in flight until finish()
        TimedOut, // another first contact to the peer outlived the deadline
    };
    // `try_reuse` runs with no first contact to `key` in flight, under the
    // table's mutex (a lookup, nothing that waits).
    Turn enter(const PeerKey& key, const std::function<bool()>& try_reuse,
               std::chrono::steady_clock::time_point deadline);
    // The first contact ended, with a group or without: its waiters look
    // again.
    void finish(const PeerKey& key);
    size_t in_flight() const;
    size_t waiting() const; // callers waiting now (tests)

  private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::set<PeerKey> in_flight_;
    size_t waiting_ = 0;
};

} // namespace usmc::smcr
