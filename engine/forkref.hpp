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

} // namespace usmc::forkref
