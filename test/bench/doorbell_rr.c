// SPDX-License-Identifier: MIT
// Request/response between two epoll loops over P connections, the shape of
// nginx keep-alive (docs/DESIGN-NOTES.md, "Readiness: the candidates,
// measured"): each connection is a
// pair of shared-memory mailboxes and a doorbell that rings only a side that
// said it waits, as usmc's SMC-D data path does. The doorbell is a socket
// pair per connection (usmc today) or the connection's own loopback TCP
// socket; "tcp data" sends the requests over TCP itself, the baseline.
// "hop" is per-peer signalling: each side holds both ends of its
// connections' pairs; the peer queues the connection in a shared ready ring
// and rings one doorbell per pair of processes, and a thread of ours makes
// that connection's pair readable (one descriptor fewer per connection, one
// thread hop more per wake-up). "dgram" is the third candidate (the same
// section): each connection's doorbell an unconnected Unix datagram
// socket bound to an abstract name, rung by sendto(name) from one waker
// socket per process: no far end, nothing passed per connection.
//
//   usmc-bench-doorbell <pair|tcp|data|hop|dgram> [connections] [seconds]
#include "bench_common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum Mode { kPair, kTcpBell, kTcpData, kHop, kDgram };

// One direction's mailbox: the message count and the receiver's "wake me".
struct box {
    _Atomic uint64_t seq;
    _Atomic uint32_t waiting;
    char pad[52];
};

struct conn {
    struct box* in;
    struct box* out;
    int fd;      // what the epoll loop watches (and drains)
    int far;     // hop: the far end of our pair, written by our engine thread
    uint32_t id; // hop: the connection's index
    uint64_t seen;
    struct sockaddr_un peer; // dgram: the name of the peer's doorbell
    socklen_t peer_len;
};

// hop: connections the peer made ready for us, and the doorbell that wakes
// our engine thread when it said it sleeps. One per direction, in shared
// memory; one producer (the peer's loop), one consumer (our engine).
struct ready {
    _Atomic uint64_t head, tail;
    _Atomic uint32_t engine_waiting;
    uint32_t ids[];
};

static struct ready* g_ready_in;  // the peer queues into it, our engine takes
static struct ready* g_ready_out; // we queue into it, the peer's engine takes
static int g_bell_in = -1, g_bell_out = -1;
static int g_waker = -1; // dgram: this process's one socket that rings doorbells by name
static struct conn* g_mine;
static _Atomic int g_stop;

static enum Mode g_mode;
static int g_conns = 100;
static double g_seconds = 3;

// Sends one message: count it, ring the peer if it waits. False once the
// peer has gone (its run ended first).
static int post(struct conn* c) {
    if (g_mode == kTcpData) return send(c->fd, "r", 1, MSG_NOSIGNAL) == 1;
    atomic_fetch_add(&c->out->seq, 1);
    if (!atomic_exchange(&c->out->waiting, 0)) return 1;
    if (g_mode == kDgram) {
        // A full queue already means "woken".
        ssize_t r = sendto(g_waker, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                           (const struct sockaddr*)&c->peer, c->peer_len);
        return r == 1 || (r < 0 && errno == EAGAIN);
    }
    if (g_mode != kHop) return send(c->fd, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1;
    uint64_t t = atomic_load(&g_ready_out->tail);
    g_ready_out->ids[t % (uint64_t)g_conns] = c->id;
    atomic_store(&g_ready_out->tail, t + 1);
    if (atomic_exchange(&g_ready_out->engine_waiting, 0))
        return send(g_bell_out, "b", 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1;
    return 1;
}

// hop: our engine thread, making the connections the peer queued readable.
static void* engine(void* arg) {
    (void)arg;
    char b[256];
    while (!atomic_load(&g_stop)) {
        uint64_t h = atomic_load(&g_ready_in->head);
        if (h == atomic_load(&g_ready_in->tail)) {
            atomic_store(&g_ready_in->engine_waiting, 1);
            if (h == atomic_load(&g_ready_in->tail)) {
                struct pollfd p = {g_bell_in, POLLIN, 0};
                if (poll(&p, 1, 100) == 1 && recv(g_bell_in, b, sizeof b, MSG_DONTWAIT) <= 0) break;
            }
            continue;
        }
        uint32_t id = g_ready_in->ids[h % (uint64_t)g_conns];
        atomic_store(&g_ready_in->head, h + 1);
        if (send(g_mine[id].far, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) break;
    }
    return NULL;
}

// Takes one message if there is one; else arms (drains the doorbell unless
// our flag was never taken, sets it, looks again) and returns 0.
static int take(struct conn* c) {
    char b[64];
    if (g_mode == kTcpData) return recv(c->fd, b, sizeof b, MSG_DONTWAIT) > 0;
    uint64_t s = atomic_load(&c->in->seq);
    if (s == c->seen) {
        if (!atomic_load(&c->in->waiting))
            while (recv(c->fd, b, sizeof b, MSG_DONTWAIT) > 0) {
            }
        atomic_store(&c->in->waiting, 1);
        s = atomic_load(&c->in->seq);
        if (s == c->seen) return 0;
    }
    c->seen = s;
    return 1;
}

static long serve(struct conn* cs, int client) {
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    for (int i = 0; i < g_conns; ++i) {
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &e)) die("epoll_ctl");
    }
    long done = 0;
    if (client)
        for (int i = 0; i < g_conns; ++i)
            if (!post(&cs[i])) die("post");
    double end = now() + g_seconds;
    struct epoll_event ev[256];
    while (now() < end) {
        int n = epoll_wait(ep, ev, 256, 100);
        for (int k = 0; k < n; ++k) {
            struct conn* c = &cs[ev[k].data.u32];
            while (take(c)) {
                ++done;
                if (!post(c)) goto out; // the other side's run is over
            }
        }
    }
out:
    close(ep);
    return done;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <pair|tcp|data|hop|dgram> [connections] [seconds]\n", argv[0]);
        return 2;
    }
    g_mode = strcmp(argv[1], "pair") == 0    ? kPair
             : strcmp(argv[1], "tcp") == 0   ? kTcpBell
             : strcmp(argv[1], "hop") == 0   ? kHop
             : strcmp(argv[1], "dgram") == 0 ? kDgram
                                             : kTcpData;
    if (argc > 2) g_conns = atoi(argv[2]);
    if (argc > 3) g_seconds = atof(argv[3]);
    if (g_conns < 1 || g_conns > 100000) return 2;
    size_t n = (size_t)g_conns;
    struct box* boxes = mmap(NULL, sizeof(struct box) * 2 * n, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct conn* a = calloc(n, sizeof *a);
    struct conn* b = calloc(n, sizeof *b);
    if (boxes == MAP_FAILED || !a || !b) die("memory");
    for (size_t i = 0; i < 2 * n; ++i)
        atomic_store(&boxes[i].waiting, 1); // both sides start armed
    struct sockaddr_in sa;
    int l = tcp_listener(&sa);
    for (size_t i = 0; i < n; ++i) {
        int fds[2];
        int far_a = -1, far_b = -1;
        if (g_mode == kPair) {
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds)) die("socketpair");
        } else if (g_mode == kDgram) {
            struct sockaddr_un name[2];
            socklen_t name_len[2];
            for (int k = 0; k < 2; ++k) {
                fds[k] = socket(AF_UNIX, SOCK_DGRAM, 0);
                memset(&name[k], 0, sizeof name[k]);
                name[k].sun_family = AF_UNIX;
                int len = snprintf(name[k].sun_path + 1, sizeof name[k].sun_path - 1,
                                   "usmc-bench-%d-%zu-%d", (int)getpid(), i, k);
                name_len[k] = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
                if (fds[k] < 0 || bind(fds[k], (struct sockaddr*)&name[k], name_len[k]))
                    die("bind");
            }
            a[i].peer = name[1], a[i].peer_len = name_len[1];
            b[i].peer = name[0], b[i].peer_len = name_len[0];
        } else if (g_mode == kHop) {
            int pa[2], pb[2];
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, pa) || socketpair(AF_UNIX, SOCK_STREAM, 0, pb))
                die("socketpair");
            fds[0] = pa[0], far_a = pa[1], fds[1] = pb[0], far_b = pb[1];
        } else {
            tcp_pair(l, &sa, 0, 0, fds);
        }
        struct sockaddr_un pa = a[i].peer, pb = b[i].peer;
        socklen_t la = a[i].peer_len, lb = b[i].peer_len;
        a[i] =
            (struct conn){&boxes[2 * i], &boxes[2 * i + 1], fds[0], far_a, (uint32_t)i, 0, pa, la};
        b[i] =
            (struct conn){&boxes[2 * i + 1], &boxes[2 * i], fds[1], far_b, (uint32_t)i, 0, pb, lb};
    }
    size_t ready_size = sizeof(struct ready) + sizeof(uint32_t) * n;
    struct ready* ra =
        mmap(NULL, ready_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct ready* rb =
        mmap(NULL, ready_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (ra == MAP_FAILED || rb == MAP_FAILED) die("memory");
    int bell[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, bell)) die("socketpair");
    close(l);
    if (g_mode == kDgram && (g_waker = socket(AF_UNIX, SOCK_DGRAM, 0)) < 0) die("socket");
    pid_t kid = fork();
    pthread_t eng;
    if (kid == 0) {
        pin(1);
        for (size_t i = 0; i < n; ++i)
            close(a[i].fd);
        g_ready_in = rb, g_ready_out = ra, g_bell_in = g_bell_out = bell[1], g_mine = b;
        if (g_mode == kHop && pthread_create(&eng, NULL, engine, NULL)) die("thread");
        if (g_mode == kDgram) { // a waker of its own, as each process has
            close(g_waker);
            if ((g_waker = socket(AF_UNIX, SOCK_DGRAM, 0)) < 0) die("socket");
        }
        serve(b, 0);
        atomic_store(&g_stop, 1);
        if (g_mode == kHop) pthread_join(eng, NULL);
        _exit(0);
    }
    for (size_t i = 0; i < n; ++i)
        close(b[i].fd);
    pin(0);
    g_ready_in = ra, g_ready_out = rb, g_bell_in = g_bell_out = bell[0], g_mine = a;
    if (g_mode == kHop && pthread_create(&eng, NULL, engine, NULL)) die("thread");
    struct rusage r0, r1, rk;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now();
    long done = serve(a, 1);
    double elapsed = now() - t0;
    atomic_store(&g_stop, 1);
    if (g_mode == kHop) pthread_join(eng, NULL);
    getrusage(RUSAGE_SELF, &r1);
    for (size_t i = 0; i < n; ++i)
        close(a[i].fd);
    int status;
    wait4(kid, &status, 0, &rk);
    if (done == 0) return 1;
    const char* names[] = {"socket pair bell", "tcp bell", "tcp data", "per-peer hop",
                           "dgram by name"};
    printf("%-16s c=%-5d %9.0f round trips/s  CPU per round trip: client %5.2f us, server %5.2f "
           "us\n",
           names[g_mode], g_conns, (double)done / elapsed,
           (cpu_of(&r1) - cpu_of(&r0)) / (double)done * 1e6, cpu_of(&rk) / (double)done * 1e6);
    return 0;
}
