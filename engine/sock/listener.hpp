// SPDX-License-Identifier: MIT
#pragma once
// An SMC listener of this process: its registry entry and the queue between
// the handshake workers and the application's accept() (the kernel's
// smc_sock accept queue).
//
// Backlog (the short-lived-connection series, patch 2): connections in a
// handshake plus completed ones not yet accepted count against the listen
// backlog. At the limit accept() stops taking connections from the kernel
// listener, so the kernel's own queue fills and it drops SYNs as it does
// for TCP: at most backlog here plus backlog in the kernel.
//
// Readiness: the application's fd is still the kernel listener. Completed
// handshakes cannot make it readable, so an eventfd (`done_event`, readable
// while the queue is non-empty) joins it in every epoll set the application
// adds it to, with the application's epoll_data. While stalled at the
// backlog the kernel listener leaves those sets (it is readable, but
// accept() would not take from it: a level-triggered loop would spin).
#include "engine/base/forkref.hpp"
#include "engine/conn/conn.hpp"
#include "engine/discovery/listen_share.hpp"
#include "engine/discovery/registry.hpp"

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <vector>

namespace usmc {

// How the kernel listener gave us a connection: the peer's address, and
// the flags (SOCK_NONBLOCK, SOCK_CLOEXEC) it was accepted with (-1: not
// known). Nobody else holds the socket until accept() hands it out, so
// those are still its flags then.
struct Origin {
    sockaddr_storage peer{};
    socklen_t peer_len = 0; // 0: not known
    int flags = -1;
};

// A connection the workers are done with, waiting for accept().
struct Accepted {
    int fd = -1;
    std::unique_ptr<SmcConn> conn; // null: it runs as TCP
    uint32_t reason = 0;           // why TCP
    bool late_clc = false;         // TCP, but a CLC Proposal may still arrive
    bool error = false;            // not handed out (its handshake could not be queued)
    Origin origin;
    // Queued before this process first accepted: a process forked
    // meanwhile holds a copy too, and whichever accept()s first takes it
    // (this word, shared by fork only, from claim_v to taken). Null: ours.
    forkref::Count* claim = nullptr;
    uint64_t claim_v = 0;
    uint32_t claim_forks = 0; // forkref::forks_so_far() when queued: no copy elsewhere while equal
};

class SmcListener {
  public:
    SmcListener(registry::Listener reg, int fd, int backlog);
    ~SmcListener();
    SmcListener(const SmcListener&) = delete;
    SmcListener& operator=(const SmcListener&) = delete;

    bool ok() const { return done_event_ >= 0; }
    int fd() const { return fd_; }
    int done_event() const { return done_event_; }
    registry::Listener& reg() { return reg_; }

    void set_backlog(int backlog);
    int backlog() const { return backlog_.load(std::memory_order_relaxed); }

    // The SOCK_NONBLOCK / SOCK_CLOEXEC of the application's latest accept
    // (-1: none yet). Connections the engine accepts for it are nonblocking
    // as it asks, so that handing one out changes at most its close-on-exec
    // (nginx: one fcntl call a connection instead of three); the
    // connection's Origin says which flags it took.
    void note_accept_flags(int flags) { accept_flags_.store(flags, std::memory_order_relaxed); }
    int accept_flags() const { return accept_flags_.load(std::memory_order_relaxed); }

    // A connection goes to a worker / comes back from it.
    // `fd` (if any) is remembered until push_done: a child forked meanwhile
    // closes its copy, or the connection would outlive its handler there.
    void handshake_started(int fd = -1);
    // Worker: queues `a`, or hands it back when the listener is closed (the
    // caller then releases it).
    std::optional<Accepted> push_done(Accepted a);
    // The handshake of `fd` ended inside the accept() that began it, which
    // hands the connection out itself: counted out, not queued, nobody woken.
    void handshake_ended_here(int fd);
    // Takes the oldest completed connection; a stall ends here once the
    // queue has room again. (The application may be asleep on epoll with
    // nothing else to wake it: while stalled the kernel listener is out of
    // its sets, and the queue's eventfd is drained with the last entry. A
    // storm of connections froze an event-loop server for good that way.)
    std::optional<Accepted> pop_done();
    // Ends a stall if the queue has room (not under intake_mu()).
    void unstall_if_room();
    size_t queued() const; // completed, not accepted
    size_t in_handshake() const { return in_handshake_.load(std::memory_order_acquire); }
    bool at_backlog() const { return in_handshake() + queued() >= size_t(backlog()); }

    // The application's epoll_ctl on the listener fd, and the stall switch.
    int epoll_ctl(int epfd, int op, epoll_event* ev);
    // The socket was put in epoll sets before listen() (asyncore, pyftpdlib):
    // finds those registrations (/proc/self/fdinfo) and puts the queue's
    // eventfd beside each, as epoll_ctl() would have. Returns how many.
    int adopt_epoll_regs();
    void set_stalled(bool stalled);
    bool stalled() const { return stalled_.load(std::memory_order_relaxed); }

    // Held while taking one connection from the kernel listener, so the
    // backlog check and the intake are one step for accept() and the watcher.
    std::mutex& intake_mu() { return intake_mu_; }

    // The listen watcher runs for it in this process (from listen() on).
    bool accepts_here() const { return accepts_here_.load(std::memory_order_relaxed); }
    void set_accepts_here() { accepts_here_.store(true, std::memory_order_relaxed); }
    // The application of this process has called accept() on it.
    bool app_accepted() const { return app_accepted_.load(std::memory_order_relaxed); }
    void note_app_accept() {
        if (!app_accepted()) app_accepted_.store(true, std::memory_order_relaxed);
    }

    // The processes that hold it (listen_share.hpp).
    ListenShare& share() { return share_; }

    // Lifetime: the fd table holds one reference, each queued handshake one.
    void ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
    void unref();
    // In a forked child: the parent's queue, handshakes, epoll sets and
    // eventfd stay the parent's; this copy starts empty with its own...
    void after_fork_child();
    // ... except where the parent never accepted (a pre-fork master whose
    // engine took connections before its workers existed, or a server that
    // forks before its accept loop): the completed connections it queued
    // until then stay in both queues, and the first process to accept one
    // takes it (claim()); the other forgets its copy. The queue is held
    // still across the fork: before_fork() locks it, after_fork_parent()
    // and the child's handler let go.
    void before_fork();
    void after_fork_parent();
    // Whether this process takes `a` (popped): false if another took it.
    static bool claim(Accepted& a);

    // Its learner (learn.hpp; 0: not learning: learn_smc off, or an
    // explicit mode). Set at listen(), before any fork shares it.
    uint64_t learn_ticket = 0;

    // close(): no more accepts; returns what was queued, for the caller to release.
    std::deque<Accepted> close();

  private:
    struct Reg {
        int epfd;
        epoll_event ev;
    };
    void drain_event();

    registry::Listener reg_;
    const int fd_;
    int done_event_ = -1;
    std::atomic<int> backlog_;
    std::atomic<int> accept_flags_{-1};
    std::atomic<size_t> in_handshake_{0};
    std::atomic<int> refs_{1};
    std::atomic<bool> stalled_{false};
    std::atomic<bool> accepts_here_{false};
    std::atomic<bool> app_accepted_{false};
    bool fork_hold_ = false; // mu_ held across a fork by before_fork()
    mutable std::mutex mu_;
    std::mutex intake_mu_;
    std::deque<Accepted> done_;
    std::vector<Reg> regs_;
    std::vector<int> in_flight_;  // descriptors on a worker, not yet queued
    bool event_written_ = false;  // done_event_ written since its last drain (under mu_)
    bool edge_triggered_ = false; // an epoll set watches done_event_ with EPOLLET (under mu_)
    ListenShare share_;
    bool closed_ = false;
};

} // namespace usmc
