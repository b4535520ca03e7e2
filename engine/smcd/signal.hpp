// SPDX-License-Identifier: MIT
#pragma once
// SMC-D's signal half, the answering side (wait_flags.hpp is the asking
// side): a peer that asked is woken by a datagram to its `sig`, sent by
// name from a waker of the pool we keep for its process (wakeup.hpp), and a
// peer that waits for space by a datagram to its process's bell, whose id
// it wrote into our control line. Nothing passes between the processes but
// the two names. SMC-R answers with its CDC message instead: the SEND's
// receive completion wakes the peer's engine, which wakes its `sig` itself.
#include "engine/readiness/wakeup.hpp"

#include <cstdint>

namespace usmc::smcd {

// How one connection reaches its peer's waiters.
class PeerSignals {
  public:
    // The peer's `sig` (its token in CLC) and a waker pool for its process
    // (`peer_gid`), kept until release(). False if no pool could be had.
    bool reach(uint64_t peer_gid, uint64_t peer_token) {
        sig_ = wakeup::sig_name(peer_token);
        peer_token_ = peer_token;
        if (!wakers_) wakers_ = wakeup::wakers_for(peer_gid);
        return wakers_ != nullptr;
    }
    // Its reader asked for data (or the end): wake it.
    void wake_reader() const { wakeup::send(wakers_, sig_); }
    // Its epoll set (kept in user memory) asked for data: ring that set's
    // bell with the token of the peer's side, which names the connection
    // there (the peer's word: a wrong bell wakes a stranger or nobody).
    void ring_data_bell(uint64_t bell) const {
        if (bell) wakeup::send_token(wakers_, wakeup::bell_name(bell), peer_token_);
    }
    // Its writer asked for space: ring the bell it named (0: none).
    void ring_bell(uint64_t bell) const {
        if (bell) wakeup::send(wakers_, wakeup::bell_name(bell));
    }
    // The connection is done with the peer: the pool goes back.
    void release() {
        wakeup::release(wakers_);
        wakers_ = nullptr;
    }

  private:
    wakeup::Name sig_;
    uint64_t peer_token_ = 0;
    wakeup::Wakers* wakers_ = nullptr;
};

} // namespace usmc::smcd
