// SPDX-License-Identifier: MIT
#pragma once
// The close state of a connection: what each end has said of its close and
// what the TCP connection underneath showed, folded into the one state that
// recv, send and poll answer from (net/smc keeps it as sk_state, moved by
// smc_close.c). Transport-independent: SMC-D feeds it the peer's flags from
// the control line, SMC-R will feed it those of a CDC message.
//
// Every event only moves the state on: a peer cannot take back a close it
// has said, nor hide a reset behind a later word. The states that wait for
// data (Open, WeDoneWriting) have seen no word of the peer and no end of its
// TCP socket, so a reader never sleeps on an end it has been told of.
#include <cstdint>

namespace usmc::core {

enum class CloseState : uint8_t {
    Open,             // SMC_ACTIVE
    PeerDoneWriting,  // SMC_APPCLOSEWAIT1: the peer shut down writing
    PeerClosed,       // SMC_APPCLOSEWAIT2: it closed, or its process ended quietly
    WeDoneWriting,    // SMC_PEERCLOSEWAIT1: we shut down writing (or closed)
    BothDoneWriting,  // SMC_PEERCLOSEWAIT2
    WeDonePeerClosed, // SMC_APPFINCLOSEWAIT
    Reset,            // SMC_PROCESSABORT: the peer aborted, or vanished with ours unread
    EofThenReset,     // ... vanished so after its end of stream (TCP: a reset in CLOSE_WAIT)
    Broken,           // a word of the peer's out of bounds, or our wake-up pair gone
    ResetTaken,       // Reset, its error reported once (TCP clears sk_err as it reports it)
};
inline constexpr int kCloseStates = 10;

enum class CloseEvent : uint8_t {
    WeDoneWriting,   // we sent done-writing, closed or aborted
    PeerDoneWriting, // the peer's connection flags
    PeerClosed,
    PeerAborted,
    TcpEndQuiet, // the peer's TCP socket ended by a FIN, every byte of ours read
    TcpEndLost,  // ... by a reset, or with bytes of ours unread
    Broken,
    // A call reported the reset's ECONNRESET (recv, send, SO_ERROR): TCP
    // reports the error once; later reads see the end, writes EPIPE, and
    // poll no longer shows POLLERR.
    ErrorTaken,
};
inline constexpr int kCloseEvents = 8;

CloseState next(CloseState s, CloseEvent e);

// The connection-state flags of a CDC message (struct
// smc_cdc_conn_state_flags), the same for SMC-D and SMC-R; other bits of the
// byte are reserved and ignored.
enum ConnFlags : uint8_t {
    kPeerDoneWriting = 0x80, // shutdown(SHUT_WR)
    kPeerConnClosed = 0x40,  // orderly close
    kPeerConnAbort = 0x20,   // abnormal close
    // usmc's own, in two bits the kernel reserves: the connection moved to
    // TCP with both ends (engine/sock/af_smc_move.cpp). Out: this side stopped
    // using the rings (an exec its descriptor survives, a seccomp filter);
    // the consumer cursor in the same word is final, and the peer sends
    // what it wrote past it again, over TCP. Took: this side followed the
    // peer's move; it drains its own ring and sends what the peer never
    // read over TCP. Neither ends anything by itself: not "known" below.
    kMovedOut = 0x08,
    kMovedTook = 0x04,
};
inline constexpr uint8_t kConnFlagsKnown = kPeerDoneWriting | kPeerConnClosed | kPeerConnAbort;
inline constexpr uint8_t kMovedFlags = kMovedOut | kMovedTook;

// A peer's flag byte as events, applied in the order a peer says them: done
// writing, closed, aborted.
CloseState with_peer_flags(CloseState s, uint8_t flags);

// What recv answers when nothing is left to read.
enum class AtEnd : uint8_t { Wait, Eof, Reset };
AtEnd recv_at_end(CloseState s);

// What send does before it writes a byte.
enum class SendGate : uint8_t {
    Go,
    TakeOnce, // the first write after the peer's close is taken unread, as TCP's
    Pipe,     // EPIPE
    Reset,    // ECONNRESET (the caller takes the error: CloseEvent::ErrorTaken)
};
SendGate send_gate(CloseState s);

// The poll bits the state raises by itself, data and room aside.
short end_events(CloseState s);

const char* name(CloseState s);

} // namespace usmc::core
