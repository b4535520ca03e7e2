// SPDX-License-Identifier: MIT
#pragma once
// Links: Unix connections kept between pairs of processes carry their SMC-D
// attaches (the kernel's link group, in spirit: set up once per peer, after
// which a connection only claims buffers). A client keeps a link to each
// server endpoint (GID) it attached to, more while several handshakes to it
// run at once (an exchange holds its link until the answer is in); the
// endpoint serves every link it accepted (ism_endpoint.cpp). Before links, every connection made,
// connected, questioned (SO_PEERCRED) and closed a Unix socket on both sides, a large share of
// a short-lived client's CPU per connection.
//
// Identities are taken once per link with SO_PEERCRED (each side's effective
// uid when the link was made). A process whose effective uid changed since
// must not be known by the old one: the client makes a new link when its
// euid differs from the link's, the endpoint closes links it accepted under
// another euid of its own.
#include <cstdint>
#include <functional>
#include <optional>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

namespace usmc::lgr {

// The abstract Unix address of the endpoint of `gid` in this network
// namespace (no file: scoped to the namespace, gone with the socket).
socklen_t endpoint_address(uint64_t gid, sockaddr_un& sun);

// The peer side of a link: the socket (nonblocking SOCK_SEQPACKET) and who
// owns the endpoint, as the kernel said when the link was made.
struct Peer {
    int fd = -1;
    pid_t pid = 0;
    uid_t uid = 0;
};

// What one exchange on a link came to.
enum class Outcome : uint8_t {
    Done,   // finished (accepted or refused): the link stays
    Stale,  // the link was closed by the peer before our request reached it:
            // a new link is made and the exchange runs again (once)
    Broken, // the link's state is unknown (timeout, half an exchange): it goes
};

// Runs `exchange` on the link to the endpoint of `gid` (made if needed),
// one exchange at a time per link. False if no link could be had (no such
// endpoint, its backlog full, all link slots busy) or the exchange did not
// end in Done.
bool with_link(uint64_t gid, const std::function<Outcome(const Peer&)>& exchange);

// A link held for one exchange whose answer comes later, on an event loop
// (the connect watch): the request goes out now, the answer is read when
// the link polls readable. Taken and given back on the same thread.
struct Hold {
    int slot = -1;
    Peer peer;
};
// An idle link to the endpoint of `gid` (made if there is room for one
// more), held; nullopt when every link to it is busy or none can be made
// (with_link waits for one instead).
std::optional<Hold> hold(uint64_t gid);
// Ends the exchange: Done keeps the link, anything else closes it.
void release(const Hold& h, Outcome o);

// Links currently open (tests, stats).
int open_links();
// Closes every idle link of this process (tests; the endpoints see EOF).
void close_all();
// In a forked child: the parent's links are not ours. Closed here without a
// word to the peer, which keeps serving the parent. No allocation.
void on_fork_child();

} // namespace usmc::lgr
