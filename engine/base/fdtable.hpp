// SPDX-License-Identifier: MIT
#pragma once
// The fd table: one 64-bit word per descriptor, indexed by fd. A word packs
// everything the shim knows about a TCP socket. Lookups are one relaxed
// atomic load; no locks, no allocation, safe in signal handlers and after
// fork.
//
// The table itself is private anonymous memory, so fork() hands the child an
// exact copy-on-write snapshot taken at the instant of the fork. Every change
// is also written to a mirror in the stats segment, which `usmc ss` reads.
// (A shared table alone would let the parent's later close() leak into a
// child that has not yet re-created its segment.)
#include <atomic>
#include <cstdint>

namespace usmc {

enum class SockKind : uint8_t { None = 0, Stream = 1 }; // 4 bits in the word
enum class SockRole : uint8_t { None = 0, Client = 1, Server = 2, Listener = 3 };
enum class SockMode : uint8_t { Tcp = 0, SmcD = 1, SmcR = 2 };

enum SockFlags : uint8_t {
    kFlagLimitHs = 1,      // SMC_LIMIT_HS is on for this socket
    kFlagAfSmc = 2,        // created as socket(AF_SMC, ...)
    kFlagAllowD = 4,       // policy allows SMC-D
    kFlagAllowR = 8,       // policy allows SMC-R
    kFlagDecided = 16,     // policy has been evaluated (listen/connect/accept)
    kFlagIpprotoSmc = 32,  // created as socket(AF_INET[6], SOCK_STREAM, IPPROTO_SMC)
    kFlagLimitHsSet = 64,  // SMC_LIMIT_HS set explicitly (a listener then stops following the knob)
    kFlagEpollEarly = 128, // put in an epoll set before connect() (stays TCP: EPOLLEARLY)
};

// Hints: what the shim last saw set, not what the kernel says. The file
// status flags are shared with dups, children and any process the socket
// was passed to, which may change them behind our back; a hint may only
// pick between two answers that are both correct (a bypass to TCP or an
// SMC attempt; whether accept() asks the kernel for O_NONBLOCK where a
// blocking and a nonblocking listener act alike), never decide what a call
// does.
enum SockHints : uint8_t {
    kHintNonblock = 1, // O_NONBLOCK as set through socket(), fcntl() or ioctl(FIONBIO)
};

struct SockInfo {
    SockKind kind = SockKind::None;
    uint8_t hints = 0;  // SockHints, 4 bits in the word
    uint8_t family = 0; // AF_INET / AF_INET6
    SockRole role = SockRole::None;
    SockMode mode = SockMode::Tcp;
    uint8_t flags = 0;
    uint32_t reason = 0; // fallback reason code when mode is Tcp and SMC was allowed or refused

    bool tracked() const { return kind != SockKind::None; }
    bool has(SockFlags f) const { return flags & f; }
    uint64_t pack() const;
    static SockInfo unpack(uint64_t word);
};

const char* role_name(SockRole role);
const char* mode_name(SockMode mode);

class FdTable {
  public:
    // Hands the table its storage (once, at runtime init). `mirror` and
    // `mirror_high` may be null (no stats segment).
    void attach(std::atomic<uint64_t>* slots, uint32_t capacity, std::atomic<uint64_t>* mirror,
                std::atomic<uint32_t>* mirror_high);
    // A forked child's new stats segment: the mirror moves there and is
    // rebuilt from the (exact) private table.
    void remirror(std::atomic<uint64_t>* mirror, std::atomic<uint32_t>* mirror_high);

    SockInfo get(int fd) const {
        auto* slots = slots_.load(std::memory_order_acquire);
        if (!slots || static_cast<unsigned>(fd) >= capacity_) return {};
        return SockInfo::unpack(slots[fd].load(std::memory_order_relaxed));
    }
    // False when fd is outside the table (the socket then stays untracked).
    bool set(int fd, const SockInfo& info);
    void clear(int fd);
    // Sets or clears hint bits of a tracked fd without losing a concurrent
    // set() of the rest of its word.
    void set_hint(int fd, uint8_t hint, bool on);
    // dup/dup2/dup3/F_DUPFD: `to` now names the same socket as `from`.
    void copy(int from, int to);
    // close_range: forget [first, last].
    void clear_range(unsigned first, unsigned last);

    uint32_t capacity() const { return capacity_; }
    uint32_t high() const { return high_.load(std::memory_order_relaxed); }

  private:
    void store(int fd, uint64_t word);

    std::atomic<std::atomic<uint64_t>*> slots_{nullptr};
    uint32_t capacity_ = 0;
    std::atomic<uint32_t> high_{0}; // one past the highest fd ever set
    std::atomic<uint64_t>* mirror_ = nullptr;
    std::atomic<uint32_t>* mirror_high_ = nullptr;
};

extern FdTable g_fds;

} // namespace usmc
