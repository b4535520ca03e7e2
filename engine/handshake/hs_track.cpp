// SPDX-License-Identifier: MIT
#include "engine/handshake/hs_track.hpp"

#include "engine/base/count.hpp"
#include "engine/base/counters.hpp"
#include "engine/base/log.hpp"

namespace usmc::hs_track {

namespace {

using core::ClientHs;
using core::ServerHs;

// The gauge of a waiting state; kCount for the start and the ends.
counters::Id gauge_of(ClientHs s) {
    switch (s) {
    case ClientHs::Connecting:
        return counters::hs_client_connecting;
    case ClientHs::AwaitAccept:
        return counters::hs_client_await_accept;
    case ClientHs::Attaching:
        return counters::hs_client_attaching;
    case ClientHs::Blocking:
        return counters::hs_client_blocking;
    default:
        return counters::kCount;
    }
}

counters::Id gauge_of(ServerHs s) {
    switch (s) {
    case ServerHs::AwaitProposal:
        return counters::hs_server_await_proposal;
    case ServerHs::Begin:
        return counters::hs_server_begin;
    case ServerHs::AwaitConfirm:
        return counters::hs_server_await_confirm;
    case ServerHs::Blocking:
        return counters::hs_server_blocking;
    default:
        return counters::kCount;
    }
}

template <typename State, typename Event>
bool move(State& s, Event e, int fd, const char* side) {
    State to = core::next(s, e);
    if (to == State::Invalid) {
        counters::count(counters::hs_unexpected_events);
        log::warn("fd {}: {} handshake: event {} in state {} (ignored)", fd, side, core::name(e),
                  core::name(s));
        return false;
    }
    if (to == s) return true;
    if (auto g = gauge_of(s); g != counters::kCount) counters::count(g, uint64_t(-1));
    if (auto g = gauge_of(to); g != counters::kCount) counters::count(g);
    s = to;
    return true;
}

} // namespace

bool advance(ClientHs& s, core::ClientEvent e, int fd) {
    return move(s, e, fd, "client");
}

bool advance(ServerHs& s, core::ServerEvent e, int fd) {
    return move(s, e, fd, "server");
}

} // namespace usmc::hs_track
