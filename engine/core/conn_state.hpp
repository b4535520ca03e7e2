// SPDX-License-Identifier: MIT
#pragma once
// The transport-independent half of a connection (the kernel's struct
// smc_connection without its link group): the cursors only this side
// writes, the close state, urgent data and corking. It knows no transport,
// no socket and no wake-up: a transport feeds it the peer's CDC
// (cdc_recv.hpp) and carries what it posts (data_path.hpp).
#include "engine/core/close_state.hpp"
#include "engine/core/cursor.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>

namespace usmc::core {

struct ConnState {
    // Written only by this side.
    SharedCursor tx_prod;               // bytes produced into the peer's ring (under tx_mu)
    SharedCursor rx_cons;               // bytes consumed from our ring (under rx_mu)
    Cursor rx_cons_announced;           // what the peer has been told (receiver thread only)
    std::atomic<uint8_t> conn_flags{0}; // ConnFlags we sent
    // What recv, send and poll answer from (any thread moves it on, with
    // close_state.hpp's next()).
    std::atomic<CloseState> close_state{CloseState::Open};

    // Urgent data (MSG_OOB). Sending: our urgent sends so far (under tx_mu),
    // carried in every producer cursor we post. Receiving (written under
    // rx_mu, read by poll and ioctl without it):
    //   rx_urg_key  the peer's urgent count we have taken in, | kUrgStands
    //               while a mark stands ahead of (or at) our consumer
    //               cursor: a read whose CDC's count differs from it takes
    //               the slow path (kUrgStands never matches a count).
    //   rx_urg      that mark: the cursor of the urgent byte, the byte, and
    //               whether it was read with MSG_OOB.
    static constexpr uint32_t kUrgStands = 0x10000;
    uint16_t tx_urg_count = 0;
    std::atomic<uint32_t> rx_urg_key{0};
    std::atomic<uint64_t> rx_urg{0};

    // Corking: bytes copied into the peer's ring but not yet posted (under
    // tx_mu), TCP_CORK as set on the socket, and whether the backstop
    // flusher knows the connection.
    uint32_t tx_held = 0;
    std::atomic<bool> corked{false};
    std::atomic<bool> cork_listed{false};
    uint64_t cork_key = 0; // its entry in the backstop's table (under tx_mu)

    // The peer's CDC as cdc_recv last accepted it: what changed since is
    // what a receive wakes for.
    SharedCursor seen_prod;
    SharedCursor seen_cons;
    std::atomic<uint8_t> seen_flags{0};
    std::atomic<uint16_t> seen_urg{0};
    // A post the transport answered busy: progress() posts the latest
    // cursors again (a newer post supersedes an older one).
    std::atomic<bool> post_pending{false};

    std::mutex tx_mu; // one sender at a time
    std::mutex rx_mu; // one receiver at a time
};

} // namespace usmc::core
