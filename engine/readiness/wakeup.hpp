// SPDX-License-Identifier: MIT
#pragma once
// Wake-ups between the two processes of an SMC-D connection, and the one
// descriptor per connection side that poll() and the application's epoll
// sets watch in place of its TCP socket: `sig`, an unconnected Unix datagram
// socket bound to an abstract name made from the token its side announced
// in CLC. Nothing travels per connection: the peer reaches `sig` by name.
// It is made only when a wait first needs it (smc_ensure_sig): a set kept in
// user memory never does, and until then a datagram to the name fails.
//
//   readable  a datagram is queued: data or an end may be waiting. The peer
//             (or we ourselves) sends one, from a waker socket of its own
//             (below), when it takes our "waiting for data" flag; we drain
//             `sig` when we find the ring empty.
//   writable  unless `sig` holds a fill: the peer's ring was full, and `sig`
//             sent a 2 KiB datagram into its sink, a socket of ours made at
//             the connection's first fill and connected to `sig` (nobody
//             else can send into it). With `sig`'s send buffer at the
//             minimum, one queued fill is more than a quarter of it, so the
//             kernel stops reporting it writable until the sink is drained;
//             readability is untouched. We drain the sink: when our own
//             calls find space, and when the peer rings our bell (a
//             datagram to one bound socket per process, space_watch.hpp)
//             after freeing space we waited for.
//   blocked   a connecting client's `sig` is connected to this process's
//             blocker, a socket whose receive queue is kept full: the kernel
//             then reports `sig` unwritable (its peer cannot take a
//             datagram) and refuses every other sender (EPERM). Disconnecting
//             it when the connection is up gives the OUT edge.
//
// Why datagrams by name: a socket pair per connection cost three
// descriptors per side (both ends, and the peer's far end, passed with
// SCM_RIGHTS at every attach); this costs one (two while a connection's
// sink exists), and no descriptor crosses between processes for it.
//
// Wakers: a datagram is charged to its sender's send buffer until it is
// read, so one waker socket holds at most a few hundred undrained wake-ups.
// Each peer process (by GID) gets a pool of its own that grows while its
// members are full (a peer that never drains fills only its own pool), and
// our own process one for self-wake-ups.
//
// Anyone local can send a datagram to an unconnected `sig` (its name is in
// /proc/net/unix): a spurious "readable", taken by our next drain (a drain
// takes no control messages: descriptors a stranger attaches are closed by
// the kernel). It never forges data or an end, and a full queue already
// means "readable". Every call passes MSG_DONTWAIT and MSG_NOSIGNAL.
#include <atomic>
#include <cstdint>
#include <optional>
#include <sys/socket.h>
#include <sys/un.h>

namespace usmc::wakeup {

// An abstract Unix address.
struct Name {
    sockaddr_un sun{};
    socklen_t len = 0;
    bool valid() const { return len != 0; }
};
// The `sig` of the connection side that announced `token` in CLC, and the
// bell of the process whose bell id is `id` (space_watch.hpp).
Name sig_name(uint64_t token);
Name bell_name(uint64_t id);

// A new `sig` (nonblocking, close-on-exec, in usmc's descriptor range),
// `blocked` or not; -1 (errno EMFILE, ...) if it cannot be made.
int make_sig(bool blocked);
// Binds `sig` to its name: before the token is announced, so that nobody
// else can hold the name. False if the name is taken (or the bind fails).
bool name_sig(int sig, const Name& name);
// A blocked `sig` becomes unconnected: writable, reachable by name.
void unblock(int sig);
// An unconnected `sig` becomes blocked again (a spare taken by a client).
bool block(int sig);

// Spare `sig`s: a connection that ends gives its `sig` back here rather
// than closing it, and the next connection of this process takes it with
// its name and token, so a short connection pays no socket, bind and close
// of its own (four system calls each side, and the kernel's work of making
// and releasing a socket). Only a `sig` no other process holds and no
// epoll set holds any more comes here (the caller's part, close.cpp);
// a spare made before a fork since is closed, not taken.
struct Spare {
    int fd = -1;
    uint64_t token = 0;
    Name name;
    bool clean = false; // nothing queued by its last connection: no drain needed
};
// False: the pool is full (the caller closes it).
bool park(const Spare& s);
// A spare, or nullopt. The caller drains it (after blocking it, if it
// wants it blocked) unless it is `clean`: its last connection left nothing
// in it, and a datagram a stranger sent meanwhile is a spurious
// "readable", as on any `sig`.
std::optional<Spare> take_spare();
// Takes every datagram queued on `fd` (one system call).
void drain(int fd);

// Makes `sig` (named after `token`) unwritable: its sink gets one fill.
// The sink (`sink`, made on first use and kept; `sink_name`, its name,
// written before `sink` is) is connected to `sig` and bound to a name the
// kernel picks. `shrink`: first set `sig`'s send buffer to the minimum
// (once per `sig`). False if the sink cannot be made, or another call is
// making it (`sig` then stays writable). `sink` holds kSinkMaking while
// one call makes it: whoever closes the connection swaps in -1, and the
// maker then closes what it made.
constexpr int kSinkMaking = -2;
bool fill(int sig, uint64_t token, std::atomic<int>& sink, Name& sink_name, bool shrink);
// The sink drained: `sig` writable again.
inline void unfill(int sink) {
    if (sink >= 0) drain(sink);
}

// A pool of waker sockets for one peer process (GID), counted by the
// connections that use it.
struct Wakers;
// The pool for `gid` (made if needed); nullptr if no socket can be made.
// 0 is this process's own (self-wake-ups).
Wakers* wakers_for(uint64_t gid);
void release(Wakers* w);
// This process's own pool (made on first use, kept): wake-ups we send our
// own `sig`. nullptr if no socket can be made.
Wakers* wakers_for_self();
// One datagram to `to` (a `sig` or a bell). A full receive queue already
// means "woken"; a full waker moves on to another of the pool.
void send(Wakers* w, const Name& to);
// The same with an 8-byte payload: the token of the connection side a
// bell's owner is woken for (its set finds the connection by it).
void send_token(Wakers* w, const Name& to, uint64_t token);

// In a forked child: the pools' lock may have been held at the fork.
void after_fork_child();

} // namespace usmc::wakeup
