#pragma once
// The per-process stats segment: a file in the stats directory (default
// /dev/shm) named usmc-live.<uid>.<pid>, mapped shared. Page 0 holds the
// header and counters, the pages after it the fd table. The shim creates it
// lazily (processes that never touch TCP leave no trace).
//
// Counters outlive their process: at exit the shim adds them to the user's
// usmc-retired.<uid> file (same header layout, no fd table) and removes its
// segment; `usmc stats` does the same for processes that died without
// exiting cleanly. So `usmc stats` after a wrk run still shows wrk's
// connections, as `smcd stats` would.
#include "engine/counters.hpp"
#include "engine/fallback.hpp"

#include <atomic>
#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace usmc::statseg {

constexpr char kMagic[8] = {'U', 'S', 'M', 'C', 'S', 'E', 'G', '1'};
constexpr uint32_t kVersion = 1;
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
};
static_assert(sizeof(Header) <= kHeaderBytes);
static_assert(fallback::kCount <= kReasonSlots);
static_assert(std::atomic<uint64_t>::is_always_lock_free); // shared between processes

inline std::atomic<uint64_t>* slots_of(Header* h) {
    return reinterpret_cast<std::atomic<uint64_t>*>(reinterpret_cast<char*>(h) + kHeaderBytes);
}
inline size_t segment_bytes(uint32_t capacity) {
    return kHeaderBytes + size_t{capacity} * 8;
}

// $USMC_STATS_DIR, else /dev/shm.
std::string stats_dir();

// Reads field 22 of /proc/<pid>/stat without allocating; 0 if unknown.
uint64_t process_start_time(pid_t pid);

// Creates and maps this process's segment. Returns nullptr (and the shim
// runs with an anonymous, invisible table) if the directory is unusable.
// `path_out` receives the file name (must hold PATH_MAX bytes).
Header* create(const char* program, uint32_t capacity, char* path_out, size_t path_len);

// A forked child: re-create the segment under the child's pid at the same
// address with zeroed counters and an empty fd-table mirror (the caller
// rebuilds it). Uses only system calls (runs in the atfork child handler).
bool recreate_in_child(Header* h, char* path_inout, size_t path_len);

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
    bool alive = false;  // a live process's segment
    bool totals = false; // a retired-counters file (no process, no fd table)
    uid_t owner = 0;     // the file's owner
    const std::atomic<uint64_t>* slots() const { return slots_of(const_cast<Header*>(header)); }
};
// Maps every live segment and every retired-counters file in `dir`
// read-only. Segments of processes that died without retiring are retired
// first (claimed by rename, so two readers never count one twice) when
// `clean` is set, and counted as they are otherwise.
std::vector<View> open_all(const std::string& dir, bool clean);
void close_all(std::vector<View>& views);

// Removes the retired-counters files the caller may remove (`usmc stats reset`).
int reset_retired(const std::string& dir);

} // namespace usmc::statseg
