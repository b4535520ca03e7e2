// SPDX-License-Identifier: MIT
#pragma once
// What `usmc ss -d/-D` reads about an SMC-D connection, from the outside:
// the connection's record in its process's stats segment (statseg.hpp) and
// copies of the two DMBs' control lines, read through /proc/<pid>/fd. The
// other processes' bytes are never trusted: every record and control line is
// a copy, checked for size, identity (inode) and plausible cursors before it
// is shown, and whatever fails a check shows as unknown.
#include "engine/base/statseg.hpp"
#include "engine/smcd/cdc_line.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace usmc::tools {

// The control line's words, as copied.
struct ControlWords {
    uint64_t prod = 0, cons = 0, waiting = 0;
};

// Copies the control line of the DMB `rec` names in process `pid`: the
// descriptor must still be a regular file of the recorded inode and size
// (else nullopt: the connection ended, the descriptor was reused, or we may
// not look). Never maps it: a copy is all an observer needs.
std::optional<ControlWords> read_control(pid_t pid, const statseg::ConnRecord& rec);
// The same check on bytes already read (for tests): `line` holds the first
// smcd::kControlBytes of the file.
std::optional<ControlWords> parse_control(const uint8_t* line, size_t len);

// A record from another process, checked: DMB sizes a handshake can agree
// on (16 KiB .. 1 MiB, powers of two) and a descriptor number.
bool record_plausible(const statseg::ConnRecord& rec);

// The peer's record among `all` (live records of every process with their
// pids): the one whose GID and token are our peer's, whose peer GID and
// token are ours, and whose DMB is the file we produce into.
struct Located {
    pid_t pid;
    statseg::ConnRecord rec;
};
std::optional<Located> find_peer(const statseg::ConnRecord& mine, const std::vector<Located>& all);

// One connection's details, as `usmc ss -d` shows them. Cursors live in the
// DMB they describe: rx (the peer produces into our DMB, we consume) in our
// control line and the peer's; tx likewise the other way round. The
// consumer cursors are what each side has announced (it announces after
// consuming a tenth of the ring, an empty ring, or a waiting writer), as the
// kernel's CDC cursors are.
struct Detail {
    uint32_t rcvbuf = 0;  // our DMB's ring (the peer produces into it)
    uint32_t peerbuf = 0; // the peer's DMB's ring (we produce into it)
    std::optional<core::Cursor> rx_prod, rx_cons, tx_prod, tx_cons;
    // The flags beside each consumer cursor (smcd::ProdFlags, smcd::ConnFlags):
    // rx those the peer sent, tx those we sent.
    std::optional<uint8_t> rx_flags, rx_pflags, tx_flags, tx_pflags;
    bool rx_ok = true, tx_ok = true; // cursors consistent (distance() accepts them)
};
Detail detail_of(const statseg::ConnRecord& mine, const std::optional<ControlWords>& own,
                 const std::optional<ControlWords>& peers);

// Bytes a cursor stands for, from the start of the connection.
inline uint64_t cursor_bytes(core::Cursor c, uint32_t ring) {
    return uint64_t{c.wrap} * ring + c.count;
}

// smcss's forms: "0001:0000fa00" (wrap:count), "-" when unknown.
std::string cursor_text(const std::optional<core::Cursor>& c);
// smcss's flags: "prod:conn" in hex, "-" when unknown.
std::string flags_text(const std::optional<uint8_t>& prod, const std::optional<uint8_t>& conn);
// smcss's Shutd: 'R' we will receive no more (the peer shut down writing or
// closed), 'W' we shut down writing (or closed); "<->" neither, "?" unknown.
std::string shutdown_text(const Detail& d);
// "%016llx"
std::string hex64(uint64_t v);

} // namespace usmc::tools
