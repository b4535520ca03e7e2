// SPDX-License-Identifier: MIT
#include "engine/smcd/ism.hpp"

#include "engine/smcd/cdc_line.hpp"
#include "engine/smcd/link_group.hpp"

#include "engine/base/count.hpp"
#include "engine/base/statseg.hpp"
#include "engine/base/sys.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace usmc::ism {

namespace {
// Spare DMBs kept per list (ready / waiting for the old peer's close): a
// short-lived server cycles through about as many as it has connections
// open at once, and with far fewer most connections made a new one (and
// its peer a new mapping). They count against the memory cap, which drops
// them first when it is reached.
constexpr size_t kMaxSpareDmbs = 1024;
// Waiting DMBs looked at per allocation, so an allocation never scans them
// all; the next one goes on where this one stopped.
constexpr size_t kSweepBatch = 16;
constexpr uint32_t kMinDmb = 16 << 10;
constexpr uint32_t kMaxDmb = 1 << 20;
constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

void init_control(Dmb& d) {
    auto* c = d.control();
    std::memset(static_cast<void*>(c), 0, sizeof *c);
    c->type = smcd::kCdcType;
}
} // namespace

namespace {

void fill_random(void* p, size_t n) {
    auto* b = static_cast<uint8_t*>(p);
    while (n > 0) {
        ssize_t got = getrandom(b, n, 0);
        if (got > 0) {
            b += got;
            n -= size_t(got);
        }
    }
}

// Tokens must be unguessable by other processes, and a connection takes one
// or two on each side: a getrandom() each was a system call per connection.
// They come from a block fetched at once, in a page the kernel wipes in a
// forked child (MADV_WIPEONFORK): a child must never hand out its parent's
// tokens, and finds the block empty (and its lock free: zero) instead.
struct RandomBlock {
    std::atomic<uint32_t> lock; // 0: free
    uint32_t left;
    uint64_t words[64];
};
static_assert(sizeof(RandomBlock) <= 4096);

RandomBlock* random_block() {
    static RandomBlock* block = [] {
        void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return static_cast<RandomBlock*>(nullptr);
        if (madvise(p, 4096, MADV_WIPEONFORK) != 0) {
            munmap(p, 4096);
            return static_cast<RandomBlock*>(nullptr);
        }
        return static_cast<RandomBlock*>(p);
    }();
    return block;
}

} // namespace

uint64_t random64() {
    uint64_t v = 0;
    RandomBlock* b = random_block();
    if (!b) {
        fill_random(&v, sizeof v);
        return v;
    }
    while (b->lock.exchange(1, std::memory_order_acquire) != 0)
        sched_yield();
    if (b->left == 0) {
        fill_random(b->words, sizeof b->words);
        b->left = 64;
    }
    v = b->words[--b->left];
    b->words[b->left] = 0; // handed out: not kept
    b->lock.store(0, std::memory_order_release);
    return v;
}

int make_sealed_memfd(const char* name, size_t size) {
    int fd = sys::place_high_strict(memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (fd < 0) return -1;
    if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
        fcntl(fd, F_ADD_SEALS, kSizeSeals | F_SEAL_SEAL) != 0) {
        sys::real().close(fd);
        return -1;
    }
    return fd;
}

bool sealed_memfd_ok(int fd, size_t size, struct stat& st) {
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(size))
        return false;
    int seals = fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & kSizeSeals) == kSizeSeals;
}

std::optional<Dmb> create_dmb(uint32_t size) {
    if (size < kMinDmb || size > kMaxDmb) return std::nullopt;
    // (usmc ss -d looks for this name before it reads a control line.)
    int fd = make_sealed_memfd("usmc-dmb", size);
    if (fd < 0) return std::nullopt;
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        sys::real().close(fd);
        return std::nullopt;
    }
    Dmb d;
    d.fd = fd;
    d.base = static_cast<uint8_t*>(p);
    d.size = d.file_size = size;
    d.token = random64();
    struct stat st;
    if (fstat(fd, &st) == 0) d.ino = static_cast<uint64_t>(st.st_ino); // for observers (diag)
    init_control(d);
    return d;
}

namespace {
// The identity and size check of a peer's DMB descriptor.
bool peer_dmb_ok(int fd, uint32_t size, struct stat& st) {
    return size >= kMinDmb && size <= kMaxDmb && sealed_memfd_ok(fd, size, st);
}
} // namespace

namespace {
// Maps the whole of a peer's checked file (`st` its fstat) and closes the
// descriptor: the mapping keeps the memory, the descriptor would only count
// against the application's RLIMIT_NOFILE.
std::optional<Dmb> map_whole(int fd, uint32_t file_size, const struct stat& st) {
    void* p = mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return std::nullopt;
    Dmb d;
    d.base = static_cast<uint8_t*>(p);
    d.size = d.file_size = file_size;
    d.ino = static_cast<uint64_t>(st.st_ino);
    return d;
}

// The `size` bytes at `offset` of a whole-file mapping.
Dmb view_of(const Dmb& whole, uint32_t offset, uint32_t size) {
    Dmb v = whole;
    v.base = whole.base + offset;
    v.size = size;
    v.offset = offset;
    return v;
}
} // namespace

std::optional<Dmb> map_peer_dmb(int fd, uint32_t size) {
    struct stat st;
    if (!peer_dmb_ok(fd, size, st)) return std::nullopt;
    auto d = map_whole(fd, size, st);
    if (d) sys::real().close(fd); // the mapping keeps the file
    return d;
}

bool slot_claim_ok(uint32_t size, uint32_t offset, uint32_t file_size) {
    return size >= kMinDmb && size <= kMaxDmb && file_size >= size &&
           file_size <= kMaxSegmentBytes && offset % size == 0 && offset <= file_size - size;
}

void release_slot_at_exit(const Dmb& d) {
    if (d.seg) d.seg->state[d.slot].store(kSlotReleased, std::memory_order_release);
}

void unmap(Dmb& d) {
    if (d.seg) { // a slot: the segment owns descriptor and mapping
        d = Dmb{};
        return;
    }
    // A view of a peer's segment this device does not cache (a forked
    // child's inherited one): other connections of this process may use the
    // same mapping, so it stays until the process ends.
    bool shared_view = d.fd < 0 && d.file_size > d.size;
    if (d.base && !shared_view) munmap(d.base - d.offset, d.file_size ? d.file_size : d.size);
    if (d.fd >= 0) sys::real().close(d.fd);
    d = Dmb{};
}

Segment::~Segment() {
    if (base) munmap(base, file_size());
    if (fd >= 0) sys::real().close(fd);
    if (state) munmap(state, (size_t{nslots} * sizeof *state + 4095) & ~size_t{4095});
}

Device::Device(uint64_t max_memory, bool segments, uint32_t base)
    : gid_(random64()), max_memory_(max_memory), base_size_(base), segments_on_(segments),
      next_serial_(uint32_t(random64())), groups_(std::make_unique<LinkGroups>(*this)) {
    statseg::claim_device(counters::current_segment(), gid_, max_memory_);
}

Device::~Device() = default;

void Device::sweep_waiting() {
    constexpr uint8_t kDone = core::kPeerConnClosed | core::kPeerConnAbort;
    // A rotating position: entries whose peer never closes (it died) do not
    // hide the ones behind them.
    for (size_t looked = 0; looked < kSweepBatch && !waiting_.empty(); ++looked) {
        if (sweep_pos_ >= waiting_.size()) sweep_pos_ = 0;
        Dmb& d = waiting_[sweep_pos_].dmb;
        if (!(smcd::conn_flags_of(d.control()->cons.load(std::memory_order_acquire)) & kDone)) {
            ++sweep_pos_;
            continue;
        }
        if (free_.size() < kMaxSpareDmbs) {
            free_.push_back(waiting_[sweep_pos_]);
        } else {
            uncount_spare(d.size);
            unmap(d);
        }
        waiting_[sweep_pos_] = waiting_.back(); // (looked at next)
        waiting_.pop_back();
    }
}

size_t Device::spare_count() const {
    std::lock_guard lock(mu_);
    return free_.size() + waiting_.size();
}

namespace {
// (A peer that moved to TCP never writes the DMB again either.)
constexpr uint8_t kPeerDone = core::kPeerConnClosed | core::kPeerConnAbort | core::kMovedFlags;

// A DMB given to a new connection: the old connection's bytes zeroed (its
// peer wrote only up to the producer cursor it published; held bytes are
// published at close: a short-lived connection touched a few hundred bytes
// of the ring, not all of it), a new token, a fresh control line.
void wipe_for_reuse(Dmb& d) {
    core::Cursor hi = smcd::unpack_prod(d.control()->prod.load(std::memory_order_acquire));
    uint32_t used = hi.wrap == 0 && hi.count < d.ring_size() ? hi.count : d.ring_size();
    std::memset(d.ring(), 0, used);
    d.token = random64();
    init_control(d);
}
} // namespace

std::shared_ptr<Segment> Device::make_segment(uint32_t size, uid_t peer_uid) {
    // Doubling with the peers' demand: a peer user with one connection
    // costs a few slots, a crowd a few segments.
    uint32_t held = 0;
    for (const auto& g : segments_)
        if (g->peer_uid == peer_uid && g->slot_size == size && !g->retired) held += g->nslots;
    uint32_t n = std::clamp<uint32_t>(held, 4, kMaxSegmentSlots);
    n = std::min(n, (kMaxSegmentBytes - kGatePage) / size);
    drop_idle_segments(uint64_t{n} * size);
    // At most half the room left: the free slots of a segment serve only
    // its size, and a crowd's smaller DMBs (crowd_size) need segments of
    // their own.
    uint64_t room = max_memory_ > in_use_ ? max_memory_ - in_use_ : 0;
    n = static_cast<uint32_t>(std::min<uint64_t>(n, std::max<uint64_t>(2, room / 2 / size)));
    while (n >= 2 && in_use_ + uint64_t{n} * size > max_memory_)
        n /= 2;
    if (n < 2) return nullptr;
    auto g = std::make_shared<Segment>();
    g->slot_size = size;
    g->nslots = n;
    g->peer_uid = peer_uid;
    g->owner = gid_;
    if (++next_serial_ == 0) ++next_serial_;
    g->serial = next_serial_;
    g->fd = make_sealed_memfd("usmc-dmb", g->file_size());
    if (g->fd < 0) return nullptr;
    void* p = mmap(nullptr, g->file_size(), PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
    void* st = mmap(nullptr, (size_t{n} * sizeof *g->state + 4095) & ~size_t{4095},
                    PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) g->base = static_cast<uint8_t*>(p);
    if (st != MAP_FAILED) g->state = static_cast<std::atomic<uint32_t>*>(st);
    struct stat fst;
    if (!g->base || !g->state || fstat(g->fd, &fst) != 0) return nullptr;
    g->ino = static_cast<uint64_t>(fst.st_ino);
    g->live.assign(n, 0);
    g->tokens.assign(n, 0);
    in_use_ += g->slot_bytes();
    spare_bytes_ += g->slot_bytes();
    segments_.push_back(g);
    counters::count(counters::dmb_segments);
    return g;
}

std::optional<Dmb> Device::claim_slot(uint32_t size, uid_t peer_uid, uint32_t up_to, bool make) {
    auto take = [&](const std::shared_ptr<Segment>& g) -> std::optional<Dmb> {
        const uint32_t bytes = g->slot_size; // `size`, or up to `up_to`
        for (uint32_t i = 0; i < g->nslots; ++i) {
            uint32_t st = g->state[i].load(std::memory_order_acquire);
            if (st == kSlotReleased) {
                auto* line = reinterpret_cast<smcd::Control*>(g->slot_base(i));
                if (!(smcd::conn_flags_of(line->cons.load(std::memory_order_acquire)) & kPeerDone))
                    continue;
            } else if (st != kSlotFree) {
                continue;
            }
            // (A forked child may give a slot back meanwhile: never take one
            // it still uses.)
            if (!g->state[i].compare_exchange_strong(st, kSlotUsed, std::memory_order_acq_rel))
                continue;
            if (g->live[i] == Segment::kSpare)
                spare_bytes_ -= std::min<uint64_t>(spare_bytes_, bytes);
            if (g->live[i] == Segment::kAway) // a forked child gave it back
                away_bytes_ -= std::min<uint64_t>(away_bytes_, bytes);
            g->live[i] = Segment::kLive;
            Dmb d;
            d.fd = g->fd;
            d.base = g->slot_base(i);
            d.size = bytes;
            d.ino = g->ino;
            d.owner = gid_;
            d.offset = i * bytes;
            d.file_size = g->file_size();
            d.seg = g;
            d.slot = i;
            d.serial = g->serial;
            wipe_for_reuse(d);
            g->tokens[i] = d.token;
            publish();
            counters::count(counters::dmb_slots);
            return d;
        }
        return std::nullopt;
    };
    size_t n = segments_.size();
    for (size_t k = 0; k < n; ++k) {
        const auto& g = segments_[(claim_pos_ + k) % n];
        if (g->peer_uid != peer_uid || g->slot_size != size || g->retired) continue;
        if (auto d = take(g)) {
            claim_pos_ = (claim_pos_ + k) % n;
            return d;
        }
    }
    // A caller that tells the peer the size after the claim (up_to != 0)
    // takes a free slot of a larger size up to `up_to` whole before a new
    // segment holds more memory.
    for (uint32_t s = size * 2; s <= up_to && s <= kMaxDmb; s *= 2)
        for (const auto& g : segments_)
            if (g->peer_uid == peer_uid && g->slot_size == s && !g->retired)
                if (auto d = take(g)) return d;
    if (!make) return std::nullopt;
    auto g = make_segment(size, peer_uid);
    if (!g) return std::nullopt;
    claim_pos_ = segments_.size() - 1;
    return take(g);
}

void Device::drop_idle_segments(uint64_t need) {
    // Idle retired segments always go; other idle ones while `need` does not fit.
    for (size_t i = segments_.size(); i-- > 0;) {
        auto& g = segments_[i];
        if (!g->retired && in_use_ + need <= max_memory_) continue;
        // No connection of any of our processes holds a slot of it (a lost
        // slot's peer keeps its own mapping of the file).
        bool idle = true;
        uint64_t spare = 0, away = 0;
        for (uint32_t k = 0; k < g->nslots && idle; ++k) {
            uint32_t st = g->state[k].load(std::memory_order_acquire);
            idle = st == kSlotLost ||
                   (g->live[k] != Segment::kLive && (st == kSlotFree || st == kSlotReleased));
            spare += g->live[k] == Segment::kSpare ? g->slot_size : 0;
            away += g->live[k] == Segment::kAway ? g->slot_size : 0;
        }
        if (!idle) continue;
        spare_bytes_ -= std::min(spare, spare_bytes_);
        away_bytes_ -= std::min(away, away_bytes_);
        in_use_ -= std::min<uint64_t>(g->slot_bytes(), in_use_);
        segments_.erase(segments_.begin() + static_cast<long>(i));
    }
    claim_pos_ = 0;
}

void Device::release_slot(Dmb& dmb, uid_t peer_uid, bool reusable) {
    Segment& g = *dmb.seg;
    // A slot whose peer is unknown (a handshake that failed around the
    // attach) may still be written by it: never reused, as such a DMB is
    // never reused.
    uint32_t st = peer_uid == kUnknownPeer ? kSlotLost : reusable ? kSlotFree : kSlotReleased;
    if (g.owner == gid_) {
        std::lock_guard lock(mu_);
        // (Only the claim it was: a slot given back by a forked child may
        // have been claimed again since.)
        if (g.tokens[dmb.slot] == dmb.token) {
            if (st != kSlotLost && g.live[dmb.slot] == Segment::kLive) {
                g.live[dmb.slot] = Segment::kSpare;
                spare_bytes_ += dmb.size;
            }
            g.state[dmb.slot].store(st, std::memory_order_release);
            if (st == kSlotLost) {
                // Never reused, and the segment takes no more claims: it
                // goes once its connections have, so failed handshakes
                // cannot pin segments (a peer can make them fail at will).
                g.retired = true;
                drop_idle_segments(0);
            }
            publish();
        }
    } else { // a forked child: the slot goes back to the process that made it
        g.state[dmb.slot].store(st, std::memory_order_release);
    }
    dmb = Dmb{};
}

std::optional<Dmb> Device::allocate(uint32_t size, uid_t peer_uid, uint32_t up_to) {
    auto d = allocate_sized(size, peer_uid, up_to);
    if (d && d->size < base_size_) counters::count(counters::dmb_downgraded);
    return d;
}

std::optional<Dmb> Device::allocate_sized(uint32_t size, uid_t peer_uid, uint32_t up_to) {
    std::lock_guard lock(mu_);
    if (segments_on_ && peer_uid != kUnknownPeer && size >= kMinDmb && size <= kMaxDmb)
        if (auto d = claim_slot(size, peer_uid, up_to)) return d;
    sweep_waiting();
    // The most recently freed first: its pages are warm, and the peer most
    // likely still has it mapped (Device::map_peer's cache).
    for (size_t i = free_.size(); peer_uid != kUnknownPeer && i-- > 0;) {
        if (free_[i].dmb.size == size && free_[i].last_peer == peer_uid) {
            Dmb d = free_[i].dmb;
            free_.erase(free_.begin() + static_cast<long>(i));
            spare_bytes_ -= std::min<uint64_t>(spare_bytes_, d.size); // now a connection's
            publish();
            wipe_for_reuse(d); // the new peer must not see the old connection's bytes
            counters::count(counters::dmb_reused);
            return d;
        }
    }
    // Free DMBs of other sizes/peers count against the cap: drop them first.
    drop_idle_segments(size);
    for (auto* spare : {&free_, &waiting_}) {
        while (in_use_ + size > max_memory_ && !spare->empty()) {
            uncount_spare(spare->back().dmb.size);
            unmap(spare->back().dmb);
            spare->pop_back();
        }
    }
    publish();
    if (in_use_ + size > max_memory_) {
        // Nothing of `size` fits: a caller that tells the size after takes
        // a smaller one rather than none (the kernel's downgrade on
        // failure), a free slot held already first, then a new segment.
        bool slots = up_to && segments_on_ && peer_uid != kUnknownPeer;
        for (bool make : {false, true})
            for (uint32_t s = size / 2; slots && s >= kMinDmb; s /= 2)
                if (auto d = claim_slot(s, peer_uid, 0, make)) return d;
        return std::nullopt;
    }
    auto d = create_dmb(size);
    if (d) {
        in_use_ += size;
        d->owner = gid_;
        publish();
        counters::count(counters::dmb_created);
    }
    return d;
}

void Device::release(Dmb dmb, uid_t peer_uid, bool reusable) {
    if (!dmb.valid()) return;
    if (dmb.seg) {
        release_slot(dmb, peer_uid, reusable);
        return;
    }
    if (dmb.owner != gid_) { // never counted here
        unmap(dmb);
        return;
    }
    {
        std::lock_guard lock(mu_);
        bool known = peer_uid != kUnknownPeer;
        auto* list = !known ? nullptr : reusable ? &free_ : &waiting_;
        // (Only bytes this device counts as a connection's become spare:
        // the spares never exceed the count.)
        if (list && list->size() < kMaxSpareDmbs && in_use_ - spare_bytes_ >= dmb.size) {
            list->push_back({dmb, peer_uid});
            spare_bytes_ += dmb.size;
            publish();
            return;
        }
        uncount_live(dmb.size);
        publish();
    }
    unmap(dmb);
}

uint32_t crowd_size(uint32_t base, uint64_t live, uint64_t cap) {
    uint64_t size = base;
    uint64_t half = cap / 2;
    if (live > half && half > 0) {
        uint64_t left = cap > live ? cap - live : 0;
        size = std::min<uint64_t>(size, uint64_t{base} * left / half);
    }
    size = std::bit_floor(std::max<uint64_t>(size, kMinDmb));
    while (size > kMinDmb && live + size > cap)
        size /= 2;
    return static_cast<uint32_t>(std::min<uint64_t>(size, std::max(base, kMinDmb)));
}

uint32_t Device::size_for(uint32_t base, uint32_t roomy) const {
    std::lock_guard lock(mu_);
    uint64_t live = in_use_ - spare_bytes_ - away_bytes_;
    if (roomy > base && live + roomy <= max_memory_ / 16) return roomy;
    return crowd_size(base, live, max_memory_);
}

void Device::disown(Dmb& dmb) {
    if (!dmb.valid()) return;
    if (dmb.seg) { // the process that closes it last gives the slot back
        if (dmb.seg->owner == gid_) {
            std::lock_guard lock(mu_);
            if (dmb.seg->tokens[dmb.slot] == dmb.token &&
                dmb.seg->live[dmb.slot] == Segment::kLive) {
                dmb.seg->live[dmb.slot] = Segment::kAway;
                away_bytes_ += dmb.size;
                publish();
            }
        }
        dmb = Dmb{};
        return;
    }
    if (dmb.owner == gid_) {
        std::lock_guard lock(mu_);
        uncount_live(dmb.size);
        publish();
    }
    unmap(dmb);
}

void Device::uncount_spare(uint32_t size) {
    uint64_t n = std::min<uint64_t>(size, spare_bytes_);
    spare_bytes_ -= n;
    in_use_ -= std::min(n, in_use_);
}

void Device::uncount_live(uint32_t size) {
    in_use_ -= std::min<uint64_t>(size, in_use_ - spare_bytes_);
}

void Device::publish() const {
    counters::set_gauge(counters::dmb_bytes, in_use_ - spare_bytes_ - away_bytes_);
    counters::set_gauge(counters::dmb_spare_bytes, spare_bytes_);
    statseg::publish_device(counters::current_segment(), gid_, segments_.size(), peer_maps_.size());
}

bool Device::has_room(uint32_t size) const {
    std::lock_guard lock(mu_);
    // (Slots our forked children hold count as room: most come back by the
    // time a claim looks; one that has not makes that claim fail.)
    return in_use_ - spare_bytes_ - away_bytes_ + size <= max_memory_;
}

std::optional<Dmb> Device::map_peer(int fd, uint32_t size, uint32_t offset, uint32_t file_size) {
    if (file_size == 0) file_size = size;
    struct stat st;
    if (!slot_claim_ok(size, offset, file_size) || !sealed_memfd_ok(fd, file_size, st))
        return std::nullopt;
    uint64_t key = static_cast<uint64_t>(st.st_ino);
    auto cached = [&](PeerMap& m) {
        if (m.refs++ == 0) {
            idle_peer_maps_.erase(m.idle);
            idle_peer_bytes_ -= m.dmb.size;
        }
        return view_of(m.dmb, offset, size);
    };
    {
        std::lock_guard lock(mu_);
        auto it = peer_maps_.find(key);
        if (it != peer_maps_.end() && it->second.dev == st.st_dev &&
            it->second.dmb.size == file_size) {
            sys::real().close(fd);
            counters::count(counters::peer_maps_reused);
            return cached(it->second);
        }
    }
    // The descriptor is ours to close only on success: a caller closes it
    // after a failure.
    auto d = map_whole(fd, file_size, st);
    if (!d) return d;
    std::lock_guard lock(mu_);
    auto [it, fresh] = peer_maps_.try_emplace(key);
    if (!fresh) {
        // Another thread mapped the same file meanwhile: use its mapping
        // (a segment's views must share one, see unmap). An inode of
        // another device under the same number: this one stays uncached.
        if (it->second.dev == st.st_dev && it->second.dmb.size == file_size) {
            munmap(d->base, file_size);
            sys::real().close(fd);
            return cached(it->second);
        }
        if (file_size != size) {
            munmap(d->base, file_size);
            return std::nullopt;
        }
        sys::real().close(fd);
        return d;
    }
    sys::real().close(fd);
    it->second.dmb = *d;
    it->second.dev = st.st_dev;
    it->second.refs = 1;
    publish();
    return view_of(*d, offset, size);
}

std::optional<Dmb> Device::view_peer(uint64_t ino, uint32_t size, uint32_t offset,
                                     uint32_t file_size) {
    // (A view of the whole file too: a link group's pin.)
    if (size == 0 || file_size > kMaxSegmentBytes ||
        offset > file_size - std::min(size, file_size) || size > file_size)
        return std::nullopt;
    std::lock_guard lock(mu_);
    auto it = peer_maps_.find(ino);
    if (it == peer_maps_.end() || it->second.dmb.size != file_size) return std::nullopt;
    PeerMap& m = it->second;
    if (m.refs++ == 0) {
        idle_peer_maps_.erase(m.idle);
        idle_peer_bytes_ -= m.dmb.size;
    }
    return view_of(m.dmb, offset, size);
}

void Device::unmap_peer(Dmb& dmb) {
    if (!dmb.valid()) return;
    {
        std::lock_guard lock(mu_);
        auto it = peer_maps_.find(dmb.ino);
        if (it != peer_maps_.end() && it->second.dmb.base == dmb.base - dmb.offset) {
            PeerMap& m = it->second;
            if (m.refs > 0 && --m.refs == 0) {
                if (m.gone) { // its peer is gone: nobody maps it again
                    unmap(m.dmb);
                    peer_maps_.erase(it);
                } else {
                    m.idle = idle_peer_maps_.insert(idle_peer_maps_.end(), dmb.ino);
                    idle_peer_bytes_ += m.dmb.size;
                    while (idle_peer_maps_.size() > kMaxIdlePeerMaps ||
                           idle_peer_bytes_ > max_memory_ / 4) {
                        auto old = peer_maps_.find(idle_peer_maps_.front());
                        idle_peer_maps_.pop_front();
                        idle_peer_bytes_ -= old->second.dmb.size;
                        unmap(old->second.dmb);
                        peer_maps_.erase(old);
                    }
                }
                publish();
            }
            dmb = Dmb{};
            return;
        }
    }
    unmap(dmb);
}

void Device::forget_peer(uint64_t ino) {
    std::lock_guard lock(mu_);
    auto it = peer_maps_.find(ino);
    if (it == peer_maps_.end()) return;
    if (it->second.refs > 0) {
        it->second.gone = true;
        return;
    }
    idle_peer_maps_.erase(it->second.idle);
    idle_peer_bytes_ -= it->second.dmb.size;
    unmap(it->second.dmb);
    peer_maps_.erase(it);
    publish();
}

size_t Device::idle_peer_maps() const {
    std::lock_guard lock(mu_);
    return idle_peer_maps_.size();
}

uint64_t Device::memory_in_use() const {
    std::lock_guard lock(mu_);
    return in_use_;
}

uint64_t Device::spare_bytes() const {
    std::lock_guard lock(mu_);
    return spare_bytes_;
}

size_t Device::segment_count() const {
    std::lock_guard lock(mu_);
    return segments_.size();
}

size_t Device::slots_in_use() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& g : segments_)
        for (uint32_t i = 0; i < g->nslots; ++i)
            n += g->state[i].load(std::memory_order_acquire) == kSlotUsed;
    return n;
}

bool Device::accounting_consistent() const {
    std::lock_guard lock(mu_);
    uint64_t listed = 0;
    for (const auto* list : {&free_, &waiting_})
        for (const auto& f : *list)
            listed += f.dmb.size;
    uint64_t away = 0;
    for (const auto& g : segments_)
        for (uint32_t i = 0; i < g->nslots; ++i) {
            listed += g->live[i] == Segment::kSpare ? g->slot_size : 0;
            away += g->live[i] == Segment::kAway ? g->slot_size : 0;
        }
    if (away != away_bytes_ || spare_bytes_ + away_bytes_ > in_use_) return false;
    return listed == spare_bytes_ && spare_bytes_ <= in_use_ && in_use_ <= max_memory_;
}

} // namespace usmc::ism
