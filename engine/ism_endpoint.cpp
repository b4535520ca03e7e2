#include "engine/ism_endpoint.hpp"

#include "engine/registry.hpp"
#include "engine/sys.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace usmc::ism {

namespace {

constexpr uint32_t kMagic = 0x55534d41; // "USMA"
constexpr int kFdCount = 3;

struct Request {
    uint32_t magic;
    uint32_t dmb_size;
    uint64_t token;
};
struct Reply {
    uint32_t magic;
    int32_t status; // 0 or a positive errno
    uint32_t dmb_size;
    uint32_t reserved;
};

socklen_t endpoint_address(uint64_t gid, sockaddr_un& sun) {
    std::memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    // Abstract namespace (leading NUL): scoped to the network namespace, no file.
    int n = std::snprintf(sun.sun_path + 1, sizeof sun.sun_path - 1, "usmc-ism.%llu.%016llx",
                          static_cast<unsigned long long>(registry::netns_id()),
                          static_cast<unsigned long long>(gid));
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

bool send_with_fds(int sock, const void* data, size_t len, const int* fds, int nfds) {
    iovec iov{const_cast<void*>(data), len};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFdCount)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (nfds > 0) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    // Never blocks: each side sends one message into an empty queue (a
    // peer that let it fill is not worth waiting for). The endpoint needs no
    // SO_SNDTIMEO for its answer.
    return sys::real().sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) ==
           static_cast<ssize_t>(len);
}

// Receives exactly `len` bytes and exactly kFdCount descriptors (or none when
// `want_fds` is false). Any descriptor that arrives is either returned or
// closed: a hostile peer cannot leak descriptors into us.
bool recv_with_fds(int sock, void* data, size_t len, int* fds, bool want_fds) {
    iovec iov{data, len};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = sys::real().recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    int got = 0;
    int received[8];
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int k = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k && got < 8; ++i)
            std::memcpy(&received[got++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    bool ok = n == static_cast<ssize_t>(len) && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
              got == (want_fds ? kFdCount : 0);
    if (ok && want_fds) {
        // The eventfds stay for the connection's life: into usmc's range.
        // The DMB's (first) is closed as soon as it is mapped, or at once
        // when the mapping is cached: not worth two more system calls.
        fds[0] = received[0];
        for (int i = 1; i < kFdCount; ++i) {
            fds[i] = sys::place_high_strict(received[i]);
            ok = ok && fds[i] >= 0;
        }
        if (!ok)
            for (int i = 0; i < kFdCount; ++i)
                if (fds[i] >= 0) sys::real().close(fds[i]);
        return ok;
    } else
        for (int i = 0; i < got; ++i)
            sys::real().close(received[i]);
    return ok;
}

// Is fd an eventfd? Eventfds share one anonymous inode (as do other
// anon-inode files), so an fstat matching a known eventfd's inode narrows it
// to those; /proc's link name then settles it. The name is looked at once
// per distinct inode, not per connection (the readlink was ~5 % of a
// short-lived server's CPU).
bool is_eventfd(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return false;
    static std::atomic<uint64_t> known_ino{0}, known_dev{0};
    if (st.st_ino != 0 && known_ino.load(std::memory_order_relaxed) == st.st_ino &&
        known_dev.load(std::memory_order_relaxed) == st.st_dev)
        return true;
    char path[64], target[64] = {};
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0 || std::strcmp(target, "anon_inode:[eventfd]") != 0) return false;
    known_dev.store(st.st_dev, std::memory_order_relaxed);
    known_ino.store(st.st_ino, std::memory_order_relaxed);
    return true;
}

// The descriptors must be what they claim: a regular file (memfd) of the
// announced size and two nonblocking eventfds (a blocking one would let the
// peer hang our drains).
bool plausible(const Fds& f) {
    struct stat st;
    if (fstat(f.dmb, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size != static_cast<off_t>(f.dmb_size))
        return false;
    for (int fd : {f.rx_event, f.tx_event}) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || !(fl & O_NONBLOCK) || !is_eventfd(fd)) return false;
    }
    return true;
}

} // namespace

void close_fds(Fds& f) {
    for (int* fd : {&f.dmb, &f.rx_event, &f.tx_event}) {
        if (*fd >= 0) sys::real().close(*fd);
        *fd = -1;
    }
}

Endpoint* Endpoint::start(Device& dev) {
    auto* e = new Endpoint();
    e->dev_ = &dev;
    sockaddr_un sun;
    socklen_t len = endpoint_address(dev.gid(), sun);
    e->listen_fd_ = sys::real().socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (e->listen_fd_ < 0 ||
        sys::real().bind(e->listen_fd_, reinterpret_cast<sockaddr*>(&sun), len) != 0 ||
        sys::real().listen(e->listen_fd_, 128) != 0 || pipe2(e->wake_, O_CLOEXEC) != 0) {
        delete e;
        return nullptr;
    }
    e->thread_ = std::thread([e] { e->serve(); });
    return e;
}

Endpoint::~Endpoint() {
    if (thread_.joinable()) {
        char c = 0;
        ssize_t rc = sys::real().write(wake_[1], &c, 1);
        (void)rc;
        thread_.join();
    }
    for (int fd : {listen_fd_, wake_[0], wake_[1]})
        if (fd >= 0) sys::real().close(fd);
    for (auto& [token, o] : offers_)
        if (o.done) {
            close_fds(o.done->peer.fds);
            dev_->release(o.done->ours, kUnknownPeer);
        }
}

void Endpoint::abandon_after_fork() {
    // The mutex, map and thread handle belong to the parent's moment of
    // fork; the object is never used or destroyed here again.
    for (int fd : {listen_fd_, wake_[0], wake_[1]})
        if (fd >= 0) sys::real().close(fd);
    listen_fd_ = wake_[0] = wake_[1] = -1;
}

void Endpoint::serve() {
    while (true) {
        pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
        if (sys::real().poll(p, 2, -1) < 0) continue;
        if (p[1].revents) return;
        if (!(p[0].revents & POLLIN)) continue;
        int conn = sys::real().accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        timeval tv{1, 0}; // a silent client cannot hold the endpoint
        sys::real().setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        handle(conn);
        sys::real().close(conn);
    }
}

void Endpoint::handle(int conn) {
    Request req{};
    int fds[kFdCount];
    if (!recv_with_fds(conn, &req, sizeof req, fds, true)) return;
    PeerFds peer;
    peer.fds = {fds[0], req.dmb_size, fds[1], fds[2]};
    ucred cred{};
    socklen_t clen = sizeof cred;
    bool creds = sys::real().getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0;
    peer.pid = cred.pid;
    peer.uid = cred.uid;
    Reply reply{kMagic, EACCES, 0, 0};
    OfferSpec spec;
    {
        std::lock_guard lock(mu_);
        auto it = offers_.find(req.token);
        if (req.magic == kMagic && creds && it != offers_.end() && !it->second.taken &&
            plausible(peer.fds)) {
            it->second.taken = true;
            spec = it->second.spec;
            reply.status = 0;
        }
    }
    std::optional<Dmb> ours;
    if (reply.status == 0) {
        // Outside our lock: the device has its own, and a withdraw meanwhile
        // is noticed below.
        ours = dev_->allocate(spec.dmb_size, peer.uid);
        if (!ours) reply.status = ENOMEM;
    }
    if (reply.status == 0) {
        std::lock_guard lock(mu_);
        auto it = offers_.find(req.token);
        if (it == offers_.end()) {
            reply.status = EACCES; // withdrawn while we took the DMB
        } else {
            it->second.done = Attached{peer, *ours};
        }
    }
    if (reply.status != 0) {
        if (ours) dev_->release(*ours, kUnknownPeer);
        close_fds(peer.fds);
        send_with_fds(conn, &reply, sizeof reply, nullptr, 0);
        return;
    }
    reply.dmb_size = ours->size;
    int out[kFdCount] = {ours->fd, spec.rx_event, spec.tx_event};
    send_with_fds(conn, &reply, sizeof reply, out, kFdCount);
    cv_.notify_all();
}

void Endpoint::offer(uint64_t token, const OfferSpec& spec) {
    std::lock_guard lock(mu_);
    offers_[token] = Offer{spec, false, std::nullopt};
}

std::optional<Attached> Endpoint::wait_attached(uint64_t token, int timeout_ms) {
    std::unique_lock lock(mu_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    auto it = offers_.find(token);
    while (it != offers_.end() && !it->second.done) {
        if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
        it = offers_.find(token);
    }
    if (it == offers_.end()) return std::nullopt;
    std::optional<Attached> done = it->second.done;
    offers_.erase(it);
    return done;
}

void Endpoint::withdraw(uint64_t token) {
    std::optional<Attached> done;
    {
        std::lock_guard lock(mu_);
        auto it = offers_.find(token);
        if (it == offers_.end()) return;
        done = it->second.done;
        offers_.erase(it);
    }
    if (done) {
        close_fds(done->peer.fds);
        dev_->release(done->ours, kUnknownPeer);
    }
}

std::optional<PeerFds> attach(uint64_t gid, uint64_t token,
                              const std::function<std::optional<Fds>(uid_t)>& ours,
                              int timeout_ms) {
    int s = sys::real().socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return std::nullopt;
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    sys::real().setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    // Bounds connect() too: it waits while the endpoint's backlog is full.
    sys::real().setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_un sun;
    socklen_t len = endpoint_address(gid, sun);
    std::optional<PeerFds> result;
    ucred cred{};
    socklen_t clen = sizeof cred;
    std::optional<Fds> mine;
    // The endpoint's owner (who listen()ed on it) is the process that will
    // map our DMB: known from connect() on, before any descriptor goes out.
    if (sys::real().connect(s, reinterpret_cast<sockaddr*>(&sun), len) == 0 &&
        sys::real().getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 &&
        (mine = ours(cred.uid))) {
        Request req{kMagic, mine->dmb_size, token};
        int out[kFdCount] = {mine->dmb, mine->rx_event, mine->tx_event};
        Reply reply{};
        int in[kFdCount];
        // A refusal carries no descriptors; an acceptance exactly three.
        if (send_with_fds(s, &req, sizeof req, out, kFdCount) &&
            recv_with_fds(s, &reply, sizeof reply, in, true) && reply.magic == kMagic &&
            reply.status == 0) {
            PeerFds peer;
            peer.fds = {in[0], reply.dmb_size, in[1], in[2]};
            if (plausible(peer.fds)) {
                peer.pid = cred.pid;
                peer.uid = cred.uid;
                result = peer;
            } else {
                close_fds(peer.fds);
            }
        }
    }
    int saved = errno;
    sys::real().close(s);
    errno = saved;
    return result;
}

} // namespace usmc::ism
