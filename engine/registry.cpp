#include "engine/registry.hpp"

#include "engine/statseg.hpp"
#include "engine/sys.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace usmc::registry {

namespace {

constexpr uint32_t kMagic = 0x55534d4c; // "USML"
constexpr uint32_t kVersion = 1;
constexpr uint64_t kPendingTtlNs = 6'000'000'000ull; // CLC_WAIT_TIME

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
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

std::optional<Found> lookup_exact(const sockaddr* addr, socklen_t len,
                                  std::span<const uint32_t> trusted_uids) {
    std::string name = entry_name(addr, len);
    if (name.empty()) return std::nullopt;
    struct stat st;
    auto* e = static_cast<Entry*>(map_file(path_of(name), O_RDONLY, 0, sizeof(Entry), false, &st));
    if (!e) return std::nullopt;
    uint32_t magic = e->magic, version = e->version;
    int32_t pid = e->pid;
    uint64_t start_time = e->start_time;
    Found f;
    f.pid = pid;
    f.gid = e->gid;
    f.flags = e->flags.load(std::memory_order_acquire);
    f.owner = st.st_uid;
    munmap(e, sizeof(Entry));
    if (magic != kMagic || version != kVersion || !trusted(st.st_uid, trusted_uids))
        return std::nullopt;
    if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM) ||
        statseg::process_start_time(pid) != start_time)
        return std::nullopt; // the listener's process is gone
    return f;
}

Pending* map_pending(const sockaddr* addr, socklen_t len, bool create) {
    std::string name = entry_name(addr, len);
    if (name.empty()) return nullptr;
    struct stat st;
    return static_cast<Pending*>(map_file(path_of(name + ".pending"),
                                          create ? O_RDWR | O_CREAT : O_RDWR, 0666, sizeof(Pending),
                                          create, &st));
}

} // namespace

uint64_t netns_id() {
    struct stat st;
    return ::stat("/proc/self/ns/net", &st) == 0 ? st.st_ino : 0;
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
    l.path_ = path_of(name);
    struct stat st;
    // A leftover of a dead listener of ours is replaced; another user's file is not ours to touch.
    unlink(l.path_.c_str());
    l.entry_ = static_cast<Entry*>(
        map_file(l.path_, O_RDWR | O_CREAT | O_EXCL, 0644, sizeof(Entry), true, &st));
    if (!l.entry_) {
        l.path_.clear();
        return l;
    }
    l.entry_->pid = getpid();
    l.entry_->start_time = statseg::process_start_time(getpid());
    l.entry_->gid = gid;
    l.entry_->flags.store(flags, std::memory_order_release);
    l.entry_->version = kVersion;
    std::atomic_thread_fence(std::memory_order_release);
    l.entry_->magic = kMagic; // last: readers ignore a half-written entry
    l.pending_ = map_pending(addr, len, true);
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
        pending_ = o.pending_;
        o.entry_ = nullptr;
        o.pending_ = nullptr;
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

uint64_t Listener::pending_connects() const {
    if (!pending_ || pending_->deadline_ns.load(std::memory_order_acquire) < now_ns()) return 0;
    return pending_->connects.load(std::memory_order_acquire);
}

bool still_listening(uint64_t inode) {
    for (const char* path : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
        FILE* f = std::fopen(path, "re");
        if (!f) continue;
        char line[512];
        bool found = false;
        while (!found && std::fgets(line, sizeof line, f)) {
            unsigned state = 0;
            unsigned long long ino = 0;
            // sl local rem st tx:rx tr:when retr uid timeout inode
            if (std::sscanf(line, "%*s %*s %*s %x %*s %*s %*s %*s %*s %llu", &state, &ino) == 2 &&
                state == 0x0A && ino == inode)
                found = true;
        }
        std::fclose(f);
        if (found) return true;
    }
    return false;
}

void Listener::socket_closed(uint64_t inode) {
    if (entry_ && !still_listening(inode)) unlink(path_.c_str());
    if (entry_) munmap(entry_, sizeof(Entry));
    if (pending_) munmap(pending_, sizeof(Pending));
    entry_ = nullptr;
    pending_ = nullptr;
    path_.clear();
}

void Listener::withdraw() {
    if (entry_) {
        if (entry_->pid == getpid())
            unlink(path_.c_str()); // a forked child does not withdraw its parent's
        munmap(entry_, sizeof(Entry));
        entry_ = nullptr;
    }
    if (pending_) {
        munmap(pending_, sizeof(Pending));
        pending_ = nullptr;
    }
    path_.clear();
}

std::optional<Found> lookup(const sockaddr* addr, socklen_t len,
                            std::span<const uint32_t> trusted_uids) {
    if (auto f = lookup_exact(addr, len, trusted_uids)) return f;
    socklen_t wlen = 0;
    sockaddr_storage w = wildcard_of(addr, len, &wlen);
    return lookup_exact(reinterpret_cast<sockaddr*>(&w), wlen, trusted_uids);
}

void announce_pending(const sockaddr* addr, socklen_t len, bool begin) {
    Pending* p = map_pending(addr, len, false);
    if (!p) {
        socklen_t wlen = 0;
        sockaddr_storage w = wildcard_of(addr, len, &wlen);
        p = map_pending(reinterpret_cast<sockaddr*>(&w), wlen, false);
    }
    if (!p) return;
    if (begin) {
        p->connects.fetch_add(1, std::memory_order_acq_rel);
        p->deadline_ns.store(now_ns() + kPendingTtlNs, std::memory_order_release);
    } else if (p->connects.load(std::memory_order_acquire) > 0) {
        p->connects.fetch_sub(1, std::memory_order_acq_rel);
    }
    munmap(p, sizeof(Pending));
}

} // namespace usmc::registry
