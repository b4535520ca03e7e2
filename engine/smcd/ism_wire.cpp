// SPDX-License-Identifier: MIT
#include "engine/smcd/ism_wire.hpp"

#include <algorithm>
#include <cstring>

namespace usmc::ism::wire {

Received inspect(const msghdr& msg, ssize_t n, size_t len, int nfds) {
    Received r;
    msghdr m = msg; // (CMSG_NXTHDR takes a mutable msghdr)
    const auto* end = static_cast<const uint8_t*>(m.msg_control) + m.msg_controllen;
    for (cmsghdr* c = n >= 0 ? CMSG_FIRSTHDR(&m) : nullptr; c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        // The descriptors the header claims, but only those inside the
        // buffer: a cmsg_len past its end must not make us read beyond it.
        const uint8_t* data = CMSG_DATA(c);
        size_t claimed = c->cmsg_len > CMSG_LEN(0) ? c->cmsg_len - CMSG_LEN(0) : 0;
        size_t room = data < end ? static_cast<size_t>(end - data) : 0;
        size_t k = std::min(claimed, room) / sizeof(int);
        for (size_t i = 0; i < k && r.count < kMaxFds; ++i)
            std::memcpy(&r.fds[r.count++], data + i * sizeof(int), sizeof(int));
    }
    r.well_formed = n == static_cast<ssize_t>(len) && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
                    (r.count == nfds || r.count == 0);
    return r;
}

} // namespace usmc::ism::wire
