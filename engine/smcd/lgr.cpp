// SPDX-License-Identifier: MIT
#include "engine/smcd/lgr.hpp"

#include "engine/base/count.hpp"
#include "engine/base/counters.hpp"
#include "engine/base/sys.hpp"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <poll.h>
#include <unistd.h>

namespace usmc::lgr {

namespace {

// A process links to few endpoints at once (a few per server process it
// talks to); the least recently used idle link makes room for a new one.
constexpr int kMaxLinks = 64;
// An exchange waits for the endpoint's answer with the link to itself, so
// handshakes running at once to one peer get links of their own, up to
// this many (as many as a client has handshake workers by default). With
// one link per peer, the attaches of a connection storm's first burst went
// one round trip at a time, and the storm's rate with them.
constexpr int kLinksPerPeer = 8;

struct Slot {
    std::mutex mu;        // one exchange at a time on this link
    uint64_t gid = 0;     // 0: free
    int pins = 0;         // threads using or waiting for this slot (under g_mu)
    Peer peer;            // fd < 0: not connected
    uid_t our_euid = 0;   // ours when the link was made
    uint64_t used_ns = 0; // last exchange (eviction order)
};

// The table: which slot serves which GID, pins, and the descriptors of
// unpinned slots. A pinned slot's link is changed only by the thread that
// holds its `mu`.
std::mutex g_mu;
Slot g_slots[kMaxLinks];

void close_link(Slot& s) {
    if (s.peer.fd >= 0) sys::real().close(s.peer.fd);
    s.peer = Peer{};
}

// Under g_mu, on the (rare) way to a new link: idle links whose endpoint has
// gone (its process exited) are closed. An endpoint never writes first, so
// an idle link that polls readable is at its end.
void sweep_dead() {
    pollfd p[kMaxLinks];
    int idx[kMaxLinks];
    int n = 0;
    for (int i = 0; i < kMaxLinks; ++i)
        if (g_slots[i].pins == 0 && g_slots[i].peer.fd >= 0) {
            p[n] = {g_slots[i].peer.fd, POLLIN, 0};
            idx[n++] = i;
        }
    if (n == 0 || sys::real().poll(p, static_cast<nfds_t>(n), 0) <= 0) return;
    for (int k = 0; k < n; ++k)
        if (p[k].revents) {
            close_link(g_slots[idx[k]]);
            g_slots[idx[k]].gid = 0;
        }
}

// A slot for `gid`, pinned: an idle link to it if there is one, else a new
// one (up to kLinksPerPeer), else the link with the fewest waiting. nullptr
// if every slot is in use.
Slot* pin(uint64_t gid) {
    std::lock_guard lock(g_mu);
    Slot* victim = nullptr;
    Slot* least = nullptr;
    int links = 0;
    for (auto& s : g_slots) {
        if (s.gid != gid) continue;
        if (s.pins == 0) {
            s.pins = 1;
            return &s;
        }
        ++links;
        if (!least || s.pins < least->pins) least = &s;
    }
    if (least && links >= kLinksPerPeer) {
        ++least->pins;
        return least;
    }
    sweep_dead();
    for (auto& s : g_slots) {
        if (s.pins != 0) continue;
        if (s.gid == 0) {
            victim = &s;
            break;
        }
        if (!victim || s.used_ns < victim->used_ns) victim = &s;
    }
    if (!victim) {
        if (least) ++least->pins;
        return least;
    }
    close_link(*victim); // unpinned: nobody holds its mu
    victim->gid = gid;
    victim->pins = 1;
    victim->used_ns = 0;
    return victim;
}

void unpin(Slot& s) {
    std::lock_guard lock(g_mu);
    --s.pins;
    if (s.pins == 0 && s.peer.fd < 0) s.gid = 0;
}

// Connects a new link to the endpoint of `gid`. Nonblocking: a full
// endpoint backlog fails at once (EAGAIN) instead of holding a handshake.
bool connect_link(Slot& s, uint64_t gid, uid_t euid) {
    int fd = sys::real().socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return false;
    sockaddr_un sun;
    socklen_t len = endpoint_address(gid, sun);
    ucred cred{};
    socklen_t clen = sizeof cred;
    // The endpoint's owner (who listen()ed on it) is the process that will
    // map our DMBs: known from connect() on, before any descriptor goes out.
    if (sys::real().connect(fd, reinterpret_cast<sockaddr*>(&sun), len) != 0 ||
        sys::real().getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) {
        int saved = errno;
        sys::real().close(fd);
        errno = saved;
        return false;
    }
    s.peer = Peer{sys::place_high(fd), cred.pid, cred.uid};
    s.our_euid = euid;
    counters::count(counters::links_made);
    return true;
}

} // namespace

socklen_t endpoint_address(uint64_t gid, sockaddr_un& sun) {
    std::memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    int n = std::snprintf(sun.sun_path + 1, sizeof sun.sun_path - 1, "usmc-ism.%llu.%016llx",
                          static_cast<unsigned long long>(sys::netns_id()),
                          static_cast<unsigned long long>(gid));
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

bool with_link(uint64_t gid, const std::function<Outcome(const Peer&)>& exchange) {
    if (gid == 0) return false;
    Slot* s = pin(gid);
    if (!s) return false;
    bool done = false;
    {
        std::lock_guard lock(s->mu);
        uid_t euid = geteuid();
        if (s->peer.fd >= 0 && s->our_euid != euid) close_link(*s);
        for (int attempt = 0; attempt < 2 && !done; ++attempt) {
            if (s->peer.fd < 0 && !connect_link(*s, gid, euid)) break;
            Outcome o = exchange(s->peer);
            if (o == Outcome::Done) {
                s->used_ns = sys::mono_ns();
                done = true;
            } else {
                close_link(*s);
                if (o == Outcome::Broken) break;
            }
        }
    }
    unpin(*s);
    return done;
}

std::optional<Hold> hold(uint64_t gid) {
    if (gid == 0) return std::nullopt;
    Slot* s = nullptr;
    {
        std::lock_guard lock(g_mu);
        int links = 0;
        for (auto& t : g_slots) {
            if (t.gid != gid) continue;
            ++links;
            if (t.pins == 0) {
                s = &t;
                break;
            }
        }
        if (!s && links < kLinksPerPeer) {
            sweep_dead();
            for (auto& t : g_slots) {
                if (t.pins != 0) continue;
                if (t.gid == 0) {
                    s = &t;
                    break;
                }
                if (!s || t.used_ns < s->used_ns) s = &t;
            }
            if (s) {
                close_link(*s); // unpinned: nobody holds its mu
                s->gid = gid;
                s->used_ns = 0;
            }
        }
        if (!s) return std::nullopt;
        s->pins = 1;
    }
    s->mu.lock(); // unpinned until now: free at once
    uid_t euid = geteuid();
    if (s->peer.fd >= 0 && s->our_euid != euid) close_link(*s);
    if (s->peer.fd < 0 && !connect_link(*s, gid, euid)) {
        s->mu.unlock();
        unpin(*s);
        return std::nullopt;
    }
    return Hold{int(s - g_slots), s->peer};
}

void release(const Hold& h, Outcome o) {
    Slot& s = g_slots[h.slot];
    if (o == Outcome::Done)
        s.used_ns = sys::mono_ns();
    else
        close_link(s);
    s.mu.unlock();
    unpin(s);
}

int open_links() {
    std::lock_guard lock(g_mu);
    int n = 0;
    for (auto& s : g_slots)
        n += s.peer.fd >= 0;
    return n;
}

void close_all() {
    std::lock_guard lock(g_mu);
    for (auto& s : g_slots)
        if (s.pins == 0) {
            close_link(s);
            s.gid = 0;
        }
}

void on_fork_child() {
    new (&g_mu) std::mutex();
    for (auto& s : g_slots) {
        if (s.peer.fd >= 0) sys::real().close(s.peer.fd);
        s.~Slot();
        new (&s) Slot();
    }
}

} // namespace usmc::lgr
