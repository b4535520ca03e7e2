// SPDX-License-Identifier: MIT
#include "engine/handshake/connect_watch.hpp"

#include "engine/base/loop.hpp"

#include <sys/epoll.h>

namespace usmc::connect_watch {

bool add(int fd, Want want, uint32_t timeout_ms, std::function<void(bool ok)> done) {
    uint32_t events = want == Want::Readable ? EPOLLIN | EPOLLRDHUP : EPOLLOUT;
    int timeout = int(std::min<uint32_t>(timeout_ms, INT32_MAX));
    return loop::add(
               fd, events, timeout,
               [want, done = std::move(done)](uint32_t ev) {
                   // Readable: whatever came (an answer, a hang-up, an error) is for
                   // the handshake to read. 0: the deadline passed.
                   bool up = ev != 0 && (want == Want::Readable ||
                                         ((ev & EPOLLOUT) && !(ev & (EPOLLERR | EPOLLHUP))));
                   done(up);
               },
               loop::Kind::Handshake) != 0;
}

void on_fork_child() {
    loop::on_fork_child();
}

} // namespace usmc::connect_watch
