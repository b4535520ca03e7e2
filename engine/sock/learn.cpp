// SPDX-License-Identifier: MIT
#include "engine/sock/learn.hpp"

#include "engine/base/count.hpp"
#include "engine/base/counters.hpp"
#include "engine/base/forkref.hpp"
#include "engine/base/sys.hpp"
#include "engine/sock/runtime.hpp"

#include <cstring>
#include <netinet/in.h>
#include <sys/mman.h>

namespace usmc::learn {

namespace {

constexpr uint64_t kGenMask = 0xffffffffull;
constexpr uint64_t kCountMask = 0xffff;
// Slots looked at from a key's hash: a claim or an eviction stays near it.
constexpr uint32_t kNear = 8;
// In the shared learn word of a connection, beside its ticket.
constexpr uint64_t kPaid = uint64_t{1} << 63;
constexpr uint64_t kDestination = uint64_t{1} << 62; // the ticket is a destination's
constexpr uint64_t kTicketMask = ~(kPaid | kDestination);

uint64_t mix(uint64_t x) { // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint32_t gen_of(uint64_t counts) {
    return uint32_t(counts >> 32);
}

} // namespace

Slot* Table::slot_of(Ticket t) const {
    uint64_t i = (t & kTicketMask) >> 32;
    return i >= 1 && i <= n_ ? &slots_[i - 1] : nullptr;
}

namespace {
Ticket ticket_of(Slot* s, Slot* base) {
    return uint64_t(s - base + 1) << 32 | gen_of(s->counts.load(std::memory_order_acquire));
}

// A slot given to a new key: a new generation, nothing learned.
void reset(Slot* s, uint64_t now_ns) {
    uint64_t gen = (gen_of(s->counts.load(std::memory_order_acquire)) + 1) & kGenMask;
    s->counts.store(gen << 32, std::memory_order_release);
    s->tcp_until_ns.store(0, std::memory_order_relaxed);
    s->held.store(0, std::memory_order_relaxed);
    s->used_ns.store(now_ns, std::memory_order_relaxed);
}
} // namespace

Ticket Table::ticket(uint64_t key, uint64_t now_ns) {
    if (!key || !n_) return 0;
    uint32_t h = uint32_t(mix(key) % n_);
    Slot* oldest = nullptr;
    for (uint32_t i = 0; i < kNear && i < n_; ++i) {
        Slot* s = &slots_[(h + i) % n_];
        uint64_t k = s->key.load(std::memory_order_acquire);
        if (k == 0 && s->key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
            reset(s, now_ns);
            return ticket_of(s, slots_);
        }
        if (k == key) {
            s->used_ns.store(now_ns, std::memory_order_relaxed);
            return ticket_of(s, slots_);
        }
        if (!oldest || s->used_ns.load(std::memory_order_relaxed) <
                           oldest->used_ns.load(std::memory_order_relaxed))
            oldest = s;
    }
    uint64_t k = oldest->key.load(std::memory_order_acquire);
    if (k != key && oldest->key.compare_exchange_strong(k, key, std::memory_order_acq_rel))
        reset(oldest, now_ns);
    return ticket_of(oldest, slots_);
}

void Table::report(Ticket t, bool paid, uint64_t now_ns) {
    Slot* s = slot_of(t);
    if (!s) return;
    uint32_t gen = uint32_t(t);
    // A connection that paid while the learner says TCP (a probe, most
    // likely): the workload may have changed. The hold ends and a new window
    // starts from this report: the older ones describe the connections
    // that made it TCP, and halved they would outvote the new ones (two
    // paying connections after a probe would make it TCP again). If nothing
    // changed, one window of SMC-D connections sets TCP again.
    bool restart = paid && s->tcp_until_ns.load(std::memory_order_acquire) > now_ns;
    uint64_t cur = s->counts.load(std::memory_order_acquire);
    uint64_t next = 0;
    bool decided = false, tcp = false;
    do {
        if (gen_of(cur) != gen) return; // the slot went to another key meanwhile
        if (restart) {
            next = uint64_t{gen} << 32 | 1;
            continue;
        }
        uint32_t p = uint32_t(cur & kCountMask), u = uint32_t((cur >> 16) & kCountMask);
        if (paid)
            ++p;
        else
            ++u;
        decided = p + u >= kWindow;
        if (decided) {
            tcp = p * kPaidShare < p + u;
            p /= 2; // decay: the next window counts this one half
            u /= 2;
        }
        next = uint64_t{gen} << 32 | uint64_t{u} << 16 | p;
    } while (!s->counts.compare_exchange_weak(cur, next, std::memory_order_acq_rel));
    if (decided || restart) {
        s->tcp_until_ns.store(decided && tcp ? now_ns + hold_ns_ : 0, std::memory_order_release);
    } else if (!paid) {
        // A connection that did not pay while the hold lasts (a probe): the
        // hold goes on from now. Renewed only per window, a slow stream of
        // connections (one whose window of reports, a probe every
        // kProbeEvery-th connect, takes longer than the hold) ran a window
        // of SMC-D connections at every expiry.
        uint64_t until = s->tcp_until_ns.load(std::memory_order_acquire);
        if (until > now_ns)
            s->tcp_until_ns.compare_exchange_strong(until, now_ns + hold_ns_,
                                                    std::memory_order_acq_rel);
    }
}

uint64_t Table::tcp_until(Ticket t) const {
    Slot* s = slot_of(t);
    if (!s || gen_of(s->counts.load(std::memory_order_acquire)) != uint32_t(t)) return 0;
    return s->tcp_until_ns.load(std::memory_order_acquire);
}

bool Table::probe(Ticket t, uint64_t now_ns) {
    Slot* s = slot_of(t);
    if (!s || gen_of(s->counts.load(std::memory_order_acquire)) != uint32_t(t)) return false;
    uint64_t n = s->held.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n < kProbeEvery) return false;
    uint64_t last = s->probed_ns.load(std::memory_order_relaxed);
    if (last && now_ns - last < probe_gap_ns_) return false;
    // One winner among the processes and threads connecting now.
    if (!s->probed_ns.compare_exchange_strong(last, now_ns, std::memory_order_relaxed))
        return false;
    s->held.store(0, std::memory_order_relaxed);
    return true;
}

bool Table::counts(Ticket t, uint32_t* paid, uint32_t* unpaid) const {
    Slot* s = slot_of(t);
    if (!s) return false;
    uint64_t c = s->counts.load(std::memory_order_acquire);
    if (gen_of(c) != uint32_t(t)) return false;
    *paid = uint32_t(c & kCountMask);
    *unpaid = uint32_t((c >> 16) & kCountMask);
    return true;
}

namespace {

constexpr uint32_t kListenerSlots = 64;
constexpr uint32_t kDestinationSlots = 256;

struct Region {
    Slot listeners[kListenerSlots];
    Slot destinations[kDestinationSlots];
};

std::atomic<Region*> g_region{nullptr};

// Made at first need (a listen or a connect that may learn), before the
// forks that should share it: a pre-fork server listens first.
Region* region() {
    Region* r = g_region.load(std::memory_order_acquire);
    if (r) return r;
    void* m =
        mmap(nullptr, sizeof(Region), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    auto* fresh = static_cast<Region*>(m); // zero pages: every slot free
    if (!g_region.compare_exchange_strong(r, fresh, std::memory_order_acq_rel)) {
        munmap(m, sizeof(Region));
        return r;
    }
    return fresh;
}

uint64_t hold_ns() {
    uint32_t ms = runtime::get().cfg.testonly_learn_hold_ms;
    return ms ? uint64_t{ms} * 1'000'000 : kHoldNs;
}

uint64_t probe_gap_ns() {
    uint32_t ms = runtime::get().cfg.testonly_learn_probe_gap_ms;
    return ms ? uint64_t{ms} * 1'000'000 : kProbeGapNs;
}

Table listeners(Region* r) {
    return Table(r->listeners, kListenerSlots, hold_ns(), probe_gap_ns());
}
Table destinations(Region* r) {
    return Table(r->destinations, kDestinationSlots, hold_ns(), probe_gap_ns());
}

// Family, port and address folded into a key (never 0).
uint64_t key_of(const sockaddr* addr, socklen_t len) {
    if (addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
        auto* in = reinterpret_cast<const sockaddr_in*>(addr);
        return uint64_t{4} << 56 | uint64_t{in->sin_port} << 32 | in->sin_addr.s_addr;
    }
    if (addr->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
        auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
        uint64_t a = 0, b = 0;
        std::memcpy(&a, in6->sin6_addr.s6_addr, 8);
        std::memcpy(&b, in6->sin6_addr.s6_addr + 8, 8);
        return mix(a ^ mix(b ^ in6->sin6_port)) | 1;
    }
    return 0;
}

void report_word(uint64_t word, bool paid) {
    Region* r = g_region.load(std::memory_order_acquire);
    if (!r) return;
    counters::count(paid ? counters::learn_paid : counters::learn_unpaid);
    Table t = (word & kDestination) ? destinations(r) : listeners(r);
    t.report(word & kTicketMask, paid, sys::mono_ns());
}

} // namespace

Ticket listener_ticket(const sockaddr* addr, socklen_t len) {
    Region* r = region();
    return r ? listeners(r).ticket(key_of(addr, len), sys::mono_ns()) : 0;
}

Ticket destination_ticket(const sockaddr* addr, socklen_t len) {
    Region* r = region();
    Ticket t = r ? destinations(r).ticket(key_of(addr, len), sys::mono_ns()) : 0;
    return t ? t | kDestination : 0;
}

uint64_t listener_tcp_until(Ticket t) {
    Region* r = g_region.load(std::memory_order_acquire);
    return r && t ? listeners(r).tcp_until(t & kTicketMask) : 0;
}

uint64_t destination_tcp_until(Ticket t) {
    Region* r = g_region.load(std::memory_order_acquire);
    return r && t ? destinations(r).tcp_until(t & kTicketMask) : 0;
}

bool destination_probe(Ticket t) {
    Region* r = g_region.load(std::memory_order_acquire);
    return r && t && destinations(r).probe(t & kTicketMask, sys::mono_ns());
}

void begin(SmcConn& c) {
    if (!c.learn_ticket || c.learn_word) return;
    forkref::Count* word = forkref::alloc();
    if (!word) return; // not learned from; it runs as it is
    word->store(c.learn_ticket & ~kPaid, std::memory_order_release);
    c.learn_word = word;
    c.learn_turns.store(0, std::memory_order_relaxed);
    c.learn_bytes.store(0, std::memory_order_relaxed);
    c.learn_dir.store(SmcConn::kLearnNone, std::memory_order_relaxed);
}

void paid(SmcConn& c) {
    c.learn_dir.store(SmcConn::kLearnDone, std::memory_order_relaxed);
    if (!c.learn_word) return;
    uint64_t was = c.learn_word->fetch_or(kPaid, std::memory_order_acq_rel);
    if (!(was & kPaid)) report_word(was, true); // once, whichever process crossed first
}

void end(SmcConn& c) {
    c.learn_dir.store(SmcConn::kLearnDone, std::memory_order_relaxed);
    forkref::Count* word = c.learn_word;
    if (!word) return;
    c.learn_word = nullptr;
    uint64_t v = word->load(std::memory_order_acquire);
    if (!(v & kPaid)) report_word(v, false);
    forkref::free(word);
}

} // namespace usmc::learn
