// SPDX-License-Identifier: MIT
#pragma once
// Blocking waits of the data path: optional bounded busy-polling, then
// poll() on the wake-up socket and the TCP connection (a dead peer closes it).
#include "engine/conn/conn.hpp"

#include <functional>

namespace usmc::wait {

// One pause of a spin loop (lets the sibling hyperthread run).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// Spins up to `us` microseconds while `ready()` is false, when spinning pays
// now (spin.hpp); otherwise looks once. True if it became ready.
bool spin(uint32_t us, const std::function<bool()>& ready);

// Sleeps until `fd` reports `events`, the TCP fd closes, or `timeout_ms`
// passes (-1: forever). Returns 0, or -ETIMEDOUT / -EINTR. Marks
// c.peer_gone when the TCP connection has ended.
int sleep(SmcConn& c, int fd, short events, int timeout_ms);

} // namespace usmc::wait
