// SPDX-License-Identifier: MIT
#include "engine/readiness/user_epoll.hpp"

#include <cerrno>

namespace usmc::readiness {

template <class T>
void UserEpoll::List<T>::push_back(T* x) {
    x->prev = tail;
    x->next = nullptr;
    (tail ? tail->next : head) = x;
    tail = x;
}

template <class T>
void UserEpoll::List<T>::erase(T* x) {
    (x->prev ? x->prev->next : head) = x->next;
    (x->next ? x->next->prev : tail) = x->prev;
    x->prev = x->next = nullptr;
}

UserEpoll::UserEpoll(unsigned cold_after) : cold_after_(cold_after ? cold_after : 1) {}

UserEpoll::~UserEpoll() = default;

// The wake-ups a registration with `events` has been woken by: a wake-up
// queues a registration when its key meets the registration's events, and
// always when it has no key (`all`; EPOLLERR's key meets every enabled
// registration, which always has EPOLLERR). A sum of counts that only grow
// grows exactly when one of them does.
uint64_t UserEpoll::keyed(uint32_t events, const Wakes& w) {
    return w.all + ((events & kInKey) ? w.in : 0) + ((events & kOutKey) ? w.out : 0);
}

void UserEpoll::enqueue(Reg& r) {
    ready_.push_back(&r);
    r.queued = true;
}

void UserEpoll::dequeue(Reg& r) {
    ready_.erase(&r);
    r.queued = false;
}

// What the kernel's callbacks would have done for the wake-ups of `e`'s
// source since the last look, in its wait queue's order: each enabled
// registration whose keyed count moved is queued unless it is already.
// Whether any moved.
bool UserEpoll::look(Entry& e) {
    Wakes w = e.src->wakes();
    bool moved = false;
    for (Reg* r : e.regs) {
        if (!enabled(*r)) continue; // a disabled one-shot ignores wake-ups
        uint64_t s = keyed(r->events, w);
        if (s == r->seen) continue;
        r->seen = s;
        moved = true;
        if (!r->queued) enqueue(*r);
    }
    return moved;
}

void UserEpoll::set_heat(Entry& e, Heat h) {
    if (e.heat == h) return;
    if (e.heat == Heat::Hot) hot_.erase(&e);
    if (e.heat == Heat::Cold) cold_.erase(&e);
    e.heat = h;
    if (h == Heat::Hot) hot_.push_back(&e);
    if (h == Heat::Cold) cold_.push_back(&e);
}

// `e` changed, or a registration of it was enabled: Hot (looked at by every
// collect) if it has an enabled registration, else Off.
void UserEpoll::make_hot(Entry& e) {
    set_heat(e, any_enabled(e) ? Heat::Hot : Heat::Off);
    e.idle = 0;
}

bool UserEpoll::any_enabled(const Entry& e) {
    for (const Reg* r : e.regs)
        if (enabled(*r)) return true;
    return false;
}

void UserEpoll::drop(Reg& r) {
    if (r.queued) dequeue(r);
    Entry& e = *r.entry;
    std::erase(e.regs, &r);
    const Source* src = e.src;
    regs_.erase({src, r.fd});
    if (e.regs.empty()) {
        set_heat(e, Heat::Off);
        entries_.erase(src);
    } else if (!any_enabled(e)) {
        set_heat(e, Heat::Off); // what is left is disabled: nothing to look at or arm
    }
}

int UserEpoll::ctl(int op, int fd, const Source* src, const epoll_event* ev) {
    // The kernel's order: the event is copied in for every op but DEL; the
    // EPOLLEXCLUSIVE rules are checked before the registration is looked
    // up (so they win over EEXIST and ENOENT).
    if (op != EPOLL_CTL_DEL && ev == nullptr) return -EFAULT;
    if (src == nullptr) return -EBADF;
    uint32_t events = op != EPOLL_CTL_DEL ? ev->events : 0;
    if (op != EPOLL_CTL_DEL && (events & EPOLLEXCLUSIVE)) {
        if (op == EPOLL_CTL_MOD) return -EINVAL;
        if (op == EPOLL_CTL_ADD && (events & ~kExclusiveOk)) return -EINVAL;
    }
    std::lock_guard lock(mu_);
    auto it = regs_.find({src, fd});
    switch (op) {
    case EPOLL_CTL_ADD: {
        if (it != regs_.end()) return -EEXIST;
        auto [eit, fresh] = entries_.try_emplace(src);
        Entry& e = eit->second;
        if (fresh)
            e.src = src;
        else
            look(e); // wake-ups before this add come first on the list
        Reg& r = regs_.try_emplace({src, fd}).first->second;
        r.fd = fd;
        r.entry = &e;
        r.events = events | EPOLLERR | EPOLLHUP;
        r.data = ev->data.u64;
        // The kernel's wait queue: add_wait_queue puts an entry at the
        // head, add_wait_queue_exclusive (EPOLLEXCLUSIVE) at the tail.
        if (events & EPOLLEXCLUSIVE)
            e.regs.push_back(&r);
        else
            e.regs.insert(e.regs.begin(), &r);
        r.seen = keyed(r.events, src->wakes());
        if (src->bits() & r.events & ~kPrivateBits) enqueue(r);
        make_hot(e);
        return 0;
    }
    case EPOLL_CTL_MOD: {
        if (it == regs_.end()) return -ENOENT;
        Reg& r = it->second;
        if (r.events & EPOLLEXCLUSIVE) return -EINVAL;
        Entry& e = *r.entry;
        look(e);
        r.events = events | EPOLLERR | EPOLLHUP;
        r.data = ev->data.u64;
        r.seen = keyed(r.events, src->wakes());
        if ((src->bits() & r.events & ~kPrivateBits) && !r.queued) enqueue(r);
        make_hot(e);
        return 0;
    }
    case EPOLL_CTL_DEL:
        if (it == regs_.end()) return -ENOENT;
        drop(it->second);
        return 0;
    default:
        return -EINVAL;
    }
}

int UserEpoll::collect(epoll_event* out, int maxevents) {
    if (maxevents <= 0 || maxevents > kMaxEvents) return -EINVAL;
    std::lock_guard lock(mu_);
    // The looks: each hot and cold source once (one that changes lists
    // here goes behind the entries the walk stops at).
    Entry* hot_last = hot_.tail;
    Entry* cold_last = cold_.tail;
    for (Entry* e = hot_last ? hot_.head : nullptr; e != nullptr;) {
        Entry* next = e == hot_last ? nullptr : e->next;
        if (look(*e))
            e->idle = 0;
        else if (++e->idle >= cold_after_)
            set_heat(*e, Heat::Cold);
        e = next;
    }
    for (Entry* e = cold_last ? cold_.head : nullptr; e != nullptr;) {
        Entry* next = e == cold_last ? nullptr : e->next;
        if (look(*e)) make_hot(*e);
        e = next;
    }
    // ep_send_events: from the head, each item polled and taken off; the
    // reported level-triggered ones go back behind the items not reached.
    List<Reg> again;
    int n = 0;
    while (n < maxevents && !ready_.empty()) {
        Reg& r = *ready_.head;
        dequeue(r);
        const Source* src = r.entry->src;
        r.seen = keyed(r.events, src->wakes()); // before the bits (I1)
        uint32_t revents = src->bits() & r.events & ~kPrivateBits;
        if (revents == 0) continue;
        out[n].events = revents;
        out[n].data.u64 = r.data;
        ++n;
        if (r.events & EPOLLONESHOT) {
            r.events &= kPrivateBits; // disabled until EPOLL_CTL_MOD
            if (!any_enabled(*r.entry)) set_heat(*r.entry, Heat::Off);
        } else if (!(r.events & EPOLLET)) {
            again.push_back(&r);
        }
    }
    while (!again.empty()) {
        Reg* r = again.head;
        again.erase(r);
        enqueue(*r);
    }
    return n;
}

void UserEpoll::mark(const Source* src) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(src);
    if (it == entries_.end()) return;
    if (look(it->second)) make_hot(it->second);
}

void UserEpoll::remove_source(const Source* src) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(src);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    for (Reg* r : e.regs) {
        if (r->queued) dequeue(*r);
        regs_.erase({src, r->fd});
    }
    set_heat(e, Heat::Off);
    entries_.erase(it);
}

size_t UserEpoll::take_cold(const Source** out, size_t max) {
    std::lock_guard lock(mu_);
    size_t k = 0;
    while (k < max && !cold_.empty()) {
        Entry& e = *cold_.head;
        out[k++] = e.src;
        set_heat(e, Heat::Armed);
    }
    return k;
}

size_t UserEpoll::take_unarmed(const Source** out, size_t max) {
    std::lock_guard lock(mu_);
    size_t k = 0;
    for (List<Entry>* l : {&hot_, &cold_}) {
        while (k < max && !l->empty()) {
            Entry& e = *l->head;
            out[k++] = e.src;
            set_heat(e, Heat::Armed);
        }
    }
    return k;
}

void UserEpoll::disarmed(const Source* src) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(src);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    if (look(e) || e.heat == Heat::Armed) make_hot(e);
}

void UserEpoll::look_at_armed() {
    std::lock_guard lock(mu_);
    for (auto& [src, e] : entries_)
        if (e.heat == Heat::Armed) {
            look(e);
            make_hot(e);
        }
}

std::vector<UserEpoll::Registration> UserEpoll::registrations(const Source* src) const {
    std::lock_guard lock(mu_);
    std::vector<Registration> out;
    for (const auto& [key, r] : regs_) {
        if (src && key.first != src) continue;
        epoll_event ev{};
        ev.events =
            enabled(r) ? r.events & ~uint32_t(EPOLLERR | EPOLLHUP) : r.events & kPrivateBits;
        ev.data.u64 = r.data;
        out.push_back({r.fd, key.first, ev});
    }
    return out;
}

uint32_t UserEpoll::interest(const Source* src) const {
    std::lock_guard lock(mu_);
    auto it = entries_.find(src);
    if (it == entries_.end()) return 0;
    uint32_t events = 0;
    for (const Reg* r : it->second.regs)
        if (enabled(*r)) events |= r->events & ~kPrivateBits;
    return events;
}

Heat UserEpoll::heat(const Source* src) const {
    std::lock_guard lock(mu_);
    auto it = entries_.find(src);
    return it == entries_.end() ? Heat::Off : it->second.heat;
}

bool UserEpoll::pending() const {
    std::lock_guard lock(mu_);
    return !ready_.empty();
}

size_t UserEpoll::size() const {
    std::lock_guard lock(mu_);
    return regs_.size();
}

} // namespace usmc::readiness
