#include "engine/ism.hpp"

#include "engine/cdc.hpp"
#include "engine/runtime.hpp"

#include "engine/sys.hpp"

#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace usmc::ism {

namespace {
constexpr size_t kMaxFreeDmbs = 64;
constexpr uint32_t kMinDmb = 16 << 10;
constexpr uint32_t kMaxDmb = 1 << 20;

void init_control(Dmb& d) {
    auto* c = d.control();
    std::memset(static_cast<void*>(c), 0, sizeof *c);
    c->type = cdc::kCdcType;
}
} // namespace

uint64_t random64() {
    uint64_t v = 0;
    while (getrandom(&v, sizeof v, 0) != sizeof v) {
    }
    return v;
}

std::optional<Dmb> create_dmb(uint32_t size) {
    if (size < kMinDmb || size > kMaxDmb) return std::nullopt;
    int fd = sys::place_high_strict(memfd_create("usmc-dmb", MFD_CLOEXEC));
    if (fd < 0) return std::nullopt;
    if (ftruncate(fd, size) != 0) {
        sys::real().close(fd);
        return std::nullopt;
    }
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        sys::real().close(fd);
        return std::nullopt;
    }
    Dmb d{fd, static_cast<uint8_t*>(p), size, random64()};
    init_control(d);
    return d;
}

std::optional<Dmb> map_peer_dmb(int fd, uint32_t size) {
    struct stat st;
    if (size < kMinDmb || size > kMaxDmb || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size != static_cast<off_t>(size))
        return std::nullopt;
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return std::nullopt;
    // The mapping keeps the memory; the descriptor would only count against
    // the application's RLIMIT_NOFILE.
    sys::real().close(fd);
    return Dmb{-1, static_cast<uint8_t*>(p), size, 0};
}

void unmap(Dmb& d) {
    if (d.base) munmap(d.base, d.size);
    if (d.fd >= 0) sys::real().close(d.fd);
    d = Dmb{};
}

Device::Device(uint64_t max_memory) : gid_(random64()), max_memory_(max_memory) {}

void Device::sweep_waiting() {
    constexpr uint8_t kDone = cdc::kPeerConnClosed | cdc::kPeerConnAbort;
    for (size_t i = 0; i < waiting_.size();) {
        Dmb& d = waiting_[i].dmb;
        if (!(cdc::conn_flags_of(d.control()->cons.load(std::memory_order_acquire)) & kDone)) {
            ++i;
            continue;
        }
        if (free_.size() < kMaxFreeDmbs) {
            free_.push_back(waiting_[i]);
        } else {
            in_use_ -= d.size;
            unmap(d);
        }
        waiting_.erase(waiting_.begin() + static_cast<long>(i));
    }
}

size_t Device::spare_count() const {
    std::lock_guard lock(mu_);
    return free_.size() + waiting_.size();
}

std::optional<Dmb> Device::allocate(uint32_t size, uid_t peer_uid) {
    std::lock_guard lock(mu_);
    sweep_waiting();
    for (size_t i = 0; peer_uid != kUnknownPeer && i < free_.size(); ++i) {
        if (free_[i].dmb.size == size && free_[i].last_peer == peer_uid) {
            Dmb d = free_[i].dmb;
            free_.erase(free_.begin() + static_cast<long>(i));
            // Zero it: the new peer must not see the old connection's bytes.
            if (fallocate(d.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, d.size) != 0)
                std::memset(d.base, 0, d.size);
            d.token = random64();
            init_control(d);
            runtime::count(counters::dmb_reused);
            return d;
        }
    }
    // Free DMBs of other sizes/peers count against the cap: drop them first.
    for (auto* spare : {&free_, &waiting_}) {
        while (in_use_ + size > max_memory_ && !spare->empty()) {
            in_use_ -= spare->back().dmb.size;
            unmap(spare->back().dmb);
            spare->pop_back();
        }
    }
    if (in_use_ + size > max_memory_) return std::nullopt;
    auto d = create_dmb(size);
    if (d) {
        in_use_ += size;
        runtime::count(counters::dmb_created);
    }
    return d;
}

void Device::release(Dmb dmb, uid_t peer_uid, bool reusable) {
    if (!dmb.valid()) return;
    std::lock_guard lock(mu_);
    bool known = peer_uid != kUnknownPeer;
    if (known && reusable && free_.size() < kMaxFreeDmbs) {
        free_.push_back({dmb, peer_uid});
        return;
    }
    if (known && !reusable && waiting_.size() < kMaxFreeDmbs) {
        waiting_.push_back({dmb, peer_uid});
        return;
    }
    in_use_ -= dmb.size;
    unmap(dmb);
}

bool Device::has_room(uint32_t size) const {
    std::lock_guard lock(mu_);
    uint64_t spare = 0;
    for (auto* list : {&free_, &waiting_})
        for (const auto& f : *list)
            spare += f.dmb.size;
    return in_use_ - spare + size <= max_memory_;
}

uint64_t Device::memory_in_use() const {
    std::lock_guard lock(mu_);
    return in_use_;
}

} // namespace usmc::ism
