// SPDX-License-Identifier: MIT
#include "engine/conn/wait.hpp"

#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/spin.hpp"

#include <cerrno>
#include <poll.h>
#include <time.h>

namespace usmc::wait {

using sys::mono_ns;

bool spin(uint32_t us, const std::function<bool()>& ready) {
    uint64_t budget = spin::begin(us);
    if (budget == 0) return ready();
    uint64_t until = mono_ns() + budget;
    do {
        if (ready()) {
            spin::end(true);
            return true;
        }
        for (int i = 0; i < 64; ++i)
            cpu_relax();
    } while (mono_ns() < until);
    bool hit = ready();
    spin::end(hit);
    return hit;
}

int sleep(SmcConn& c, int fd, short events, int timeout_ms) {
    pollfd p[2] = {{fd, events, 0}, {c.tcp_fd, POLLRDHUP, 0}};
    int n = sys::real().poll(p, c.tcp_fd >= 0 ? 2 : 1, timeout_ms);
    if (n < 0) return -errno;
    if (n == 0) return -ETIMEDOUT;
    if (c.tcp_fd >= 0) smc_note_tcp_end(c, p[1].revents);
    return 0;
}

} // namespace usmc::wait
