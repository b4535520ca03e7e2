// SPDX-License-Identifier: MIT
#include "engine/clc/clc_io.hpp"

#include "engine/base/sys.hpp"
#include "engine/clc/clc.hpp"

#include <algorithm>
#include <cerrno>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

namespace usmc::clc {

namespace {

// The first look at a message takes up to this much: every message usmc
// sends fits (a Proposal with its v2 extension is ~100 bytes).
constexpr size_t kPeekLen = FirstLook::kLen;

int64_t now_ms() {
    return int64_t(sys::mono_ns() / 1000000);
}

// Waits for `events`; false on timeout or error.
bool wait_for(int fd, short events, int64_t deadline) {
    while (true) {
        int left = static_cast<int>(std::max<int64_t>(0, deadline - now_ms()));
        pollfd p{fd, events, 0};
        int n = sys::real().poll(&p, 1, left);
        if (n > 0) return true;
        if (n == 0) return false;
        if (errno != EINTR) return false;
    }
}

// A peek that found the stream closed or broken: says so in `r`.
bool ended(ssize_t n, ReadResult& r) {
    if (n == 0) {
        r.status = ReadStatus::Closed;
        return true;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
        r.status = ReadStatus::Error;
        r.err = errno;
        return true;
    }
    return false;
}

// How many leading bytes of `b` agree with a CLC eyecatcher.
bool could_be_clc(const uint8_t* b, size_t n) {
    bool r = true, d = true;
    for (size_t i = 0; i < n && i < 4; ++i) {
        r = r && b[i] == kEyeR[i];
        d = d && b[i] == kEyeD[i];
    }
    return r || d;
}

} // namespace

FirstBytes classify(int fd, int timeout_ms) {
    int64_t deadline = now_ms() + timeout_ms;
    uint8_t buf[kHeaderLen];
    while (true) {
        ssize_t n = sys::real().recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) return FirstBytes::Closed;
        if (n < 0 && errno != EAGAIN && errno != EINTR) return FirstBytes::Closed;
        if (n > 0) {
            if (!could_be_clc(buf, size_t(n))) return FirstBytes::Other;
            if (n == sizeof buf) {
                auto h = parse_header(std::span<const uint8_t>(buf, sizeof buf));
                auto* hdr = std::get_if<Header>(&h);
                if (!hdr) return FirstBytes::Other;
                return hdr->type == Type::Proposal ? FirstBytes::Proposal : FirstBytes::OtherClc;
            }
            // A partial header: the rest follows in the same segment train.
            if (now_ms() >= deadline) return FirstBytes::Other;
            timespec pause{0, 100000};
            nanosleep(&pause, nullptr);
            continue;
        }
        if (!wait_for(fd, POLLIN, deadline)) return FirstBytes::Nothing;
    }
}

FirstLook first_look(int fd) {
    FirstLook look;
    look.n = sys::real().recv(fd, look.bytes, sizeof look.bytes, MSG_PEEK | MSG_DONTWAIT);
    if (look.n < 0) look.err = errno;
    return look;
}

FirstBytes classify(const FirstLook& look) {
    if (look.n == 0) return FirstBytes::Closed;
    if (look.n < 0)
        return look.err == EAGAIN || look.err == EINTR ? FirstBytes::Nothing : FirstBytes::Closed;
    if (!could_be_clc(look.bytes, size_t(look.n))) return FirstBytes::Other;
    if (look.n < ssize_t(kHeaderLen)) return FirstBytes::Other; // (classify(fd, 0) too)
    auto h = parse_header(std::span<const uint8_t>(look.bytes, kHeaderLen));
    auto* hdr = std::get_if<Header>(&h);
    if (!hdr) return FirstBytes::Other;
    return hdr->type == Type::Proposal ? FirstBytes::Proposal : FirstBytes::OtherClc;
}

std::optional<ReadResult> take_whole_message(int fd) {
    return take_whole_message(fd, first_look(fd));
}

std::optional<ReadResult> take_whole_message(int fd, const FirstLook& look) {
    const uint8_t* first = look.bytes;
    ssize_t n = look.n;
    if (n < ssize_t(kHeaderLen)) return std::nullopt;
    auto h = parse_header(std::span<const uint8_t>(first, kHeaderLen));
    if (!std::holds_alternative<Header>(h)) return std::nullopt;
    const Header& head = std::get<Header>(h);
    size_t len = head.length;
    ReadResult r;
    r.bytes.resize(len);
    if (len <= size_t(n)) {
        std::copy(first, first + len, r.bytes.begin());
    } else if (sys::real().recv(fd, r.bytes.data(), len, MSG_PEEK | MSG_DONTWAIT) != ssize_t(len)) {
        return std::nullopt; // (longer than any message usmc sends, and not all here)
    }
    // As read_message: only a whole frame, trailer included, is taken.
    if (head.type != Type::Decline &&
        !std::equal(r.bytes.end() - kTrailerLen, r.bytes.end(), r.bytes.begin()))
        return std::nullopt;
    ssize_t got = sys::real().recv(fd, r.bytes.data(), len, MSG_DONTWAIT);
    if (got != ssize_t(len)) { // cannot happen: the bytes were there
        r.status = ReadStatus::Error;
        r.err = got < 0 ? errno : EIO;
        r.bytes.clear();
        return r;
    }
    r.status = ReadStatus::Message;
    return r;
}

ReadResult read_message(int fd, int timeout_ms, bool expect_wait) {
    int64_t deadline = now_ms() + timeout_ms;
    ReadResult r;
    if (expect_wait && !wait_for(fd, POLLIN, deadline)) {
        r.status = ReadStatus::Timeout;
        return r;
    }
    // Peek until the header is complete (or clearly not CLC). One look
    // mostly sees the whole message: a CLC message is written whole.
    uint8_t first[kPeekLen];
    size_t seen = 0;
    while (true) {
        ssize_t n = sys::real().recv(fd, first, sizeof first, MSG_PEEK | MSG_DONTWAIT);
        if (ended(n, r)) return r;
        if (n > 0 && !could_be_clc(first, size_t(n))) {
            r.status = ReadStatus::NotClc;
            return r;
        }
        if (n >= ssize_t(kHeaderLen)) {
            seen = size_t(n);
            break;
        }
        if (n > 0) {
            timespec pause{0, 100000};
            nanosleep(&pause, nullptr);
            if (now_ms() >= deadline) {
                r.status = ReadStatus::Timeout;
                return r;
            }
            continue;
        }
        if (!wait_for(fd, POLLIN, deadline)) {
            r.status = ReadStatus::Timeout;
            return r;
        }
    }
    auto h = parse_header(std::span<const uint8_t>(first, kHeaderLen));
    if (!std::holds_alternative<Header>(h)) {
        r.status = ReadStatus::NotClc;
        return r;
    }
    const Header& head = std::get<Header>(h);
    size_t len = head.length;
    r.bytes.resize(len);
    // The whole message is looked at before any of it is taken: bytes that
    // only begin like CLC (a plain client's) stay in the stream untouched.
    // A CLC message is written whole, so the rest follows at once.
    if (len <= seen) {
        std::copy(first, first + len, r.bytes.begin());
    } else {
        for (int tries = 0;; ++tries) {
            ssize_t n = sys::real().recv(fd, r.bytes.data(), len, MSG_PEEK | MSG_DONTWAIT);
            if (n == static_cast<ssize_t>(len)) break;
            if (ended(n, r)) return r;
            if (now_ms() >= deadline) {
                r.status = ReadStatus::Timeout;
                return r;
            }
            timespec pause{0, tries < 20 ? 100000L : 1000000L};
            nanosleep(&pause, nullptr);
        }
    }
    // Every CLC message but the Decline (whose decoder accepts old layouts)
    // ends with the eyecatcher it starts with.
    if (head.type != Type::Decline &&
        !std::equal(r.bytes.end() - kTrailerLen, r.bytes.end(), r.bytes.begin())) {
        r.status = ReadStatus::NotClc;
        r.bytes.clear();
        return r;
    }
    ssize_t n = sys::real().recv(fd, r.bytes.data(), len, MSG_DONTWAIT);
    if (n != static_cast<ssize_t>(len)) { // cannot happen: the bytes were there
        r.status = ReadStatus::Error;
        r.err = n < 0 ? errno : EIO;
        return r;
    }
    r.status = ReadStatus::Message;
    return r;
}

bool write_message(int fd, const std::vector<uint8_t>& bytes, int timeout_ms) {
    int64_t deadline = now_ms() + timeout_ms;
    size_t off = 0;
    while (off < bytes.size()) {
        ssize_t n = sys::real().send(fd, bytes.data() + off, bytes.size() - off,
                                     MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            off += size_t(n);
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
        if (!wait_for(fd, POLLOUT, deadline)) return false;
    }
    return true;
}

void send_decline(int fd, uint64_t gid, uint32_t reason, int timeout_ms) {
    Decline d;
    for (int i = 0; i < 8; ++i)
        d.peer_id[i] = uint8_t(gid >> (56 - 8 * i));
    d.diagnosis = reason;
    write_message(fd, encode(d), timeout_ms);
}

} // namespace usmc::clc
