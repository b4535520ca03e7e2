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
//   ask_*/take_*  what a side sleeps for and the other side's answer,
//               exactly one wake-up per request. SMC-D: a word in the
//               control line taken with one RMW; SMC-R: the CDC's
//               cons_curs_upd_req / write_blocked flags.
//   wake_reader, ring_bell  SMC-D: a datagram by name to the peer's `sig`
//               or its process's bell. SMC-R: the CDC message itself.
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

// Every request of the peer's, taken at once (our close).
struct Requests {
    bool data = false;
    bool space = false;
};

template <typename T>
concept ConnTransport = requires(T& t, const T& ct, Cursor at, uint16_t urg, uint8_t flags,
                                 uint64_t id) {
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
    {t.send_prod(at, urg)};
    {t.send_urgent_mark(at, urg)};
    {t.send_cons(at, flags)};
    { ct.sent() } -> std::same_as<PeerCdc>;
    // Asking: what this side sleeps for.
    {t.ask_for_data()};
    {t.ask_for_space()};
    { t.withdraw_data_request() } -> std::same_as<bool>; // (true: it still stood)
    { ct.data_asked() } -> std::same_as<bool>;
    { ct.data_wake_in_flight() } -> std::same_as<bool>;
    {t.name_bell(id)};
    // Answering: what the peer sleeps for, and its wake-up.
    { t.take_data_request() } -> std::same_as<bool>;
    {t.keep_data_request()};
    {t.data_woken()};
    { ct.space_asked() } -> std::same_as<bool>;
    { t.take_space_request() } -> std::same_as<bool>;
    { t.take_all_requests() } -> std::same_as<Requests>;
    {ct.wake_reader()};
    {ct.ring_bell()};
};

} // namespace usmc::core
