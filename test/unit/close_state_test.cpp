// SPDX-License-Identifier: MIT
#include "engine/core/close_state.hpp"

#include <catch2/catch.hpp>

#include <initializer_list>
#include <poll.h>
#include <vector>

using namespace usmc::core;
using S = CloseState;
using E = CloseEvent;

namespace {
constexpr E kPeerEvents[] = {E::PeerDoneWriting, E::PeerClosed, E::PeerAborted, E::TcpEndQuiet,
                             E::TcpEndLost};

S run(std::initializer_list<E> events) {
    S s = S::Open;
    for (E e : events)
        s = next(s, e);
    return s;
}

std::vector<S> all_states() {
    std::vector<S> v;
    for (int i = 0; i < kCloseStates; ++i)
        v.push_back(S(i));
    return v;
}
} // namespace

TEST_CASE("close state: what a socket sees after each sequence of ends, as TCP shows it") {
    constexpr short kEof = POLLIN | POLLRDHUP;
    constexpr short kErr = POLLERR | POLLHUP;
    struct Row {
        const char* what;
        std::initializer_list<E> events;
        S state;
        AtEnd recv;
        SendGate send;
        short poll;
    };
    // clang-format off
    const Row rows[] = {
        {"nothing said", {}, S::Open, AtEnd::Wait, SendGate::Go, 0},
        {"peer shut down writing", {E::PeerDoneWriting},
         S::PeerDoneWriting, AtEnd::Eof, SendGate::Go, kEof},
        {"peer closed", {E::PeerClosed},
         S::PeerClosed, AtEnd::Eof, SendGate::TakeOnce, kEof | POLLOUT},
        {"peer shut down, then closed", {E::PeerDoneWriting, E::PeerClosed},
         S::PeerClosed, AtEnd::Eof, SendGate::TakeOnce, kEof | POLLOUT},
        {"peer aborted", {E::PeerAborted},
         S::Reset, AtEnd::Reset, SendGate::Reset, kEof | POLLOUT | kErr},
        {"peer aborted, its error reported", {E::PeerAborted, E::ErrorTaken},
         S::ResetTaken, AtEnd::Eof, SendGate::Pipe, kEof | POLLOUT | POLLHUP},
        {"an error reported twice is reported once", {E::PeerAborted, E::ErrorTaken, E::ErrorTaken},
         S::ResetTaken, AtEnd::Eof, SendGate::Pipe, kEof | POLLOUT | POLLHUP},
        {"no error to report: nothing changes", {E::PeerClosed, E::ErrorTaken},
         S::PeerClosed, AtEnd::Eof, SendGate::TakeOnce, kEof | POLLOUT},
        {"we shut down writing", {E::WeDoneWriting},
         S::WeDoneWriting, AtEnd::Wait, SendGate::Pipe, POLLOUT},
        {"both shut down writing", {E::WeDoneWriting, E::PeerDoneWriting},
         S::BothDoneWriting, AtEnd::Eof, SendGate::Pipe, kEof | POLLOUT | POLLHUP},
        {"we shut down, the peer closed", {E::WeDoneWriting, E::PeerClosed},
         S::WeDonePeerClosed, AtEnd::Eof, SendGate::Pipe, kEof | POLLOUT | POLLHUP},
        {"peer's process ended quietly (FIN, ours all read)", {E::TcpEndQuiet},
         S::PeerClosed, AtEnd::Eof, SendGate::TakeOnce, kEof | POLLOUT},
        {"peer's process ended, ours unread or reset", {E::TcpEndLost},
         S::Reset, AtEnd::Reset, SendGate::Reset, kEof | POLLOUT | kErr},
        {"we shut down, then the peer vanished", {E::WeDoneWriting, E::TcpEndLost},
         S::Reset, AtEnd::Reset, SendGate::Reset, kEof | POLLOUT | kErr},
        {"peer shut down, then vanished with ours unread", {E::PeerDoneWriting, E::TcpEndLost},
         S::EofThenReset, AtEnd::Eof, SendGate::Pipe, kEof | POLLOUT | kErr},
        {"peer shut down writing, then aborted", {E::PeerDoneWriting, E::PeerAborted},
         S::EofThenReset, AtEnd::Eof, SendGate::Pipe, kEof | POLLOUT | kErr},
        {"both shut down, then the peer aborted", {E::WeDoneWriting, E::PeerDoneWriting, E::PeerAborted},
         S::EofThenReset, AtEnd::Eof, SendGate::Pipe, kEof | POLLOUT | kErr},
        {"both shut down, then the peer reset", {E::WeDoneWriting, E::PeerDoneWriting, E::TcpEndLost},
         S::EofThenReset, AtEnd::Eof, SendGate::Pipe, kEof | POLLOUT | kErr},
        {"peer closed, then its socket ended", {E::PeerClosed, E::TcpEndLost},
         S::PeerClosed, AtEnd::Eof, SendGate::TakeOnce, kEof | POLLOUT},
        {"peer's word out of bounds", {E::Broken},
         S::Broken, AtEnd::Reset, SendGate::Reset, POLLIN | POLLOUT | kErr},
        {"a reset is not taken back by a later close", {E::PeerAborted, E::PeerClosed},
         S::Reset, AtEnd::Reset, SendGate::Reset, kEof | POLLOUT | kErr},
        {"a vanished peer's later words change nothing", {E::TcpEndLost, E::PeerDoneWriting},
         S::Reset, AtEnd::Reset, SendGate::Reset, kEof | POLLOUT | kErr},
        {"a reported reset stays so", {E::PeerAborted, E::ErrorTaken, E::PeerClosed, E::TcpEndLost},
         S::ResetTaken, AtEnd::Eof, SendGate::Pipe, kEof | POLLOUT | POLLHUP},
    };
    // clang-format on
    for (const Row& r : rows) {
        INFO(r.what);
        S s = run(r.events);
        CHECK(s == r.state);
        CHECK(recv_at_end(s) == r.recv);
        CHECK(send_gate(s) == r.send);
        CHECK(end_events(s) == r.poll);
    }
}

TEST_CASE("close state: after any word or end of the peer no reader waits") {
    // A reader that saw a flag looks again and must find an answer, or it
    // would spin: no peer event may lead to a state that waits.
    for (S s : all_states())
        for (E e : kPeerEvents) {
            INFO(name(s) << " + event " << int(e));
            CHECK(recv_at_end(next(s, e)) != AtEnd::Wait);
        }
}

TEST_CASE("close state: every event is idempotent and only moves the state on") {
    for (S s : all_states())
        for (int i = 0; i < kCloseEvents; ++i) {
            E e = E(i);
            INFO(name(s) << " + event " << i);
            S once = next(s, e);
            CHECK(next(once, e) == once);
            // Nothing that failed calls (reset, broken) is ever undone, and
            // no end makes a state that fails writes accept them again. Only
            // reporting a reset's error takes POLLERR away.
            if (s == S::Broken) CHECK(once == S::Broken);
            if (s == S::Reset || s == S::EofThenReset || s == S::ResetTaken)
                CHECK((once == s || once == S::Broken ||
                       (s == S::Reset && e == E::ErrorTaken && once == S::ResetTaken)));
            if ((end_events(s) & POLLERR) && e != E::ErrorTaken) CHECK(end_events(once) & POLLERR);
            if (end_events(s) & POLLHUP) CHECK(end_events(once) & POLLHUP);
            if (send_gate(s) == SendGate::Pipe) CHECK(send_gate(once) != SendGate::Go);
            if (recv_at_end(s) != AtEnd::Wait) CHECK(recv_at_end(once) != AtEnd::Wait);
        }
}

TEST_CASE("close state: our shutdown and the peer's words commute") {
    // Which of the two a thread sees first must not matter.
    for (S s : all_states())
        for (E e : {E::PeerDoneWriting, E::PeerClosed, E::PeerAborted, E::TcpEndQuiet,
                    E::TcpEndLost, E::Broken}) {
            INFO(name(s) << " + event " << int(e));
            CHECK(next(next(s, E::WeDoneWriting), e) == next(next(s, e), E::WeDoneWriting));
        }
}

TEST_CASE("close state: every state is reachable from Open") {
    std::vector<bool> seen(kCloseStates);
    std::vector<S> todo{S::Open};
    seen[0] = true;
    while (!todo.empty()) {
        S s = todo.back();
        todo.pop_back();
        for (int i = 0; i < kCloseEvents; ++i) {
            S n = next(s, E(i));
            if (!seen[int(n)]) {
                seen[int(n)] = true;
                todo.push_back(n);
            }
        }
    }
    for (S s : all_states()) {
        INFO(name(s));
        CHECK(seen[int(s)]);
    }
}

TEST_CASE("close state: a flag byte is its events in the order a peer says them") {
    CHECK(with_peer_flags(S::Open, 0) == S::Open);
    CHECK(with_peer_flags(S::Open, 0x1f) == S::Open); // reserved bits
    CHECK(with_peer_flags(S::Open, kPeerDoneWriting) == S::PeerDoneWriting);
    CHECK(with_peer_flags(S::Open, kPeerDoneWriting | kPeerConnClosed) == S::PeerClosed);
    CHECK(with_peer_flags(S::Open, kPeerConnClosed | kPeerConnAbort) == S::Reset);
    CHECK(with_peer_flags(S::WeDoneWriting, kPeerConnClosed) == S::WeDonePeerClosed);
    CHECK(with_peer_flags(S::Broken, kConnFlagsKnown) == S::Broken);
}
