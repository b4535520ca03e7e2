// SPDX-License-Identifier: MIT
#pragma once
// SMC-D's part of a connection, behind the core's transport seam
// (core/transport.hpp): the two DMBs and how the peer's waiters are woken.
// Every call is one or two atomic operations on a control line, or a
// datagram by name: inline, so the data path is what it was before the seam.
//
//   rx  ours: the peer writes data into its ring and its CDC and requests
//       into its control line (cdc_line.hpp).
//   tx  the peer's: we write data into its ring and our CDC and requests
//       into its control line.
//
// The handshake fills both (connect.cpp, listen.cpp: claimed, mapped, or
// named by a link group) and the connection's release gives them back.
// Held by engine/transport's Part, which shows the layers above only the
// seam (not final for that reason: Part derives from it privately).
#include "engine/core/transport.hpp"
#include "engine/smcd/cdc_line.hpp"
#include "engine/smcd/gate.hpp"
#include "engine/smcd/ism.hpp"
#include "engine/smcd/signal.hpp"
#include "engine/smcd/wait_flags.hpp"

namespace usmc::smcd {

class ConnPart {
  public:
    ism::Dmb rx;
    ism::Dmb tx;
    PeerSignals signals;

    bool attached() const { return tx.valid(); }
    uint32_t rx_ring_size() const { return rx.ring_size(); }
    const uint8_t* rx_ring() const { return rx.ring(); }
    uint32_t tx_ring_size() const { return tx.ring_size(); }
    uint8_t* tx_ring() { return tx.ring(); }

    core::PeerCdc receive() const { return smcd::receive(own()); }
    core::UrgentMark receive_urgent_mark() const { return smcd::receive_urgent_mark(own()); }
    void send_prod(core::Cursor prod, uint16_t urg_count) {
        smcd::send_prod(peer(), prod, urg_count);
    }
    void send_urgent_mark(core::Cursor after, uint16_t urg_count) {
        smcd::send_urgent_mark(peer(), after, urg_count);
    }
    void send_cons(core::Cursor cons, uint8_t conn_flags) {
        smcd::send_cons(peer(), cons, conn_flags);
    }
    core::PeerCdc sent() const { return smcd::sent(peer()); }
    // The core's exit: a store into the peer's line, never busy.
    core::Posted post_prod(core::Cursor prod, uint16_t urg_count) {
        send_prod(prod, urg_count);
        return core::Posted::Done;
    }
    void progress() {}
    // The peer's reader asked for data (its request, taken here): wake it,
    // unless it already read all we posted (its request then stands for the
    // next write, and no wake-up goes that would find nothing to read).
    bool notify_reader(core::Cursor prod) {
        DataRequest req = take_data_request();
        if (!req) return false;
        if (receive().cons == prod) {
            keep_data_request(req);
            return false;
        }
        if (req.bell && knock(req.gate, req.bell)) signals.ring_data_bell(req.bell);
        if (req.sig) {
            wake_reader();
            data_woken();
        }
        return true;
    }
    bool writer_waits() const { return space_asked(); }
    // The peer's writer asked for space (taken here): ring its process's bell.
    bool notify_writer() {
        if (!take_space_request()) return false;
        wake_writer();
        return true;
    }
    // Moving to TCP (core::kMovedFlags): the flags alone, the peer's and
    // ours as sent, and our move flag stored once among our processes.
    uint8_t peer_conn_flags() const { return smcd::conn_flags(own()); }
    uint8_t sent_conn_flags() const { return smcd::conn_flags(peer()); }
    bool send_move(core::Cursor cons, uint8_t conn_flags, uint8_t move) {
        return smcd::send_move(peer(), cons, conn_flags, move);
    }

    // Our own waits (the core's seam, core/transport.hpp): a request in
    // the peer's control line, taken by the peer when it posts or consumes.
    void want_data() { smcd::ask_for_data(peer()); }
    bool unwant_data() { return smcd::withdraw_data_request(peer()); }
    bool wants_data() const { return smcd::data_asked(peer()); }
    // Taken, and the peer's datagram not yet sent (its in-flight word).
    bool data_wake_coming() const { return smcd::data_wake_in_flight(peer()); }
    void want_space() { smcd::ask_for_space(peer()); }
    // For a set kept in user memory: data (or the end) rings its bell,
    // through its gate line `gate` of our DMB's segment (-1: none).
    void want_data_bell(uint64_t bell, int gate = -1) {
        smcd::ask_for_data_bell(peer(), bell, gate);
    }
    // For a set kept in user memory: its gate line `g` of our DMB's segment
    // (nullptr: our DMB is a file of its own). A connection in such a set is
    // never one a fork shares, so only this process's sets use the lines of
    // the segments its device made (a forked child's device makes its own).
    GateLine* own_gate(unsigned g) const {
        return rx.seg && rx.slot < 64 && g < kGates ? &smcd::own_gate(*rx.seg, g) : nullptr;
    }
    void unwant_data_bell() { smcd::withdraw_data_bell(peer()); }
    bool wants_data_bell() const { return smcd::data_bell_asked(peer()); }
    // Our process's bell, where the peer rings when it takes our request for
    // space (written before the request; a store only when it changes).
    void name_space_bell(uint64_t bell) {
        auto& ours = peer().space_bell;
        if (ours.load(std::memory_order_relaxed) != bell)
            ours.store(bell, std::memory_order_relaxed);
    }
    core::Requests take_all_requests() { return smcd::take_all_requests(own()); }
    void wake_reader() const { signals.wake_reader(); }
    void ring_data_bell(uint64_t bell) const { signals.ring_data_bell(bell); }
    // The bell the peer named in our line (its word: a wrong one wakes a
    // stranger's bell or nobody, never us).
    void wake_writer() const {
        signals.ring_bell(own().space_bell.load(std::memory_order_relaxed));
    }
    // The connection's end: the peer's waker no longer ours to use.
    void release_wakers() { signals.release(); }

    // The buffers' life, on SMC-D's device (ism.hpp; the caller holds the
    // engine's lock around the device). The handshake claims or maps them.
    bool has_buffers() const { return rx.valid(); }
    uint32_t rx_buffer_bytes() const { return rx.size; }
    uint32_t tx_buffer_bytes() const { return tx.size; }
    // The connection is over: our DMB back to the device (reusable at once
    // if the peer is done with it, else once its close flags are in), the
    // peer's unmapped or left in the device's mapping cache.
    void release(ism::Device& dev, uid_t peer_uid) {
        if (rx.valid()) {
            uint8_t flags = core::cdc_ending_flags(receive());
            // (A peer that moved to TCP never writes here again either.)
            bool peer_done = !tx.valid() ||
                             (flags & (core::kPeerConnClosed | core::kPeerConnAbort)) ||
                             (receive().conn_flags & core::kMovedFlags);
            dev.release(rx, peer_uid, peer_done);
        }
        rx = ism::Dmb{};
        dev.unmap_peer(tx);
    }
    // Another process may still use the connection (fork): only our own
    // mappings go. Our DMB leaves the device's count if the device made it,
    // the peer's may go back to the device's mapping cache (under the
    // engine's lock); then what is left is unmapped (without it).
    void leave_device(ism::Device& dev) {
        dev.disown(rx);
        dev.unmap_peer(tx);
    }
    void unmap() {
        ism::unmap(rx);
        ism::unmap(tx);
    }
    // A forked child's copy of a handshake its parent runs: the buffers
    // are the parent's to give back.
    void forget() { rx = tx = ism::Dmb{}; }
    // At exit: our slot goes back to whichever process outlives us.
    void release_at_exit() const { ism::release_slot_at_exit(rx); }

  private:
    // A request naming the peer set's gate line `gate` (-1: none): our bit
    // there; whether its bell rings (no gate it can name: always).
    bool knock(int gate, uint64_t bell) const {
        unsigned slot = 0;
        if (gate < 0) return true;
        GateLine* l = peer_gate(tx, unsigned(gate), &slot);
        return !l || smcd::knock(*l, slot, bell);
    }
    // The peer's requests in our line, taken by notify_* and our close.
    DataRequest take_data_request() { return smcd::take_data_request(own()); }
    void keep_data_request(DataRequest taken) { smcd::keep_data_request(own(), taken); }
    void data_woken() { smcd::data_woken(own()); }
    bool space_asked() const { return smcd::space_asked(own()); }
    bool take_space_request() { return smcd::take_space_request(own()); }

    Control& own() const { return *rx.control(); }
    Control& peer() const { return *tx.control(); }
};

static_assert(core::ConnTransport<ConnPart>);

} // namespace usmc::smcd
