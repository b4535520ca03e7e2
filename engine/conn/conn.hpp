// SPDX-License-Identifier: MIT
#pragma once
// One side of a connection's data path: its transport's part (the rings
// and how the peer is reached: SMC-D's two DMBs, smcd/conn_part.hpp), the
// cursors only this side writes, and the socket that carries wake-ups
// (readiness/wakeup.hpp).
//
// Wake-ups cost a system call, so they are sent only to a peer that said it
// is waiting (the transport's ask_for_* and take_*_request: SMC-D's wait
// flags in the peer's control line, taken by the notifier with one atomic
// RMW), and at most one per call.
// Both sides use seq_cst for "publish cursor, then look at the wait flag" and
// "set wait flag, then look at the cursor again", so a wake-up is never lost.
//
//   sig       ours, what poll and epoll sets watch: a datagram socket bound
//             to a name made from our token. Readable when data or EOF may
//             be waiting: the peer sends a datagram to it by name; we drain
//             it when we find the ring empty. Writable when space may be
//             free: we fill it (into our sink) when the peer's ring is
//             full, and drain the sink when space is found, by our own
//             calls or when the peer rings our bell (space_watch.hpp).
//
// Every cursor the peer gives us is checked against the ring and our own
// cursors; a bad one marks the connection broken (ECONNRESET), nothing
// else.
#include "engine/base/forkref.hpp"
#include "engine/conn/conn_source.hpp"
#include "engine/conn/tcp_opts.hpp"
#include "engine/core/close_state.hpp"
#include "engine/core/conn_state.hpp"
#include "engine/core/transport.hpp"
#include "engine/readiness/conn_readiness.hpp"
#include "engine/readiness/wakeup.hpp"
#include "engine/transport/conn_part.hpp"

#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>
#include <sys/epoll.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <vector>

namespace usmc {

// Where a connection stands. A nonblocking connect() returns at once and the
// handshake runs on a worker (Connecting); it ends Active (SMC-D) or Tcp (the
// object then stays only so the descriptor's calls pass straight through).
enum class Phase : uint8_t { Active, Connecting, Tcp };

// The transport a connection runs on (engine/transport/conn_part.hpp: SMC-D's
// part today; SMC-R's comes beside it there).
using Transport = transport::Part;

// A connection moved to TCP with bytes of the rings still to hand over
// (af_smc_move.cpp): shared with the event loop, which pushes the resend
// when the application does not write.
struct MovedLeft {
    std::mutex mu;               // the resend's: the application's writes and the loop
    std::vector<uint8_t> resend; // to the TCP socket before any later write
    size_t resent = 0;
    int push_fd = -1;     // the loop's duplicate of the socket while it pushes
    bool shut_wr = false; // we had shut down writing: TCP's FIN goes after the resend
    std::atomic<bool> resend_left{false};
    std::vector<uint8_t> stash; // to the application's reads before the kernel's (rx_mu)
    size_t stashed = 0;
    std::atomic<bool> stash_left{false};
};

// smc_recv / smc_send: the connection moved to TCP (core::kMovedFlags): the
// caller takes the move and makes the call on the TCP socket. Never seen by
// the application.
constexpr ssize_t kSmcMoved = -EXDEV;
// smc_recv / smc_send would sleep, and no `sig` could be made to sleep on
// (usmc's descriptors used up): the caller moves the connection to TCP.
constexpr ssize_t kSmcNoSig = -ENOSR;

// The socket the application holds: descriptor references, phase,
// timeouts, fork and exec, learning, its record for observers. One of the
// three objects a connection side is (below).
struct ConnSocket {
    std::atomic<Phase> phase{Phase::Active};
    int tcp_fd = -1;                   // the TCP connection: a dead peer shows up here
    std::atomic<int> fd_refs{1};       // descriptors of this process naming the connection (dup)
    std::atomic<bool> nonblock{false}; // O_NONBLOCK, followed through fcntl/ioctl
    std::atomic<int> rcvtimeo_ms{-1}, sndtimeo_ms{-1}; // SO_RCVTIMEO / SO_SNDTIMEO
    std::atomic<uint8_t> tcp_opts{0}; // TCP_NODELAY, TCP_CORK as set (tcp_opts.hpp)
    uint32_t busy_poll_us = 0;
    uint32_t autocorking_size = 0;       // most bytes MSG_MORE / TCP_CORK hold back (config)
    std::atomic<bool> closing{false};    // this process is closing it: blocked calls return EBADF
    std::atomic<bool> rd_shut{false};    // shutdown(SHUT_RD): a read that would wait is at EOF
    int32_t diag_slot = -1;              // its record in the stats segment, -1: none
    std::atomic<int> so_error{0};        // a background handshake failed: SO_ERROR reports it once
    std::atomic<bool> worker_done{true}; // false while a handshake worker uses the object
    std::atomic<bool> late_clc{false};   // Tcp phase, but a CLC message may still arrive
    // Moved to TCP with the peer (af_smc_move.cpp): this process's copy is
    // Tcp phase, and `moved_left` while `left` holds bytes to hand over.
    std::atomic<bool> moved{false};
    std::atomic<bool> moved_left{false};
    std::shared_ptr<MovedLeft> left;
    // af_smc's marker: counted in this fork already; and what it was before
    // (a failed fork puts it back). Atomic: a failed fork's undo runs while
    // another thread's fork may mark (af_smc::fork_returned).
    std::atomic<uint64_t> fork_gen{0};
    std::atomic<uint64_t> prev_fork_gen{0};
    std::atomic<uint64_t> undone_gen{0}; // the failed fork whose reference was given back
    // Processes holding this side (fork): shared with our forked children
    // only (forkref.hpp); `own_refs` if that mapping was full.
    forkref::Count* owner_refs = &own_refs;
    forkref::Count own_refs{1};
    // af_smc's marker for a walk over the fd table (each connection once,
    // however many descriptors name it), and an exec's count-out: this
    // process left `owner_refs` (of generation `exec_gen`) before an exec.
    uint64_t walk_mark = 0;
    bool exec_closes = false, exec_out = false;
    uint32_t exec_gen = 0;
    // Learning whether SMC-D pays (learn.hpp). The learner this connection
    // reports to (0: none), and this process's count of its turns and bytes
    // until it pays (data path: relaxed loads and stores). `learn_word` is
    // shared with forked children: the ticket, and whether it was reported paid.
    static constexpr uint8_t kLearnDone = 0, kLearnIn = 1, kLearnOut = 2, kLearnNone = 3;
    uint64_t learn_ticket = 0;
    std::atomic<uint8_t> learn_dir{kLearnDone};
    std::atomic<uint32_t> learn_turns{0};
    std::atomic<uint64_t> learn_bytes{0};
    forkref::Count* learn_word = nullptr;

    bool shared_by_fork() const { return fork_gen.load(std::memory_order_relaxed) != 0; }
};

// One side of a connection is three objects (docs/ARCHITECTURE.md,
// "Objects") and the transport's part: the transport-independent core
// (core::ConnState: cursors, close state, urgent data, corking), the socket
// (ConnSocket), its readiness (readiness::ConnReadiness: what poll, epoll
// and blocked calls wait on), and, here, the transport's part with what the
// handshake agreed and what the data path counts.
struct SmcConn : core::ConnState, ConnSocket, readiness::ConnReadiness {
    // The transport's part (core/transport.hpp): the rings, the CDC both
    // ways, the requests and wake-ups. SMC-D: the two DMBs.
    Transport transport;
    // What a set kept in user memory looks at (conn_source.hpp).
    ConnSource source{this};
    uid_t peer_uid = transport::kUnknownPeer; // the peer's user (attach), labels our DMB for reuse
    // What the handshake agreed, for observers (diag.hpp): the two devices'
    // GIDs and the DMB tokens each side announced in CLC.
    uint64_t gid = 0, peer_gid = 0, token = 0, peer_token = 0;
    // Our DMB's owner token (smcd/cdc_line.hpp, offset 56): random, told
    // only in CLC, so only the peer that got the message can name the DMB.
    uint64_t dmb_secret = 0;
    // Client, during the handshake: our DMB is named in the Proposal
    // (clc::NamedDmb), so the server may take it with its Accept.
    bool named_dmb = false;

    std::atomic<bool> peer_gone{false}; // TCP connection closed under us (after close_state has it)
    std::atomic<bool> sent_after_peer_close{false}; // the one write TCP takes after the peer closed
    std::atomic<bool> waking_overrun{
        false}; // the peer held kWakingData past the bound once (rx.cpp)
    std::atomic<uint64_t> notifications{0}, notifications_suppressed{0}, cursor_updates{0};

    // Announce our consumer cursor (receiver, under rx_mu) or our connection
    // flags (any thread: shutdown/close must not wait for a blocked reader)
    // in the peer's control line. A short spin lock keeps the word monotonic.
    void publish_cons();
    void publish_flags();
    // Our consumer cursor, exact, with `move` (core::kMovedFlags) added to
    // our flags: false if a process holding our side moved it first.
    bool publish_move(uint8_t move);
    // A connection shared across fork() is closed by whichever process
    // closes last, which may not be the one that used it last: its own
    // cursors and flags are then stale. Take those all processes published
    // in shared memory instead (consumer cursor and flags in the peer's
    // control line, producer cursor in ours).
    void adopt_published();
    // The same, for one direction, before a send (under tx_mu) or a recv
    // (under rx_mu) of a connection that went through a fork: the process
    // that used it last may be another. Such a connection publishes every
    // cursor move at once (no corking, no held-back consumer cursor), so
    // what is published is all there is. False if what is published is
    // impossible (the peer can write there): the connection is broken.
    bool adopt_published_tx();
    bool adopt_published_rx();
    // Our side is up: its process count starts at 1 (af_smc.cpp).
    void start_owner_refs();
    // In a forked child: locks a parent thread held at the fork (a recv or
    // send blocked in it) belong to a thread that does not exist here.
    void reset_locks_after_fork();

  private:
    std::atomic_flag pub_lock_ = ATOMIC_FLAG_INIT;
    core::Cursor announced_; // consumer cursor last published, under pub_lock_
    void store_cons_word();
};

// The connection moved to TCP: the peer moved (its flags in our line), or
// a process of ours did (fork: our flags as sent, in the peer's line).
inline bool smc_move_noticed(const SmcConn& c) {
    if (c.moved.load(std::memory_order_acquire)) return true;
    if (c.transport.peer_conn_flags() & core::kMovedFlags) return true;
    return c.shared_by_fork() && (c.transport.sent_conn_flags() & core::kMovedFlags);
}

// The transport's CDC receive for this connection (core/cdc.hpp): what the
// peer last said, to be checked against our cursors before it counts.
inline core::PeerCdc smc_peer_cdc(const SmcConn& c) {
    return c.transport.receive();
}

// A new connection's wake-ups: its name, after `token` (ours in CLC: chosen
// before it is announced), or a spare (wakeup::take_spare) taken with the
// name and token it has, `blocked`: a connecting client's, unwritable
// until smc_unblock. The caller reads c.token after. No `sig` is made
// here: smc_ensure_sig makes it when a wait first needs one. Zeroes the
// local cursors. Always true today (the bool stays for the callers).
bool smc_conn_init_wakeups(SmcConn& c, bool blocked, uint64_t token);
// Epoll sets closed while holding an SMC connection's `sig` (counted at
// close): such a set may live on in a dup or a child, out of reach of an
// EPOLL_CTL_DEL by number, so a `sig` taken before cannot be a spare.
extern std::atomic<uint32_t> g_epoll_sets_closed;
// Whether `sig` may become a spare when the connection ends: made since
// the last fork, no epoll set closed since (above), never filled or
// shrunk, not blocked, nobody polling it.
bool smc_sig_reusable(const SmcConn& c);
// Before `sig` becomes a spare: our request for data withdrawn from the
// peer's line, and a wake-up it had in flight landed (bounded: false if
// it did not, and `sig` must then be closed).
bool smc_withdraw_requests(SmcConn& c);
// A connecting client's `sig` now reachable and writable.
void smc_unblock(SmcConn& c);
// Makes `sig` if there is none yet: before a blocking sleep, a poll() or
// select(), a registration in a kernel epoll set, a fork. Blocked if the
// connection is still connecting. False (errno set, logged) if it cannot
// be made, or the connection's `sig` was retired or closed already:
// the caller then moves the connection to TCP (or fails the call).
// `may_wait`: false where a lock held by the interrupted thread could
// hang us (a fork from a signal handler): it then gives up instead.
bool smc_ensure_sig(SmcConn& c, bool may_wait = true);
// Wakes everything that waits on `sig` (readable and writable): its end,
// or its retirement, is to be seen.
void smc_wake_all(SmcConn& c);
// Closes `sig` and its sink, once, whichever thread asks, and lets go of
// the peer's wakers.
void smc_close_wakeups(SmcConn& c);
// A connection that went TCP gives its `sig` up: closed now, or by the last
// poll() that uses it. A poll() of a Connecting connection reads `sig` only
// between smc_sig_enter (false: retired, look at the TCP socket) and
// smc_sig_leave.
void smc_retire_wakeups(SmcConn& c);
bool smc_sig_enter(SmcConn& c);
void smc_sig_leave(SmcConn& c);

// send/recv with socket semantics. Return bytes or -errno: -EAGAIN when
// `nonblock` and nothing could be done, -EPIPE after shutdown/peer close,
// -ECONNRESET on abort or a broken peer, -ETIMEDOUT/-EAGAIN after
// `timeout_ms` (>= 0; -1 waits forever), -EINTR when a signal interrupts.
// recv flags: MSG_PEEK, MSG_WAITALL. Returns 0 at EOF. A read never
// crosses an urgent mark; without SO_OOBINLINE the urgent byte is left out.
// `more`: MSG_MORE (hold the bytes back, see tx.hpp). `urgent`: MSG_OOB,
// the last byte sent is urgent (each publication of the call moves the
// mark to its end, as TCP marks what it pushes).
ssize_t smc_send(SmcConn& c, const iovec* iov, int iovcnt, bool nonblock, int timeout_ms,
                 bool more = false, bool urgent = false);
ssize_t smc_recv(SmcConn& c, const iovec* iov, int iovcnt, int flags, bool nonblock,
                 int timeout_ms);

// Bytes ready to read (FIONREAD/SIOCINQ: without SO_OOBINLINE only those
// before a standing urgent mark, as TCP counts them) and bytes sent but not
// yet consumed by the peer (SIOCOUTQ).
uint32_t smc_rx_available(const SmcConn& c);
uint32_t smc_tx_unconsumed(const SmcConn& c);

// Readiness as poll() bits, computed from the cursors and the close state
// (for poll/select): POLLPRI while urgent data waits to be read with MSG_OOB.
short smc_poll_events(SmcConn& c);

// Urgent data with TCP's semantics (Linux tcp_recv_urg, SIOCATMARK).
// recv(MSG_OOB): the urgent byte (1, or 0 with len 0), -EINVAL when there
// is none, it was read, or SO_OOBINLINE is set, -EAGAIN when it is being
// written (never waits), 0 at EOF. `peek`: MSG_PEEK.
ssize_t smc_recv_urgent(SmcConn& c, void* buf, size_t len, bool peek);
// SIOCATMARK: our read position is at the urgent mark.
bool smc_at_mark(const SmcConn& c);

// Before sleeping in poll/epoll on `sig`: the poll bits of `want` already
// true (`sig` is then made to show them), or 0 after arming the peer's
// wake-ups so `sig` will fire. Who else watches the TCP socket's end (the
// peer's crash), where the arm would otherwise look at it (a system call):
//   Nobody      the arm looks
//   EpollSets   only epoll sets see the answer, which they take from `sig`:
//               while this process's peer watch watches the socket, its end
//               needs no look (the watch wakes `sig`)
//   TheWait     the caller's own wait (poll) has the socket in its set: an
//               end that came already ends that wait at once
enum class TcpEndWatch : uint8_t { Nobody, EpollSets, TheWait };
short smc_arm(SmcConn& c, short want, TcpEndWatch watch = TcpEndWatch::Nobody);

// After a wait that armed for urgent data only: `sig` readable again if
// data is waiting (level-triggered watchers of it rely on that).
void smc_restore_level(SmcConn& c);
// Ask the peer for a wake-up on its next write: after any wake-up it is
// sending has landed, drain `sig`, set kWaitData. The caller looks at the
// ring again afterwards. `read_nothing`: a recv that found the ring empty
// (the second in a row drains even while the flag stands).
void smc_arm_for_data(SmcConn& c, bool read_nothing = false);
// `sig` readable: drain it (only if it may hold a byte), or wake it
// ourselves (for data the peer slipped in, or level-triggered truth).
void smc_drain_wakeup(SmcConn& c, bool read_nothing = false);
void smc_self_wake(SmcConn& c);
// `sig` holds the peer's wake-up already, so one of our own would only
// cost a datagram: the peer took our request since our last drain and the
// kernel says `sig` is readable.
bool smc_wake_queued(SmcConn& c);
// `sig` writable: fill it (not writable: the peer's ring is full; it also
// names our bell to the peer, which the caller asks for space with), or
// make it writable again (only if we filled it). `filled_here`: the
// caller's own fill may have landed after another thread took the flag and
// drained, so it drains whatever the flag says.
void smc_block_writable(SmcConn& c);
void smc_open_writable(SmcConn& c, bool filled_here = false);
// The peer freed space we asked for (kWaitSpace taken): ring the bell its
// process named in our control line (space_watch.hpp).
void smc_ring_peer_bell(SmcConn& c);
// Something this process saw changed the side's readiness (its peer's TCP
// end, room found by the space watch): the set kept in user memory that
// holds it looks at it (a datagram to its bell with our token).
void smc_wake_user(SmcConn& c);

// The close state moved on by `e` (any thread): the new state.
core::CloseState smc_close_event(SmcConn& c, core::CloseEvent e);
// The close state with the peer's connection flags as its control line
// shows them now folded in: SMC-D's receive of the CDC flags.
core::CloseState smc_close_state(SmcConn& c);
// A reset's ECONNRESET reported to the application (recv, send,
// SO_ERROR): TCP reports it once, then the end (EOF, EPIPE, no POLLERR).
// True if there was one to report.
bool smc_take_error(SmcConn& c);
// A word of the peer's out of bounds, or our `sig` gone: every call
// fails with ECONNRESET from now on.
void smc_break(SmcConn& c);
inline bool smc_broken(const SmcConn& c) {
    return c.close_state.load(std::memory_order_acquire) == core::CloseState::Broken;
}

// Looks at the TCP connection without reading: marks peer_gone when it has
// ended (the peer process died, or closed after announcing it).
bool smc_check_peer(SmcConn& c);
// From a poll of the TCP socket with POLLRDHUP asked for: true when it has
// ended, and then its end is in the close state (the peer's last flags
// first) and peer_gone set. Closed by a FIN with every byte we sent read is
// how TCP shows a process that ended with the connection open (exit, exec,
// a kill): an end of stream, as a close. A reset, or bytes of ours unread
// (TCP's close answers them with a reset): ECONNRESET.
bool smc_note_tcp_end(SmcConn& c, short revents);

// shutdown(SHUT_WR) / close / abort: tell the peer through the control line
// and wake it if it waits. smc_close does not wake our own threads: callers
// quiesce the connection first (or the process is exiting) and close its
// wake-up pair right after.
void smc_shutdown_write(SmcConn& c);
void smc_close(SmcConn& c, bool abort);

// Before the connection's memory goes: make calls blocked in other threads
// of this process return (EBADF) and wait until they have left.
void smc_quiesce(SmcConn& c);

} // namespace usmc
