// SPDX-License-Identifier: MIT
#pragma once
// The socket layer of the engine (the kernel's af_smc.c): what the preload
// calls for an SMC-capable TCP socket. The preload owns symbol interposition;
// this file owns the protocol decisions: who becomes an SMC candidate, when
// handshakes run, how a connection in SMC mode answers socket calls.
#include "engine/conn/conn.hpp"
#include "engine/sock/runtime.hpp"

#include <atomic>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>

namespace usmc::af_smc {

// The connection behind `fd`, or nullptr (plain TCP or not a socket): one
// relaxed atomic load, the whole cost for every other descriptor.
extern std::atomic<std::atomic<SmcConn*>*> g_conns;
extern uint32_t g_conns_capacity;
inline SmcConn* conn_of(int fd) {
    auto* conns = g_conns.load(std::memory_order_acquire);
    if (!conns || static_cast<unsigned>(fd) >= g_conns_capacity) return nullptr;
    return conns[fd].load(std::memory_order_acquire);
}

// Sets up the connection table (runtime init); `busy_poll_us` > 0 makes
// epoll_wait/poll spin that long before sleeping on sets with SMC fds.
void init(uint32_t capacity, uint32_t busy_poll_us);

// (runtime::engine_hooks, defined in af_smc.cpp: init, the fork handlers,
// holds_smc_connections and on_exit, for the runtime to call.)

// listen(): publishes SMC listeners in the registry; listen() again on a
// listener changes its backlog.
void on_listen(int fd, int backlog);
void on_listen_again(int fd, int backlog);
bool is_listener(int fd);
// A socket put into an epoll set before its connect(): the kernel's set then
// holds the TCP socket, where an SMC connection's readiness would never
// show (nginx registers its upstream sockets before connecting), so its
// connect stays TCP (EPOLLEARLY).
void note_epoll_add(int fd);
// SMC_LIMIT_HS of fd as it applies now. A listener whose option was never
// set follows the global knob (limit_smc_hs in usmc.toml) while it runs;
// other sockets keep the value they were created with, as in the kernel.
bool limit_hs(int fd);
// setsockopt(SOL_SMC, SMC_LIMIT_HS) succeeded on fd (a listener's registry
// entry follows it).
void on_limit_hs(int fd, bool on);
// connect(): the real connect, then the SMC-D handshake for a candidate
// (in the calling thread when blocking, on a worker when not).
int connect(int fd, const sockaddr* addr, socklen_t len);
// accept()/accept4(): the real accept, classification; handshakes run on
// workers and come back through the listener's queue.
int accept(int lfd, sockaddr* addr, socklen_t* len, int flags, bool use_accept4);

// Descriptor bookkeeping. close(): on_close before the real close, then
// after_close with what on_close returned (a listener's registry entry is
// settled once the kernel has dropped our reference).
struct Closed {
    void* listener = nullptr;
    uint64_t inode = 0;
    int fd = -1;
};
Closed on_close(int fd);
void after_close(const Closed& closed);
void on_dup(int from, int to);

// Data calls on an SMC connection: bytes, or -1 with errno.
ssize_t recv(SmcConn* c, int fd, const iovec* iov, int iovcnt, int flags);
ssize_t send(SmcConn* c, int fd, const iovec* iov, int iovcnt, int flags);
ssize_t sendfile(SmcConn* c, int fd, int in_fd, off_t* offset, size_t count);
int shutdown(SmcConn* c, int fd, int how);
// fcntl F_SETFL / ioctl FIONBIO / SO_RCVTIMEO / SO_SNDTIMEO seen on an SMC fd.
void set_nonblock(SmcConn* c, bool on);
void set_timeout(SmcConn* c, int optname, const void* optval, socklen_t optlen);
// setsockopt / getsockopt(IPPROTO_TCP, TCP_NODELAY or TCP_CORK) on an SMC
// connection: 0, or -1 with errno. Active: kept and answered by usmc
// (conn/tcp_opts.hpp) with the kernel's semantics, the send path following
// (TCP_CORK holds, TCP_CORK off and TCP_NODELAY on push), no system call.
// Connecting, or shared by fork (another process keeps its own copy): the
// kernel's socket, and usmc's copy follows it.
int set_tcp_option(SmcConn* c, int fd, int optname, const void* optval, socklen_t optlen);
int get_tcp_option(SmcConn* c, int fd, int optname, void* optval, socklen_t* optlen);
// FIONREAD/SIOCINQ, SIOCOUTQ and SIOCATMARK.
int ioctl_queue(SmcConn* c, int fd, unsigned long request, int* out);
// getsockopt(SO_ERROR): true when usmc answers, with the error in `*err`:
// a failed background handshake's, once, or an SMC connection's reset,
// once (the kernel's socket may hold the same reset: taken with it). False:
// the kernel's socket answers.
bool take_so_error(int fd, int* err);

// Readiness.
bool any_smc(const pollfd* fds, nfds_t n);
int poll(pollfd* fds, nfds_t n, int timeout_ms, const sigset_t* mask);
int epoll_ctl(int epfd, int op, int fd, epoll_event* ev);

// Busy polling in epoll_wait: per epoll fd, how many SMC connections are
// registered in it (only kept when busy_poll_us > 0). An epoll set without
// SMC fds costs one load here and goes straight to the kernel.
extern std::atomic<int32_t>* g_epoll_smc;
extern uint32_t g_busy_poll_us;
inline bool epoll_spins(int epfd) {
    auto* sets = g_epoll_smc;
    return sets && static_cast<unsigned>(epfd) < g_conns_capacity &&
           sets[epfd].load(std::memory_order_relaxed) > 0;
}
// epoll_wait/epoll_pwait on a set with SMC fds: spins (the peer's wake-up
// then lands on a running thread, with no sleep and no cross-core wake-up)
// for up to busy_poll_us, then sleeps for what is left of the timeout.
int epoll_wait_spin(int epfd, epoll_event* evs, int max, int timeout_ms, const sigset_t* mask);

// Epoll sets kept in user memory (user_sets.hpp): whether `epfd` has a
// user-memory part (one load while no set ever had one); a wait on it
// (false: fallen back, ask the kernel); and the calls that make a set fall
// back (it is nested in another set, or polled).
bool epoll_in_user_memory(int epfd);
bool epoll_wait_user(int epfd, epoll_event* evs, int max, int64_t timeout_ns, const sigset_t* mask,
                     bool pwait2, int* rc);
void epoll_set_watched(int epfd);
// After a wait that went to the kernel while `epfd` had no user-memory part:
// if it has one now (made meanwhile by another thread), its bell's event is
// taken out of `evs` (the count left; 0: wait again, in user memory).
int epoll_kernel_returned(int epfd, epoll_event* evs, int n);
bool any_user_set();

// fork: before it, every connection gains the reference the child will
// hold (so a parent that closes at once does not end it); if fork fails,
// fork_returned(true) gives them back. The child gets its own device and
// endpoint.
void before_fork();
void after_fork_parent();
void fork_returned(bool failed);
void on_fork_child();
// Whether this process holds SMC-D connections (a forked child, before
// on_fork_child: whether it inherited any).
bool holds_smc_connections();
// Around an exec of this process (not a vfork child's): the listeners this
// process published are marked withdrawn first, because the new program
// inherits their sockets but not usmc's state (its endpoint closes), and a
// client that still believed the entry would send CLC to a program that
// may not speak it. exec_failed() marks them live again.
void before_exec();
void exec_failed();
// Before this process installs a seccomp filter: its SMC connections move
// to TCP with their peers (the filter may forbid what the data path calls).
void before_sandbox();
// Before this process sets up an io_uring: its reads, writes and
// epoll_ctl (IORING_OP_EPOLL_CTL) on sockets would bypass usmc, so every
// connection moves to TCP with its peer and new ones are TCP.
void before_io_uring();
// Before a message with descriptors (SCM_RIGHTS) goes out: another process
// is to hold them. An SMC connection among them moves to TCP with its peer
// (the other process reads and writes the socket, not our rings), and an
// epoll set kept in user memory falls back to the kernel's (the other
// process waits on the kernel's set).
void before_pass(const msghdr* msg);
// Process exit (library destructor, or _exit): connections still open are
// closed in order, so peers read EOF as they would from TCP, not a reset;
// one another process still holds (fork) is counted out, so that process's
// close is the last. Once per process.
void on_exit();

// The application writes to a TCP connection that still carries the late-CLC
// marker: a late Proposal will then be swallowed without a Decline.
void note_late_write(int fd);

// recv() answers this when the fd is TCP after all (a late CLC Proposal was
// handled): the caller makes the real call.
constexpr ssize_t kPassThrough = -2;

} // namespace usmc::af_smc
