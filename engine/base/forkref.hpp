// SPDX-License-Identifier: MIT
#pragma once
// Reference counts shared by this process and the children it forks, and by
// nobody else: how many processes hold our side of a connection (fork). They
// live in one shared anonymous mapping made by this process; a forked child
// inherits it, an exec'd program and a peer never see it. (They were in our
// DMB's control line, which the peer maps read-write: a peer that wrote the
// count made every close of ours look like one of several, and our DMBs
// were never given back.)
#include <atomic>
#include <cstdint>

namespace usmc::forkref {

using Count = std::atomic<uint64_t>;

// A count set to 1, or nullptr when the mapping cannot be made or is full.
Count* alloc();
// Gives back a count that reached 0 (in whichever process released last).
void free(Count* c);

// A count of holders (processes holding one side of a connection): the
// number in the low 32 bits, and in the high 32 a generation that changes
// each time alloc() hands the slot out again. A process that counted itself
// out before an exec that then failed counts itself back in only if the
// connection is still the one it left (the others may have closed it
// meanwhile, and the slot gone to another connection).
inline uint32_t holders(const Count& c) {
    return uint32_t(c.load(std::memory_order_acquire));
}
inline uint32_t generation(const Count& c) {
    return uint32_t(c.load(std::memory_order_acquire) >> 32);
}
inline void hold(Count& c) {
    c.fetch_add(1, std::memory_order_acq_rel);
}
// True when this was the last holder.
inline bool unhold(Count& c) {
    return uint32_t(c.fetch_sub(1, std::memory_order_acq_rel)) == 1;
}
// Forks of this process so far (fork() and glibc's own forks, counted
// before each: the child inherits the count). A descriptor made at the
// current count is held by no other process: closing it drops it from
// every epoll set, with no EPOLL_CTL_DEL.
uint32_t forks_so_far();
void note_fork();

// Counts one holder out unless it is the last (then false, unchanged).
bool leave_unless_last(Count& c);
// Counts one holder back in if the count is still of generation `gen` and
// held by someone.
bool rehold(Count& c, uint32_t gen);

} // namespace usmc::forkref
