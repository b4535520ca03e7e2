#include "engine/link_group.hpp"

#include "engine/base/sys.hpp"
#include "engine/smcd/cdc_line.hpp"

#include <algorithm>

namespace usmc::ism {

LinkGroups::~LinkGroups() {
    for (auto& g : groups_)
        drop(g);
}

void LinkGroups::drop(Group& g) {
    for (auto& t : g.theirs)
        dev_.unmap_peer(t.pin);
    g.theirs.clear();
}

void LinkGroups::expire_locked(uint64_t now_ns) {
    for (size_t i = groups_.size(); i-- > 0;)
        if (now_ns - groups_[i].used_ns > kIdleMs * 1000000) {
            drop(groups_[i]);
            groups_.erase(groups_.begin() + long(i));
        }
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
    if (it == groups_.end()) {
        groups_.push_back(Group{gid, pid, uid, {}, {}, 0});
        it = groups_.end() - 1;
    }
    it->used_ns = sys::mono_ns();
    if (our_serial && std::find(it->ours.begin(), it->ours.end(), our_serial) == it->ours.end())
        it->ours.push_back(our_serial);
    if (!their_serial || !theirs.valid()) return;
    for (auto& t : it->theirs)
        if (t.serial == their_serial) return;
    // Pinned: a view of the whole file keeps the mapping out of the idle list.
    if (auto pin = dev_.view_peer(theirs.ino, theirs.file_size, 0, theirs.file_size))
        it->theirs.push_back({their_serial, *pin});
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
        if (!g || !serial) return std::nullopt;
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
