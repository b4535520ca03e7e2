// SPDX-License-Identifier: MIT
#include "engine/readiness/wakeup.hpp"

#include "engine/base/forkref.hpp"
#include "engine/base/sys.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <sys/ioctl.h>
#include <unordered_map>
#include <vector>

#include <linux/sockios.h>

namespace usmc::wakeup {

namespace {

// One fill: more than a quarter of the smallest send buffer
// (SOCK_MIN_SNDBUF, ~4.5 KiB with its overhead), so one queued fill leaves
// `sig` unwritable.
constexpr size_t kFillBytes = 2048;
// The blocker's queue must stay longer than net.unix.max_dgram_qlen (10
// by default): a datagram a socket sends itself is not held to that limit.
constexpr int kBlockerDatagrams = 64;
constexpr int kDrainBatch = 16;
constexpr int kMaxDrainCalls = 4;
// A waker's send buffer: as large as the kernel allows (net.core.wmem_max),
// so that one holds many undrained wake-ups.
constexpr int kWakerSndbuf = 4 << 20;
// Pools nobody uses are kept for a while (short-lived connections to the
// same peer come and go); past this many the oldest go.
constexpr size_t kMaxIdlePools = 32;

Name make_name(const char* kind, uint64_t id) {
    Name n;
    n.sun.sun_family = AF_UNIX;
    // Abstract: a leading NUL, no file, gone with the socket.
    int len = std::snprintf(n.sun.sun_path + 1, sizeof n.sun.sun_path - 1, "usmc-%s-%016llx", kind,
                            static_cast<unsigned long long>(id));
    n.len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + len);
    return n;
}

const sockaddr* addr(const Name& n) {
    return reinterpret_cast<const sockaddr*>(&n.sun);
}

int new_dgram(bool strict) {
    int fd = sys::real().socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    return strict ? sys::place_high_strict(fd) : sys::place_high(fd);
}

// The blocker: made once per process, its queue filled by itself and never
// drained (a forked child shares it, and does not drain it either).
std::mutex g_blocker_mu;
int g_blocker = -1;
Name g_blocker_name; // under g_blocker_mu until g_blocker is set

bool blocker(Name* out) {
    std::lock_guard lock(g_blocker_mu);
    if (g_blocker < 0) {
        int fd = new_dgram(false);
        if (fd < 0) return false;
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        socklen_t len = sizeof a;
        // An address of the family alone: the kernel picks an abstract name.
        if (sys::real().bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(sa_family_t)) != 0 ||
            sys::real().getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
            sys::real().close(fd);
            return false;
        }
        Name n;
        n.sun = a;
        n.len = len;
        static const char b = 0;
        for (int i = 0; i < kBlockerDatagrams; ++i)
            if (sys::real().sendto(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, addr(n), n.len) != 1) {
                sys::real().close(fd);
                return false;
            }
        g_blocker_name = n;
        g_blocker = fd;
    }
    *out = g_blocker_name;
    return true;
}

} // namespace

Name sig_name(uint64_t token) {
    return make_name("s", token);
}

Name bell_name(uint64_t id) {
    return make_name("b", id);
}

int make_sig(bool blocked) {
    Name b;
    if (blocked && !blocker(&b)) return -1;
    int fd = new_dgram(true);
    if (fd < 0) {
        errno = EMFILE;
        return -1;
    }
    if (blocked && sys::real().connect(fd, addr(b), b.len) != 0) {
        sys::real().close(fd);
        return -1;
    }
    return fd;
}

bool name_sig(int sig, const Name& name) {
    return sys::real().bind(sig, addr(name), name.len) == 0;
}

void unblock(int sig) {
    sockaddr none{};
    none.sa_family = AF_UNSPEC;
    sys::real().connect(sig, &none, sizeof none);
}

bool block(int sig) {
    Name b;
    return blocker(&b) && sys::real().connect(sig, addr(b), b.len) == 0;
}

namespace {
// Enough for the connections a busy process closes in one turn of its
// event loop before it accepts or opens as many (nginx handles hundreds of
// events a turn); a spare is a descriptor in usmc's quarter, which the
// spares may take an eighth of.
constexpr size_t kMaxSpares = 1024;
size_t max_spares() {
    size_t quarter = size_t(sys::high_base()) / 3;
    return std::max<size_t>(8, std::min(kMaxSpares, quarter / 8));
}
struct Parked {
    Spare s;
    uint32_t forks; // forkref::forks_so_far() when parked
};
std::mutex g_spares_mu;
std::vector<Parked>* g_spares = nullptr; // under g_spares_mu
} // namespace

bool park(const Spare& s) {
    std::lock_guard lock(g_spares_mu);
    if (!g_spares) g_spares = new std::vector<Parked>;
    if (g_spares->size() >= max_spares()) return false;
    g_spares->push_back({s, forkref::forks_so_far()});
    return true;
}

std::optional<Spare> take_spare() {
    std::optional<Spare> got;
    {
        std::lock_guard lock(g_spares_mu);
        if (!g_spares) return std::nullopt;
        // Parked before a fork since: a child holds it too.
        while (!g_spares->empty() && g_spares->back().forks != forkref::forks_so_far()) {
            sys::real().close(g_spares->back().s.fd);
            g_spares->pop_back();
        }
        if (g_spares->empty()) return std::nullopt;
        got = g_spares->back().s;
        g_spares->pop_back();
    }
    return got;
}

void drain(int fd) {
    char bytes[kDrainBatch];
    iovec iov[kDrainBatch];
    mmsghdr msgs[kDrainBatch];
    std::memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < kDrainBatch; ++i) {
        iov[i] = {&bytes[i], 1};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    for (int i = 0; i < kMaxDrainCalls; ++i)
        if (sys::real().recvmmsg(fd, msgs, kDrainBatch, MSG_DONTWAIT, nullptr) < kDrainBatch)
            return;
}

namespace {
// The sink of `sig`: connected to it first (from then on only `sig` can
// send into it), then bound to a name the kernel picks (autobind). Not a
// name made from the token: `sig`'s name, and so the token, is public in
// /proc/net/unix, and another user who bound the sink's name first left
// `sig` unfillable (a writer whose peer stopped reading then spun). -1 if
// it cannot be made.
int make_sink(const Name& sig, Name* name) {
    int s = new_dgram(true);
    if (s < 0) return -1;
    sockaddr_un any{};
    any.sun_family = AF_UNIX;
    name->len = sizeof name->sun;
    if (sys::real().connect(s, addr(sig), sig.len) != 0 ||
        sys::real().bind(s, reinterpret_cast<const sockaddr*>(&any), sizeof(sa_family_t)) != 0 ||
        sys::real().getsockname(s, reinterpret_cast<sockaddr*>(&name->sun), &name->len) != 0 ||
        name->len <= sizeof(sa_family_t)) {
        sys::real().close(s);
        name->len = 0;
        return -1;
    }
    return s;
}
} // namespace

bool fill(int sig, uint64_t token, std::atomic<int>& sink, Name& sink_name, bool shrink) {
    int s = sink.load(std::memory_order_acquire);
    if (s == kSinkMaking) return false; // another call makes it right now
    if (s < 0) {
        if (!sink.compare_exchange_strong(s, kSinkMaking, std::memory_order_acq_rel))
            return s >= 0 && fill(sig, token, sink, sink_name, shrink);
        int made = make_sink(sig_name(token), &sink_name);
        int making = kSinkMaking;
        // (Its name is written before the sink is published.)
        if (!sink.compare_exchange_strong(making, made, std::memory_order_acq_rel)) {
            if (made >= 0) sys::real().close(made); // the connection's wake-ups closed meanwhile
            return false;
        }
        if (made < 0) return false;
    }
    if (shrink) {
        int smallest = 1; // the kernel rounds up to its minimum
        sys::real().setsockopt(sig, SOL_SOCKET, SO_SNDBUF, &smallest, sizeof smallest);
    }
    static const char zeros[kFillBytes] = {};
    return sys::real().sendto(sig, zeros, sizeof zeros, MSG_DONTWAIT | MSG_NOSIGNAL,
                              addr(sink_name), sink_name.len) == ssize_t(sizeof zeros);
}

// --- Wakers ---

struct Wakers {
    uint64_t gid = 0;
    int refs = 0;            // under g_pools_mu
    uint64_t idle_since = 0; // under g_pools_mu, while refs == 0
    std::atomic<int> fd{-1}; // the member sends go through
    std::mutex grow_mu;
    std::vector<int> members; // under grow_mu
    int sndbuf = 0;           // what the kernel gave each member
};

namespace {

std::mutex g_pools_mu;
std::unordered_map<uint64_t, Wakers*>* g_pools = nullptr; // under g_pools_mu

int new_member(Wakers* w) {
    int fd = new_dgram(false);
    if (fd < 0) return -1;
    int want = kWakerSndbuf;
    sys::real().setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
    socklen_t len = sizeof w->sndbuf;
    sys::real().getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &w->sndbuf, &len);
    w->members.push_back(fd);
    return fd;
}

// Whether `fd`'s send buffer has no room for another wake-up (rather than
// the receiver's queue being full).
bool member_full(const Wakers* w, int fd) {
    int queued = 0;
    if (sys::real().ioctl(fd, SIOCOUTQ, &queued) != 0) return true;
    return queued + 4096 > w->sndbuf;
}

// After `full` was found full: another member with room, or a new one.
bool move_on(Wakers* w, int full) {
    std::lock_guard lock(w->grow_mu);
    if (w->fd.load(std::memory_order_acquire) != full) return true; // another thread moved on
    for (int fd : w->members)
        if (fd != full && !member_full(w, fd)) {
            w->fd.store(fd, std::memory_order_release);
            return true;
        }
    int fd = new_member(w);
    if (fd < 0) return false;
    w->fd.store(fd, std::memory_order_release);
    return true;
}

void free_pool(Wakers* w) {
    for (int fd : w->members)
        sys::real().close(fd);
    delete w;
}

} // namespace

Wakers* wakers_for(uint64_t gid) {
    std::lock_guard lock(g_pools_mu);
    if (!g_pools) g_pools = new std::unordered_map<uint64_t, Wakers*>;
    auto it = g_pools->find(gid);
    if (it != g_pools->end()) {
        ++it->second->refs;
        return it->second;
    }
    auto* w = new Wakers;
    w->gid = gid;
    int fd = new_member(w);
    if (fd < 0) {
        delete w;
        return nullptr;
    }
    w->fd.store(fd, std::memory_order_release);
    w->refs = 1;
    g_pools->emplace(gid, w);
    return w;
}

Wakers* wakers_for_self() {
    static std::atomic<Wakers*> self{nullptr};
    Wakers* w = self.load(std::memory_order_acquire);
    if (w) return w;
    w = wakers_for(0); // (two threads may both ask: the pool is the same)
    self.store(w, std::memory_order_release);
    return w;
}

void release(Wakers* w) {
    if (!w) return;
    std::lock_guard lock(g_pools_mu);
    if (--w->refs > 0 || w->gid == 0) return;
    w->idle_since = sys::mono_ns();
    size_t idle = 0;
    Wakers* oldest = nullptr;
    for (auto& [gid, p] : *g_pools)
        if (p->refs == 0 && p->gid != 0) {
            ++idle;
            if (!oldest || p->idle_since < oldest->idle_since) oldest = p;
        }
    if (idle > kMaxIdlePools && oldest) {
        g_pools->erase(oldest->gid);
        free_pool(oldest);
    }
}

namespace {
void send_bytes(Wakers* w, const Name& to, const void* b, size_t n) {
    if (!w || !to.valid()) return;
    for (int attempt = 0; attempt < 3; ++attempt) {
        int fd = w->fd.load(std::memory_order_acquire);
        if (sys::real().sendto(fd, b, n, MSG_DONTWAIT | MSG_NOSIGNAL, addr(to), to.len) ==
            ssize_t(n))
            return;
        // ECONNREFUSED: nobody holds the name any more. EAGAIN: the
        // receiver's queue is full (it is readable: done), or our buffer.
        if (errno != EAGAIN || !member_full(w, fd) || !move_on(w, fd)) return;
    }
}
} // namespace

void send(Wakers* w, const Name& to) {
    static const char b = 1;
    send_bytes(w, to, &b, 1);
}

void send_token(Wakers* w, const Name& to, uint64_t token) {
    send_bytes(w, to, &token, sizeof token);
}

void after_fork_child() {
    new (&g_pools_mu) std::mutex();
    new (&g_blocker_mu) std::mutex();
    new (&g_spares_mu) std::mutex();
    // The parent's spares are the parent's: closed here, never taken.
    if (g_spares) {
        for (auto& p : *g_spares)
            sys::real().close(p.s.fd);
        g_spares->clear();
    }
    if (g_pools)
        for (auto& [gid, w] : *g_pools)
            new (&w->grow_mu) std::mutex();
}

} // namespace usmc::wakeup
