// SPDX-License-Identifier: MIT
#include "engine/core/close_state.hpp"

#include <poll.h>

namespace usmc::core {

namespace {
using S = CloseState;
constexpr S O = S::Open, PDW = S::PeerDoneWriting, PC = S::PeerClosed, WDW = S::WeDoneWriting,
            BDW = S::BothDoneWriting, WPC = S::WeDonePeerClosed, R = S::Reset, ER = S::EofThenReset,
            B = S::Broken, RT = S::ResetTaken;

// kNext[state][event]. A reset or a broken connection stays so; after the
// peer's TCP socket ended its later words change nothing a reader sees. A
// reset after the peer's end of stream leaves reads at EOF and fails writes
// (tcp_reset in CLOSE_WAIT: EPIPE, the FIN already taken).
constexpr S kNext[kCloseStates][kCloseEvents] = {
    //        WeDone PeerDW PeerCl PeerAb TcpQuiet TcpLost Broken Taken
    /* O   */ {WDW, PDW, PC, R, PC, R, B, O},
    // After the peer's end of stream a reset leaves reads at EOF (TCP in
    // CLOSE_WAIT: sk_err EPIPE, the FIN already taken).
    /* PDW */ {BDW, PDW, PC, ER, PC, ER, B, PDW},
    // Closed: its last word said; its process ending afterwards is no news.
    /* PC  */ {WPC, PC, PC, R, PC, PC, B, PC},
    /* WDW */ {WDW, BDW, WPC, R, WPC, R, B, WDW},
    /* BDW */ {BDW, BDW, WPC, ER, WPC, ER, B, BDW},
    /* WPC */ {WPC, WPC, WPC, R, WPC, WPC, B, WPC},
    /* R   */ {R, R, R, R, R, R, B, RT},
    /* ER  */ {ER, ER, ER, ER, ER, ER, B, ER},
    /* B   */ {B, B, B, B, B, B, B, B},
    /* RT  */ {RT, RT, RT, RT, RT, RT, B, RT},
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
    case S::ResetTaken:
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
    case S::EofThenReset:
    case S::ResetTaken:
        return SendGate::Pipe;
    // (TCP fails the first write after a reset with its error, then EPIPE.)
    case S::Reset:
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
        return kEof | POLLOUT;
    // Both directions shut: HUP (tcp_poll, smc_poll: SHUTDOWN_MASK).
    case S::BothDoneWriting:
    case S::WeDonePeerClosed:
        return kEof | POLLOUT | POLLHUP;
    // A reset shuts both directions (tcp_done): HUP, and RDHUP with it;
    // ERR until its error is reported.
    case S::Reset:
    case S::EofThenReset:
        return kEof | POLLOUT | POLLERR | POLLHUP;
    case S::ResetTaken:
        return kEof | POLLOUT | POLLHUP;
    case S::Broken:
        return POLLIN | POLLOUT | POLLERR | POLLHUP;
    }
    return POLLIN | POLLOUT | POLLERR | POLLHUP;
}

const char* name(CloseState s) {
    constexpr const char* kNames[kCloseStates] = {
        "open",          "peer-done-writing", "peer-closed",
        "done-writing",  "both-done-writing", "done-writing-peer-closed",
        "reset",         "eof-then-reset",    "broken",
        "reset-reported"};
    return int(s) < kCloseStates ? kNames[int(s)] : "unknown";
}

} // namespace usmc::core
