// SPDX-License-Identifier: MIT
#include "engine/discovery/listen_share.hpp"

#include <cerrno>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

namespace usmc {

namespace {
bool alive(int32_t pid) {
    return ::kill(pid, 0) == 0 || errno == EPERM; // a zombie counts: conservative
}
} // namespace

ListenShare::ListenShare() {
    void* m =
        mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;   // no slot: this listener never counts as ours alone
    page_ = static_cast<Page*>(m); // zero-filled: every slot free
    page_->slots[0].pid.store(static_cast<int32_t>(getpid()), std::memory_order_relaxed);
    page_->slots[0].state.store(kMayAccept, std::memory_order_release);
    mine_ = 0;
}

ListenShare::~ListenShare() {
    if (page_) munmap(page_, sizeof(Page));
}

void ListenShare::set_acceptor() {
    page_->slots[mine_].state.store(kAcceptor, std::memory_order_release);
}

bool ListenShare::clear_if_dead(Slot& s, int32_t pid) {
    if (alive(pid)) return false;
    // Gone without closing (exit, a kill): its slot is free again.
    if (s.pid.compare_exchange_strong(pid, 0, std::memory_order_acq_rel))
        s.state.store(kFree, std::memory_order_release);
    return true;
}

int ListenShare::reserve() {
    for (int round = 0; round < 2; ++round) {
        for (int i = 0; i < kSlots; ++i) {
            uint32_t expect = kFree;
            if (page_->slots[i].state.compare_exchange_strong(expect, kBorn,
                                                              std::memory_order_acq_rel))
                return i;
        }
        // Full: distributors are never looked at otherwise; clear the dead.
        for (int i = 0; i < kSlots; ++i) {
            Slot& s = page_->slots[i];
            int32_t pid = s.pid.load(std::memory_order_acquire);
            if (i != mine_ && s.state.load(std::memory_order_acquire) != kBorn && pid > 0)
                clear_if_dead(s, pid);
        }
    }
    page_->unknown.store(1, std::memory_order_release);
    return -1;
}

bool ListenShare::others_may_accept() {
    if (!page_ || mine_ < 0 || page_->unknown.load(std::memory_order_acquire)) return true;
    bool others = false;
    for (int i = 0; i < kSlots; ++i) {
        if (i == mine_) continue;
        Slot& s = page_->slots[i];
        uint32_t state = s.state.load(std::memory_order_acquire);
        if (state == kFree) continue;
        int32_t pid = s.pid.load(std::memory_order_acquire);
        if (state == kBorn || pid <= 0) { // a child on its way (or a slot in transition)
            others = true;
            continue;
        }
        // A distributor never counts: no system call for it (nginx's
        // master, on every connection its worker accepts).
        if (state == kDistributor) continue;
        if (!clear_if_dead(s, pid)) others = true;
    }
    return others;
}

void ListenShare::before_fork(uint64_t gen) {
    child_ = -1;
    child_gen_ = gen;
    demoted_ = false;
    if (!page_) return;
    if (mine_ >= 0 && state_of(mine_) == kMayAccept) {
        page_->slots[mine_].state.store(kDistributor, std::memory_order_release);
        demoted_ = true;
    }
    child_ = reserve();
}

void ListenShare::fork_failed(uint64_t gen) {
    if (!page_ || gen != child_gen_) return;
    child_gen_ = 0;
    // No child took the slot (none exists): free again. Nor did it become
    // a distributor's parent.
    uint32_t born = kBorn;
    if (child_ >= 0)
        page_->slots[child_].state.compare_exchange_strong(born, kFree, std::memory_order_acq_rel);
    child_ = -1;
    uint32_t dist = kDistributor;
    if (demoted_ && mine_ >= 0)
        page_->slots[mine_].state.compare_exchange_strong(dist, kMayAccept,
                                                          std::memory_order_acq_rel);
    demoted_ = false;
}

void ListenShare::after_fork_child() {
    int slot = child_;
    child_ = -1;
    mine_ = -1;
    if (!page_) return;
    auto me = static_cast<int32_t>(getpid());
    int32_t none = 0;
    // Two threads forking at once may have handed both children one slot:
    // the second to claim it takes another.
    if (slot < 0 ||
        !page_->slots[slot].pid.compare_exchange_strong(none, me, std::memory_order_acq_rel)) {
        slot = reserve();
        if (slot < 0) return;
        page_->slots[slot].pid.store(me, std::memory_order_release);
    }
    page_->slots[slot].state.store(kMayAccept, std::memory_order_release);
    mine_ = slot;
}

int ListenShare::reserved_count() const {
    int n = 0;
    for (int i = 0; page_ && i < kSlots; ++i)
        n += state_of(i) == kBorn;
    return n;
}

void ListenShare::leave() {
    if (!page_ || mine_ < 0) return;
    page_->slots[mine_].pid.store(0, std::memory_order_release);
    page_->slots[mine_].state.store(kFree, std::memory_order_release);
    mine_ = -1;
}

} // namespace usmc
