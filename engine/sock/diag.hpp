// SPDX-License-Identifier: MIT
#pragma once
// What `usmc ss -d/-D` shows of this process's SMC-D connections (the
// kernel's smc_diag): one statseg::ConnRecord per active connection in the
// stats segment, written when it becomes active and cleared when it ends.
// Nothing here runs per send or recv: the cursors an observer wants are in
// the DMBs' control lines already, and it reads copies of those.
#include "engine/base/statseg.hpp"
#include "engine/conn/conn.hpp"

namespace usmc::diag {

// `c` is active on `fd`: fills a free record of `seg` (none free, or no
// segment: the connection just goes unrecorded) and remembers it in
// c.diag_slot. Idempotent.
void publish(statseg::Header* seg, SmcConn& c, int fd);
// The connection ends: its record is freed.
void withdraw(statseg::Header* seg, SmcConn& c);
// A forked child: its segment's records start empty and the parent's
// allocator lock may have been held; the caller publishes the connections
// again (their diag_slot is reset first).
void after_fork_child();

// Exposed for tests: the record `c` on `fd` is published as.
statseg::ConnRecord record_of(const SmcConn& c, int fd);

} // namespace usmc::diag
