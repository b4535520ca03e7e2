// SPDX-License-Identifier: MIT
#pragma once
// The seam between a connection's core (cursors, CDC receive, corking, the
// close state: rx, tx, close) and the transport that carries its bytes and
// control messages, as net/smc's smc_connection sits above SMC-D's ISM
// writes and SMC-R's RDMA WRITEs and CDC SENDs.
//
// A transport part is one object per connection (SMC-D: smcd::ConnPart,
// engine/smcd/conn_part.hpp). The core reaches the peer only through the
// calls named here; the concept below spells them, so a transport that lacks
// one fails to build where it is plugged in. The part is a concrete final
// class whose calls are inline (no virtual call on the data path: SMC-D's
// compile to the stores into the control line they always were).
//
// What each transport does behind a call:
//   rings       SMC-D: ours is the DMB the peer writes; we write straight
//               into the peer's DMB. SMC-R: we write a local send buffer,
//               which send_prod carries to the peer's RMB by RDMA WRITE.
//   send_*      SMC-D: one store into the peer's control line each.
//               SMC-R: a CDC message over SEND.
//   receive     SMC-D: the peer's words copied out of our control line.
//               SMC-R: the last CDC message its receive completion gave.
//   post_prod   the exit: SMC-D stores the producer cursor into the peer's
//               control line (never busy); SMC-R posts the RDMA WRITE and
//               the CDC SEND, busy while its send slots are taken, and
//               progress reaps completions so the core can post again.
//   notify_*    the peer's sleeping reader or writer: SMC-D takes its
//               request from the control line (one RMW) and sends one
//               datagram; SMC-R's CDC message is the wake-up.
//   want_*      our own sleeping reader or writer asks the peer for a
//               wake-up: SMC-D stores a request into the peer's control
//               line (its wait flags, the bell we name, the in-flight word
//               while the peer's datagram is on its way: smcd/conn_part.hpp);
//               SMC-R notes it locally, and its receive completion wakes us.
#include "engine/core/cdc.hpp"
#include "engine/core/cursor.hpp"

#include <concepts>
#include <cstdint>

namespace usmc::core {

// The mark of the peer's latest urgent send: the producer cursor just after
// its urgent byte, and that send's count (the peer's word, checked by rx).
struct UrgentMark {
    Cursor after;
    uint16_t count = 0;
};

// What the transport's exit answers a post: done, or busy (no room for the
// message now: SMC-R's send slots); the core posts again from progress().
enum class Posted : uint8_t { Done, Busy };

// Every request of the peer's, taken at once (our close).
struct Requests {
    bool data = false;
    bool space = false;
    // A reader's set kept in user memory asked for data too: the bell the
    // transport rings for it (0: none; SMC-D's kWaitDataBell).
    uint64_t data_bell = 0;
};

template <typename T>
concept ConnTransport = requires(T& t, const T& ct, Cursor at, uint16_t urg, uint8_t flags) {
    // Both rings: ours (the peer produces into it), the one we produce into.
    { ct.attached() } -> std::same_as<bool>;
    { ct.rx_ring_size() } -> std::same_as<uint32_t>;
    { ct.rx_ring() } -> std::same_as<const uint8_t*>;
    { ct.tx_ring_size() } -> std::same_as<uint32_t>;
    { t.tx_ring() } -> std::same_as<uint8_t*>;
    // CDC: the peer's as received; ours as sent (what every process holding
    // the connection sent: the record a forked sibling reads back).
    { ct.receive() } -> std::same_as<PeerCdc>;
    { ct.receive_urgent_mark() } -> std::same_as<UrgentMark>;
    // The exit: the producer cursor (and the bytes before it) to the peer;
    // progress finishes what an earlier post left (completions).
    { t.post_prod(at, urg) } -> std::same_as<Posted>;
    {t.progress()};
    {t.send_urgent_mark(at, urg)};
    {t.send_cons(at, flags)};
    { ct.sent() } -> std::same_as<PeerCdc>;
    // The peer's waiters: wake its reader after a post, its writer after
    // our consumer cursor moved, if they wait (true: a wake-up went out).
    // SMC-D: the peer's requests in the control line and a datagram;
    // SMC-R: the CDC message itself wakes, so nothing more.
    { t.notify_reader(at) } -> std::same_as<bool>;
    { ct.writer_waits() } -> std::same_as<bool>;
    { t.notify_writer() } -> std::same_as<bool>;
    // Our waiters: a reader asks to be woken after the peer's next post
    // (withdrawn: true if the peer had not taken it; whether it stands;
    // whether a wake-up for it is on its way and must land before a drain),
    // a writer after the peer's next consume, at this process's bell.
    {t.want_data()};
    { t.unwant_data() } -> std::same_as<bool>;
    { ct.wants_data() } -> std::same_as<bool>;
    { ct.data_wake_coming() } -> std::same_as<bool>;
    {t.want_space()};
    {t.name_space_bell(uint64_t{})};
    // Our end (close, abort, a move to TCP): every request of the peer's
    // taken at once, its reader and writer woken, its waker let go.
    { t.take_all_requests() } -> std::same_as<Requests>;
    {ct.wake_reader()};
    {ct.ring_data_bell(uint64_t{})};
    {ct.wake_writer()};
    {t.release_wakers()};
    // Moving to TCP (kMovedFlags): the flags as the peer sent them and as
    // we did, and our move stored once among the processes holding us.
    { ct.peer_conn_flags() } -> std::same_as<uint8_t>;
    { ct.sent_conn_flags() } -> std::same_as<uint8_t>;
    { t.send_move(at, flags, flags) } -> std::same_as<bool>;
};

} // namespace usmc::core
