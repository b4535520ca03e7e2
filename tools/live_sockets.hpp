// SPDX-License-Identifier: MIT
#pragma once
// The sockets the live processes' stats segments show: every tracked slot
// of their descriptor tables, read without trusting the segment's sizes
// (fd_high is bounded by fd_capacity, which the mapping was checked for).
#include "engine/base/fdtable.hpp"
#include "engine/base/statseg.hpp"

#include <atomic>
#include <cstdint>
#include <sys/types.h>
#include <vector>

namespace usmc::tools {

// Calls fn(view, pid, fd, info) for each tracked descriptor of each live
// process in `views`, in process then descriptor order.
template <class Fn>
void for_each_live_socket(const std::vector<statseg::View>& views, Fn&& fn) {
    for (const auto& v : views) {
        if (!v.alive) continue;
        pid_t pid = v.header->pid;
        uint32_t high = v.header->fd_high.load(std::memory_order_relaxed);
        if (high > v.header->fd_capacity) high = v.header->fd_capacity;
        for (uint32_t fd = 0; fd < high; ++fd) {
            SockInfo s = SockInfo::unpack(v.slots()[fd].load(std::memory_order_relaxed));
            if (s.tracked()) fn(v, pid, static_cast<int>(fd), s);
        }
    }
}

} // namespace usmc::tools
