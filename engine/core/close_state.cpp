// SPDX-License-Identifier: MIT
#include "engine/core/close_state.hpp"

#include <poll.h>

namespace usmc::core {

namespace {
using S = CloseState;
constexpr S PDW = S::PeerDoneWriting, PC = S::PeerClosed, WDW = S::WeDoneWriting,
            BDW = S::BothDoneWriting, WPC = S::WeDonePeerClosed, R = S::Reset, ER = S::EofThenReset,
            B = S::Broken;

// kNext[state][event]. A reset or a broken connection stays so; after the
// peer's TCP socket ended its later words change nothing a reader sees. A
// reset after the peer's end of stream leaves reads at EOF and fails writes
// (tcp_reset in CLOSE_WAIT: EPIPE, the FIN already taken).
constexpr S kNext[kCloseStates][kCloseEvents] = {
    //        WeDone PeerDW PeerCl PeerAb TcpQuiet TcpLost Broken
    /* O   */ {WDW, PDW, PC, R, PC, R, B},
    /* PDW */ {BDW, PDW, PC, R, PC, ER, B},
    // Closed: its last word said; its process ending afterwards is no news.
    /* PC  */ {WPC, PC, PC, R, PC, PC, B},
    /* WDW */ {WDW, BDW, WPC, R, WPC, R, B},
    /* BDW */ {BDW, BDW, WPC, R, WPC, ER, B},
    /* WPC */ {WPC, WPC, WPC, R, WPC, WPC, B},
    /* R   */ {R, R, R, R, R, R, B},
    /* ER  */ {ER, ER, ER, ER, ER, ER, B},
    /* B   */ {B, B, B, B, B, B, B},
};
} // namespace

CloseState next(CloseState s, CloseEvent e) {
    return kNext[int(s)][int(e)];
}

CloseState with_peer_flags(CloseState s, uint8_t flags) {
    if (flags & kPeerDoneWriting) s = next(s, CloseEvent::PeerDoneWriting);
    if (flags & kPeerConnClosed) s = next(s, CloseEvent::PeerClosed);
    if (flags & kPeerConnAbort) s = next(s, CloseEvent::PeerAborted);
    return s;
}

AtEnd recv_at_end(CloseState s) {
    switch (s) {
    case S::Open:
    case S::WeDoneWriting:
        return AtEnd::Wait;
    case S::PeerDoneWriting:
    case S::PeerClosed:
    case S::BothDoneWriting:
    case S::WeDonePeerClosed:
    case S::EofThenReset:
        return AtEnd::Eof;
    case S::Reset:
    case S::Broken:
        return AtEnd::Reset;
    }
    return AtEnd::Reset;
}

SendGate send_gate(CloseState s) {
    switch (s) {
    case S::Open:
    case S::PeerDoneWriting:
        return SendGate::Go;
    case S::PeerClosed:
        return SendGate::TakeOnce;
    case S::WeDoneWriting:
    case S::BothDoneWriting:
    case S::WeDonePeerClosed:
    // (After a reset TCP fails a write with EPIPE once the error is taken.)
    case S::Reset:
    case S::EofThenReset:
        return SendGate::Pipe;
    case S::Broken:
        return SendGate::Reset;
    }
    return SendGate::Reset;
}

short end_events(CloseState s) {
    constexpr short kEof = POLLIN | POLLRDHUP;
    // Writable whenever a write fails at once (EPIPE), as TCP reports
    // POLLOUT after SEND_SHUTDOWN or a reset.
    switch (s) {
    case S::Open:
        return 0;
    case S::PeerDoneWriting:
        return kEof;
    case S::WeDoneWriting:
        return POLLOUT;
    case S::PeerClosed:
    case S::BothDoneWriting:
    case S::WeDonePeerClosed:
        return kEof | POLLOUT;
    // A reset shuts both directions (tcp_done): HUP, and RDHUP with it.
    case S::Reset:
    case S::EofThenReset:
        return kEof | POLLOUT | POLLERR | POLLHUP;
    case S::Broken:
        return POLLIN | POLLOUT | POLLERR | POLLHUP;
    }
    return POLLIN | POLLOUT | POLLERR | POLLHUP;
}

const char* name(CloseState s) {
    constexpr const char* kNames[kCloseStates] = {
        "open",         "peer-done-writing", "peer-closed",
        "done-writing", "both-done-writing", "done-writing-peer-closed",
        "reset",        "eof-then-reset",    "broken"};
    return kNames[int(s) < kCloseStates ? int(s) : kCloseStates - 1];
}

} // namespace usmc::core
