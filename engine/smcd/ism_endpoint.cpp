// SPDX-License-Identifier: MIT
#include "engine/smcd/ism_endpoint.hpp"

#include "engine/base/log.hpp"
#include "engine/base/loop.hpp"
#include "engine/base/sys.hpp"
#include "engine/smcd/ism_wire.hpp"
#include "engine/smcd/lgr.hpp"
#include "engine/smcd/link_group.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace usmc::ism {

namespace {

using wire::kFdCount;
using wire::kMagic;
using wire::Reply;
using wire::Request;

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

enum class Got : uint8_t {
    Nothing,   // no message there (EAGAIN)
    Message,   // a well-formed message, with descriptors or without
    NoRoom,    // a well-formed message whose descriptors we could not keep
               // (usmc's descriptor range is full): closed, errno EMFILE
    Malformed, // or the link is at its end
};

// Receives one message of exactly `len` bytes with exactly `nfds`
// descriptors or none (`*with_fds` says which), never waiting. Any
// descriptor that arrives is either returned or closed: a hostile peer
// cannot leak descriptors into us.
Got recv_with_fds(int sock, void* data, size_t len, int* fds, bool* with_fds, int nfds = kFdCount) {
    iovec iov{data, len};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * wire::kMaxFds)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    *with_fds = false;
    ssize_t n = sys::real().recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return Got::Nothing;
    wire::Received r = wire::inspect(msg, n, len, nfds);
    int got = r.count;
    const int* received = r.fds;
    bool ok = r.well_formed;
    if (!ok || got == 0) {
        for (int i = 0; i < got; ++i)
            sys::real().close(received[i]);
        return ok ? Got::Message : Got::Malformed;
    }
    // The memfd's (first) is closed as soon as it is mapped, or at once when
    // the mapping is cached: not worth two more system calls. Any other
    // stays: into usmc's range.
    fds[0] = received[0];
    bool placed = true;
    for (int i = 1; i < nfds; ++i) {
        fds[i] = sys::place_high_strict(received[i]);
        placed = placed && fds[i] >= 0;
    }
    if (!placed) {
        for (int i = 0; i < nfds; ++i)
            if (fds[i] >= 0) sys::real().close(fds[i]);
        errno = EMFILE;
        return Got::NoRoom;
    }
    *with_fds = true;
    return Got::Message;
}

// The descriptor must be what it claims: a regular file (memfd) of the
// announced size.
bool plausible(const Fds& f) {
    struct stat st;
    uint32_t file_size = f.file_size ? f.file_size : f.dmb_size; // 0: the DMB's own file
    return slot_claim_ok(f.dmb_size, f.dmb_offset, file_size) && fstat(f.dmb, &st) == 0 &&
           S_ISREG(st.st_mode) && st.st_size == static_cast<off_t>(file_size);
}

void close_fds_array(int* fds) {
    for (int i = 0; i < kFdCount; ++i)
        sys::real().close(fds[i]);
}

} // namespace

void close_fds(Fds& f) {
    if (f.dmb >= 0) sys::real().close(f.dmb);
    f.dmb = -1;
}

namespace {
// What this process shares (share()): tokens and our own copies of the
// memfds, few (a handful per published listener), each given to one user
// at most: `user` is the first asker's (kNoUser until then).
constexpr uid_t kNoUser = static_cast<uid_t>(-1);
struct Shared {
    uint64_t token;
    int fd;
    size_t size;
    uid_t user;
};
std::mutex g_share_mu;
std::vector<Shared>* g_shared = nullptr; // under g_share_mu

// Answers a share request from user `uid` on `link`: the memfd under
// `token` that user was given before, or one nobody was given yet (now
// that user's for good); ENOENT if there is neither.
bool serve_share(int link, uint64_t token, uid_t uid) {
    const Shared* found = nullptr;
    {
        std::lock_guard lock(g_share_mu);
        if (g_shared) {
            for (const auto& sh : *g_shared)
                if (sh.token == token && sh.user == uid) found = &sh;
            for (auto& sh : *g_shared)
                if (!found && sh.token == token && sh.user == kNoUser) {
                    sh.user = uid;
                    found = &sh;
                }
        }
        if (found) {
            Reply reply{wire::kShareMagic, 0, static_cast<uint32_t>(found->size), 0, 0, 0};
            return send_with_fds(link, &reply, sizeof reply, &found->fd, 1);
        }
    }
    Reply none{wire::kShareMagic, ENOENT, 0, 0, 0, 0};
    return send_with_fds(link, &none, sizeof none, nullptr, 0);
}
} // namespace

bool share(uint64_t token, int fd) {
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return false;
    int copy = sys::place_high(fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (copy < 0) return false;
    std::lock_guard lock(g_share_mu);
    if (!g_shared) g_shared = new std::vector<Shared>;
    g_shared->push_back({token, copy, static_cast<size_t>(st.st_size), kNoUser});
    return true;
}

void unshare(uint64_t token) {
    std::lock_guard lock(g_share_mu);
    if (!g_shared) return;
    for (size_t i = g_shared->size(); i-- > 0;)
        if ((*g_shared)[i].token == token) {
            sys::real().close((*g_shared)[i].fd);
            g_shared->erase(g_shared->begin() + static_cast<long>(i));
        }
}

void shares_after_fork() {
    new (&g_share_mu) std::mutex();
}

Endpoint* Endpoint::start(Device& dev) {
    auto* e = new Endpoint();
    e->dev_ = &dev;
    sockaddr_un sun;
    socklen_t len = lgr::endpoint_address(dev.gid(), sun);
    e->listen_fd_ = sys::place_high(
        sys::real().socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (e->listen_fd_ < 0 ||
        sys::real().bind(e->listen_fd_, reinterpret_cast<sockaddr*>(&sun), len) != 0 ||
        sys::real().listen(e->listen_fd_, 128) != 0 || !e->watch_listen(-1)) {
        delete e;
        return nullptr;
    }
    return e;
}

namespace {
// Waits for a turn of the event loop: every handler that had fired when it
// was asked for has run when it returns (the loop runs them one at a time,
// a timer after the events of its turn). Not on the loop thread.
void loop_turn() {
    std::mutex m;
    std::condition_variable cv;
    bool turned = false;
    if (!loop::add(-1, 0, 0, [&](uint32_t) {
            std::lock_guard lock(m);
            turned = true;
            cv.notify_all();
        }))
        return;
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return turned; });
}
} // namespace

Endpoint::~Endpoint() {
    // Handlers that run from now on do nothing; after a turn none is inside
    // this object, so the watches can be read and cancelled; after another,
    // those that had fired meanwhile have run (and done nothing).
    stopping_.store(true, std::memory_order_release);
    loop_turn();
    {
        std::lock_guard lock(watch_mu_);
        if (listen_watch_) loop::cancel(listen_watch_);
    }
    for (auto& l : links_)
        if (l.fd >= 0 && l.watch) loop::cancel(l.watch);
    loop_turn();
    if (listen_fd_ >= 0) loop::forget(listen_fd_);
    for (auto& l : links_)
        if (l.fd >= 0) loop::forget(l.fd);
    abandon_after_fork(); // closes our descriptors
    for (auto& [token, o] : offers_)
        if (o.done) {
            close_fds(o.done->peer.fds);
            dev_->unmap_peer(o.done->theirs);
            if (!o.spec.claimed) dev_->release(o.done->ours, kUnknownPeer);
        }
}

void Endpoint::abandon_after_fork() {
    // In a child: the mutex, map and watches belong to the parent's moment
    // of fork; the object is never used or destroyed here again. The links'
    // peers keep serving the parent's copies.
    if (listen_fd_ >= 0) sys::real().close(listen_fd_);
    listen_fd_ = -1;
    for (auto& l : links_) // written only where open: each write is a copy-on-write fault
        if (l.fd >= 0) {
            sys::real().close(l.fd);
            l.fd = -1;
        }
}

bool Endpoint::watch_listen(int delay_ms) {
    // Under watch_mu_ until the id is stored: the watch may fire, and its
    // handler arm the next one, before loop::add returns (start() arms the
    // first from the application's thread).
    std::lock_guard lock(watch_mu_);
    // Out of descriptors (accept4 failed so): the socket stays readable, so
    // a timer brings it back instead of an event at once.
    if (delay_ms >= 0)
        listen_watch_ = loop::add(-1, 0, delay_ms, [this](uint32_t) {
            if (!stopping_.load(std::memory_order_acquire)) watch_listen(-1);
        });
    else
        listen_watch_ = loop::add(listen_fd_, EPOLLIN, -1, [this](uint32_t) { on_listen(); });
    return listen_watch_ != 0;
}

void Endpoint::on_listen() {
    if (stopping_.load(std::memory_order_acquire)) return;
    close_idle_links(sys::mono_ns());
    accept_links();
}

bool Endpoint::watch_link(size_t index) {
    Link& l = links_[index];
    uint64_t gen = l.gen;
    l.watch = loop::add(l.fd, EPOLLIN, -1, [this, index, gen](uint32_t) { on_link(index, gen); });
    return l.watch != 0;
}

void Endpoint::on_link(size_t index, uint64_t gen) {
    if (stopping_.load(std::memory_order_acquire)) return;
    Link& l = links_[index];
    if (l.fd < 0 || l.gen != gen) return; // dropped since (an idle sweep in the same turn)
    l.watch = 0;
    if (!handle(int(index)) || !watch_link(index)) drop_link(index);
    close_idle_links(sys::mono_ns());
}

void Endpoint::drop_link(size_t index) {
    Link& l = links_[index];
    if (l.watch) loop::cancel(l.watch);
    loop::forget(l.fd); // its fired watch's registration goes with it
    sys::real().close(l.fd);
    l.fd = -1;
    l.watch = 0;
}

void Endpoint::accept_links() {
    uid_t self = geteuid();
    while (true) {
        int fd = sys::real().accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            bool full = errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
            if (!watch_listen(full ? kFullPauseMs : -1))
                log::warn("the endpoint's socket cannot be watched: no more first contacts");
            return;
        }
        fd = sys::place_high_strict(fd); // closed (-1) if usmc's quarter is full
        if (fd < 0) continue;
        ucred cred{};
        socklen_t clen = sizeof cred;
        Link* free_slot = nullptr;
        size_t same_uid = 0;
        bool have_cred = sys::real().getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0;
        for (auto& l : links_) {
            if (l.fd < 0) {
                if (!free_slot) free_slot = &l;
            } else if (have_cred && l.uid == cred.uid) {
                ++same_uid;
            }
        }
        bool capped = cred.uid != self && cred.uid != 0 && same_uid >= kMaxLinksPerUid;
        if (!free_slot || !have_cred || capped) {
            sys::real().close(fd);
            continue;
        }
        *free_slot = Link{fd, cred.pid, cred.uid, self, sys::mono_ns(), ++next_gen_, 0};
        size_t index = size_t(free_slot - links_);
        if (!watch_link(index)) drop_link(index);
    }
}

void Endpoint::close_idle_links(uint64_t now_ns) {
    if (now_ns < next_sweep_ns_) return;
    next_sweep_ns_ = now_ns + kLinkIdleMs * 1000000 / 4;
    for (size_t i = 0; i < kMaxLinks; ++i)
        if (links_[i].fd >= 0 && now_ns - links_[i].used_ns > kLinkIdleMs * 1000000) drop_link(i);
}

bool Endpoint::handle(int index) {
    const Link& link = links_[index];
    // Made while we were another user: the peer must see who we are now.
    if (geteuid() != link.our_euid) return false;
    Request req{};
    int fds[kFdCount];
    bool with_fds = false;
    switch (recv_with_fds(link.fd, &req, sizeof req, fds, &with_fds)) {
    case Got::Nothing:
        return true;
    case Got::NoRoom: { // refused: the client declines, its connection runs as TCP
        Reply full{kMagic, EMFILE, 0, 0, 0, 0};
        return send_with_fds(link.fd, &full, sizeof full, nullptr, 0);
    }
    case Got::Malformed:
        return false;
    case Got::Message:
        if (!with_fds) { // only a share request comes without descriptors
            if (req.magic != wire::kShareMagic) return false;
            links_[index].used_ns = sys::mono_ns();
            return serve_share(link.fd, req.token, link.uid);
        }
        break;
    }
    PeerFds peer;
    peer.fds = {fds[0], req.dmb_size, req.dmb_offset, req.file_size, req.serial};
    peer.pid = link.pid;
    peer.uid = link.uid;
    Reply reply{kMagic, EACCES, 0, 0, 0, 0};
    OfferSpec spec;
    {
        std::lock_guard lock(mu_);
        auto it = offers_.find(req.token);
        if (req.magic == kMagic && it != offers_.end() && !it->second.taken &&
            plausible(peer.fds)) {
            it->second.taken = true;
            spec = it->second.spec;
            reply.status = 0;
        }
    }
    std::optional<Dmb> ours = spec.claimed;
    // Claimed at the Accept for a user the link group named: it must be
    // this peer's (a slot of a segment for another user is not given out).
    if (reply.status == 0 && ours && ours->seg && ours->seg->peer_uid != peer.uid) {
        reply.status = EACCES;
        ours.reset();
        spec.claimed.reset();
    }
    if (reply.status == 0 && !ours) {
        // Outside our lock: the device has its own, and a withdraw meanwhile
        // is noticed below.
        ours = dev_->allocate(spec.dmb_size, peer.uid);
        if (!ours) reply.status = ENOMEM;
    }
    // The peer's DMB, mapped now (the Confirm finds it in Attached).
    std::optional<Dmb> theirs;
    if (reply.status == 0) {
        theirs = dev_->map_peer(peer.fds.dmb, peer.fds.dmb_size, peer.fds.dmb_offset,
                                peer.fds.file_size);
        if (!theirs)
            reply.status = EINVAL;
        else
            peer.fds.dmb = -1; // the mapping's now
    }
    if (reply.status == 0) {
        std::lock_guard lock(mu_);
        auto it = offers_.find(req.token);
        if (it == offers_.end()) {
            reply.status = EACCES; // withdrawn while we took the DMB
        } else {
            it->second.done = Attached{peer, *ours, *theirs};
        }
    }
    if (reply.status != 0) {
        if (ours && !spec.claimed) dev_->release(*ours, kUnknownPeer);
        if (theirs) dev_->unmap_peer(*theirs);
        close_fds(peer.fds);
        return send_with_fds(link.fd, &reply, sizeof reply, nullptr, 0);
    }
    // From our reply on, the client counts its segment as one we have
    // (LinkGroups::note_attach on its side), and its next connections may
    // name slots of it before this one's Confirm comes: the link group
    // keeps it before the reply goes. (Our own segment is noted at the
    // Confirm, once the client has mapped it.)
    if (spec.peer_gid)
        dev_->groups().note_attach(spec.peer_gid, peer.pid, peer.uid, 0, peer.fds.serial, *theirs);
    reply.dmb_size = ours->size;
    reply.dmb_offset = ours->offset;
    reply.file_size = ours->file_size;
    reply.serial = ours->serial;
    links_[index].used_ns = sys::mono_ns();
    int out[kFdCount] = {ours->fd};
    bool sent = send_with_fds(link.fd, &reply, sizeof reply, out, kFdCount);
    cv_.notify_all();
    return sent;
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
    if (it == offers_.end() || !it->second.done) {
        if (it != offers_.end()) offers_.erase(it);
        return std::nullopt;
    }
    Attached done = std::move(*it->second.done);
    offers_.erase(it);
    return done;
}

bool Endpoint::attached(uint64_t token) {
    std::lock_guard lock(mu_);
    auto it = offers_.find(token);
    return it != offers_.end() && it->second.done.has_value();
}

void Endpoint::withdraw(uint64_t token) {
    std::optional<Attached> done;
    bool claimed = false;
    {
        std::lock_guard lock(mu_);
        auto it = offers_.find(token);
        if (it == offers_.end()) return;
        done = std::move(it->second.done);
        claimed = it->second.spec.claimed.has_value();
        offers_.erase(it);
    }
    if (done) {
        close_fds(done->peer.fds);
        dev_->unmap_peer(done->theirs);
        if (!claimed) dev_->release(done->ours, kUnknownPeer); // (else the connection's)
    }
}

namespace {

// One attach, in the steps an exchange on a link takes: our descriptors
// (asked once, for the endpoint owner's uid), the request, the answer.
struct AttachState {
    uint64_t token = 0;
    std::function<std::optional<Fds>(uid_t)> ours;
    std::optional<Fds> mine;
    bool asked = false;
    uid_t asked_for = 0;
    int refused = 0;
    std::optional<PeerFds> result;
};

// Sends the request on `link`; Done with nothing sent when `ours` gave
// nothing. `*sent` says whether the request went out.
lgr::Outcome send_request(AttachState& st, const lgr::Peer& link, bool* sent) {
    *sent = false;
    if (!st.asked) {
        st.asked = true;
        st.asked_for = link.uid;
        st.mine = st.ours(link.uid);
    }
    if (!st.mine) return lgr::Outcome::Done; // nothing sent: the link stays
    // A retry on a new link (the old one was stale) may reach another
    // process under the GID: our DMB (a slot of the segment for peers of
    // that user) goes only to a peer of the user it was taken for.
    if (link.uid != st.asked_for) return lgr::Outcome::Broken;
    Request req{kMagic,
                st.mine->dmb_size,
                st.token,
                st.mine->dmb_offset,
                st.mine->file_size,
                st.mine->serial,
                0};
    int out[kFdCount] = {st.mine->dmb};
    if (!send_with_fds(link.fd, &req, sizeof req, out, kFdCount))
        // The endpoint closed the link (its owner changed users) or went:
        // nothing reached it. Anything else (a full queue) is no state
        // to go on from.
        return errno == EPIPE || errno == ECONNRESET ? lgr::Outcome::Stale : lgr::Outcome::Broken;
    *sent = true;
    return lgr::Outcome::Done;
}

// Reads the endpoint's answer, which has arrived (the link polled readable).
lgr::Outcome take_reply(AttachState& st, const lgr::Peer& link) {
    Reply reply{};
    int in[kFdCount];
    bool with_fds = false;
    Got got = recv_with_fds(link.fd, &reply, sizeof reply, in, &with_fds);
    if (got == Got::NoRoom) return lgr::Outcome::Done; // errno EMFILE: runs as TCP
    if (got != Got::Message || reply.magic != kMagic) return lgr::Outcome::Broken;
    // A refusal carries no descriptors; an acceptance exactly kFdCount.
    if (reply.status == 0 && with_fds) {
        PeerFds peer;
        peer.fds = {in[0], reply.dmb_size, reply.dmb_offset, reply.file_size, reply.serial};
        if (!plausible(peer.fds)) {
            close_fds(peer.fds);
            return lgr::Outcome::Broken; // a lying endpoint: not again
        }
        peer.pid = link.pid;
        peer.uid = link.uid;
        st.result = peer;
    } else if (with_fds) {
        close_fds_array(in);
    }
    st.refused = reply.status;
    return lgr::Outcome::Done;
}

// The endpoint's reason, for the caller's Decline: ENOMEM, its DMB memory
// is spent (MAX_DMB); EMFILE, its descriptors.
std::optional<PeerFds> attach_result(AttachState& st) {
    if (!st.result && (st.refused == ENOMEM || st.refused == EMFILE)) errno = st.refused;
    return st.result;
}

} // namespace

std::optional<PeerFds> attach(uint64_t gid, uint64_t token,
                              const std::function<std::optional<Fds>(uid_t)>& ours,
                              int timeout_ms) {
    AttachState st;
    st.token = token;
    st.ours = ours;
    lgr::with_link(gid, [&](const lgr::Peer& link) {
        bool sent = false;
        lgr::Outcome o = send_request(st, link, &sent);
        if (!sent) return o;
        pollfd p{link.fd, POLLIN, 0};
        if (sys::real().poll(&p, 1, timeout_ms) != 1) return lgr::Outcome::Broken;
        return take_reply(st, link);
    });
    return attach_result(st);
}

bool attach_async(uint64_t gid, uint64_t token, std::function<std::optional<Fds>(uid_t)> ours,
                  int timeout_ms, std::function<void(std::optional<PeerFds>)> done) {
    auto st = std::make_shared<AttachState>();
    st->token = token;
    st->ours = std::move(ours);
    for (int attempt = 0; attempt < 2; ++attempt) {
        auto held = lgr::hold(gid);
        if (!held) {
            if (st->asked) break; // a stale link, and no other: it ends here
            return false;         // every link busy: the caller attaches waiting
        }
        bool sent = false;
        lgr::Outcome o = send_request(*st, held->peer, &sent);
        if (!sent) {
            lgr::release(*held, o);
            if (o == lgr::Outcome::Stale) continue; // once more, on a new link
            break;
        }
        lgr::Hold h = *held;
        // (Whatever comes, an answer or a hang-up, is for take_reply to
        // read; no event: the deadline passed.)
        bool watched = loop::add(
                           h.peer.fd, EPOLLIN | EPOLLRDHUP, std::max(timeout_ms, 0),
                           [st, h, done](uint32_t ev) {
                               lgr::release(h, ev ? take_reply(*st, h.peer) : lgr::Outcome::Broken);
                               done(attach_result(*st));
                           },
                           loop::Kind::Handshake) != 0;
        if (watched) return true;
        lgr::release(h, lgr::Outcome::Broken); // its answer would be read by nobody
        break;
    }
    done(attach_result(*st));
    return true;
}

int fetch_shared(uint64_t gid, uint64_t token, pid_t owner, size_t size, int timeout_ms) {
    int result = -1;
    lgr::with_link(gid, [&](const lgr::Peer& link) {
        // Another process under that name (the owner is gone): not ours to ask.
        if (link.pid != owner) return lgr::Outcome::Done;
        Request req{wire::kShareMagic, 0, token, 0, 0, 0, 0};
        if (!send_with_fds(link.fd, &req, sizeof req, nullptr, 0))
            return errno == EPIPE || errno == ECONNRESET ? lgr::Outcome::Stale
                                                         : lgr::Outcome::Broken;
        pollfd p{link.fd, POLLIN, 0};
        if (sys::real().poll(&p, 1, timeout_ms) != 1) return lgr::Outcome::Broken;
        Reply reply{};
        int in[wire::kShareFdCount];
        bool with_fds = false;
        Got got = recv_with_fds(link.fd, &reply, sizeof reply, in, &with_fds, wire::kShareFdCount);
        if (got == Got::NoRoom) return lgr::Outcome::Done;
        if (got != Got::Message || reply.magic != wire::kShareMagic) return lgr::Outcome::Broken;
        if (!with_fds) return lgr::Outcome::Done; // not shared (any more)
        struct stat st;
        if (reply.status != 0 || !sealed_memfd_ok(in[0], size, st)) {
            sys::real().close(in[0]);
            return lgr::Outcome::Broken; // a lying endpoint: not again
        }
        result = in[0];
        return lgr::Outcome::Done;
    });
    return result;
}

} // namespace usmc::ism
