// SPDX-License-Identifier: MIT
#pragma once
// The capability registry: which local listeners speak SMC. A client sends
// CLC bytes only to a destination with a live, trusted entry here; any other
// destination is plain TCP, untouched.
//
// One small file per listener in the stats directory, named by network
// namespace, address and port, created by the listener's process with mode
// 0644. Trust comes from what the kernel reports, never from the contents:
// an entry is believed only if the file's owner (stat) is root, the caller's
// own uid or a uid the configuration trusts, and the process it names is
// alive (pid + start time). Nobody else can write it.
//
// What others may write lives apart, in memory no one but the listener's
// process can resize: clients announce a pending SMC connect there, so a
// server knows whether waiting for a CLC Proposal is worth it. It is a
// sealed memfd (ism::make_sealed_memfd) that the publisher's endpoint hands
// to any local process asking with the entry's token (ism::fetch_shared): a
// file in /dev/shm that others can write, others can also truncate, and
// every process mapping it then dies of SIGBUS. Each user gets a memfd of
// its own (kPendingUsers; the endpoint knows the asker's user from
// SO_PEERCRED), and the server reads them all: the token is in the entry,
// which every local user reads, so with one memfd for all another user
// could zero the counts while a victim's Proposal was on its way, and the
// server handed that connection to its application as plain TCP, the
// Proposal as its first bytes. A user's forged counts now cost only time
// (plain clients from this host wait for the detect grace), never a byte.
#include "engine/base/sys.hpp"

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <sys/socket.h>
#include <sys/types.h>

namespace usmc::registry {

enum Flags : uint32_t {
    kSmcD = 1,    // SMC-D allowed on this listener
    kSmcR = 2,    // SMC-R allowed
    kLimitHs = 4, // SMC_LIMIT_HS set
    // Not stored: lookup() adds it while the entry's congested_until_ns lies
    // ahead and kLimitHs is set (handshakes congested: connect as plain TCP).
    kCongested = 8,
    // Not stored: lookup() adds it while the entry's learned_tcp_until_ns
    // lies ahead (the listener learned that SMC-D does not pay for its
    // connections: connect as plain TCP, learn.hpp).
    kLearnedTcp = 16,
};

struct Entry {
    // Stored last, with release: a reader that loads it (acquire) and finds
    // kMagic sees every other field written.
    std::atomic<uint32_t> magic;
    uint32_t version;
    int32_t pid;
    // Set by the publisher just before it removes the file: a client that
    // mapped it a moment ago does not use it.
    std::atomic<uint32_t> withdrawn;
    uint64_t start_time; // /proc/<pid>/stat field 22
    uint64_t gid;        // the listener's ISM GID (its endpoint is named after it)
    std::atomic<uint32_t> flags;
    uint32_t reserved2;
    // CLOCK_MONOTONIC (system-wide): the listener's handshakes count as
    // congested until then. A time, not a flag, so it ends by itself when the
    // server stops seeing handshakes (clients that bypass send none).
    std::atomic<uint64_t> congested_until_ns;
    // Under which the endpoint of `gid` shares the Pending announcements.
    uint64_t pending_token;
    // CLOCK_MONOTONIC: the listener's learner says TCP until then. A time,
    // as congested_until_ns, so a listener that stops renewing it (nobody
    // probes, or it died) is tried with SMC-D again.
    std::atomic<uint64_t> learned_tcp_until_ns;
};

struct Pending {
    std::atomic<uint64_t> connects;    // SMC connects announced, not yet finished
    std::atomic<uint64_t> deadline_ns; // CLOCK_MONOTONIC: after this, ignore both counts
    // Of those, the ones whose client port is not in `ports` (yet): between
    // connect() and the port's announcement, or no slot was free.
    std::atomic<uint64_t> unported;
    // Which connections: the client ports of announced connects, as
    // port << 48 | expiry (CLOCK_MONOTONIC ms), open addressing by port.
    // (The kernel knows per connection from the SYN's SMC option; this is
    // usmc's stand-in, written right after connect() returns.)
    static constexpr unsigned kPortSlots = 2048;
    std::atomic<uint64_t> ports[kPortSlots];
};

// How many users' clients can announce connects to one listener: each
// user that asks gets a Pending memory of its own (the first asker of a
// user takes one nobody had). A client of a user that comes when all are
// taken gets none, and connects as plain TCP (NOLISTENER).
constexpr unsigned kPendingUsers = 4;

struct Found {
    int32_t pid = 0;
    uint64_t gid = 0; // the publisher's endpoint
    uint32_t flags = 0;
    uid_t owner = 0;
};

// Network namespace id of this process (sys::netns_id).
using sys::netns_id;

// A forked child: the lookup cache's lock may have been held by a parent thread.
void on_fork_child();

// The file name stem for a listener address ("usmc-listen.<netns>.<ip>.<port>").
std::string entry_name(const sockaddr* addr, socklen_t len);

class Listener {
  public:
    // Publishes `addr` (the bound address) for this process, whose endpoint
    // is `gid`'s; its Pending memory is shared there (ism::share). Fails
    // quietly (returns an unpublished Listener) when the name is taken by
    // someone else or no memory can be had.
    static Listener publish(const sockaddr* addr, socklen_t len, uint64_t gid, uint32_t flags);
    Listener() = default;
    Listener(Listener&& o) noexcept;
    Listener& operator=(Listener&& o) noexcept;
    ~Listener();

    bool published() const { return entry_ != nullptr; }
    // The listening socket was closed here. If the kernel still lists it as
    // listening (other processes hold it: pre-fork servers), the entry stays
    // for them; otherwise it is removed, by whichever process gets here last.
    void socket_closed(uint64_t inode, int fd);
    void set_flag(uint32_t flag, bool on);
    void set_congested_until(uint64_t mono_ns);
    // Publishes the listener's learned decision (written only when it changed).
    void set_learned_tcp_until(uint64_t mono_ns);
    // Clients that announced an SMC connect and have not finished it.
    uint64_t pending_connects() const;
    // Of those, the ones whose client port is not known: a connection from
    // a port not announced may still be one of them. (Read it before
    // expects_port: a client announces its port, then leaves this count.)
    uint64_t unported_connects() const;
    // Whether the connection from client port `port` was announced.
    bool expects_port(uint16_t port) const;
    void withdraw();
    // Marked withdrawn (clients stop believing it) while this process execs,
    // and back if the exec fails; only the publishing process's own entry.
    void mark_exec(bool going);

  private:
    std::string path_;
    Entry* entry_ = nullptr;
    Pending* pending_[kPendingUsers] = {}; // one per user that announces (ism::share)
    uint64_t pending_token_ = 0;
    uint16_t port_ = 0; // the published port, host order
    void drop_pending();
};

// Whether the socket with this inode still listens on `port` in our network
// namespace (the kernel's sock_diag answers; false when it cannot).
bool still_listening(uint64_t inode, uint16_t port);

// The trusted entry for destination `addr` (exact address first, then the
// wildcard address of its family), or nullopt. Whether its publisher is
// still alive is not asked (a system call): a connect that would go TCP
// anyway (a bypass) needs no answer, one that tries SMC asks
// publisher_alive() before it sends anything.
std::optional<Found> lookup(const sockaddr* addr, socklen_t len,
                            std::span<const uint32_t> trusted_uids);

// Whether the process that published the entry lookup() just found for
// `addr` (`pid`) is still alive (its pidfd). A dead one's entry is dropped:
// the next lookup() finds the wildcard's, if any.
bool publisher_alive(const sockaddr* addr, socklen_t len, int32_t pid);

// Client side: announce / finish an SMC connect to `addr`'s listener, as
// found by lookup() just before. Before connect() without a port (the
// count); once connect() has chosen the client port, with it (begin); at the
// end with the port if it was given. The first count (no port) announced
// to a listener fetches its Pending memory from its endpoint; a port or an
// end never does (they never wait on the publisher). False if the announcement
// could not be made: the connection must then not send CLC (the server
// would take it as plain TCP).
bool announce_pending(const sockaddr* addr, socklen_t len, bool begin, uint16_t client_port = 0);
// The end of a connect that gave up waiting for the server's answer
// (CLCWAIT) with its Proposal on the stream: its port stays known for long
// (not only CLC_WAIT_TIME), so a server that accepts it however late still
// takes the Proposal and the Decline after it off the stream. False if the
// port could not be kept (no slot free).
bool announce_gave_up(const sockaddr* addr, socklen_t len, uint16_t client_port);
// The server's late answer came: the port kept by announce_gave_up goes.
bool announce_answered(const sockaddr* addr, socklen_t len, uint16_t client_port);

} // namespace usmc::registry
