// SPDX-License-Identifier: MIT
#pragma once
// The real libc: one table of function pointers, resolved once with
// dlsym(RTLD_NEXT). Everything in usmc that needs the kernel calls through
// this table, so the engine never re-enters the interposed functions.
#include <atomic>
#include <csignal>
#include <cstdint>
#include <fcntl.h>
#include <functional>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

namespace usmc::sys {

// X(name, return type, parameter list)
#define USMC_SYS_FUNCTIONS(X)                                                                      \
    X(socket, int, (int, int, int))                                                                \
    X(socketpair, int, (int, int, int, int*))                                                      \
    X(bind, int, (int, const sockaddr*, socklen_t))                                                \
    X(listen, int, (int, int))                                                                     \
    X(accept, int, (int, sockaddr*, socklen_t*))                                                   \
    X(accept4, int, (int, sockaddr*, socklen_t*, int))                                             \
    X(connect, int, (int, const sockaddr*, socklen_t))                                             \
    X(close, int, (int))                                                                           \
    X(close_range, int, (unsigned, unsigned, int))                                                 \
    X(shutdown, int, (int, int))                                                                   \
    X(read, ssize_t, (int, void*, size_t))                                                         \
    X(readv, ssize_t, (int, const iovec*, int))                                                    \
    X(write, ssize_t, (int, const void*, size_t))                                                  \
    X(writev, ssize_t, (int, const iovec*, int))                                                   \
    X(recv, ssize_t, (int, void*, size_t, int))                                                    \
    X(recvfrom, ssize_t, (int, void*, size_t, int, sockaddr*, socklen_t*))                         \
    X(recvmsg, ssize_t, (int, msghdr*, int))                                                       \
    X(recvmmsg, int, (int, mmsghdr*, unsigned, int, timespec*))                                    \
    X(send, ssize_t, (int, const void*, size_t, int))                                              \
    X(sendto, ssize_t, (int, const void*, size_t, int, const sockaddr*, socklen_t))                \
    X(sendmsg, ssize_t, (int, const msghdr*, int))                                                 \
    X(sendmmsg, int, (int, mmsghdr*, unsigned, int))                                               \
    X(sendfile, ssize_t, (int, int, off_t*, size_t))                                               \
    X(splice, ssize_t, (int, loff_t*, int, loff_t*, size_t, unsigned))                             \
    X(getsockopt, int, (int, int, int, void*, socklen_t*))                                         \
    X(setsockopt, int, (int, int, int, const void*, socklen_t))                                    \
    X(getsockname, int, (int, sockaddr*, socklen_t*))                                              \
    X(getpeername, int, (int, sockaddr*, socklen_t*))                                              \
    X(fcntl, int, (int, int, ...))                                                                 \
    X(ioctl, int, (int, unsigned long, ...))                                                       \
    X(poll, int, (pollfd*, nfds_t, int))                                                           \
    X(ppoll, int, (pollfd*, nfds_t, const timespec*, const sigset_t*))                             \
    X(select, int, (int, fd_set*, fd_set*, fd_set*, timeval*))                                     \
    X(pselect, int, (int, fd_set*, fd_set*, fd_set*, const timespec*, const sigset_t*))            \
    X(epoll_create, int, (int))                                                                    \
    X(epoll_create1, int, (int))                                                                   \
    X(epoll_ctl, int, (int, int, int, epoll_event*))                                               \
    X(epoll_wait, int, (int, epoll_event*, int, int))                                              \
    X(epoll_pwait, int, (int, epoll_event*, int, int, const sigset_t*))                            \
    X(epoll_pwait2, int, (int, epoll_event*, int, const timespec*, const sigset_t*))               \
    X(dup, int, (int))                                                                             \
    X(dup2, int, (int, int))                                                                       \
    X(dup3, int, (int, int, int))                                                                  \
    X(fork, pid_t, (void))                                                                         \
    X(vfork, pid_t, (void))                                                                        \
    X(daemon, int, (int, int))                                                                     \
    X(_exit, void, (int))                                                                          \
    X(_Exit, void, (int))                                                                          \
    X(execve, int, (const char*, char* const*, char* const*))                                      \
    X(execv, int, (const char*, char* const*))                                                     \
    X(execvp, int, (const char*, char* const*))                                                    \
    X(execvpe, int, (const char*, char* const*, char* const*))                                     \
    X(fexecve, int, (int, char* const*, char* const*))                                             \
    X(execveat, int, (int, const char*, char* const*, char* const*, int))                          \
    X(setuid, int, (uid_t))                                                                        \
    X(seteuid, int, (uid_t))                                                                       \
    X(setreuid, int, (uid_t, uid_t))                                                               \
    X(setresuid, int, (uid_t, uid_t, uid_t))                                                       \
    X(setgid, int, (gid_t))                                                                        \
    X(setegid, int, (gid_t))                                                                       \
    X(setregid, int, (gid_t, gid_t))                                                               \
    X(setresgid, int, (gid_t, gid_t, gid_t))                                                       \
    X(prctl, int, (int, ...))                                                                      \
    X(syscall, long, (long, ...))

struct Table {
#define USMC_SYS_FIELD(name, ret, params) ret(*name) params;
    USMC_SYS_FUNCTIONS(USMC_SYS_FIELD)
#undef USMC_SYS_FIELD
};

extern Table g_table;
extern std::atomic<int> g_state; // 0 unresolved, 1 resolving, 2 ready

// Resolves every entry; idempotent and safe to call from several threads.
// An entry the running libc lacks stays null (callers answer ENOSYS).
void resolve();

inline const Table& real() {
    if (__builtin_expect(g_state.load(std::memory_order_acquire) != 2, 0)) resolve();
    return g_table;
}

// Moves one of usmc's own descriptors (wake-up sockets, DMB memfds) into the top
// quarter of RLIMIT_NOFILE, returning its new number. Programs size tables
// by the descriptors they expect (wrk's event loop takes 10 + 3 per
// connection and fails beyond it); usmc's descriptors must not push the
// program's own sockets to higher numbers. If that range is full the
// descriptor keeps its number.
int place_high(int fd);
// For a connection's descriptors: if the top quarter is full the descriptor
// is closed and -1 returned (EMFILE), so connections never eat into the
// application's three quarters; the connection then runs as TCP.
int place_high_strict(int fd);

// This process's network namespace (the inode of /proc/self/ns/net, 0 if
// unknown): part of every abstract name usmc binds, so namespaces that
// share nothing else do not meet. Read once.
uint64_t netns_id();
// Where that top quarter starts.
int high_base();

// CLOCK_MONOTONIC in nanoseconds (system-wide: comparable across processes,
// as the registry's congestion time is).
inline uint64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Starts a detached thread of ours running `body`, with every signal
// blocked in it: a signal sent to the process goes to a thread of the
// application's, whose mask is its own choice (a program that blocks a
// signal to take it in sigwait, signalfd or epoll_pwait's mask must find
// it pending, not handled at once on one of our threads). False if the
// thread cannot be made.
bool start_thread(std::function<void()> body);

// A private epoll set served by a detached thread of ours, named `name`,
// running `loop(epfd)` for the rest of the process (the listen and peer
// watchers). Returns the set, or -1 if the set or the thread cannot be made.
int start_epoll_thread(void (*loop)(int epfd), const char* name);

// Names the calling thread (at most 15 characters) so that top -H, perf and
// /proc/PID/task/*/comm tell usmc's threads from the application's.
void name_this_thread(const char* name);

} // namespace usmc::sys
