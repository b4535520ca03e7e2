// SPDX-License-Identifier: MIT
#include "engine/sock/listener.hpp"

#include "engine/base/sys.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <new>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

namespace usmc {

SmcListener::SmcListener(registry::Listener reg, int fd, int backlog)
    : reg_(std::move(reg)), fd_(fd), backlog_(std::max(backlog, 1)) {
    done_event_ = sys::place_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
}

SmcListener::~SmcListener() {
    if (done_event_ >= 0) sys::real().close(done_event_);
}

void SmcListener::set_backlog(int backlog) {
    backlog_.store(std::max(backlog, 1), std::memory_order_relaxed);
}

void SmcListener::handshake_started(int fd) {
    in_handshake_.fetch_add(1, std::memory_order_relaxed);
    if (fd < 0) return;
    std::lock_guard lock(mu_);
    in_flight_.push_back(fd);
}

std::optional<Accepted> SmcListener::push_done(Accepted a) {
    std::lock_guard lock(mu_);
    // Counted out once it is in the queue (or known not to go there): a
    // blocking accept() that sees neither waits for neither.
    struct Out {
        std::atomic<size_t>& n;
        ~Out() { n.fetch_sub(1, std::memory_order_release); }
    } out{in_handshake_};
    std::erase(in_flight_, a.fd);
    if (closed_) return a;
    // Wake accept() even for a connection that is dropped: below the
    // backlog again, it may take from the kernel listener. Written once
    // until the next drain: the event is readable until accept() empties
    // the queue, and a second write would only add to its count. Except
    // for an edge-triggered set: every write is an edge there, as every new
    // connection is one on a kernel listener (a program that accepts once
    // per edge works with the kernel's, and must with ours).
    if (!event_written_ || edge_triggered_) {
        uint64_t one = 1;
        ssize_t rc = sys::real().write(done_event_, &one, sizeof one);
        (void)rc;
        event_written_ = true;
    }
    if (a.error) return a;
    if (!app_accepted() && (a.claim = forkref::alloc())) {
        a.claim_v = a.claim->load();
        a.claim_forks = forkref::forks_so_far();
    }
    done_.push_back(std::move(a));
    return std::nullopt;
}

void SmcListener::handshake_ended_here(int fd) {
    std::lock_guard lock(mu_);
    std::erase(in_flight_, fd);
    in_handshake_.fetch_sub(1, std::memory_order_release);
}

std::optional<Accepted> SmcListener::pop_done() {
    std::optional<Accepted> a;
    {
        std::lock_guard lock(mu_);
        if (done_.empty()) {
            drain_event();
            return std::nullopt;
        }
        a = std::move(done_.front());
        done_.pop_front();
        if (done_.empty()) drain_event();
    }
    unstall_if_room();
    return a;
}

void SmcListener::unstall_if_room() {
    if (!stalled()) return;
    std::lock_guard intake(intake_mu_); // a stall decision in progress comes first
    if (!at_backlog()) set_stalled(false);
}

size_t SmcListener::queued() const {
    std::lock_guard lock(mu_);
    return done_.size();
}

void SmcListener::drain_event() {
    // Nothing written since the last drain: nothing to read (every accept()
    // that finds the queue empty came here, one failed read each).
    if (!event_written_) return;
    event_written_ = false;
    uint64_t v;
    ssize_t rc = sys::real().read(done_event_, &v, sizeof v);
    (void)rc;
}

int SmcListener::epoll_ctl(int epfd, int op, epoll_event* ev) {
    std::lock_guard lock(mu_);
    bool stalled = stalled_.load(std::memory_order_relaxed);
    auto it =
        std::find_if(regs_.begin(), regs_.end(), [&](const Reg& r) { return r.epfd == epfd; });
    if (!stalled) {
        int rc = sys::real().epoll_ctl(epfd, op, fd_, ev);
        if (rc != 0) return rc;
    } else if ((op == EPOLL_CTL_ADD) == (it != regs_.end())) {
        errno = op == EPOLL_CTL_ADD ? EEXIST : ENOENT;
        return -1;
    }
    epoll_event done{};
    if (ev) {
        done.events = EPOLLIN | (ev->events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE));
        done.data = ev->data;
    }
    sys::real().epoll_ctl(epfd, op, done_event_, op == EPOLL_CTL_DEL ? nullptr : &done);
    if (op == EPOLL_CTL_DEL) {
        if (it != regs_.end()) regs_.erase(it);
    } else if (it != regs_.end()) {
        it->ev = *ev;
    } else {
        regs_.push_back({epfd, *ev});
    }
    edge_triggered_ = std::any_of(regs_.begin(), regs_.end(),
                                  [](const Reg& r) { return (r.ev.events & EPOLLET) != 0; });
    return 0;
}

int SmcListener::adopt_epoll_regs() {
    struct stat self {};
    if (fstat(fd_, &self) != 0) return 0;
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) return 0;
    int found = 0;
    while (dirent* e = readdir(dir)) {
        char* end = nullptr;
        long epfd = std::strtol(e->d_name, &end, 10);
        if (*e->d_name == '\0' || *end != '\0' || epfd == dirfd(dir) || epfd == fd_) continue;
        char link[64] = {};
        char path[64];
        std::snprintf(path, sizeof path, "/proc/self/fd/%ld", epfd);
        if (readlink(path, link, sizeof link - 1) <= 0 ||
            std::strcmp(link, "anon_inode:[eventpoll]") != 0)
            continue;
        std::snprintf(path, sizeof path, "/proc/self/fdinfo/%ld", epfd);
        FILE* f = std::fopen(path, "re");
        if (!f) continue;
        char line[256];
        while (std::fgets(line, sizeof line, f)) {
            int tfd = -1;
            unsigned events = 0;
            unsigned long long data = 0, ino = 0;
            // tfd: N events: HEX data: HEX pos:N ino:HEX sdev:HEX
            if (std::sscanf(line, "tfd: %d events: %x data: %llx pos:%*d ino:%llx", &tfd, &events,
                            &data, &ino) != 4 ||
                tfd != fd_ || ino != static_cast<unsigned long long>(self.st_ino))
                continue;
            epoll_event ev{};
            ev.events = events;
            ev.data.u64 = data;
            std::lock_guard lock(mu_);
            bool known = std::any_of(regs_.begin(), regs_.end(),
                                     [&](const Reg& r) { return r.epfd == int(epfd); });
            if (known) continue;
            epoll_event done{};
            done.events = EPOLLIN | (events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE));
            done.data = ev.data;
            if (sys::real().epoll_ctl(int(epfd), EPOLL_CTL_ADD, done_event_, &done) != 0) continue;
            regs_.push_back({int(epfd), ev});
            edge_triggered_ |= (events & EPOLLET) != 0;
            ++found;
        }
        std::fclose(f);
    }
    closedir(dir);
    return found;
}

void SmcListener::set_stalled(bool stalled) {
    std::lock_guard lock(mu_);
    if (stalled_.load(std::memory_order_relaxed) == stalled) return;
    stalled_.store(stalled, std::memory_order_relaxed);
    for (auto& r : regs_) {
        if (stalled)
            sys::real().epoll_ctl(r.epfd, EPOLL_CTL_DEL, fd_, nullptr);
        else
            sys::real().epoll_ctl(r.epfd, EPOLL_CTL_ADD, fd_, &r.ev);
    }
}

void SmcListener::unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void SmcListener::before_fork() {
    if (app_accepted()) return; // the parent hands out its own connections
    mu_.lock();
    fork_hold_ = true;
}

void SmcListener::after_fork_parent() {
    if (!fork_hold_) return;
    fork_hold_ = false;
    mu_.unlock();
}

bool SmcListener::claim(Accepted& a) {
    if (!a.claim) return true;
    uint64_t v = a.claim_v;
    // (A word given back and handed out again has a new generation: the
    // old value never matches it.)
    bool won = a.claim->compare_exchange_strong(v, a.claim_v - 1, std::memory_order_acq_rel);
    if (won) forkref::free(a.claim);
    if (won) a.claim = nullptr;
    return won;
}

void SmcListener::after_fork_child() {
    new (&mu_) std::mutex();
    new (&intake_mu_) std::mutex();
    fork_hold_ = false;
    // Those queued before the parent first accepted are both processes'
    // (claim); the others are the parent's.
    std::erase_if(done_, [](Accepted& a) {
        if (a.claim) return false;
        (void)a.conn.release(); // the parent's; its memory is just a copy here
        if (a.fd >= 0) sys::real().close(a.fd);
        return true;
    });
    for (int fd : in_flight_) // the parent's workers own these connections
        sys::real().close(fd);
    in_flight_.clear();
    regs_.clear();
    edge_triggered_ = false;
    share_.after_fork_child();
    in_handshake_.store(0);
    refs_.store(1);
    stalled_.store(false);
    accepts_here_.store(false);
    app_accepted_.store(false);
    if (done_event_ >= 0) sys::real().close(done_event_);
    done_event_ = sys::place_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    event_written_ = false;
    if (!done_.empty() && done_event_ >= 0) { // inherited: readable for accept()
        uint64_t one = 1;
        ssize_t rc = sys::real().write(done_event_, &one, sizeof one);
        (void)rc;
        event_written_ = true;
    }
}

std::deque<Accepted> SmcListener::close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    share_.leave();
    for (auto& r : regs_) // the kernel drops the listener from the sets; our eventfd too
        sys::real().epoll_ctl(r.epfd, EPOLL_CTL_DEL, done_event_, nullptr);
    regs_.clear();
    return std::move(done_);
}

} // namespace usmc
