// SPDX-License-Identifier: MIT
// Epoll sets kept in user memory (user_sets.hpp).
#include "engine/sock/user_sets.hpp"

#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/peer_watch.hpp"
#include "engine/conn/space_watch.hpp"
#include "engine/conn/spin.hpp"
#include "engine/conn/wait.hpp"
#include "engine/readiness/user_epoll.hpp"
#include "engine/readiness/wakeup.hpp"
#include "engine/sock/af_smc_internal.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unordered_map>

namespace usmc::af_smc {

using namespace detail;

namespace {

// Looks in a row that find a connection idle before it is armed: a wake-up
// datagram costs both sides a system call, a look a few loads.
constexpr unsigned kColdAfter = 16;
// The kernel part of a set is asked once every this many user-memory
// reports (and always before sleeping): libvma's VMA_SELECT_POLL_OS_RATIO.
constexpr uint32_t kKernelRatio = 16;
// Tokens taken from the bell per recvmmsg, and batches per drain.
constexpr unsigned kBellBatch = 64;
constexpr unsigned kBellBatches = 8;
// A datagram socket's receive queue refuses senders that are not its peer
// once it holds more than net.unix.max_dgram_qlen datagrams (10 by
// default): a peer that took our request then cannot deliver its token
// (EAGAIN), and only a look at every armed connection finds it (taken
// means ready). A drain that finds that many queued does that look.
unsigned g_bell_queue_full = 11;
// A bell's id travels in 48 bits of a request word (SMC-D's kBellShift).
constexpr uint64_t kBellIdMask = (uint64_t{1} << 48) - 1;
// Gate lines a process's sets share out (one per set, the same in every
// segment; a set beyond them rings per connection), and the segments one set
// keeps gates in (connections in others ring per connection).
constexpr unsigned kGateLines = 64;
constexpr size_t kGatesPerSet = 16;
std::atomic<uint64_t> g_gate_lines{0};

int take_gate_line() {
    uint64_t used = g_gate_lines.load(std::memory_order_relaxed);
    while (~used) {
        int g = __builtin_ctzll(~used);
        if (g >= int(kGateLines)) return -1;
        if (g_gate_lines.compare_exchange_weak(used, used | uint64_t{1} << g)) return g;
    }
    return -1;
}
void give_gate_line(int g) {
    if (g >= 0) g_gate_lines.fetch_and(~(uint64_t{1} << g));
}

} // namespace

struct UserSet {
    int epfd = -1;
    int bell = -1;
    uint64_t bell_id = 0;
    uint64_t tag = 0; // the bell's epoll_data in the kernel part
    readiness::UserEpoll set{kColdAfter};
    // Under g_user_mu: the connections held here by their token, and
    // whether the set fell back (then it holds none and no bell).
    std::unordered_map<uint64_t, SmcConn*> by_token;
    std::atomic<bool> fallen{false};
    std::atomic<uint32_t> reports{0};
    // The kernel part's last answer had none of the application's events:
    // a wait then goes to its sleep (which reports them as well) without a
    // look at the kernel part first, and a spin starts without one.
    std::atomic<bool> kernel_quiet{false};
    // Threads between arming everything and the end of their sleep in the
    // kernel part: a registration enabled meanwhile (another thread's
    // epoll_ctl) is not armed, so its ctl rings the bell to wake one.
    std::atomic<int> sleepers{0};
    // Under g_user_mu: the set's gate line (-1: none), the segments it keeps
    // one in, and the connections gated there by (segment, slot) key.
    int gate = -1;
    std::vector<transport::Gate> gates;
    std::unordered_map<uint64_t, SmcConn*> by_slot;
};

std::atomic<UserSet*>* g_user_sets = nullptr;
std::atomic<uint32_t> g_user_set_count{0};
// One past the highest epoll descriptor that had a user-memory part.
std::atomic<uint32_t> g_user_sets_high{0};

namespace {

// Ownership (a connection's set, the sets' tokens, falling back) changes
// under this lock, taken before any connection's epoll_mu; the looks and
// reports of a set take only its UserEpoll's own lock.
std::mutex g_user_mu;

SmcConn* conn_of_source(const readiness::Source* s) {
    return static_cast<const ConnSource*>(s)->conn();
}

UserSet* set_at(int epfd) {
    return has_user_set(epfd) ? g_user_sets[epfd].load(std::memory_order_acquire) : nullptr;
}

// A new user-memory part for `epfd`, its bell in the kernel part (which also
// proves `epfd` an epoll set: the kernel's answer otherwise, in errno).
UserSet* make_set(int epfd) {
    auto* S = new UserSet;
    S->epfd = epfd;
    int fd = sys::real().socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    fd = fd < 0 ? -1 : sys::place_high(fd);
    uint64_t id = 0, tag = 0;
    if (getrandom(&id, sizeof id, 0) != sizeof id) id = sys::mono_ns();
    if (getrandom(&tag, sizeof tag, 0) != sizeof tag) tag = sys::mono_ns() * 0x9e3779b97f4a7c15ull;
    id = (id & kBellIdMask) | 1; // never 0: "no bell"
    wakeup::Name name = wakeup::bell_name(id);
    int err = 0;
    if (fd < 0 ||
        sys::real().bind(fd, reinterpret_cast<const sockaddr*>(&name.sun), name.len) != 0) {
        err = errno;
    } else {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = tag;
        if (sys::real().epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) err = errno;
    }
    if (err) {
        if (fd >= 0) sys::real().close(fd);
        delete S;
        errno = err;
        return nullptr;
    }
    S->bell = fd;
    S->bell_id = id;
    S->tag = tag;
    S->gate = take_gate_line();
    return S;
}

// Wakes a thread asleep in the set's kernel part (a datagram without a
// token): it looks again, and arms what it finds before sleeping again.
void ring_sleepers(UserSet* S) {
    if (S->sleepers.load(std::memory_order_seq_cst) > 0)
        wakeup::send_token(wakeup::wakers_for_self(), wakeup::bell_name(S->bell_id), 0);
}

// Under g_user_mu: a user-memory part for `epfd`, made and published.
UserSet* install_set(int epfd) {
    UserSet* S = make_set(epfd);
    if (!S) return nullptr;
    g_user_set_count.fetch_add(1, std::memory_order_seq_cst);
    g_user_sets[epfd].store(S, std::memory_order_seq_cst);
    // A thread of the application may be asleep in this set's kernel part
    // already (it entered before the set had a user-memory part): woken by
    // the bell, the preload sees the part and takes it from there.
    wakeup::send_token(wakeup::wakers_for_self(), wakeup::bell_name(S->bell_id), 0);
    uint32_t high = g_user_sets_high.load(std::memory_order_relaxed);
    while (high < uint32_t(epfd) + 1 &&
           !g_user_sets_high.compare_exchange_weak(high, uint32_t(epfd) + 1)) {
    }
    return S;
}

// Under g_user_mu: `c` is no longer held by its set.
void detach(SmcConn* c) {
    auto* S = static_cast<UserSet*>(c->user_set);
    if (!S) return;
    S->by_token.erase(c->token);
    if (c->user_slot) S->by_slot.erase(c->user_slot);
    c->user_slot = 0;
    c->user_set = nullptr;
    c->user_bell.store(0, std::memory_order_release);
    // (Connecting: the handshake's thread may be attaching the transport
    // now, and nothing was asked of the peer. Every caller holds both
    // locks, so the phase stands.)
    if (c->phase.load(std::memory_order_acquire) != Phase::Connecting && c->transport.attached())
        c->transport.unwant_data_bell();
}

// Under g_user_mu and c->epoll_mu: every registration of `c` in its set
// becomes a `sig` one in the kernel part, with the application's events
// and data (a disabled one-shot one stays disabled).
void demote_locked(SmcConn* c) {
    auto* S = static_cast<UserSet*>(c->user_set);
    if (!S) return;
    auto regs = S->set.registrations(&c->source);
    S->set.remove_source(&c->source);
    detach(c);
    for (auto& r : regs) {
        epoll_event ev = r.ev;
        // (A dup registered beside it: one `sig` registration per set.)
        if (kernel_ctl(c, S->epfd, EPOLL_CTL_ADD, &ev) == 0 || errno == EEXIST) continue;
        // No `sig` to be had (usmc's range full) for a connection on its
        // way to TCP (the move that no `sig` caused): its socket instead.
        // (Still connecting, with no `sig`: lost, and logged; a corner of a
        // full range and a set falling back at once.)
        if (c->phase.load(std::memory_order_acquire) == Phase::Tcp &&
            (sys::real().epoll_ctl(S->epfd, EPOLL_CTL_ADD, r.fd, &ev) == 0 || errno == EEXIST))
            continue;
        log::warn("fd {}: epoll registration lost falling back to the kernel: {}", r.fd,
                  std::strerror(errno));
    }
}

// Under g_user_mu: the set's gate lines let go of (it holds no connection).
void drop_gates(UserSet* S) {
    for (auto& g : S->gates) {
        g.own(0);
        g.wake();
    }
    S->gates.clear();
    S->by_slot.clear();
    give_gate_line(S->gate);
    S->gate = -1;
}

// Under g_user_mu: the gate line `src`'s connection is armed through (-1:
// none), its segment's gate kept (woken if the set is asleep) and the
// connection found by its slot there.
int gate_for(UserSet* S, SmcConn* c) {
    if (S->gate < 0) return -1;
    if (c->user_slot) return S->gate;
    transport::Gate g = c->transport.own_gate(unsigned(S->gate));
    if (!g) return -1;
    auto it = std::find_if(S->gates.begin(), S->gates.end(),
                           [&](const transport::Gate& h) { return h.key() == g.key(); });
    if (it == S->gates.end()) {
        // (Segments no connection holds any more first: their memory may go.)
        std::erase_if(S->gates, [](const transport::Gate& h) { return h.keep.use_count() == 1; });
        if (S->gates.size() >= kGatesPerSet) return -1;
        g.own(S->bell_id);
        if (S->sleepers.load(std::memory_order_relaxed) > 0) g.sleep();
        S->gates.push_back(g);
    }
    uint64_t key = uint64_t(reinterpret_cast<uintptr_t>(g.key())) << 6 | g.slot;
    S->by_slot[key] = c;
    c->user_slot = key;
    return S->gate;
}

// Under g_user_mu: the connections whose requests were taken since the
// last time, by their bits in the set's gates, looked at.
void take_gates(UserSet* S) {
    for (auto& g : S->gates) {
        uint64_t bits = g.take_ready();
        while (bits) {
            unsigned slot = unsigned(__builtin_ctzll(bits));
            bits &= bits - 1;
            auto it = S->by_slot.find(uint64_t(reinterpret_cast<uintptr_t>(g.key())) << 6 | slot);
            if (it != S->by_slot.end()) S->set.disarmed(&it->second->source);
        }
    }
}

// A thread of the set goes to sleep (before it arms everything): a writer
// that takes a request rings the bell, once per gate. And it woke: the
// gates quiet if no other thread of the set sleeps; if one does, they are
// set again, since the writer that woke this thread cleared them, and the
// next writer must wake that one (the kernel wakes one epoll waiter per
// wake-up; a second arrival wakes the next). What the bits name and nobody
// has reported yet wakes a sleeper too, as the kernel's ep_poll passes a
// ready list it leaves behind to the next waiter. Both under g_user_mu,
// with `sleepers`, so the last to wake is the one that quiets them.
void begin_sleep(UserSet* S) {
    std::lock_guard lock(g_user_mu);
    S->sleepers.fetch_add(1, std::memory_order_seq_cst);
    // (Segments no connection holds any more: their memory may go.)
    std::erase_if(S->gates, [](const transport::Gate& h) { return h.keep.use_count() == 1; });
    for (auto& g : S->gates)
        g.sleep();
}
void end_sleep(UserSet* S) {
    std::lock_guard lock(g_user_mu);
    bool others = S->sleepers.fetch_sub(1, std::memory_order_seq_cst) > 1;
    for (auto& g : S->gates) {
        if (others)
            g.sleep();
        else
            g.wake();
    }
    take_gates(S);
    if (others && S->set.pending()) ring_sleepers(S);
}

// Under g_user_mu: the set falls back for good.
void fall_back_locked(UserSet* S) {
    if (S->fallen.load(std::memory_order_acquire)) return;
    std::vector<SmcConn*> held;
    for (auto& [token, c] : S->by_token)
        held.push_back(c);
    for (SmcConn* c : held) {
        std::lock_guard lock(c->epoll_mu);
        demote_locked(c);
    }
    S->fallen.store(true, std::memory_order_release);
    drop_gates(S);
    if (S->bell >= 0) {
        sys::real().epoll_ctl(S->epfd, EPOLL_CTL_DEL, S->bell, nullptr);
        sys::real().close(S->bell);
        S->bell = -1;
    }
}

// Under g_user_mu: arms `src` for what its registrations wait for: data or
// the end rings the set's bell; room (if it has none now) rings this
// process's space bell, whose watch rings the set's. Then the look after
// arming.
void arm_locked(UserSet* S, const readiness::Source* src) {
    SmcConn* c = conn_of_source(src);
    uint32_t want = S->set.interest(src);
    // (Still connecting: nothing to ask of a peer yet; its handshake's end
    // rings the set.)
    const bool active = c->phase.load(std::memory_order_acquire) == Phase::Active;
    if (active && c->transport.attached()) {
        c->transport.want_data_bell(S->bell_id, gate_for(S, c));
        if ((want & EPOLLOUT) && smc_tx_unconsumed(*c) >= c->transport.tx_ring_size()) {
            c->nospace.store(true, std::memory_order_release);
            if (uint64_t bell = space_watch::bell()) {
                c->transport.name_space_bell(bell);
                space_watch::add(c);
            }
            c->transport.want_space();
        }
    }
    S->set.mark(src);
    // Found ready by that look: Hot, looked at by every collect, so the
    // request would only bring a datagram nobody needs.
    if (S->set.heat(src) != readiness::Heat::Armed && active && c->transport.attached())
        c->transport.unwant_data_bell();
}

void arm_cold(UserSet* S, bool all) {
    const readiness::Source* batch[64];
    std::lock_guard lock(g_user_mu);
    take_gates(S);
    while (true) {
        size_t n = all ? S->set.take_unarmed(batch, 64) : S->set.take_cold(batch, 64);
        for (size_t i = 0; i < n; ++i)
            arm_locked(S, batch[i]);
        if (n < 64) return;
    }
}

// The bell rang: each token names a connection of the set (a stranger's
// is dropped), which is looked at now.
void drain_bell(UserSet* S) {
    uint64_t tokens[kBellBatch];
    mmsghdr msgs[kBellBatch];
    iovec iov[kBellBatch];
    bool overflow = true;
    unsigned total = 0;
    for (unsigned b = 0; b < kBellBatches; ++b) {
        for (unsigned i = 0; i < kBellBatch; ++i) {
            tokens[i] = 0;
            iov[i] = {&tokens[i], sizeof tokens[i]};
            msgs[i] = {};
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int n = sys::real().recvmmsg(S->bell, msgs, kBellBatch, MSG_DONTWAIT, nullptr);
        if (n <= 0) {
            overflow = total >= g_bell_queue_full;
            break;
        }
        total += unsigned(n);
        {
            std::lock_guard lock(g_user_mu);
            for (int i = 0; i < n; ++i) {
                // (A longer datagram is cut to 8 bytes: the flag says so.)
                if (msgs[i].msg_len != sizeof(uint64_t) || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC))
                    continue;
                auto it = S->by_token.find(tokens[i]);
                if (it != S->by_token.end()) S->set.disarmed(&it->second->source);
            }
        }
        if (unsigned(n) < kBellBatch) {
            overflow = total >= g_bell_queue_full;
            break;
        }
    }
    if (overflow) S->set.look_at_armed();
}

// The kernel part, with `timeout_ms` (0: a look): its events for the
// application, the bell taken out (and drained).
int kernel_wait(UserSet* S, epoll_event* evs, int max, int timeout_ms, const timespec* ts,
                const sigset_t* mask) {
    int r;
    if (ts) {
        auto fn = sys::real().epoll_pwait2;
        r = fn ? fn(S->epfd, evs, max, ts, mask)
               : sys::real().epoll_pwait(S->epfd, evs, max, timeout_ms, mask);
    } else if (mask) {
        r = sys::real().epoll_pwait(S->epfd, evs, max, timeout_ms, mask);
    } else {
        r = sys::real().epoll_wait(S->epfd, evs, max, timeout_ms);
    }
    if (r == 0) S->kernel_quiet.store(true, std::memory_order_relaxed);
    if (r <= 0) return r;
    int k = 0;
    bool rang = false;
    for (int i = 0; i < r; ++i) {
        if (evs[i].data.u64 == S->tag && !rang && S->bell >= 0) {
            rang = true;
            continue;
        }
        evs[k++] = evs[i];
    }
    if (rang) drain_bell(S);
    S->kernel_quiet.store(k == 0, std::memory_order_relaxed);
    return k;
}

int64_t now_ns() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// Spins on the set's looks for up to busy_poll_us (spin.hpp decides whether
// spinning pays now): the events found (or -1 and errno), 0 if none.
// With `n` events of the user-memory part in `evs`: the kernel part's
// added where there is room, looked at every wait while it answers (a
// level-triggered descriptor there is reported beside busy connections, as
// the kernel's set reports both), once every kKernelRatio reports while it
// is quiet, and always with a signal mask (epoll_pwait delivers a signal
// the mask lets in on its way out, events or not).
int with_kernel_events(UserSet* S, epoll_event* evs, int n, int max, const sigset_t* mask) {
    if (n >= max) return n;
    bool look = mask || !S->kernel_quiet.load(std::memory_order_relaxed) ||
                S->reports.fetch_add(1, std::memory_order_relaxed) % kKernelRatio == 0;
    if (!look) return n;
    int k = kernel_wait(S, evs + n, max - n, 0, nullptr, mask);
    return k > 0 ? n + k : n;
}

// While the kernel part is quiet a spin does not look at it: the wait's
// look after the spin (before it arms for sleep) finds what came meanwhile,
// at most busy_poll_us late; while it answers, every kKernelRatio turns.
int spin_looks(UserSet* S, epoll_event* evs, int max, int64_t timeout_ns) {
    uint64_t budget = spin::begin(g_busy_poll_us);
    if (budget == 0) return 0;
    if (timeout_ns > 0) budget = std::min<uint64_t>(budget, uint64_t(timeout_ns));
    const int64_t until = now_ns() + int64_t(budget);
    for (unsigned i = 1;; ++i) {
        if (i % 4 == 1 && g_user_mu.try_lock()) {
            take_gates(S);
            g_user_mu.unlock();
        }
        int n = S->set.collect(evs, max);
        if (n > 0)
            n = with_kernel_events(S, evs, n, max, nullptr);
        else if (!S->kernel_quiet.load(std::memory_order_relaxed) && i % kKernelRatio == 1)
            n = kernel_wait(S, evs, max, 0, nullptr, nullptr);
        if (n != 0) {
            spin::end(n > 0);
            return n;
        }
        if (now_ns() >= until) break;
        for (int k = 0; k < 32; ++k)
            wait::cpu_relax();
    }
    spin::end(false);
    return 0;
}

} // namespace

void user_sets_init(uint32_t capacity) {
    if (FILE* f = fopen("/proc/sys/net/unix/max_dgram_qlen", "re")) {
        unsigned q = 0;
        if (fscanf(f, "%u", &q) == 1 && q < kBellBatch * kBellBatches) g_bell_queue_full = q + 1;
        fclose(f);
    }
    void* p = mmap(nullptr, size_t{capacity} * sizeof(void*), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) g_user_sets = static_cast<std::atomic<UserSet*>*>(p);
}

bool user_ctl(SmcConn* c, int epfd, int op, int fd, epoll_event* ev, int* rc) {
    if (!g_user_sets || static_cast<unsigned>(epfd) >= g_conns_capacity) return false;
    std::lock_guard user_lock(g_user_mu);
    std::lock_guard lock(c->epoll_mu);
    // Connecting too: a set holds it from the start, and needs no `sig` for
    // it (its handshake's end rings the set: user_connect_ended_locked).
    const Phase phase = c->phase.load(std::memory_order_acquire);
    if (phase == Phase::Tcp) return false;
    const bool connecting = phase == Phase::Connecting;
    UserSet* S = set_at(epfd);
    if (S && S->fallen.load(std::memory_order_acquire)) return false;
    if (c->user_set && c->user_set != S) return false; // held in user memory elsewhere
    if (!c->user_set) {
        // Only an add (or a modify that takes over a `sig` registration)
        // brings a connection into user memory; never one another process
        // holds too (its requests would name two bells).
        if (op == EPOLL_CTL_DEL || c->shared_by_fork() || (!connecting && !c->transport.attached()))
            return false;
        // (A `sig` registration made while connecting stays the kernel's.)
        if (connecting && std::any_of(c->connecting_regs.begin(), c->connecting_regs.end(),
                                      [&](const SmcConn::EpollReg& r) { return r.epfd == epfd; }))
            return false;
        auto it = std::find_if(c->epoll_members.begin(), c->epoll_members.end(),
                               [&](const SmcConn::EpollMember& m) { return m.epfd == epfd; });
        if (it != c->epoll_members.end()) {
            // A `sig` registration here already (made while connecting, or
            // parked by a delete): a modify of a live one, or an add of a
            // parked one, takes it into user memory; anything else is the
            // kernel's to answer (EEXIST, ENOENT).
            if ((op == EPOLL_CTL_MOD) == it->parked) return false;
            if (!ev) return false;
        } else if (op != EPOLL_CTL_ADD) {
            return false;
        }
        if (!S) {
            S = install_set(epfd);
            if (!S) return false; // not an epoll set (the kernel's answer), or no bell: `sig`
        }
        if (it != c->epoll_members.end()) {
            sys::real().epoll_ctl(epfd, EPOLL_CTL_DEL, c->sig, nullptr);
            if (!it->parked) note_epoll_member(epfd, -1);
            c->epoll_members.erase(it);
            op = EPOLL_CTL_ADD;
        }
        int r = S->set.ctl(op, fd, &c->source, ev);
        if (r < 0) {
            *rc = fail(-r);
            return true;
        }
        c->user_set = S;
        c->user_bell.store(S->bell_id, std::memory_order_release);
        S->by_token[c->token] = c;
        ring_sleepers(S);
        // The `sig` path's own arming on reads is for kernel registrations.
        if (c->epoll_members.empty()) c->epoll_watched.store(false, std::memory_order_relaxed);
        // Its TCP end rings the bell (once per connection; a connecting
        // one's from the handshake's end).
        if (!connecting) peer_watch::add(c);
        *rc = 0;
        return true;
    }
    int r = S->set.ctl(op, fd, &c->source, ev);
    if (r < 0) {
        *rc = fail(-r);
        return true;
    }
    if (op == EPOLL_CTL_DEL && S->set.registrations(&c->source).empty()) detach(c);
    if (op != EPOLL_CTL_DEL) ring_sleepers(S);
    *rc = 0;
    return true;
}

bool user_wait(int epfd, epoll_event* evs, int max, int64_t timeout_ns, const sigset_t* mask,
               bool pwait2, int* rc) {
    UserSet* S = set_at(epfd);
    if (!S || S->fallen.load(std::memory_order_acquire)) return false;
    if (max <= 0 || max > readiness::kMaxEvents) {
        *rc = fail(EINVAL);
        return true;
    }
    const int64_t deadline = timeout_ns > 0 ? now_ns() + timeout_ns : 0;
    for (unsigned round = 0;; ++round) {
        if (S->fallen.load(std::memory_order_acquire)) return false;
        arm_cold(S, false);
        // Busy polling (busy_poll_us): the looks, at user memory and now and
        // then at the kernel part, are the spin; it ends in the sleep below.
        if (g_busy_poll_us > 0 && round == 0 && timeout_ns != 0 && !mask) {
            if (int got = spin_looks(S, evs, max, timeout_ns)) {
                *rc = got;
                return true;
            }
        }
        int n = S->set.collect(evs, max);
        if (n > 0) {
            *rc = with_kernel_events(S, evs, n, max, mask);
            return true;
        }
        // A look at the kernel part (and the bell) before arming for sleep,
        // even when it was quiet: without it a wait arms every connection
        // for a bell that has already rung (docs/bench-history.md).
        {
            int k = kernel_wait(S, evs, max, 0, nullptr, nullptr);
            if (k != 0) {
                *rc = k;
                return true;
            }
            if (S->set.pending()) continue; // the bell named some
            if (timeout_ns == 0) {
                *rc = 0;
                return true;
            }
        }
        // Before sleeping: every connection armed, then looked at once more
        // (with what the gates say writers took while we were awake).
        begin_sleep(S);
        struct Awake {
            UserSet* S;
            ~Awake() { end_sleep(S); }
        } awake{S};
        arm_cold(S, true);
        n = S->set.collect(evs, max);
        if (n > 0) {
            *rc = n;
            return true;
        }
        int left_ms = -1;
        timespec left_ts{};
        if (timeout_ns > 0) {
            int64_t left = deadline - now_ns();
            if (left <= 0) {
                *rc = 0;
                return true;
            }
            left_ms = int(std::min<int64_t>((left + 999999) / 1000000, INT32_MAX));
            left_ts = {time_t(left / 1000000000), long(left % 1000000000)};
        }
        int k =
            kernel_wait(S, evs, max, left_ms, pwait2 && timeout_ns > 0 ? &left_ts : nullptr, mask);
        if (k != 0) {
            *rc = k; // events, or -1 (EINTR: a signal the mask let in)
            return true;
        }
        // Woken by the bell (its connections looked at now) or for nothing:
        // the looks again, for what is left of the timeout.
        if (timeout_ns > 0 && now_ns() >= deadline) {
            *rc = S->set.collect(evs, max);
            return true;
        }
    }
}

void user_set_prepare(int epfd) {
    if (!g_user_sets || static_cast<unsigned>(epfd) >= g_conns_capacity || has_user_set(epfd))
        return;
    int saved = errno;
    std::lock_guard user_lock(g_user_mu);
    if (!has_user_set(epfd)) install_set(epfd);
    errno = saved;
}

void user_leave(SmcConn* c) {
    if (!g_user_sets) return;
    std::lock_guard user_lock(g_user_mu);
    std::lock_guard lock(c->epoll_mu);
    auto* S = static_cast<UserSet*>(c->user_set);
    if (!S) return;
    S->set.remove_source(&c->source);
    detach(c);
}

std::mutex& user_sets_mutex() {
    return g_user_mu;
}

void user_connect_ended_locked(SmcConn* c) {
    auto* S = static_cast<UserSet*>(c->user_set);
    if (!S) return;
    // Gone TCP: its registrations are the kernel's, on the socket, with the
    // application's events and data (none has reported: it never was ready).
    auto regs = S->set.registrations(&c->source);
    S->set.remove_source(&c->source);
    S->by_token.erase(c->token);
    if (c->user_slot) S->by_slot.erase(c->user_slot);
    c->user_slot = 0;
    c->user_set = nullptr;
    c->user_bell.store(0, std::memory_order_release);
    for (auto& r : regs) {
        epoll_event ev = r.ev;
        // (Each under its own descriptor: a dup registered beside it; one
        // closed meanwhile, or naming another socket now, goes under the
        // connection's own.)
        int fd = conn_of(r.fd) == c ? r.fd : c->tcp_fd;
        if (sys::real().epoll_ctl(S->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST)
            log::warn("fd {}: epoll registration lost falling back to TCP: {}", r.fd,
                      std::strerror(errno));
    }
}

void user_move_out(SmcConn* c) {
    if (!g_user_sets) return;
    std::lock_guard user_lock(g_user_mu);
    std::lock_guard lock(c->epoll_mu);
    demote_locked(c);
}

void user_set_fallback(int epfd) {
    UserSet* S = set_at(epfd);
    if (!S || S->fallen.load(std::memory_order_acquire)) return;
    std::lock_guard user_lock(g_user_mu);
    fall_back_locked(S);
}

void user_set_closed(int epfd) {
    UserSet* S = set_at(epfd);
    if (!S) return;
    std::lock_guard user_lock(g_user_mu);
    std::vector<SmcConn*> held;
    for (auto& [token, c] : S->by_token)
        held.push_back(c);
    for (SmcConn* c : held) {
        std::lock_guard lock(c->epoll_mu);
        S->set.remove_source(&c->source);
        detach(c);
    }
    drop_gates(S);
    if (S->bell >= 0) sys::real().close(S->bell);
    S->bell = -1;
    S->fallen.store(true, std::memory_order_release);
    g_user_sets[epfd].store(nullptr, std::memory_order_release);
    // (Not freed: a thread of the application may still be inside a wait on
    // the number it closed; it finds the set fallen and asks the kernel.)
}

void user_sets_before_fork() {
    if (!g_user_sets || g_user_set_count.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard user_lock(g_user_mu);
    for (uint32_t fd = 0; fd < g_user_sets_high.load(std::memory_order_relaxed); ++fd)
        if (UserSet* S = g_user_sets[fd].load(std::memory_order_acquire)) fall_back_locked(S);
}

void user_sets_after_fork_child() {
    // (A thread of the parent's — the application's, the loop's finishing
    // a connect — may have held it at the fork.)
    new (&g_user_mu) std::mutex();
}

void user_sets_before_exec() {
    if (!g_user_sets || g_user_set_count.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard user_lock(g_user_mu);
    for (uint32_t fd = 0; fd < g_user_sets_high.load(std::memory_order_relaxed); ++fd) {
        UserSet* S = g_user_sets[fd].load(std::memory_order_acquire);
        if (!S || S->fallen.load()) continue;
        int flags = sys::real().fcntl(int(fd), F_GETFD, nullptr);
        if (flags >= 0 && !(flags & FD_CLOEXEC)) fall_back_locked(S);
    }
}

int epoll_kernel_returned(int epfd, epoll_event* evs, int n) {
    UserSet* S = set_at(epfd);
    if (!S || n <= 0) return n;
    int k = 0;
    for (int i = 0; i < n; ++i)
        if (evs[i].data.u64 != S->tag) evs[k++] = evs[i];
    return k;
}

bool epoll_in_user_memory(int epfd) {
    // (A program whose sets never held an SMC-D connection reads one word.)
    return g_user_set_count.load(std::memory_order_relaxed) != 0 && has_user_set(epfd);
}

bool epoll_wait_user(int epfd, epoll_event* evs, int max, int64_t timeout_ns, const sigset_t* mask,
                     bool pwait2, int* rc) {
    return user_wait(epfd, evs, max, timeout_ns, mask, pwait2, rc);
}

void epoll_set_watched(int epfd) {
    if (has_user_set(epfd)) user_set_fallback(epfd);
}

bool any_user_set() {
    return g_user_set_count.load(std::memory_order_relaxed) != 0;
}

} // namespace usmc::af_smc
