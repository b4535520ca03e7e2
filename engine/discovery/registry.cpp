// SPDX-License-Identifier: MIT
#include "engine/discovery/registry.hpp"

#include "engine/base/sockdiag.hpp"
#include "engine/base/statseg.hpp"
#include "engine/base/sys.hpp"
#include "engine/smcd/ism.hpp"
#include "engine/smcd/ism_endpoint.hpp"

#include <arpa/inet.h>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <vector>

namespace usmc::registry {

namespace {

constexpr uint32_t kMagic = 0x55534d4c; // "USML"
// 2: congested_until_ns; 3: Pending shared by the endpoint; 4: learned_tcp_until_ns
constexpr uint32_t kVersion = 4;
constexpr uint64_t kPendingTtlNs = 6'000'000'000ull; // CLC_WAIT_TIME
// How long the port of a client that gave up waiting for its server's answer
// stays known: its Proposal (and the Decline after it) is still on the
// stream, and the server must take them off before its application reads,
// however late it accepts. Withdrawn earlier once the server's answer came.
constexpr uint64_t kGaveUpTtlNs = 3600'000'000'000ull;

uint64_t now_ns() {
    return sys::mono_ns();
}

void* map_file(const std::string& path, int flags, mode_t mode, size_t size, bool create,
               struct stat* st) {
    int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) return nullptr;
    void* p = MAP_FAILED;
    bool ok = fstat(fd, st) == 0 && S_ISREG(st->st_mode);
    if (ok && create) {
        fchmod(fd, mode); // not subject to umask
        ok = ftruncate(fd, static_cast<off_t>(size)) == 0;
    } else if (ok) {
        ok = st->st_size == static_cast<off_t>(size);
    }
    if (ok) {
        int prot = (flags & O_ACCMODE) == O_RDONLY ? PROT_READ : PROT_READ | PROT_WRITE;
        p = mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
    }
    sys::real().close(fd);
    return p == MAP_FAILED ? nullptr : p;
}

std::string path_of(const std::string& name) {
    return statseg::stats_dir() + "/" + name;
}

// The same address with the port kept and the IP set to the wildcard.
sockaddr_storage wildcard_of(const sockaddr* addr, socklen_t len, socklen_t* out_len) {
    sockaddr_storage w{};
    std::memcpy(&w, addr, std::min<size_t>(len, sizeof w));
    if (addr->sa_family == AF_INET) {
        reinterpret_cast<sockaddr_in*>(&w)->sin_addr.s_addr = htonl(INADDR_ANY);
        *out_len = sizeof(sockaddr_in);
    } else {
        reinterpret_cast<sockaddr_in6*>(&w)->sin6_addr = in6addr_any;
        *out_len = sizeof(sockaddr_in6);
    }
    return w;
}

bool trusted(uid_t owner, std::span<const uint32_t> trusted_uids) {
    if (owner == 0 || owner == geteuid()) return true;
    for (uint32_t u : trusted_uids)
        if (u == owner) return true;
    return false;
}

// Clients look up the same few destinations over and over (wrk, a pool of
// RPC connections): their entries (and Pending memory) stay mapped here. Each use
// still asks the kernel the two questions that matter, cheaply: is this the
// same file (stat: inode), and is its process alive (a pidfd, polled)?
// A destination as raw bytes (family, port, address): lookups find their
// cached entry without building its file name.
struct AddrKey {
    std::array<uint8_t, 19> bytes{};
    uint8_t len = 0;
    bool operator==(const AddrKey&) const = default;
};

AddrKey key_of(const sockaddr* addr, socklen_t len) {
    AddrKey k;
    auto put = [&](const void* p, size_t n) {
        std::memcpy(k.bytes.data() + k.len, p, n);
        k.len = static_cast<uint8_t>(k.len + n);
    };
    if (addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
        auto* in = reinterpret_cast<const sockaddr_in*>(addr);
        put("\4", 1);
        put(&in->sin_port, 2);
        put(&in->sin_addr, 4);
    } else if (addr->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
        auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
        put("\6", 1);
        put(&in6->sin6_port, 2);
        put(&in6->sin6_addr, 16);
    }
    return k;
}

struct Cached {
    std::string path;
    AddrKey key;         // entries: the destination they answer for
    size_t dir_hash = 0; // and the stats directory they were found in
    ino_t ino = 0;
    void* map = nullptr;
    size_t size = 0;
    int pidfd = -1; // entries: the listener's process
    uid_t owner = 0;
    int32_t pid = 0;         // the process pidfd refers to
    uint64_t checked_ns = 0; // when stat last said it is the same file
    // Entries: where the publisher shares its Pending announcements, and
    // their mapping once fetched (announce_pending).
    uint64_t gid = 0, token = 0;
    Pending* pending = nullptr;
    uint64_t fetch_again_ns = 0; // a fetch failed: not before then
};
std::mutex g_cache_mu;
std::vector<Cached>* g_cache = nullptr;
constexpr size_t kCacheMax = 32;

void drop(std::vector<Cached>& cache, size_t i) {
    munmap(cache[i].map, cache[i].size);
    if (cache[i].pending) munmap(cache[i].pending, sizeof(Pending));
    if (cache[i].pidfd >= 0) sys::real().close(cache[i].pidfd);
    cache.erase(cache.begin() + static_cast<long>(i));
}

// The mapping of `path` (opened read-only or read-write), from the cache if
// it is still the same file. `fresh` says whether it was just mapped.
Cached* cached_map(const std::string& path, int flags, size_t size, bool* fresh) {
    if (!g_cache) g_cache = new std::vector<Cached>;
    auto& cache = *g_cache;
    uint64_t now = now_ns();
    struct stat st;
    bool exists = ::stat(path.c_str(), &st) == 0;
    for (size_t i = 0; i < cache.size(); ++i) {
        if (cache[i].path != path) continue;
        if (exists && cache[i].ino == st.st_ino && cache[i].owner == st.st_uid) {
            *fresh = false;
            cache[i].checked_ns = now;
            return &cache[i];
        }
        drop(cache, i);
        break;
    }
    if (!exists) return nullptr;
    void* m = map_file(path, flags, 0, size, false, &st);
    if (!m) return nullptr;
    if (cache.size() >= kCacheMax) drop(cache, 0);
    cache.push_back({path, {}, 0, st.st_ino, m, size, -1, st.st_uid, 0, now});
    *fresh = true;
    return &cache.back();
}

Pending* map_pending(int fd) {
    void* p = mmap(nullptr, sizeof(Pending), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? nullptr : static_cast<Pending*>(p);
}

// Destinations found to have no entry, remembered briefly: a client of a
// plain (non-usmc) server asks the file system at most once per kMissNs
// instead of twice per connect (exact address, then wildcard). A listener
// published meanwhile by another process is seen that much later; one
// published by this process clears it.
struct Miss {
    AddrKey key;
    size_t dir_hash; // the stats directory it was looked for in
    uint64_t until_ns;
};
std::vector<Miss>* g_misses = nullptr; // under g_cache_mu
constexpr uint64_t kMissNs = 50'000'000;
constexpr uint64_t kEntryTrustNs = 200'000'000;
constexpr size_t kMissesMax = 64;

size_t dir_hash() {
    return std::hash<std::string>{}(statseg::stats_dir());
}

bool recent_miss(const AddrKey& key, size_t dir, uint64_t now) {
    if (!g_misses) return false;
    for (auto& m : *g_misses)
        if (m.key == key && m.dir_hash == dir && now < m.until_ns) return true;
    return false;
}

void note_miss(const AddrKey& key, size_t dir, uint64_t now) {
    if (!g_misses) g_misses = new std::vector<Miss>;
    for (auto& m : *g_misses)
        if ((m.key == key && m.dir_hash == dir) || m.until_ns <= now) {
            m = {key, dir, now + kMissNs};
            return;
        }
    if (g_misses->size() < kMissesMax) g_misses->push_back({key, dir, now + kMissNs});
}

std::optional<Found> lookup_exact(const sockaddr* addr, socklen_t len,
                                  std::span<const uint32_t> trusted_uids) {
    AddrKey key = key_of(addr, len);
    if (!key.len) return std::nullopt;
    size_t dir = dir_hash();
    std::lock_guard lock(g_cache_mu);
    uint64_t now = now_ns();
    if (recent_miss(key, dir, now)) return std::nullopt;
    bool fresh = false;
    Cached* c = nullptr;
    // An entry believed and checked (stat) within kEntryTrustNs is taken as
    // it is: its publisher marks it withdrawn before removing it, and a dead
    // publisher shows on the pidfd (publisher_alive). The stat only notices a file
    // changed behind the publisher's back (an owner changed by root).
    if (g_cache)
        for (auto& k : *g_cache)
            if (k.key == key && k.dir_hash == dir && k.pidfd >= 0 &&
                now - k.checked_ns < kEntryTrustNs &&
                !static_cast<const Entry*>(k.map)->withdrawn.load(std::memory_order_acquire)) {
                c = &k;
                break;
            }
    if (!c) {
        std::string name = entry_name(addr, len);
        if (name.empty()) return std::nullopt;
        c = cached_map(path_of(name), O_RDONLY, sizeof(Entry), &fresh);
        if (!c) {
            note_miss(key, dir, now);
            return std::nullopt;
        }
        c->key = key;
        c->dir_hash = dir;
    }
    auto* e = static_cast<const Entry*>(c->map);
    if (e->withdrawn.load(std::memory_order_acquire)) { // being removed right now
        drop(*g_cache, size_t(c - g_cache->data()));
        return std::nullopt;
    }
    // A file just mapped may still be being written by its publisher: only
    // its magic (stored last) says the other fields are there to be read.
    if (fresh && e->magic.load(std::memory_order_acquire) != kMagic) {
        drop(*g_cache, size_t(c - g_cache->data()));
        return std::nullopt;
    }
    Found f;
    f.pid = e->pid;
    f.gid = e->gid;
    f.flags = e->flags.load(std::memory_order_acquire) & ~uint32_t{kCongested | kLearnedTcp};
    if ((f.flags & kLimitHs) && now < e->congested_until_ns.load(std::memory_order_acquire))
        f.flags |= kCongested;
    if (now < e->learned_tcp_until_ns.load(std::memory_order_acquire)) f.flags |= kLearnedTcp;
    f.owner = c->owner;
    if (!fresh && c->pid != e->pid) { // published again by another process: believe anew
        if (c->pidfd >= 0) sys::real().close(c->pidfd);
        if (c->pending) munmap(c->pending, sizeof(Pending));
        c->pidfd = -1;
        c->pending = nullptr;
        c->fetch_again_ns = 0;
        fresh = true;
    }
    if (fresh) {
        // Believed once per file: right magic, trusted owner, and the process
        // it names is the one that created it (pid + start time).
        bool ok = e->magic.load(std::memory_order_acquire) == kMagic && e->version == kVersion &&
                  trusted(c->owner, trusted_uids) && e->pid > 0 &&
                  (kill(e->pid, 0) == 0 || errno == EPERM) &&
                  statseg::process_start_time(e->pid) == e->start_time;
        if (ok) {
            c->pid = e->pid;
            c->gid = e->gid;
            c->token = e->pending_token;
            c->pidfd =
                sys::place_high(static_cast<int>(sys::real().syscall(SYS_pidfd_open, e->pid, 0)));
        }
        if (!ok || c->pidfd < 0) {
            drop(*g_cache, size_t(c - g_cache->data()));
            return std::nullopt;
        }
    } else if (!trusted(c->owner, trusted_uids)) {
        return std::nullopt;
    }
    return f;
}

} // namespace

void on_fork_child() {
    new (&g_cache_mu) std::mutex();
}

std::string entry_name(const sockaddr* addr, socklen_t len) {
    char ip[INET6_ADDRSTRLEN] = {};
    unsigned port = 0;
    if (addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
        auto* in = reinterpret_cast<const sockaddr_in*>(addr);
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        port = ntohs(in->sin_port);
    } else if (addr->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
        auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        port = ntohs(in6->sin6_port);
        for (char* c = ip; *c; ++c)
            if (*c == ':') *c = '_'; // keep file names plain
    } else {
        return {};
    }
    return "usmc-listen." + std::to_string(netns_id()) + "." + ip + "." + std::to_string(port);
}

Listener Listener::publish(const sockaddr* addr, socklen_t len, uint64_t gid, uint32_t flags) {
    Listener l;
    std::string name = entry_name(addr, len);
    if (name.empty()) return l;
    {
        // This process may have looked for it before: forget that it was not there.
        AddrKey key = key_of(addr, len);
        std::lock_guard lock(g_cache_mu);
        if (g_misses)
            for (auto& m : *g_misses)
                if (m.key == key) m.until_ns = 0;
    }
    l.path_ = path_of(name);
    // sin_port and sin6_port share their offset; entry_name checked the family.
    l.port_ = ntohs(reinterpret_cast<const sockaddr_in*>(addr)->sin_port);
    // One Pending memory per user that announces (kPendingUsers), all under
    // one token: the endpoint gives each user its own (ism::share), so no
    // user can zero or forge what another user's clients announced.
    l.pending_token_ = ism::random64();
    bool shared = true;
    for (auto& region : l.pending_) {
        int pfd = ism::make_sealed_memfd("usmc-pending", sizeof(Pending));
        region = pfd >= 0 ? map_pending(pfd) : nullptr;
        shared = shared && region && ism::share(l.pending_token_, pfd);
        if (pfd >= 0) sys::real().close(pfd); // the mapping and the shared copy keep it
    }
    if (!shared) {
        l.drop_pending();
        l.path_.clear();
        return l;
    }
    struct stat st;
    // A leftover of a dead listener of ours is replaced; another user's file is not ours to touch.
    unlink(l.path_.c_str());
    l.entry_ = static_cast<Entry*>(
        map_file(l.path_, O_RDWR | O_CREAT | O_EXCL, 0644, sizeof(Entry), true, &st));
    if (!l.entry_) {
        l.drop_pending();
        l.path_.clear();
        return l;
    }
    l.entry_->pid = getpid();
    l.entry_->start_time = statseg::process_start_time(getpid());
    l.entry_->gid = gid;
    l.entry_->flags.store(flags, std::memory_order_release);
    l.entry_->version = kVersion;
    l.entry_->pending_token = l.pending_token_;
    // Last: readers ignore a half-written entry.
    l.entry_->magic.store(kMagic, std::memory_order_release);
    return l;
}

Listener::Listener(Listener&& o) noexcept {
    *this = std::move(o);
}

Listener& Listener::operator=(Listener&& o) noexcept {
    if (this != &o) {
        withdraw();
        path_ = std::move(o.path_);
        entry_ = o.entry_;
        for (unsigned i = 0; i < kPendingUsers; ++i) {
            pending_[i] = o.pending_[i];
            o.pending_[i] = nullptr;
        }
        pending_token_ = o.pending_token_;
        port_ = o.port_;
        o.entry_ = nullptr;
        o.pending_token_ = 0;
        o.path_.clear();
    }
    return *this;
}

Listener::~Listener() {
    withdraw();
}

void Listener::set_flag(uint32_t flag, bool on) {
    if (!entry_) return;
    if (on)
        entry_->flags.fetch_or(flag, std::memory_order_acq_rel);
    else
        entry_->flags.fetch_and(~flag, std::memory_order_acq_rel);
}

void Listener::set_congested_until(uint64_t mono_ns) {
    if (entry_) entry_->congested_until_ns.store(mono_ns, std::memory_order_release);
}

void Listener::set_learned_tcp_until(uint64_t mono_ns) {
    // Read first: every accept publishes, and the entry's line should not
    // bounce between the processes of a pre-fork server for nothing.
    if (entry_ && entry_->learned_tcp_until_ns.load(std::memory_order_relaxed) != mono_ns)
        entry_->learned_tcp_until_ns.store(mono_ns, std::memory_order_release);
}

bool Listener::expects_port(uint16_t port) const {
    if (!port) return false;
    uint64_t now_ms = now_ns() / 1000000;
    for (const Pending* p : pending_) {
        if (!p) continue;
        for (unsigned i = 0; i < 8; ++i) {
            uint64_t v = p->ports[(port + i) % Pending::kPortSlots].load(std::memory_order_acquire);
            if ((v >> 48) == port && (v & ((1ull << 48) - 1)) > now_ms) return true;
        }
    }
    return false;
}

namespace {
// Each user's counts apart, added without wrapping: another user's forged
// ones only add to ours (a count of 2^64 - 1 in one memory must not bring
// the sum back to 0 while ours stands).
uint64_t add_up(Pending* const (&regions)[kPendingUsers], std::atomic<uint64_t> Pending::*count,
                std::memory_order order) {
    uint64_t n = 0, now = now_ns();
    for (const Pending* p : regions)
        if (p && p->deadline_ns.load(std::memory_order_acquire) >= now) {
            uint64_t v = (p->*count).load(order);
            n = v > UINT64_MAX - n ? UINT64_MAX : n + v;
        }
    return n;
}
} // namespace

uint64_t Listener::pending_connects() const {
    return add_up(pending_, &Pending::connects, std::memory_order_acquire);
}

uint64_t Listener::unported_connects() const {
    return add_up(pending_, &Pending::unported, std::memory_order_seq_cst);
}

bool still_listening(uint64_t inode, uint16_t port) {
    // Not known (no netlink here) counts as gone: an entry left behind would
    // send clients' Proposals to whatever binds the port next.
    return sockdiag::tcp_listening(inode, port).value_or(false);
}

void Listener::drop_pending() {
    if (pending_token_) ism::unshare(pending_token_);
    for (auto& p : pending_) {
        if (p) munmap(p, sizeof(Pending));
        p = nullptr;
    }
    pending_token_ = 0;
}

namespace {
// Whether process `pid` holds the socket `inode` under descriptor `fd`: a
// forked child closing the listener it inherited (every PostgreSQL backend
// does) asks its parent's descriptor of the same number, one readlink,
// before it walks every TCP socket of the namespace.
bool holds_socket(pid_t pid, int fd, uint64_t inode) {
    char path[64];
    char want[64];
    std::snprintf(path, sizeof path, "/proc/%d/fd/%d", int(pid), fd);
    int len =
        std::snprintf(want, sizeof want, "socket:[%llu]", static_cast<unsigned long long>(inode));
    char link[64];
    ssize_t n = readlink(path, link, sizeof link);
    return n == len && std::memcmp(link, want, size_t(n)) == 0;
}
} // namespace

void Listener::socket_closed(uint64_t inode, int fd) {
    bool stays =
        entry_ && ((entry_->pid != getpid() && fd >= 0 && holds_socket(entry_->pid, fd, inode)) ||
                   still_listening(inode, port_));
    if (entry_ && !stays) {
        entry_->withdrawn.store(1, std::memory_order_release);
        unlink(path_.c_str());
    }
    if (entry_) munmap(entry_, sizeof(Entry));
    // An entry that stays for other processes (pre-fork servers) keeps its
    // announcements shared: this process's endpoint serves them till it exits.
    if (stays) {
        for (auto& p : pending_) {
            if (p) munmap(p, sizeof(Pending));
            p = nullptr;
        }
        pending_token_ = 0;
    }
    drop_pending();
    entry_ = nullptr;
    path_.clear();
}

void Listener::mark_exec(bool going) {
    if (entry_ && entry_->pid == getpid())
        entry_->withdrawn.store(going ? 1 : 0, std::memory_order_release);
}

void Listener::withdraw() {
    if (entry_) {
        if (entry_->pid == getpid()) {
            entry_->withdrawn.store(1, std::memory_order_release);
            unlink(path_.c_str()); // a forked child does not withdraw its parent's
        }
        munmap(entry_, sizeof(Entry));
        entry_ = nullptr;
    }
    drop_pending();
    path_.clear();
}

std::optional<Found> lookup(const sockaddr* addr, socklen_t len,
                            std::span<const uint32_t> trusted_uids) {
    if (auto f = lookup_exact(addr, len, trusted_uids)) return f;
    socklen_t wlen = 0;
    sockaddr_storage w = wildcard_of(addr, len, &wlen);
    return lookup_exact(reinterpret_cast<sockaddr*>(&w), wlen, trusted_uids);
}

bool publisher_alive(const sockaddr* addr, socklen_t len, int32_t pid) {
    AddrKey exact = key_of(addr, len);
    socklen_t wlen = 0;
    sockaddr_storage w = wildcard_of(addr, len, &wlen);
    AddrKey wild = key_of(reinterpret_cast<sockaddr*>(&w), wlen);
    size_t dir = dir_hash();
    std::lock_guard lock(g_cache_mu);
    if (!g_cache) return false;
    for (const AddrKey* k : {&exact, &wild})
        for (auto& c : *g_cache)
            if (c.key == *k && c.dir_hash == dir && c.pidfd >= 0 && c.pid == pid) {
                // A pidfd turns readable when its process exits.
                pollfd p{c.pidfd, POLLIN, 0};
                if (sys::real().poll(&p, 1, 0) == 0) return true;
                drop(*g_cache, size_t(&c - g_cache->data()));
                return false;
            }
    return false;
}

namespace {
// Places (begin) or removes the port's slot; whether it was there to place
// or to remove.
bool announce_port(Pending* p, uint16_t port, bool begin, uint64_t ttl_ns = kPendingTtlNs) {
    uint64_t now_ms = now_ns() / 1000000;
    for (unsigned i = 0; i < 8; ++i) {
        auto& slot = p->ports[(port + i) % Pending::kPortSlots];
        uint64_t v = slot.load(std::memory_order_acquire);
        bool mine = (v >> 48) == port;
        if (!begin) {
            if (mine) return slot.compare_exchange_strong(v, 0);
            continue;
        }
        bool free = v == 0 || (v & ((1ull << 48) - 1)) <= now_ms;
        if ((free || mine) &&
            slot.compare_exchange_strong(v, uint64_t{port} << 48 | (now_ms + ttl_ns / 1000000)))
            return true;
    }
    return false;
}

void count_down(std::atomic<uint64_t>& n) {
    uint64_t v = n.load(std::memory_order_acquire);
    while (v > 0 && !n.compare_exchange_weak(v, v - 1, std::memory_order_seq_cst)) {
    }
}
} // namespace

namespace {
// The believed entry lookup() left in the cache for `addr` (the exact
// address first, then its wildcard), or nullptr. Under g_cache_mu.
Cached* believed_entry(const AddrKey& exact, const AddrKey& wild) {
    if (!g_cache) return nullptr;
    for (const AddrKey* k : {&exact, &wild})
        for (auto& c : *g_cache)
            if (c.key == *k && c.pidfd >= 0) return &c;
    return nullptr;
}

constexpr int kFetchTimeoutMs = 500;
constexpr uint64_t kFetchAgainNs = 1'000'000'000;

// The Pending memory of `addr`'s listener, fetched from its publisher's
// endpoint the first time `fetch` allows (without our lock: other lookups
// go on). Under g_cache_mu (`lock`), which it may release and take again.
Pending* pending_of(const sockaddr* addr, socklen_t len, std::unique_lock<std::mutex>& lock,
                    bool fetch) {
    AddrKey exact = key_of(addr, len);
    socklen_t wlen = 0;
    sockaddr_storage w = wildcard_of(addr, len, &wlen);
    AddrKey wild = key_of(reinterpret_cast<sockaddr*>(&w), wlen);
    Cached* c = believed_entry(exact, wild);
    if (!c || c->pending) return c ? c->pending : nullptr;
    if (!fetch || sys::mono_ns() < c->fetch_again_ns) return nullptr;
    uint64_t gid = c->gid, token = c->token;
    int32_t pid = c->pid;
    lock.unlock();
    int fd = gid ? ism::fetch_shared(gid, token, pid, sizeof(Pending), kFetchTimeoutMs) : -1;
    Pending* m = fd >= 0 ? map_pending(fd) : nullptr;
    if (fd >= 0) sys::real().close(fd);
    lock.lock();
    c = believed_entry(exact, wild);
    if (!c || c->pid != pid || c->token != token || c->pending) {
        if (m) munmap(m, sizeof(Pending)); // the entry changed meanwhile, or another thread won
        return c && c->pid == pid ? c->pending : nullptr;
    }
    c->pending = m;
    if (!m) c->fetch_again_ns = sys::mono_ns() + kFetchAgainNs;
    return m;
}
} // namespace

bool announce_gave_up(const sockaddr* addr, socklen_t len, uint16_t client_port) {
    std::unique_lock lock(g_cache_mu);
    Pending* p = pending_of(addr, len, lock, false);
    if (!p || !client_port) return false;
    // Its slot kept for long (or placed now) before the counts end as for
    // any end: a server looking meanwhile still knows the port.
    bool was_placed = false;
    for (unsigned i = 0; i < 8; ++i)
        was_placed |=
            (p->ports[(client_port + i) % Pending::kPortSlots].load() >> 48) == client_port;
    bool placed = announce_port(p, client_port, true, kGaveUpTtlNs);
    if (!was_placed) count_down(p->unported); // it never left the count
    count_down(p->connects);
    return placed;
}

bool announce_answered(const sockaddr* addr, socklen_t len, uint16_t client_port) {
    std::unique_lock lock(g_cache_mu);
    Pending* p = pending_of(addr, len, lock, false);
    return p && client_port && announce_port(p, client_port, false);
}

bool announce_pending(const sockaddr* addr, socklen_t len, bool begin, uint16_t client_port) {
    std::unique_lock lock(g_cache_mu);
    // Only the count's beginning (before connect()) fetches the memory: a
    // port or an end whose beginning found none has nothing to move (and
    // under an entry that changed since must not move another listener's
    // counts). Those run on the engine loop, which must not wait on the
    // publisher's endpoint: a stopped or hostile publisher would hold every
    // handshake of this process for the fetch's timeout.
    Pending* p = pending_of(addr, len, lock, begin && !client_port);
    if (!p) return false;
    if (client_port) {
        bool placed = announce_port(p, client_port, begin);
        // Counted already, before connect(); known by its port from now on
        // (the port first, then the count: see unported_connects).
        if (begin) {
            if (placed) count_down(p->unported);
            return true;
        }
        if (!placed) count_down(p->unported); // it never left the count
        count_down(p->connects);
        return true;
    }
    if (begin) {
        p->connects.fetch_add(1, std::memory_order_acq_rel);
        p->unported.fetch_add(1, std::memory_order_seq_cst);
        p->deadline_ns.store(now_ns() + kPendingTtlNs, std::memory_order_release);
    } else {
        count_down(p->connects);
        count_down(p->unported);
    }
    return true;
}

} // namespace usmc::registry
