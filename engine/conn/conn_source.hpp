// SPDX-License-Identifier: MIT
#pragma once
// A connection side as a set kept in user memory sees it
// (readiness/user_epoll.hpp's Source): its poll bits from the cursors and
// the close state, and its wake-ups counted from words that only move when
// the peer or this process changes something (issue 44; docs/DESIGN-NOTES.md
// "Issue 44: readiness in user memory").
//   in   the peer's producer word (cursor and urgent count): every publish
//        of data moves it, and the bit it turns on is in the same word
//   out  counted here when a look finds room again after a look or a send
//        found none (TCP's SOCK_NOSPACE, then sk_write_space)
//   all  the peer's connection flags that are set, and this side's close
//        events (smc_close_event): each only turns on
// While the connection is still connecting it shows nothing: its handshake's
// end counts an `out` wake-up and rings the set (af_smc_connect.cpp).
#include "engine/readiness/user_epoll.hpp"

namespace usmc {

struct SmcConn;

class ConnSource final : public readiness::Source {
  public:
    explicit ConnSource(SmcConn* c) : c_(c) {}
    SmcConn* conn() const { return c_; }
    uint32_t bits() const override;
    readiness::Wakes wakes() const override;

  private:
    SmcConn* c_;
};

// Poll bits as epoll reports them.
uint32_t epoll_bits(short poll_bits);

} // namespace usmc
