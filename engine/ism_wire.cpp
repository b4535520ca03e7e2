#include "engine/ism_wire.hpp"

#include <cstring>

namespace usmc::ism::wire {

Received inspect(const msghdr& msg, ssize_t n, size_t len) {
    Received r;
    msghdr m = msg; // (CMSG_NXTHDR takes a mutable msghdr)
    for (cmsghdr* c = n >= 0 ? CMSG_FIRSTHDR(&m) : nullptr; c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int k = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k && r.count < kMaxFds; ++i)
            std::memcpy(&r.fds[r.count++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    r.well_formed = n == static_cast<ssize_t>(len) && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
                    (r.count == kFdCount || r.count == 0);
    return r;
}

} // namespace usmc::ism::wire
