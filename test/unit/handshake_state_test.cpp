// SPDX-License-Identifier: MIT
#include "engine/core/handshake_state.hpp"

#include <catch2/catch.hpp>

#include <initializer_list>
#include <set>
#include <string>

using namespace usmc::core;
using CE = ClientEvent;
using SE = ServerEvent;

namespace {

// Runs `events` from the start; Invalid as soon as one is not expected.
template <typename State, typename Event>
State run(State s, std::initializer_list<Event> events) {
    for (Event e : events) {
        s = next(s, e);
        if (s == State::Invalid) break;
    }
    return s;
}

// Every state reachable from `start` by any sequence of events.
template <typename State, typename Event>
std::set<State> reachable(State start, int events) {
    std::set<State> seen{start};
    std::set<State> todo{start};
    while (!todo.empty()) {
        State s = *todo.begin();
        todo.erase(todo.begin());
        for (int e = 0; e < events; ++e) {
            State to = next(s, Event(e));
            if (to != State::Invalid && seen.insert(to).second) todo.insert(to);
        }
    }
    return seen;
}

} // namespace

TEST_CASE("client handshake: each way through it ends where the connection goes") {
    struct Row {
        const char* what;
        std::initializer_list<CE> events;
        ClientHs end;
    };
    // clang-format off
    const Row rows[] = {
        {"loopback connect up at once, Accept on a link group", {CE::ProposalSent, CE::Up}, ClientHs::Smc},
        {"first contact: attach on the event loop", {CE::ProposalSent, CE::NeedsAttach, CE::Up}, ClientHs::Smc},
        {"SYN dropped, connect up later", {CE::TcpPending, CE::ProposalSent, CE::NeedsAttach, CE::Up}, ClientHs::Smc},
        {"server declines", {CE::ProposalSent, CE::FellBack}, ClientHs::Tcp},
        {"TCP connect fails", {CE::TcpPending, CE::TcpFailed}, ClientHs::Tcp},
        {"Proposal half written", {CE::TcpPending, CE::ProposalFailed}, ClientHs::Failed},
        {"Proposal write fails at connect()", {CE::ProposalFailed}, ClientHs::Failed},
        {"answer late: a worker reads it", {CE::ProposalSent, CE::NeedsThread, CE::Up}, ClientHs::Smc},
        {"every link busy: a worker attaches", {CE::ProposalSent, CE::NeedsAttach, CE::NeedsThread, CE::Up}, ClientHs::Smc},
        {"attach fails", {CE::ProposalSent, CE::NeedsAttach, CE::Error}, ClientHs::Failed},
        {"no room for a buffer: a worker waits for the connect", {CE::NeedsThread, CE::TcpFailed}, ClientHs::Tcp},
        {"no worker for it: Decline", {CE::ProposalSent, CE::NeedsThread, CE::FellBack}, ClientHs::Tcp},
        {"blocking connect()", {CE::NeedsThread, CE::Up}, ClientHs::Smc},
        {"server's answer broken", {CE::ProposalSent, CE::Error}, ClientHs::Failed},
        // Not expected: a bug of ours, whatever a peer sends.
        {"connect failed after the Proposal went", {CE::ProposalSent, CE::TcpFailed}, ClientHs::Invalid},
        {"Proposal sent twice", {CE::ProposalSent, CE::ProposalSent}, ClientHs::Invalid},
        {"attach before any answer", {CE::TcpPending, CE::NeedsAttach}, ClientHs::Invalid},
        {"up before the Proposal", {CE::Up}, ClientHs::Invalid},
        {"anything after the end", {CE::ProposalSent, CE::Up, CE::Error}, ClientHs::Invalid},
        {"a second end", {CE::ProposalSent, CE::FellBack, CE::Up}, ClientHs::Invalid},
    };
    // clang-format on
    for (const auto& row : rows) {
        INFO(row.what);
        CHECK(run(ClientHs::Start, row.events) == row.end);
    }
}

TEST_CASE("server handshake: each way through it ends where the connection goes") {
    struct Row {
        const char* what;
        std::initializer_list<SE> events;
        ServerHs end;
    };
    // clang-format off
    const Row rows[] = {
        {"Proposal at accept time, link group", {SE::ProposalHere, SE::AcceptSent, SE::Up}, ServerHs::Smc},
        {"Proposal later", {SE::NothingYet, SE::ProposalHere, SE::AcceptSent, SE::Up}, ServerHs::Smc},
        {"port announced late: waits again", {SE::NothingYet, SE::NothingYet, SE::ProposalHere, SE::AcceptSent, SE::Up}, ServerHs::Smc},
        {"the Accept took the client's named DMB: no Confirm", {SE::ProposalHere, SE::AcceptTook}, ServerHs::Smc},
        {"first contact: a worker waits for the attach", {SE::ProposalHere, SE::AcceptSent, SE::NeedsThread, SE::Up}, ServerHs::Smc},
        {"nothing comes", {SE::NothingYet, SE::NotSmc}, ServerHs::Tcp},
        {"bytes that are no Proposal", {SE::ProposalHere, SE::NotSmc}, ServerHs::Tcp},
        {"congested: Decline", {SE::ProposalHere, SE::FellBack}, ServerHs::Tcp},
        {"no worker", {SE::FellBack}, ServerHs::Tcp},
        {"client declines our Accept", {SE::ProposalHere, SE::AcceptSent, SE::FellBack}, ServerHs::Tcp},
        {"client vanishes after the Accept", {SE::ProposalHere, SE::AcceptSent, SE::Error}, ServerHs::Failed},
        {"attach never comes", {SE::ProposalHere, SE::AcceptSent, SE::NeedsThread, SE::Error}, ServerHs::Failed},
        {"Accept cannot be written", {SE::ProposalHere, SE::Error}, ServerHs::Failed},
        // Not expected.
        {"no Proposal after the Accept went", {SE::ProposalHere, SE::AcceptSent, SE::NotSmc}, ServerHs::Invalid},
        {"up without an Accept", {SE::ProposalHere, SE::Up}, ServerHs::Invalid},
        {"a DMB taken after the Accept went", {SE::ProposalHere, SE::AcceptSent, SE::AcceptTook}, ServerHs::Invalid},
        {"Accept without a Proposal", {SE::AcceptSent}, ServerHs::Invalid},
        {"an error before a worker looked", {SE::NothingYet, SE::Error}, ServerHs::Invalid},
        {"anything after the end", {SE::NotSmc, SE::ProposalHere}, ServerHs::Invalid},
    };
    // clang-format on
    for (const auto& row : rows) {
        INFO(row.what);
        CHECK(run(ServerHs::Intake, row.events) == row.end);
    }
}

TEST_CASE("handshake states: every state is reachable, every wait can end, ends take nothing") {
    auto client = reachable<ClientHs, ClientEvent>(ClientHs::Start, kClientEvents);
    CHECK(client.size() == size_t(kClientStates));
    auto server = reachable<ServerHs, ServerEvent>(ServerHs::Intake, kServerEvents);
    CHECK(server.size() == size_t(kServerStates));

    for (int s = 0; s < kClientStates; ++s) {
        auto state = ClientHs(s);
        INFO(name(state));
        for (int e = 0; e < kClientEvents; ++e)
            if (is_end(state)) CHECK(next(state, ClientEvent(e)) == ClientHs::Invalid);
        if (is_end(state)) continue;
        // Either side may decline at any point before SMC is up.
        CHECK(next(state, CE::FellBack) == ClientHs::Tcp);
        // And the connection never goes back to where it was.
        CHECK(next(state, CE::ProposalSent) != ClientHs::Start);
    }
    for (int s = 0; s < kServerStates; ++s) {
        auto state = ServerHs(s);
        INFO(name(state));
        for (int e = 0; e < kServerEvents; ++e)
            if (is_end(state)) CHECK(next(state, ServerEvent(e)) == ServerHs::Invalid);
        if (is_end(state)) continue;
        CHECK(next(state, SE::FellBack) == ServerHs::Tcp);
        // After the Accept the client may think SMC is up: no quiet TCP.
        bool accept_out = state == ServerHs::AwaitConfirm || state == ServerHs::Blocking;
        CHECK((next(state, SE::NotSmc) == ServerHs::Invalid) == accept_out);
        CHECK((next(state, SE::Error) == ServerHs::Failed) ==
              (state != ServerHs::Intake && state != ServerHs::AwaitProposal));
    }
    // Out-of-range values are not states or events.
    CHECK(next(ClientHs::Invalid, CE::Up) == ClientHs::Invalid);
    CHECK(next(ServerHs::Intake, SE(200)) == ServerHs::Invalid);
    CHECK(std::string(name(ClientHs::AwaitAccept)) == "await-accept");
    CHECK(std::string(name(ServerHs::AwaitConfirm)) == "await-confirm");
}
