// SPDX-License-Identifier: MIT
#pragma once
// The transport's part of a connection as everything above the transports
// sees it: the core's seam (core/transport.hpp) and the few calls of a
// connection's life that branch on the transport (its buffers' size for
// stats, what diag shows, given back at exit, forgotten by a forked
// child's copy of a handshake). The kernel branches on lgr->is_smcd at the
// same places.
//
// Today the part is SMC-D's, held privately: nothing above this header can
// reach SMC-D's DMBs, wait flags or signals (engine/conn's include check
// refuses engine/smcd/). SMC-R's part (engine/smcr, issue 45) comes beside
// it here: the handshake says which one a connection runs on, and the
// declarations below become the branches between them. The handshake's
// transport halves reach their own part through smcd() (and smcr()).
#include "engine/core/transport.hpp"
#include "engine/smcd/conn_part.hpp"

#include <cstdint>
#include <memory>
#include <sys/types.h>

namespace usmc::transport {

// The peer's user before the handshake knows it (labels buffers for reuse).
inline constexpr uid_t kUnknownPeer = ism::kUnknownPeer;

// What observers are shown of a connection's buffers (usmc ss, diag).
struct BufferView {
    int fd = -1;         // ours: the memory's descriptor
    uint32_t size = 0;   // ours, bytes
    uint32_t offset = 0; // ours, within the descriptor's memory
    uint64_t ino = 0;    // ours: the memory's inode
    uint32_t peer_size = 0;
    uint64_t peer_ino = 0;
};

// An epoll set's gate line in one of our segments (smcd/gate.hpp), as the
// set kept in user memory holds it: the segment stays mapped while held.
struct Gate {
    std::shared_ptr<const void> keep;
    smcd::GateLine* line = nullptr;
    unsigned slot = 0; // the connection's bit there

    explicit operator bool() const { return line != nullptr; }
    const void* key() const { return keep.get(); }
    void own(uint64_t bell) const { smcd::gate_own(*line, bell); }
    void sleep() const { smcd::gate_sleep(*line); }
    void wake() const { smcd::gate_wake(*line); }
    uint64_t take_ready() const { return smcd::take_ready(*line); }
};

class Part final : private smcd::ConnPart {
  public:
    // The core's seam (core/transport.hpp says what each call does).
    using smcd::ConnPart::attached;
    using smcd::ConnPart::rx_ring;
    using smcd::ConnPart::rx_ring_size;
    using smcd::ConnPart::tx_ring;
    using smcd::ConnPart::tx_ring_size;

    using smcd::ConnPart::post_prod;
    using smcd::ConnPart::progress;
    using smcd::ConnPart::receive;
    using smcd::ConnPart::receive_urgent_mark;
    using smcd::ConnPart::send_cons;
    using smcd::ConnPart::send_urgent_mark;
    using smcd::ConnPart::sent;

    using smcd::ConnPart::notify_reader;
    using smcd::ConnPart::notify_writer;
    using smcd::ConnPart::writer_waits;

    using smcd::ConnPart::data_wake_coming;
    using smcd::ConnPart::name_space_bell;
    using smcd::ConnPart::unwant_data;
    using smcd::ConnPart::unwant_data_bell;
    using smcd::ConnPart::want_data;
    using smcd::ConnPart::want_data_bell;
    using smcd::ConnPart::want_space;
    using smcd::ConnPart::wants_data;
    using smcd::ConnPart::wants_data_bell;

    using smcd::ConnPart::release_wakers;
    using smcd::ConnPart::ring_data_bell;
    using smcd::ConnPart::take_all_requests;
    using smcd::ConnPart::wake_reader;
    using smcd::ConnPart::wake_writer;

    using smcd::ConnPart::peer_conn_flags;
    using smcd::ConnPart::send_move;
    using smcd::ConnPart::sent_conn_flags;

    // The gate line `g` of our side's buffer, for a set kept in user memory
    // (empty: none, its every wake-up a datagram).
    Gate own_gate(unsigned g) const {
        smcd::GateLine* l = smcd::ConnPart::own_gate(g);
        return l ? Gate{rx.seg, l, rx.slot} : Gate{};
    }

    // A connection's life where it branches on the transport.
    using smcd::ConnPart::forget;
    using smcd::ConnPart::has_buffers;
    using smcd::ConnPart::release_at_exit;
    using smcd::ConnPart::rx_buffer_bytes;
    using smcd::ConnPart::tx_buffer_bytes;
    using smcd::ConnPart::unmap;
    BufferView buffers() const { return {rx.fd, rx.size, rx.offset, rx.ino, tx.size, tx.ino}; }

    // The handshake's SMC-D half, and SMC-D's device calls.
    smcd::ConnPart& smcd() { return *this; }
    const smcd::ConnPart& smcd() const { return *this; }
};

static_assert(core::ConnTransport<Part>);

} // namespace usmc::transport
