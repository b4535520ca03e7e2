// SPDX-License-Identifier: MIT
#pragma once
// The per-process stats segment: a file in the stats directory (default
// /dev/shm) named usmc-live.<uid>.<pid>, mapped shared. Page 0 holds the
// header and counters, the pages after it the fd table, then the connection
// records (ConnRecord). The shim creates it lazily (processes that never
// touch TCP leave no trace).
//
// Counters outlive their process: at exit the shim adds them to the user's
// usmc-retired.<uid> file (same header layout, no fd table) and removes its
// segment; `usmc stats` does the same for processes that died without
// exiting cleanly. So `usmc stats` after a wrk run still shows wrk's
// connections, as `smcd stats` would.
#include "engine/base/counters.hpp"
#include "engine/base/fallback.hpp"

#include <atomic>
#include <cstdint>
#include <string>
#include <sys/types.h>
#include <type_traits>
#include <vector>

namespace usmc::statseg {

constexpr char kMagic[8] = {'U', 'S', 'M', 'C', 'S', 'E', 'G', '1'};
// kVersion changes only with a layout older readers cannot read (they
// reject other versions). Fields added in place, where older segments hold
// zeros, raise kRevision instead: a reader uses what the segment's revision
// says it has, so old and new readers and writers get along.
constexpr uint32_t kVersion = 1;
constexpr uint32_t kRevision = 1; // 1: the device and the link-group table
constexpr size_t kHeaderBytes = 4096;
constexpr unsigned kReasonSlots = 64;

struct Header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    int32_t pid;
    uint32_t uid;
    uint64_t start_time; // /proc/<pid>/stat field 22: tells a live process from a reused pid
    char program[64];
    uint32_t fd_capacity;
    std::atomic<uint32_t> fd_high;
    std::atomic<uint32_t> retired; // 1 once the counters were added to a retired file
    std::atomic<uint64_t> counters[counters::kSlots];
    std::atomic<uint64_t> fallbacks[kReasonSlots]; // indexed by fallback::Index
    // Added in place (older segments hold zeros here): RX and TX as
    // `smcd stats` shows them, indexed by counters::Dir and counters::Traffic.
    std::atomic<uint64_t> traffic[2][counters::kTrafficSlots];
    uint32_t conn_slots; // ConnRecords after the fd table (0: none)
    // Revision 1 (older segments hold zeros from here on).
    uint32_t revision;
    uint32_t lgr_slots; // LgrRecords after the ConnRecords (0: none)
    // The process's SMC-D device, written at its set-up and as its
    // segments and link groups change (connection set-up and end, never a
    // send or receive). gid 0: no device yet. Its DMB bytes are the gauges
    // counters::dmb_bytes and dmb_spare_bytes.
    struct Device {
        std::atomic<uint64_t> gid;
        std::atomic<uint64_t> max_dmb_memory; // its cap
        std::atomic<uint64_t> segments;       // DMB segments it made
        std::atomic<uint64_t> peer_maps;      // peers' DMB files it maps
        std::atomic<uint64_t> link_groups;    // all of them, published or not
    } device;
};
static_assert(sizeof(Header) <= kHeaderBytes);
static_assert(fallback::kCount <= kReasonSlots);
static_assert(std::atomic<uint64_t>::is_always_lock_free); // shared between processes

inline std::atomic<uint64_t>* slots_of(Header* h) {
    return reinterpret_cast<std::atomic<uint64_t>*>(reinterpret_cast<char*>(h) + kHeaderBytes);
}
// One SMC-D connection as `usmc ss -d/-D` shows it: what it is made of,
// written when it becomes active and cleared when it ends, never on the data
// path. The cursors are not here: they are in the two DMBs' control lines,
// which an observer reads (a copy, through /proc/<pid>/fd/<dmb_fd>) from
// this process's DMB and from the peer process's.
//
// `gen` says whether the rest may be read: free when gen % 4 == 0, being
// written when odd, live when gen % 4 == 2 (the writer stores it through
// std::atomic_ref; the record stays trivially copyable for readers). Readers
// copy the record twice and use it only if both copies are the same and live.
struct ConnRecord {
    uint32_t gen;
    int32_t fd;                 // the descriptor it was made on
    int32_t dmb_fd;             // our DMB's descriptor in this process
    uint32_t dmb_size;          // our DMB: control line + ring (the peer produces into it)
    uint32_t peer_dmb_size;     // the peer's DMB, which we produce into
    uint32_t dmb_offset;        // where our DMB starts in its file (a slot of a segment)
    uint64_t dmb_ino;           // our DMB file's inode: the observer checks what it opened
    uint64_t peer_dmb_ino;      // the peer's DMB file's inode (its record's dmb_ino)
    uint64_t gid, peer_gid;     // ISM GIDs of the two devices
    uint64_t token, peer_token; // the DMB tokens the two sides announced in CLC
};
static_assert(sizeof(ConnRecord) == 72);
static_assert(std::is_trivially_copyable_v<ConnRecord>);
constexpr uint32_t kConnSlots = 4096;
constexpr uint32_t kMaxConnSlots = 1u << 16; // what a reader accepts

// One link group (engine/smcd/link_group.hpp) as `usmc linkgroup` shows it:
// the peer process and what the two have exchanged. Written under the same
// generation protocol as ConnRecord when the group is made, gains a
// segment, or goes. Its connections are the live ConnRecords whose
// peer_gid is this peer_gid.
struct LgrRecord {
    uint32_t gen;
    uint32_t id;             // the group's number in this process (never 0)
    int32_t peer_pid;        // as the kernel said when the first link was made (SO_PEERCRED)
    uint32_t peer_uid;       // likewise
    uint64_t peer_gid;       // the peer's device
    uint32_t their_segments; // the peer's DMB segments this process maps
    uint32_t our_segments;   // this process's segments the peer has
};
static_assert(sizeof(LgrRecord) == 32);
static_assert(std::is_trivially_copyable_v<LgrRecord>);
constexpr uint32_t kLgrSlots = 256;
constexpr uint32_t kMaxLgrSlots = 1u << 14; // what a reader accepts

constexpr bool record_live(uint32_t gen) {
    return gen % 4 == 2;
}

// Page 0 and the fd table.
inline size_t table_bytes(uint32_t capacity) {
    return kHeaderBytes + size_t{capacity} * 8;
}
inline size_t segment_bytes(uint32_t capacity) {
    return table_bytes(capacity) + size_t{kConnSlots} * sizeof(ConnRecord) +
           size_t{kLgrSlots} * sizeof(LgrRecord);
}
inline ConnRecord* records_of(Header* h) {
    return reinterpret_cast<ConnRecord*>(reinterpret_cast<char*>(h) + table_bytes(h->fd_capacity));
}
inline LgrRecord* groups_of(Header* h) {
    return reinterpret_cast<LgrRecord*>(reinterpret_cast<char*>(records_of(h)) +
                                        size_t{h->conn_slots} * sizeof(ConnRecord));
}

// Writer side of the device and the link groups (never on the data path).
// The device `gid` takes the segment's device block (a forked child's old
// device, which writes nothing once the child has its own, loses it).
void claim_device(Header* h, uint64_t gid, uint64_t max_dmb_memory);
void publish_device(Header* h, uint64_t gid, uint64_t segments, uint64_t peer_maps);
void publish_link_groups(Header* h, uint64_t gid, uint64_t count);
// Writes `rec` into slot `slot` of the link-group table, or (slot < 0) into
// a free one; returns the slot, or -1 (no segment, table full).
int publish_group(Header* h, int slot, const LgrRecord& rec);
void withdraw_group(Header* h, int slot);

// $USMC_STATS_DIR, else /dev/shm: as it was when remember_stats_dir() ran
// (the library's constructor), else as it is now (the tools).
std::string stats_dir();
void remember_stats_dir();

// Reads field 22 of /proc/<pid>/stat without allocating; 0 if unknown.
uint64_t process_start_time(pid_t pid);

// Creates and maps this process's segment. Returns nullptr (and the shim
// runs with an anonymous, invisible table) if the directory is unusable.
// `path_out` receives the file name (must hold PATH_MAX bytes).
Header* create(const char* program, uint32_t capacity, char* path_out, size_t path_len);

// A forked child, in two steps. First (the atfork child handler, system
// calls only): the parent's segment is replaced at the same address by
// private memory holding a copy of its header, with zeroed counters and the
// child's pid, so nothing the child counts reaches the parent's. No file yet,
// no fd-table mirror (the caller detaches it).
bool privatise_in_child(Header* h);
// Then, when the child is to be seen (its first socket call of its own, or
// SMC-D connections it inherits): its own file, with what it has counted so
// far, mapped at the same address; `path` receives the file's name. False
// (and the segment stays private) if no file can be made.
bool publish_in_child(Header* h, char* path, size_t path_len);
// Whether the segment counted anything (gauges aside): a child that never
// published and counted nothing has nothing to retire.
bool counted_anything(const Header* h);

// Anonymous private storage with the same layout, for when no file can be made.
Header* create_anonymous(const char* program, uint32_t capacity);

// Adds the segment's counters to this user's retired file and marks the
// segment retired (library destructor). Idempotent.
void retire(Header* h);

// Reader side, for the usmc CLI.
struct View {
    std::string path;
    const Header* header = nullptr;
    size_t bytes = 0;
    bool alive = false;   // a live process's segment
    bool totals = false;  // a retired-counters file (no process, no fd table)
    uid_t owner = 0;      // the file's owner
    uint32_t records = 0; // connection records in the copy (checked against its size)
    uint32_t groups = 0;  // link-group records in the copy (likewise; 0 before revision 1)
    const std::atomic<uint64_t>* slots() const { return slots_of(const_cast<Header*>(header)); }
    const ConnRecord* record_array() const { return records_of(const_cast<Header*>(header)); }
};

// The live records of a view, each copied twice from the file (see
// ConnRecord): those whose two copies differ, or are not live, are left out.
std::vector<ConnRecord> live_records(const View& v);
// The same for the link-group records.
std::vector<LgrRecord> live_groups(const View& v);
// The device block of a view (nullptr: none: an older segment, or no
// device yet).
const Header::Device* device_of(const View& v);
// Maps every live segment and every retired-counters file in `dir`
// read-only. Segments of processes that died without retiring are retired
// first (claimed by rename, so two readers never count one twice) when
// `clean` is set, and counted as they are otherwise.
std::vector<View> open_all(const std::string& dir, bool clean);
void close_all(std::vector<View>& views);

// Removes the retired-counters files the caller may remove (`usmc stats reset`).
int reset_retired(const std::string& dir);

// `usmc stats reset` for live processes: zeroes the counters (gauges
// aside) of every segment in `dir` the caller may write, each with an
// atomic exchange, so an increment racing with it is either zeroed or
// kept, never half of each. `skipped` receives the pids of segments it
// may not write (another user's). Returns the segments zeroed.
int zero_live(const std::string& dir, std::vector<pid_t>* skipped = nullptr);
// One segment's counters (what zero_live does to each).
void zero_counters_of(Header* h);

} // namespace usmc::statseg
