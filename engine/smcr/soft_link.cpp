// SPDX-License-Identifier: MIT
#include "engine/smcr/soft_link.hpp"

#include "engine/base/sys.hpp"

#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace usmc::smcr::soft {

namespace {
// The peer's bytes a link holds unacted before it stops reading.
constexpr size_t kMaxBacklog = 1u << 20;
} // namespace

bool Link::open(int fd, uint32_t user_timeout_ms) {
    std::lock_guard lock(mu_);
    fd_ = fd;
    int fl = sys::real().fcntl(fd, F_GETFL, 0);
    if (fl >= 0) sys::real().fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int one = 1;
    // (Not TCP, as in the tests' socket pairs: these fail and change nothing.)
    sys::real().setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (user_timeout_ms) {
        unsigned int ms = user_timeout_ms;
        sys::real().setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
    }
    channel_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (channel_ < 0) {
        qp_.fail();
        return false;
    }
    return true;
}

Link::~Link() {
    if (fd_ >= 0) sys::real().close(fd_);
    if (channel_ >= 0) sys::real().close(channel_);
}

Qp::Region Link::reg_mr(void* base, size_t len) {
    std::lock_guard lock(mu_);
    return qp_.reg_mr(base, len);
}

void Link::dereg_mr(uint32_t rkey) {
    std::lock_guard lock(mu_);
    qp_.dereg_mr(rkey);
}

bool Link::post_write(uint64_t wr_id, const void* src, uint32_t len, uint32_t rkey,
                      uint64_t remote_addr, bool signaled) {
    std::lock_guard lock(mu_);
    bool ok = qp_.post_write(wr_id, src, len, rkey, remote_addr, signaled);
    flush_locked();
    return ok;
}

bool Link::post_send(uint64_t wr_id, const void* src, uint32_t len, bool signaled) {
    std::lock_guard lock(mu_);
    bool ok = qp_.post_send(wr_id, src, len, signaled);
    flush_locked();
    return ok;
}

bool Link::post_recv(uint64_t wr_id, void* buf, uint32_t len) {
    std::lock_guard lock(mu_);
    bool ok = qp_.post_recv(wr_id, buf, len);
    flush_locked(); // (a SEND that waited for it is acknowledged now)
    signal_locked();
    return ok;
}

size_t Link::poll(Completion* out, size_t max) {
    std::lock_guard lock(mu_);
    signal_locked(); // take in what the QP finished
    size_t n = std::min(max, ready_.size());
    std::copy(ready_.begin(), ready_.begin() + long(n), out);
    ready_.erase(ready_.begin(), ready_.begin() + long(n));
    if (ready_.empty() && signalled_) {
        uint64_t v;
        ssize_t rc = sys::real().read(channel_, &v, sizeof v);
        (void)rc;
        signalled_ = false;
    }
    return n;
}

bool Link::service() {
    std::lock_guard lock(mu_);
    if (!qp_.in_error()) {
        uint8_t buf[16384];
        // Bounded: the loop serves other links too; the rest is read at
        // the next readable event (level-triggered). And not past what the
        // QP holds unacted (a SEND waiting for a receive holds what follows
        // it): the peer's stream backs up in TCP, not in our memory.
        for (int i = 0; i < 16 && qp_.input_backlog() < kMaxBacklog; ++i) {
            ssize_t n = sys::real().recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
                qp_.on_input(buf, size_t(n));
                if (qp_.in_error()) break;
                continue;
            }
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                qp_.fail(); // the port went: EOF, reset, TCP_USER_TIMEOUT
            break;
        }
    }
    flush_locked();
    signal_locked();
    return !qp_.in_error();
}

bool Link::wants_write() const {
    std::lock_guard lock(mu_);
    return out_off_ < out_.size();
}

bool Link::in_error() const {
    std::lock_guard lock(mu_);
    return qp_.in_error();
}

void Link::flush_locked() {
    qp_.take_output(out_);
    while (out_off_ < out_.size()) {
        ssize_t n = sys::real().send(fd_, out_.data() + out_off_, out_.size() - out_off_,
                                     MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            out_off_ += size_t(n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
        qp_.fail();
        out_.clear();
        out_off_ = 0;
        break;
    }
    // What the socket took goes (a socket that takes a little at a time
    // must not leave the buffer holding everything ever sent).
    if (out_off_ > 0) {
        out_.erase(out_.begin(), out_.begin() + long(out_off_));
        out_off_ = 0;
    }
}

void Link::signal_locked() {
    Completion c[16];
    while (size_t n = qp_.poll(c, 16))
        ready_.insert(ready_.end(), c, c + n);
    if (!ready_.empty() && !signalled_ && channel_ >= 0) {
        uint64_t one = 1;
        ssize_t rc = sys::real().write(channel_, &one, sizeof one);
        (void)rc;
        signalled_ = true;
    }
}

} // namespace usmc::smcr::soft
