// SPDX-License-Identifier: MIT
#include "engine/smcd/link_group.hpp"

#include "engine/base/count.hpp"
#include "engine/base/counters.hpp"
#include "engine/base/loop.hpp"
#include "engine/base/statseg.hpp"
#include "engine/base/sys.hpp"
#include "engine/smcd/cdc_line.hpp"

#include <algorithm>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace usmc::ism {

LinkGroups::LinkGroups(Device& dev) : dev_(dev), watched_(std::make_shared<Watched>()) {
    watched_->owner = this;
}

LinkGroups::~LinkGroups() {
    {
        // A handler running now finishes first; later ones find no owner.
        std::lock_guard lock(watched_->mu);
        watched_->owner = nullptr;
    }
    for (auto& g : groups_)
        drop(g);
}

void LinkGroups::close_pidfd(int pidfd) {
    loop::forget(pidfd);
    sys::real().close(pidfd);
}

void LinkGroups::show(Group& g) {
    statseg::LgrRecord r{};
    r.id = g.id;
    r.peer_pid = g.pid;
    r.peer_uid = g.uid;
    r.peer_gid = g.gid;
    r.their_segments = uint32_t(g.theirs.size());
    r.our_segments = uint32_t(g.ours.size());
    g.shown = statseg::publish_group(counters::current_segment(), g.shown, r);
}

void LinkGroups::show_count() {
    statseg::publish_link_groups(counters::current_segment(), dev_.gid(), groups_.size());
}

void LinkGroups::drop(Group& g) {
    statseg::withdraw_group(counters::current_segment(), g.shown);
    g.shown = -1;
    for (auto& t : g.theirs)
        dev_.unmap_peer(t.pin);
    g.theirs.clear();
    // A watch that fired already closes its pidfd in its handler.
    if (g.watch && loop::cancel(g.watch)) close_pidfd(g.pidfd);
    g.watch = 0;
    g.pidfd = -1;
}

void LinkGroups::watch_peer(Group& g) {
    // One descriptor per peer process, in usmc's quarter or none (the group
    // then goes when idle, as before).
    g.pidfd =
        sys::place_high_strict(static_cast<int>(sys::real().syscall(SYS_pidfd_open, g.pid, 0)));
    if (g.pidfd < 0) return;
    std::weak_ptr<Watched> w = watched_;
    int pidfd = g.pidfd;
    g.watch = loop::add(pidfd, EPOLLIN, -1, [w, pidfd](uint32_t) {
        auto watched = w.lock();
        if (!watched) {
            close_pidfd(pidfd);
            return;
        }
        std::lock_guard lock(watched->mu);
        if (watched->owner)
            watched->owner->peer_exited(pidfd);
        else
            close_pidfd(pidfd);
    });
    if (!g.watch) {
        sys::real().close(g.pidfd);
        g.pidfd = -1;
    }
}

void LinkGroups::peer_exited(int pidfd) {
    std::vector<uint64_t> inos;
    {
        std::lock_guard lock(mu_);
        auto it = std::find_if(groups_.begin(), groups_.end(),
                               [&](const Group& g) { return g.pidfd == pidfd; });
        if (it != groups_.end()) {
            for (auto& t : it->theirs)
                inos.push_back(t.pin.ino);
            it->watch = 0; // fired: the pidfd is ours to close, below
            it->pidfd = -1;
            drop(*it);
            groups_.erase(it);
            show_count();
            counters::count(counters::lgr_peer_gone);
        }
    }
    close_pidfd(pidfd);
    for (uint64_t ino : inos)
        dev_.forget_peer(ino);
}

void LinkGroups::abandon_after_fork() {
    if (!mu_.try_lock()) return;
    for (auto& g : groups_) {
        if (g.pidfd >= 0) sys::real().close(g.pidfd);
        g.pidfd = -1;
        g.watch = 0; // (the loop of this process starts afresh)
    }
    mu_.unlock();
}

void LinkGroups::expire_locked(uint64_t now_ns) {
    size_t before = groups_.size();
    for (size_t i = groups_.size(); i-- > 0;)
        if (now_ns - groups_[i].used_ns > kIdleMs * 1000000) {
            drop(groups_[i]);
            groups_.erase(groups_.begin() + long(i));
        }
    if (groups_.size() != before) show_count();
}

LinkGroups::Group* LinkGroups::find_locked(uint64_t gid) {
    uint64_t now = sys::mono_ns();
    expire_locked(now);
    Group* found = nullptr;
    for (auto& g : groups_)
        if (g.gid == gid) {
            if (found) return nullptr; // claimed by two processes: neither is believed
            found = &g;
        }
    if (found) found->used_ns = now;
    return found;
}

std::optional<uid_t> LinkGroups::peer_user(uint64_t gid) {
    std::lock_guard lock(mu_);
    Group* g = find_locked(gid);
    if (!g) return std::nullopt;
    return g->uid;
}

void LinkGroups::note_attach(uint64_t gid, pid_t pid, uid_t uid, uint32_t our_serial,
                             uint32_t their_serial, const Dmb& theirs) {
    std::lock_guard lock(mu_);
    expire_locked(sys::mono_ns());
    auto it = std::find_if(groups_.begin(), groups_.end(),
                           [&](const Group& g) { return g.gid == gid && g.pid == pid; });
    if (it != groups_.end() && it->uid != uid) { // the same pid under another user: a new group
        drop(*it);
        groups_.erase(it);
        it = groups_.end();
    }
    bool changed = false;
    if (it == groups_.end()) {
        groups_.push_back(Group{gid, pid, uid, {}, {}, 0});
        it = groups_.end() - 1;
        it->id = next_id_++;
        watch_peer(*it);
        show_count();
        changed = true;
    }
    it->used_ns = sys::mono_ns();
    if (our_serial && std::find(it->ours.begin(), it->ours.end(), our_serial) == it->ours.end()) {
        it->ours.push_back(our_serial);
        changed = true;
    }
    // A peer's new segments cost it nothing (sparse memfds) and each pins a
    // mapping of ours (vm.max_map_count): past the bound its next segments
    // are not kept, and connections in them attach (reuse is optional).
    if (their_serial && theirs.valid() && it->theirs.size() < kMaxPinnedSegments &&
        std::none_of(it->theirs.begin(), it->theirs.end(),
                     [&](const TheirSeg& t) { return t.serial == their_serial; })) {
        // Pinned: a view of the whole file keeps the mapping out of the idle list.
        if (auto pin = dev_.view_peer(theirs.ino, theirs.file_size, 0, theirs.file_size)) {
            it->theirs.push_back({their_serial, *pin});
            changed = true;
        }
    }
    if (changed) show(*it);
}

bool LinkGroups::peer_has(uint64_t gid, uint32_t serial) {
    if (!serial) return false;
    std::lock_guard lock(mu_);
    Group* g = find_locked(gid);
    return g && std::find(g->ours.begin(), g->ours.end(), serial) != g->ours.end();
}

std::optional<Dmb> LinkGroups::their_slot(uint64_t gid, uint32_t serial, uint32_t slot,
                                          uint32_t size, uint64_t token) {
    std::optional<Dmb> view;
    {
        std::lock_guard lock(mu_);
        Group* g = find_locked(gid);
        if (!g || !serial || !token) return std::nullopt; // (0: a slot nobody named)
        for (auto& t : g->theirs)
            if (t.serial == serial) {
                uint64_t offset = uint64_t{slot} * size;
                if (offset > UINT32_MAX) return std::nullopt;
                view = dev_.view_peer(t.pin.ino, size, uint32_t(offset), t.pin.file_size);
                break;
            }
    }
    if (!view) return std::nullopt;
    if (view->control()->owner_token.load(std::memory_order_acquire) != token) {
        dev_.unmap_peer(*view);
        return std::nullopt;
    }
    view->serial = serial;
    return view;
}

size_t LinkGroups::count() {
    std::lock_guard lock(mu_);
    return groups_.size();
}

} // namespace usmc::ism
