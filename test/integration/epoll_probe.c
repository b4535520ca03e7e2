// SPDX-License-Identifier: MIT
// epoll's semantics as a program sees them over TCP on 127.0.0.1, one case
// at a time: run plainly, the lines are what Linux does; run under usmc-run
// (the probe and its peers then talk SMC-D), they must be the same lines.
//
//   usmc-epoll-probe CASE | all | list
//
// Each case listens on 127.0.0.1, forks peer processes (SMC-D runs between
// processes, never inside one) that connect and then obey commands from a
// pipe (write N bytes, read N bytes, shut down writing, close, abort with
// SO_LINGER 0, exit), each acknowledged on another pipe; the probe accepts
// and watches its ends with epoll. Output is deterministic: events as flag
// names, counts, epoll_data values, errno names; never times, descriptor
// numbers or addresses. A case that cannot run (a peer that does not
// answer, a failed accept) prints FAIL and exits 1; a semantic result is
// only ever printed.
//
// Waiting: where an event is expected, epoll_wait gets EVENT_MS, far more
// than any event on one host takes. Where none is expected, QUIET_MS, and
// only after a synchronisation point after which nothing that could raise
// one is still on its way: each case says which. Every loop is bounded,
// and alarm() ends a case (and each peer) that hangs all the same.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EVENT_MS 5000
#define QUIET_MS 150
#define MAX_PEERS 4

static const char* g_case = "?";
static int g_conns; // connections the case made (the test checks they ran SMC-D)

static const char* err_name(int e) {
    const char* n = strerrorname_np(e);
    return n ? n : "E?";
}

static void say(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", g_case);
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
}

// The case cannot go on (not a semantic result).
static void die(const char* what) {
    printf("%s: FAIL %s (%s)\n", g_case, what, err_name(errno));
    fflush(stdout);
    exit(1);
}

static const char* flag_names(uint32_t ev, char* buf, size_t len) {
    static const struct {
        uint32_t bit;
        const char* name;
    } names[] = {{EPOLLIN, "IN"},         {EPOLLPRI, "PRI"},       {EPOLLOUT, "OUT"},
                 {EPOLLERR, "ERR"},       {EPOLLHUP, "HUP"},       {EPOLLRDNORM, "RDNORM"},
                 {EPOLLRDBAND, "RDBAND"}, {EPOLLWRNORM, "WRNORM"}, {EPOLLWRBAND, "WRBAND"},
                 {EPOLLMSG, "MSG"},       {EPOLLRDHUP, "RDHUP"}};
    buf[0] = 0;
    size_t used = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        if (!(ev & names[i].bit)) continue;
        used += snprintf(buf + used, len - used, "%s%s", used ? "|" : "", names[i].name);
        ev &= ~names[i].bit;
        if (used >= len) break;
    }
    if (ev && used < len) used += snprintf(buf + used, len - used, "%s0x%x", used ? "|" : "", ev);
    if (!used) snprintf(buf, len, "0");
    return buf;
}

static int by_data(const void* a, const void* b) {
    uint64_t x = ((const struct epoll_event*)a)->data.u64;
    uint64_t y = ((const struct epoll_event*)b)->data.u64;
    return x < y ? -1 : x > y;
}

// "N event(s): DATA=FLAGS ..." for epoll_wait's result `n`, sorted by
// epoll_data (the order within one call is the ready list's, which
// depends on the order the wake-ups came in).
static const char* describe(int n, struct epoll_event* ev, char* out, size_t len) {
    if (n < 0) {
        snprintf(out, len, "%s", err_name(errno));
        return out;
    }
    qsort(ev, (size_t)n, sizeof ev[0], by_data);
    size_t used = (size_t)snprintf(out, len, "%d event%s", n, n == 1 ? "" : "s");
    for (int i = 0; i < n && used < len; ++i) {
        char f[128];
        used += (size_t)snprintf(out + used, len - used, "%s %llu=%s", i ? "" : ":",
                                 (unsigned long long)ev[i].data.u64,
                                 flag_names(ev[i].events, f, sizeof f));
    }
    return out;
}

// epoll_wait(`ep`, `max`, `ms`), printed after `label`. Returns the count.
static int show_wait(const char* label, int ep, int max, int ms) {
    struct epoll_event ev[16];
    char out[512];
    if (max > 16) max = 16;
    int n = epoll_wait(ep, ev, max, ms);
    say("%s: %s", label, describe(n, ev, out, sizeof out));
    return n;
}

static const char* ctl(int ep, int op, int fd, uint32_t events, uint64_t data) {
    struct epoll_event ev = {.events = events, .data.u64 = data};
    return epoll_ctl(ep, op, fd, op == EPOLL_CTL_DEL ? NULL : &ev) == 0 ? "ok" : err_name(errno);
}

static int new_set(void) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    return ep;
}

// Reads what `fd` has (nonblocking) until EAGAIN, the end or an error:
// "read N, then EAGAIN|EOF|<errno>".
static void drain(const char* label, int fd) {
    static char buf[65536];
    long total = 0;
    const char* end = "nothing (bounded loop ended)";
    for (int i = 0; i < 100000; ++i) {
        ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0) {
            total += r;
            continue;
        }
        end = r == 0 ? "EOF" : err_name(errno);
        break;
    }
    say("%s: read %ld, then %s", label, total, end);
}

static long ms_since(const struct timespec* t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

static int wait_fd(int fd, short events, int ms) {
    struct pollfd p = {.fd = fd, .events = events};
    return poll(&p, 1, ms) == 1;
}

static int read_full(int fd, void* buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char*)buf + got, n - got);
        if (r > 0)
            got += (size_t)r;
        else if (r < 0 && errno == EINTR)
            continue;
        else
            return 0;
    }
    return 1;
}

// ---- peers -------------------------------------------------------------

struct cmd {
    char op;
    long n;
};

struct peer {
    pid_t pid;
    int cmd; // commands to it
    int ack; // its answers: 'k' done, 'e' failed
    int fd;  // the probe's end of its connection
};

static struct peer g_peers[MAX_PEERS];
static int g_npeers;
static int g_listener = -1;

// The peer process: one connection, driven by commands.
static void peer_main(int cmd, int ack) {
    alarm(60); // a probe that died leaves no peer behind for long
    static char buf[65536];
    memset(buf, 'p', sizeof buf);
    int s = -1;
    for (;;) {
        struct cmd c;
        if (!read_full(cmd, &c, sizeof c)) _exit(0); // the probe is gone
        char r = 'k';
        switch (c.op) {
        case 'c': { // connect to the probe's listener, on port n
            struct sockaddr_in a = {.sin_family = AF_INET,
                                    .sin_port = htons((uint16_t)c.n),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            s = socket(AF_INET, SOCK_STREAM, 0);
            if (s < 0 || connect(s, (struct sockaddr*)&a, sizeof a) != 0) r = 'e';
            break;
        }
        case 'w': // write n bytes
            for (long left = c.n; left > 0 && r == 'k';) {
                ssize_t w = write(s, buf, left < (long)sizeof buf ? (size_t)left : sizeof buf);
                if (w > 0)
                    left -= w;
                else if (!(w < 0 && errno == EINTR))
                    r = 'e';
            }
            break;
        case 'r': // read exactly n bytes
            for (long left = c.n; left > 0 && r == 'k';) {
                ssize_t g = read(s, buf, left < (long)sizeof buf ? (size_t)left : sizeof buf);
                if (g > 0)
                    left -= g;
                else if (!(g < 0 && errno == EINTR))
                    r = 'e';
            }
            break;
        case 'p': // until something is readable (nothing is read)
            if (!wait_fd(s, POLLIN, EVENT_MS)) r = 'e';
            break;
        case 's':
            if (shutdown(s, SHUT_WR) != 0) r = 'e';
            break;
        case 'x':
            if (close(s) != 0) r = 'e';
            s = -1;
            break;
        case 'a': { // abort: the kernel sends a reset
            struct linger l = {.l_onoff = 1, .l_linger = 0};
            if (setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof l) != 0 || close(s) != 0) r = 'e';
            s = -1;
            break;
        }
        case 'E': { // wait in epoll until n bytes were read (EVENT_MS per wait)
            int ep = epoll_create1(EPOLL_CLOEXEC);
            struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
            if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) != 0) {
                r = 'e';
                break;
            }
            long got = 0;
            for (int i = 0; i < 100 && got < c.n && r == 'k'; ++i) {
                struct epoll_event out;
                int n = epoll_wait(ep, &out, 1, EVENT_MS);
                if (n < 0 && errno == EINTR) continue;
                if (n != 1) {
                    r = 'e';
                    break;
                }
                ssize_t g = recv(s, buf, sizeof buf, MSG_DONTWAIT);
                if (g > 0)
                    got += g;
                else if (!(g < 0 && (errno == EAGAIN || errno == EINTR)))
                    r = 'e';
            }
            if (got != c.n) r = 'e';
            close(ep);
            break;
        }
        case 'q': // exit as it stands (whatever is unread stays unread)
            _exit(0);
        default:
            r = 'e';
        }
        if (write(ack, &r, 1) != 1) _exit(0);
    }
}

static void tell(struct peer* p, char op, long n) {
    struct cmd c = {.op = op, .n = n};
    if (write(p->cmd, &c, sizeof c) != (ssize_t)sizeof c) die("command to a peer");
}

static void await_peer(struct peer* p) {
    char r = 0;
    if (!wait_fd(p->ack, POLLIN, 2 * EVENT_MS) || read(p->ack, &r, 1) != 1) die("peer's answer");
    if (r != 'k') {
        errno = 0;
        die("the peer's command failed");
    }
}

// A command, and its acknowledgement: done when this returns.
static void order(struct peer* p, char op, long n) {
    tell(p, op, n);
    await_peer(p);
}

// `n` peers, each connected, and the probe's ends (g_peers[i].fd, not
// close-on-exec: exec_inherited_set passes one on). The peers are forked
// before the case makes any descriptor, so none holds a copy of one (a
// copy would keep the probe's file, and its registrations, alive).
static void start(int n) {
    if (n > MAX_PEERS) {
        errno = EINVAL;
        die("too many peers");
    }
    fflush(stdout);
    for (int i = 0; i < n; ++i) {
        int cmd[2], ack[2];
        if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(ack, O_CLOEXEC) != 0) die("pipe");
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            for (int j = 0; j < i; ++j) {
                close(g_peers[j].cmd);
                close(g_peers[j].ack);
            }
            close(cmd[1]);
            close(ack[0]);
            peer_main(cmd[0], ack[1]);
        }
        close(cmd[0]);
        close(ack[1]);
        g_peers[i] = (struct peer){.pid = pid, .cmd = cmd[1], .ack = ack[0], .fd = -1};
    }
    g_npeers = n;
    g_listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof addr;
    if (g_listener < 0 || bind(g_listener, (struct sockaddr*)&addr, sizeof addr) != 0 ||
        listen(g_listener, 8) != 0 || getsockname(g_listener, (struct sockaddr*)&addr, &len) != 0)
        die("listen");
    // One at a time, so that the connection accepted is this peer's. (The
    // peers were forked before the address was known: it travels as n.)
    for (int i = 0; i < n; ++i) {
        tell(&g_peers[i], 'c', ntohs(addr.sin_port));
        if (!wait_fd(g_listener, POLLIN, 2 * EVENT_MS)) die("no connection");
        int s = accept(g_listener, NULL, NULL);
        if (s < 0) die("accept");
        if (fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK) != 0) die("O_NONBLOCK");
        g_peers[i].fd = s;
        await_peer(&g_peers[i]);
        ++g_conns;
    }
}

// `p` has exited (it was told 'q'): reaped.
static void reap(struct peer* p) {
    int st = 0;
    if (waitpid(p->pid, &st, 0) != p->pid) die("waitpid");
    p->pid = 0;
}

// The case's end: its sockets closed, every peer stopped and reaped.
static void finish_case(void) {
    for (int i = 0; i < g_npeers; ++i)
        if (g_peers[i].fd >= 0) close(g_peers[i].fd);
    for (int i = 0; i < g_npeers; ++i) {
        if (g_peers[i].pid > 0) {
            tell(&g_peers[i], 'q', 0);
            reap(&g_peers[i]);
        }
        close(g_peers[i].cmd);
        close(g_peers[i].ack);
    }
    g_npeers = 0;
    if (g_listener >= 0) close(g_listener);
    g_listener = -1;
    say("connections %d", g_conns);
}

static void write_all(int fd, long n) {
    static char buf[4096];
    memset(buf, 'q', sizeof buf);
    while (n > 0) {
        ssize_t w = send(fd, buf, n < (long)sizeof buf ? (size_t)n : sizeof buf, MSG_NOSIGNAL);
        if (w > 0)
            n -= w;
        else if (!(w < 0 && (errno == EINTR || errno == EAGAIN)))
            die("write");
        else if (w < 0 && errno == EAGAIN && !wait_fd(fd, POLLOUT, EVENT_MS))
            die("write: no room");
    }
}

// ---- cases -------------------------------------------------------------

// Level-triggered: every epoll_wait reports the socket while unread bytes
// remain (ep_send_events puts a level-triggered item back on the ready
// list after reporting it, and polls it again at the next call).
static void case_lt_readable(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set();
    say("add IN: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 1));
    order(&g_peers[0], 'w', 10);
    show_wait("10 bytes arrived", ep, 8, EVENT_MS);
    show_wait("again, nothing read", ep, 8, EVENT_MS);
    char buf[4];
    say("read 4: %zd", recv(s, buf, sizeof buf, 0));
    show_wait("6 bytes left", ep, 8, EVENT_MS);
    drain("the rest", s);
    // No flake: the peer acknowledged its only write before we read every
    // byte of it; nothing else is sent.
    show_wait("all read", ep, 8, QUIET_MS);
    close(ep);
    finish_case();
}

// Edge-triggered, data unread: a second arrival is an edge of its own. TCP
// calls sk_data_ready (ep_poll_callback) for every segment queued, and the
// callback puts the item back on the ready list whether or not earlier
// data was read.
static void case_et_second_arrival(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set();
    say("add IN|ET: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLET, 1));
    order(&g_peers[0], 'w', 5);
    show_wait("first arrival", ep, 8, EVENT_MS);
    // No flake: the edge was taken by the wait above and nothing else was sent.
    show_wait("no new edge", ep, 8, QUIET_MS);
    order(&g_peers[0], 'w', 5);
    show_wait("second arrival, first unread", ep, 8, EVENT_MS);
    drain("both", s);
    // No flake: both writes were acknowledged, every byte read.
    show_wait("all read", ep, 8, QUIET_MS);
    close(ep);
    finish_case();
}

// Edge-triggered, read until EAGAIN: no event until new data arrives, then
// one.
static void case_et_after_drain(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set();
    say("add IN|ET: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLET, 1));
    order(&g_peers[0], 'w', 5);
    show_wait("arrival", ep, 8, EVENT_MS);
    drain("to EAGAIN", s);
    // No flake: the acknowledged write is read whole; nothing else sent.
    show_wait("drained", ep, 8, QUIET_MS);
    order(&g_peers[0], 'w', 7);
    show_wait("new arrival", ep, 8, EVENT_MS);
    drain("to EAGAIN", s);
    // No flake: as above.
    show_wait("drained again", ep, 8, QUIET_MS);
    close(ep);
    finish_case();
}

// EPOLLONESHOT: after one event the registration is disabled (its events
// cleared, EPOLLONESHOT kept) until EPOLL_CTL_MOD re-arms it; MOD polls
// the file, so data already there is reported at once.
static void case_oneshot(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set();
    say("add IN|ONESHOT: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLONESHOT, 1));
    order(&g_peers[0], 'w', 5);
    show_wait("arrival", ep, 8, EVENT_MS);
    // No flake here or below: a disabled registration reports nothing,
    // whatever arrives.
    show_wait("disabled, data unread", ep, 8, QUIET_MS);
    order(&g_peers[0], 'w', 5);
    show_wait("disabled, more arrived", ep, 8, QUIET_MS);
    say("mod IN|ONESHOT: %s", ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLONESHOT, 2));
    show_wait("re-armed, data there", ep, 8, EVENT_MS);
    show_wait("disabled again", ep, 8, QUIET_MS);
    drain("all", s);
    say("mod IN|ONESHOT: %s", ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLONESHOT, 3));
    // No flake: both writes acknowledged and read.
    show_wait("armed, nothing to read", ep, 8, QUIET_MS);
    order(&g_peers[0], 'w', 3);
    show_wait("armed, arrival", ep, 8, EVENT_MS);
    drain("all", s);
    say("del: %s", ctl(ep, EPOLL_CTL_DEL, s, 0, 0));
    say("del again: %s", ctl(ep, EPOLL_CTL_DEL, s, 0, 0));
    say("mod deleted: %s", ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN, 4));
    close(ep);
    finish_case();
}

// EPOLLEXCLUSIVE: one socket in several sets, each with a waiter. The
// kernel wakes one or more of them (an exclusive entry's callback ends the
// wake-up walk only if it woke a waiter; a set whose thread was not in
// epoll_wait yet takes the event and the walk goes on): how many is not
// deterministic, at least one is, and each reports its own registration.
#define WAITERS 3
struct waiter {
    int ep;
    int id;
    int got;     // it reported the socket
    int foreign; // it reported some other epoll_data
};
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_woken;

static void* waiter_main(void* arg) {
    struct waiter* w = arg;
    int stop = 0;
    for (int i = 0; i < 8 && !stop; ++i) {
        struct epoll_event ev[4];
        int n = epoll_wait(w->ep, ev, 4, 2 * EVENT_MS);
        for (int j = 0; j < n; ++j) {
            if (ev[j].data.u64 == 99) {
                stop = 1;
            } else if (ev[j].data.u64 == (uint64_t)w->id && !w->got) {
                w->got = 1;
                // Level-triggered and unread: out of this set, or it would
                // be reported again at once.
                epoll_ctl(w->ep, EPOLL_CTL_DEL, g_peers[0].fd, NULL);
                pthread_mutex_lock(&g_mu);
                ++g_woken;
                pthread_cond_signal(&g_cv);
                pthread_mutex_unlock(&g_mu);
            } else if (ev[j].data.u64 != (uint64_t)w->id) {
                w->foreign = 1;
            }
        }
    }
    return NULL;
}

static void case_exclusive(void) {
    start(1);
    int s = g_peers[0].fd;
    int stop[2];
    if (pipe2(stop, O_CLOEXEC) != 0) die("pipe");
    struct waiter w[WAITERS];
    pthread_t t[WAITERS];
    g_woken = 0;
    for (int i = 0; i < WAITERS; ++i) {
        w[i] = (struct waiter){.ep = new_set(), .id = 10 + i};
        say("set %d: add IN|EXCLUSIVE: %s", i + 1,
            ctl(w[i].ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLEXCLUSIVE, (uint64_t)w[i].id));
        ctl(w[i].ep, EPOLL_CTL_ADD, stop[0], EPOLLIN, 99);
    }
    for (int i = 0; i < WAITERS; ++i)
        if (pthread_create(&t[i], NULL, waiter_main, &w[i]) != 0) die("pthread_create");
    // (Whether the waiters are inside epoll_wait by now decides how many
    // wake, which is not printed.)
    usleep(50 * 1000);
    order(&g_peers[0], 'w', 5);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += EVENT_MS / 1000;
    pthread_mutex_lock(&g_mu);
    while (g_woken == 0)
        if (pthread_cond_timedwait(&g_cv, &g_mu, &until) != 0) break;
    int woken = g_woken;
    pthread_mutex_unlock(&g_mu);
    if (write(stop[1], "s", 1) != 1) die("stop");
    int foreign = 0;
    for (int i = 0; i < WAITERS; ++i) {
        pthread_join(t[i], NULL);
        foreign |= w[i].foreign;
        close(w[i].ep);
    }
    say("waiters woken by the arrival: %s", woken >= 1 ? "at least one" : "none");
    say("each reported its own set's epoll_data: %s", foreign ? "no" : "yes");
    drain("data", s);
    close(stop[0]);
    close(stop[1]);
    finish_case();
}

// Two threads asleep on one set; the first arrival wakes one, which then
// stays busy (out of epoll_wait); a second arrival on another connection
// must wake the other, as the kernel wakes the next waiter. (Under usmc the
// writer of the first arrival quiets the set's gate, and the thread it
// woke must set it again for the one still asleep.)
static pthread_mutex_t g_ts_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_ts_cv = PTHREAD_COND_INITIALIZER;
static int g_ts_got[2], g_ts_busy, g_ts_release;

static void* sleeper_main(void* arg) {
    int ep = *(int*)arg;
    for (int i = 0; i < 16; ++i) {
        struct epoll_event ev[4];
        int n = epoll_wait(ep, ev, 4, -1);
        for (int j = 0; j < n; ++j) {
            uint64_t d = ev[j].data.u64;
            if (d == 99) return NULL;
            if (d > 1) continue;
            char buf[64];
            while (recv(g_peers[d].fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
            }
            pthread_mutex_lock(&g_ts_mu);
            g_ts_got[d] = 1;
            int first = !g_ts_busy;
            g_ts_busy = 1;
            pthread_cond_broadcast(&g_ts_cv);
            // The first to report stays busy until released.
            while (first && !g_ts_release)
                pthread_cond_wait(&g_ts_cv, &g_ts_mu);
            pthread_mutex_unlock(&g_ts_mu);
        }
    }
    return NULL;
}

static int ts_wait_for(int* flag) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += EVENT_MS / 1000;
    pthread_mutex_lock(&g_ts_mu);
    while (!*flag)
        if (pthread_cond_timedwait(&g_ts_cv, &g_ts_mu, &until) != 0) break;
    int got = *flag;
    pthread_mutex_unlock(&g_ts_mu);
    return got;
}

static void case_two_sleepers(void) {
    start(2);
    int ep = new_set(), stop[2];
    if (pipe2(stop, O_CLOEXEC) != 0) die("pipe");
    say("add conn 0: %s", ctl(ep, EPOLL_CTL_ADD, g_peers[0].fd, EPOLLIN, 0));
    say("add conn 1: %s", ctl(ep, EPOLL_CTL_ADD, g_peers[1].fd, EPOLLIN, 1));
    ctl(ep, EPOLL_CTL_ADD, stop[0], EPOLLIN, 99);
    g_ts_got[0] = g_ts_got[1] = g_ts_busy = g_ts_release = 0;
    pthread_t t[2];
    for (int i = 0; i < 2; ++i)
        if (pthread_create(&t[i], NULL, sleeper_main, &ep) != 0) die("pthread_create");
    // (Whether both are asleep by now decides only whether the case tests
    // anything under usmc; nothing printed depends on it.)
    usleep(100 * 1000);
    order(&g_peers[0], 'w', 5);
    say("first arrival reported: %s", ts_wait_for(&g_ts_got[0]) ? "yes" : "no");
    order(&g_peers[1], 'w', 5);
    say("second arrival reported while the first thread is busy: %s",
        ts_wait_for(&g_ts_got[1]) ? "yes" : "no");
    pthread_mutex_lock(&g_ts_mu);
    g_ts_release = 1;
    pthread_cond_broadcast(&g_ts_cv);
    pthread_mutex_unlock(&g_ts_mu);
    if (write(stop[1], "s", 1) != 1) die("stop");
    for (int i = 0; i < 2; ++i)
        pthread_join(t[i], NULL);
    close(ep);
    close(stop[0]);
    close(stop[1]);
    finish_case();
}

// EPOLLEXCLUSIVE's rules (ep_ctl): a registration with it cannot be
// modified (EINVAL, even to the same events); it cannot be combined with
// ONESHOT or RDHUP (only IN, OUT, ERR, HUP, WAKEUP, ET are allowed beside
// it), nor target an epoll set.
static void case_exclusive_rules(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set(), other = new_set();
    say("add IN|EXCLUSIVE: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLEXCLUSIVE, 10));
    say("mod, same events: %s", ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLEXCLUSIVE, 10));
    say("mod to IN: %s", ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN, 10));
    say("add IN|EXCLUSIVE|ONESHOT: %s",
        ctl(other, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT, 20));
    say("add IN|RDHUP|EXCLUSIVE: %s",
        ctl(other, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP | EPOLLEXCLUSIVE, 20));
    say("add an epoll set with EXCLUSIVE: %s",
        ctl(other, EPOLL_CTL_ADD, ep, EPOLLIN | EPOLLEXCLUSIVE, 20));
    say("add IN|OUT|ET|EXCLUSIVE: %s",
        ctl(other, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLOUT | EPOLLET | EPOLLEXCLUSIVE, 20));
    show_wait("writable", other, 8, EVENT_MS);
    say("del: %s", ctl(other, EPOLL_CTL_DEL, s, 0, 0));
    say("del the first: %s", ctl(ep, EPOLL_CTL_DEL, s, 0, 0));
    close(other);
    close(ep);
    finish_case();
}

// maxevents smaller than the ready count: each call reports `maxevents`
// items and moves the level-triggered ones it reported to the tail of the
// ready list, so successive calls go round the ready descriptors (man
// epoll_wait). The ready list starts in the order the data arrived (the
// three peers write one after another), so the order is the kernel's too.
static void case_maxevents_smaller(void) {
    start(3);
    int ep = new_set();
    for (int i = 0; i < 3; ++i)
        say("add %d: %s", i + 1, ctl(ep, EPOLL_CTL_ADD, g_peers[i].fd, EPOLLIN, (uint64_t)i + 1));
    for (int i = 0; i < 3; ++i)
        order(&g_peers[i], 'w', 1);
    uint64_t seen[4] = {0};
    for (int call = 0; call < 4; ++call) {
        struct epoll_event ev[1];
        int n = epoll_wait(ep, ev, 1, EVENT_MS);
        seen[call] = n == 1 ? ev[0].data.u64 : 0;
        say("call %d, maxevents 1: %d event%s", call + 1, n, n == 1 ? "" : "s");
    }
    uint64_t sorted[3] = {seen[0], seen[1], seen[2]};
    for (int i = 0; i < 3; ++i)
        for (int j = i + 1; j < 3; ++j)
            if (sorted[j] < sorted[i]) {
                uint64_t x = sorted[i];
                sorted[i] = sorted[j];
                sorted[j] = x;
            }
    say("calls 1-3 reported (sorted): %llu %llu %llu", (unsigned long long)sorted[0],
        (unsigned long long)sorted[1], (unsigned long long)sorted[2]);
    say("calls 1-3 in the order of arrival: %s",
        seen[0] == 1 && seen[1] == 2 && seen[2] == 3 ? "yes" : "no");
    say("call 4 goes round to call 1's: %s", seen[3] == seen[0] && seen[0] ? "yes" : "no");
    show_wait("maxevents 8", ep, 8, EVENT_MS);
    for (int i = 0; i < 3; ++i)
        drain("drain", g_peers[i].fd);
    // No flake: every peer's single acknowledged write has been read.
    show_wait("all read", ep, 1, QUIET_MS);
    close(ep);
    finish_case();
}

// One socket in two sets: each registration is its own (its own events,
// its own edge), a delete from one leaves the other.
static void case_two_sets(void) {
    start(1);
    int s = g_peers[0].fd, a = new_set(), b = new_set();
    say("A add IN: %s", ctl(a, EPOLL_CTL_ADD, s, EPOLLIN, 1));
    say("B add IN|ET: %s", ctl(b, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLET, 2));
    order(&g_peers[0], 'w', 5);
    show_wait("A", a, 8, EVENT_MS);
    show_wait("B", b, 8, EVENT_MS);
    // No flake: B's edge was taken, nothing else is sent before the write below.
    show_wait("B again (ET)", b, 8, QUIET_MS);
    show_wait("A again (LT)", a, 8, EVENT_MS);
    say("A del: %s", ctl(a, EPOLL_CTL_DEL, s, 0, 0));
    show_wait("A after del", a, 8, QUIET_MS);
    drain("all", s);
    show_wait("B drained", b, 8, QUIET_MS);
    order(&g_peers[0], 'w', 4);
    show_wait("B new arrival", b, 8, EVENT_MS);
    show_wait("A (deleted)", a, 8, QUIET_MS);
    drain("all", s);
    close(a);
    close(b);
    finish_case();
}

// dup()ed descriptors: the kernel keys a registration by (file, descriptor
// number), so a dup of a registered descriptor is a registration of its
// own in the same set, reported beside the original, deleted on its own.
static void case_dup_separate(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set();
    int d = dup(s);
    if (d < 0) die("dup");
    say("add original IN: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 1));
    say("add dup IN: %s", ctl(ep, EPOLL_CTL_ADD, d, EPOLLIN, 2));
    say("add original again: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 1));
    order(&g_peers[0], 'w', 5);
    show_wait("both registrations", ep, 8, EVENT_MS);
    say("del original: %s", ctl(ep, EPOLL_CTL_DEL, s, 0, 0));
    show_wait("the dup's left", ep, 8, EVENT_MS);
    say("mod dup: %s", ctl(ep, EPOLL_CTL_MOD, d, EPOLLIN, 3));
    show_wait("the dup's, modified", ep, 8, EVENT_MS);
    say("del original again: %s", ctl(ep, EPOLL_CTL_DEL, s, 0, 0));
    say("del dup: %s", ctl(ep, EPOLL_CTL_DEL, d, 0, 0));
    // No flake: both registrations are gone; a gone one reports nothing.
    show_wait("none left", ep, 8, QUIET_MS);
    drain("all", s);
    close(d);
    close(ep);
    finish_case();
}

// close() while registered: a registration lives as long as its file, not
// its descriptor (eventpoll_release runs when the file's last reference
// goes). Closing the registered descriptor while a dup keeps the file open
// leaves the registration reporting (under the closed descriptor's
// epoll_data); closing the last descriptor removes it.
static void case_close_while_registered(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set();
    int d = dup(s);
    if (d < 0) die("dup");
    say("add original IN: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 1));
    order(&g_peers[0], 'w', 5);
    show_wait("registered", ep, 8, EVENT_MS);
    close(s);
    g_peers[0].fd = d;
    show_wait("original closed, dup open", ep, 8, EVENT_MS);
    say("del closed descriptor: %s", ctl(ep, EPOLL_CTL_DEL, s, 0, 0));
    // Closing the last descriptor: the data stays unread, the registration
    // goes. No flake: nothing is left that could report.
    close(d);
    g_peers[0].fd = -1;
    show_wait("last closed", ep, 8, QUIET_MS);
    say("del it now: %s", ctl(ep, EPOLL_CTL_DEL, d, 0, 0));
    close(ep);
    finish_case();
}

// An epoll set in another: the inner set is readable (EPOLLIN) while it
// has events to report; the outer polls it as it polls any file. A set
// cannot hold itself (EINVAL) or make a loop (ELOOP).
static void case_nested_set(void) {
    start(1);
    int s = g_peers[0].fd, inner = new_set(), outer = new_set();
    say("inner add IN: %s", ctl(inner, EPOLL_CTL_ADD, s, EPOLLIN, 1));
    say("outer add inner: %s", ctl(outer, EPOLL_CTL_ADD, inner, EPOLLIN, 99));
    say("inner add outer: %s", ctl(inner, EPOLL_CTL_ADD, outer, EPOLLIN, 98));
    say("inner add itself: %s", ctl(inner, EPOLL_CTL_ADD, inner, EPOLLIN, 97));
    // No flake: the peer has sent nothing.
    show_wait("outer, nothing sent", outer, 8, QUIET_MS);
    order(&g_peers[0], 'w', 5);
    show_wait("outer", outer, 8, EVENT_MS);
    show_wait("inner", inner, 8, EVENT_MS);
    show_wait("outer again (LT)", outer, 8, EVENT_MS);
    drain("all", s);
    // No flake: the acknowledged write was read whole.
    show_wait("outer, all read", outer, 8, QUIET_MS);
    show_wait("inner, all read", inner, 8, QUIET_MS);
    close(outer);
    close(inner);
    finish_case();
}

static const char* poll_result(int n, short revents, char* buf, size_t len) {
    if (n < 0) return err_name(errno);
    char f[128];
    snprintf(buf, len, "%d, %s", n, flag_names((uint16_t)revents, f, sizeof f));
    return buf;
}

static const char* select_result(int fd, int ms, char* buf, size_t len) {
    fd_set r;
    FD_ZERO(&r);
    FD_SET(fd, &r);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    int n = select(fd + 1, &r, NULL, NULL, &tv);
    if (n < 0) return err_name(errno);
    snprintf(buf, len, "%d, %s", n, FD_ISSET(fd, &r) ? "readable" : "-");
    return buf;
}

// An epoll set in poll() and select(): readable while it has events to
// report (its own poll method), as in another set.
static void case_set_in_poll(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set();
    char b[128];
    say("add IN: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 1));
    struct pollfd p = {.fd = ep, .events = POLLIN};
    // No flake: the peer has sent nothing.
    int n = poll(&p, 1, QUIET_MS);
    say("poll, nothing sent: %s", poll_result(n, p.revents, b, sizeof b));
    say("select, nothing sent: %s", select_result(ep, QUIET_MS, b, sizeof b));
    order(&g_peers[0], 'w', 5);
    n = poll(&p, 1, EVENT_MS);
    say("poll: %s", poll_result(n, p.revents, b, sizeof b));
    say("select: %s", select_result(ep, EVENT_MS, b, sizeof b));
    show_wait("epoll_wait", ep, 8, 0);
    drain("all", s);
    // No flake: the acknowledged write was read whole.
    n = poll(&p, 1, QUIET_MS);
    say("poll, all read: %s", poll_result(n, p.revents, b, sizeof b));
    say("select, all read: %s", select_result(ep, QUIET_MS, b, sizeof b));
    close(ep);
    finish_case();
}

// fork() with a set: the child's descriptor refers to the same set (one
// file), so both wait on the same registrations; what one reads, the
// other's set no longer reports.
static void case_fork_shared_set(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set();
    say("add IN: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 1));
    int go[2], res[2];
    if (pipe2(go, O_CLOEXEC) != 0 || pipe2(res, O_CLOEXEC) != 0) die("pipe");
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) { // answers each 'w'ait or 'd'rain with a line
        alarm(60);
        close(go[1]);
        close(res[0]);
        for (int i = 0; i < 16; ++i) {
            char op, line[512];
            if (read(go[0], &op, 1) != 1 || op == 'q') _exit(0);
            if (op == 'w' || op == 'W') {
                struct epoll_event ev[8];
                int k = epoll_wait(ep, ev, 8, op == 'w' ? EVENT_MS : QUIET_MS);
                describe(k, ev, line, sizeof line);
            } else {
                static char buf[65536];
                long total = 0;
                ssize_t r = 0;
                for (int j = 0; j < 1000 && (r = recv(s, buf, sizeof buf, MSG_DONTWAIT)) > 0; ++j)
                    total += r;
                snprintf(line, sizeof line, "read %ld, then %s", total,
                         r == 0 ? "EOF" : err_name(errno));
            }
            if (write(res[1], line, strlen(line) + 1) < 0) _exit(1);
        }
        _exit(0);
    }
    close(go[0]);
    close(res[1]);
    // One request to the child, its answer printed.
#define CHILD(op, label)                                                                           \
    do {                                                                                           \
        char line[512] = {0};                                                                      \
        if (write(go[1], op, 1) != 1) die("to the child");                                         \
        if (!wait_fd(res[0], POLLIN, 3 * EVENT_MS) || read(res[0], line, sizeof line - 1) <= 0)    \
            die("the child's answer");                                                             \
        say("child, %s: %s", label, line);                                                         \
    } while (0)
    order(&g_peers[0], 'w', 5);
    show_wait("parent", ep, 8, EVENT_MS);
    CHILD("w", "wait");
    CHILD("d", "drain");
    // No flake: the child read the acknowledged write whole.
    show_wait("parent, the child read all", ep, 8, QUIET_MS);
    order(&g_peers[0], 'w', 3);
    CHILD("w", "wait");
    show_wait("parent", ep, 8, EVENT_MS);
    drain("parent", s);
    CHILD("W", "wait, the parent read all");
    if (write(go[1], "q", 1) != 1) die("to the child");
    int st = 0;
    if (waitpid(child, &st, 0) != child) die("waitpid");
    say("child exited: %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    order(&g_peers[0], 'w', 2);
    show_wait("parent, the child gone", ep, 8, EVENT_MS);
    drain("parent", s);
#undef CHILD
    close(go[1]);
    close(res[0]);
    close(ep);
    finish_case();
}

// exec() keeps a set that is not close-on-exec, with its registrations: a
// program exec'd with the set's number (and the socket's) waits on it and
// reads. (The child here is this probe again, exec'd as "exec-child".)
static const char* g_self;
static void case_exec_inherited_set(void) {
    start(1);
    int s = g_peers[0].fd;
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    say("add IN: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 7));
    order(&g_peers[0], 'w', 5);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        char a[16], b[16];
        snprintf(a, sizeof a, "%d", ep);
        snprintf(b, sizeof b, "%d", s);
        execl(g_self, g_self, "exec-child", a, b, (char*)NULL);
        _exit(127);
    }
    int st = 0;
    if (waitpid(child, &st, 0) != child) die("waitpid");
    say("exec'd child exited: %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    // No flake: the exec'd child read the acknowledged write whole.
    show_wait("parent, the child read all", ep, 8, QUIET_MS);
    order(&g_peers[0], 'w', 3);
    show_wait("parent", ep, 8, EVENT_MS);
    drain("parent", s);
    close(ep);
    finish_case();
}

// The peer waits in epoll on its end when the other end's descriptor goes
// to a program exec'd with it, which writes: the peer reads those bytes
// (under usmc the connection moves to TCP at the exec: the move must wake
// the peer where it sleeps).
static void case_exec_writes_to_waiting_peer(void) {
    start(1);
    struct peer* p = &g_peers[0];
    int s = p->fd;
    tell(p, 'E', 5);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        char a[16];
        snprintf(a, sizeof a, "%d", s);
        execl(g_self, g_self, "exec-writer", a, (char*)NULL);
        _exit(127);
    }
    int st = 0;
    if (waitpid(child, &st, 0) != child) die("waitpid");
    say("exec'd writer exited: %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    await_peer(p);
    say("the peer, waiting in epoll, read the 5 bytes written after the exec");
    finish_case();
}

static int exec_writer(int s) {
    alarm(60);
    // (The socket is nonblocking: the probe made it so.)
    if (!wait_fd(s, POLLOUT, EVENT_MS)) return 1;
    return send(s, "abcde", 5, MSG_NOSIGNAL) == 5 ? 0 : 1;
}

static int exec_child(int ep, int s) {
    alarm(60);
    show_wait("exec'd child", ep, 8, EVENT_MS);
    drain("exec'd child", s);
    // No flake: the parent's only write was acknowledged before the exec.
    show_wait("exec'd child, all read", ep, 8, QUIET_MS);
    fflush(stdout);
    return 0;
}

// Descriptors over a Unix socket (SCM_RIGHTS).
static void send_fds(int via, const int* fds, int n) {
    char byte = 'f';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = u.buf,
                       .msg_controllen = CMSG_SPACE((size_t)n * sizeof(int))};
    struct cmsghdr* h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
    memcpy(CMSG_DATA(h), fds, (size_t)n * sizeof(int));
    if (sendmsg(via, &m, 0) != 1) die("sendmsg SCM_RIGHTS");
}

static void recv_fds(int via, int* fds, int n) {
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    if (recvmsg(via, &m, 0) != 1) die("recvmsg SCM_RIGHTS");
    struct cmsghdr* h = CMSG_FIRSTHDR(&m);
    if (!h || h->cmsg_type != SCM_RIGHTS || h->cmsg_len != CMSG_LEN((size_t)n * sizeof(int))) {
        errno = 0;
        die("no descriptors");
    }
    memcpy(fds, CMSG_DATA(h), (size_t)n * sizeof(int));
}

static void sync_byte(int fd, char want) {
    char c = 0;
    if (!wait_fd(fd, POLLIN, 2 * EVENT_MS) || read(fd, &c, 1) != 1 || c != want) die("sync");
}

// A set of a connection and a pipe, both ready all along (level-triggered):
// every wait reports both, as the kernel's set does (under usmc the pipe is
// in the kernel's part of the set, the connection in user memory).
static void case_mixed_set(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set(), pp[2];
    if (pipe2(pp, O_CLOEXEC) != 0 || write(pp[1], "x", 1) != 1) die("pipe");
    say("add conn OUT: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLOUT, 1));
    say("add pipe IN: %s", ctl(ep, EPOLL_CTL_ADD, pp[0], EPOLLIN, 2));
    for (int i = 0; i < 40; ++i) {
        char label[32];
        snprintf(label, sizeof label, "wait %d", i);
        show_wait(label, ep, 8, i % 2 ? 0 : EVENT_MS);
    }
    close(pp[0]);
    close(pp[1]);
    close(ep);
    finish_case();
}

// A connection and the set that holds it passed to another process
// (SCM_RIGHTS) that held neither: it waits on the set and reads what the
// peer wrote before the pass (unread here) and after it, and writes; this
// process keeps its descriptors and finds nothing more to read.
static void case_pass_fds(void) {
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) die("socketpair");
    fflush(stdout);
    pid_t child = fork(); // before the connection: it never held it
    if (child < 0) die("fork");
    if (child == 0) {
        close(sp[0]);
        alarm(60);
        int fds[2];
        recv_fds(sp[1], fds, 2);
        int s = fds[0], ep = fds[1];
        show_wait("child", ep, 8, EVENT_MS);
        drain("child", s);
        fflush(stdout);
        if (write(sp[1], "a", 1) != 1) _exit(1);
        sync_byte(sp[1], 'b');
        show_wait("child, later", ep, 8, EVENT_MS);
        drain("child, later", s);
        write_all(s, 4);
        fflush(stdout);
        if (write(sp[1], "c", 1) != 1) _exit(1);
        _exit(0);
    }
    close(sp[1]);
    start(1);
    struct peer* p = &g_peers[0];
    int s = p->fd, ep = new_set();
    say("add IN: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 7));
    order(p, 'w', 5);
    show_wait("before the pass", ep, 8, EVENT_MS);
    int fds[2] = {s, ep};
    send_fds(sp[0], fds, 2);
    sync_byte(sp[0], 'a');
    order(p, 'w', 3);
    if (write(sp[0], "b", 1) != 1) die("sync");
    sync_byte(sp[0], 'c');
    order(p, 'r', 4);
    say("the peer read the child's 4");
    drain("parent", s);
    int st = 0;
    if (waitpid(child, &st, 0) != child) die("waitpid");
    say("child exited: %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    close(sp[0]);
    close(ep);
    finish_case();
}

// Level-triggered waits for the hang-up of a connection whose unread data
// answers every wait at once: waits again (10 ms apart) until the report
// shows one of `want`, EVENT_MS at most; prints the last report.
static void show_wait_for(const char* label, int ep, uint32_t want) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct epoll_event ev[16];
    char out[512];
    int n = 0;
    for (int i = 0; i < 1000; ++i) {
        n = epoll_wait(ep, ev, 16, EVENT_MS);
        int hit = n < 0;
        for (int j = 0; j < n; ++j)
            hit |= (ev[j].events & want) != 0;
        if (hit || ms_since(&t0) >= EVENT_MS) break;
        usleep(10 * 1000);
    }
    say("%s: %s", label, describe(n, ev, out, sizeof out));
}

// The peer process exits mid-stream, data unread both ways: its kernel
// closes the socket with unread data, which sends a reset (not a FIN).
// The reset sets the error (ECONNRESET), shuts both directions and
// closes: epoll reports IN|ERR|HUP|RDHUP (the registered IN|RDHUP and the
// always-reported ERR|HUP). The data that arrived before stays readable,
// then the error is read (once), then the end; a send fails (EPIPE).
static void case_peer_exit(void) {
    start(1);
    struct peer* p = &g_peers[0];
    int s = p->fd, ep = new_set();
    say("add IN|RDHUP: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP, 1));
    order(p, 'w', 50);
    show_wait("peer's data", ep, 8, EVENT_MS);
    write_all(s, 100);
    order(p, 'p', 0); // our 100 bytes are in its receive queue, unread
    tell(p, 'q', 0);
    reap(p);
    show_wait_for("peer exited", ep, EPOLLHUP | EPOLLERR | EPOLLRDHUP);
    drain("after the exit", s);
    drain("again", s);
    show_wait("level", ep, 8, EVENT_MS);
    say("mod IN|OUT|RDHUP: %s", ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLOUT | EPOLLRDHUP, 2));
    show_wait("level, OUT too", ep, 8, EVENT_MS);
    ssize_t w = send(s, "x", 1, MSG_NOSIGNAL);
    say("send: %s", w < 0 ? err_name(errno) : "taken");
    close(ep);
    finish_case();
}

// The peer aborts (SO_LINGER 0, close): a reset while our side has unread
// data. As above: IN|ERR|HUP|RDHUP, the data, then ECONNRESET, then EOF.
static void case_peer_abort(void) {
    start(1);
    struct peer* p = &g_peers[0];
    int s = p->fd, ep = new_set();
    say("add IN|RDHUP: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP, 1));
    order(p, 'w', 5);
    show_wait("peer's data", ep, 8, EVENT_MS);
    order(p, 'a', 0);
    show_wait_for("peer aborted", ep, EPOLLHUP | EPOLLERR | EPOLLRDHUP);
    drain("after the reset", s);
    drain("again", s);
    show_wait("level", ep, 8, EVENT_MS);
    ssize_t w = send(s, "x", 1, MSG_NOSIGNAL);
    say("send: %s", w < 0 ? err_name(errno) : "taken");
    close(ep);
    finish_case();
}

// shutdown(SHUT_WR) by the peer: its FIN sets RCV_SHUTDOWN here, reported
// as IN|RDHUP (the end is readable: an edge of its own), and it stays so;
// once we shut down writing too, both directions are shut: HUP. (The data
// before it is read first: the FIN's edge is then the only one there is.)
static void case_peer_shutdown(void) {
    start(1);
    struct peer* p = &g_peers[0];
    int s = p->fd, ep = new_set();
    say("add IN|RDHUP|ET: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP | EPOLLET, 1));
    order(p, 'w', 5);
    show_wait("peer's data", ep, 8, EVENT_MS);
    drain("data", s);
    order(p, 's', 0);
    show_wait("peer shut down writing", ep, 8, EVENT_MS);
    drain("end", s);
    say("mod IN|RDHUP (LT): %s", ctl(ep, EPOLL_CTL_MOD, s, EPOLLIN | EPOLLRDHUP, 2));
    show_wait("level, end read", ep, 8, EVENT_MS);
    say("shutdown SHUT_WR here: %s", shutdown(s, SHUT_WR) == 0 ? "ok" : err_name(errno));
    show_wait("both directions shut", ep, 8, EVENT_MS);
    close(ep);
    finish_case();
}

// shutdown(SHUT_RD) here: the data before it is still read, then the end
// (EOF where a read would wait); the set and poll report IN|RDHUP from
// the shutdown on. Bytes the peer sends after it are read too (Linux's TCP
// keeps taking them while established), then the end again. A blocked
// reader in another thread is not part of this case.
static void case_shut_rd(void) {
    start(1);
    struct peer* p = &g_peers[0];
    int s = p->fd, ep = new_set();
    say("add IN|RDHUP: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLRDHUP, 1));
    order(p, 'w', 5);
    show_wait("peer's data", ep, 8, EVENT_MS);
    say("shutdown SHUT_RD here: %s", shutdown(s, SHUT_RD) == 0 ? "ok" : err_name(errno));
    show_wait("read side shut, data unread", ep, 8, EVENT_MS);
    drain("data, then", s);
    show_wait("level, read side shut", ep, 8, EVENT_MS);
    struct pollfd pf = {.fd = s, .events = POLLIN | POLLOUT | POLLRDHUP};
    char f[128];
    int pr = poll(&pf, 1, 0);
    say("poll: %d %s", pr, flag_names((uint32_t)pf.revents, f, sizeof f));
    char one;
    ssize_t r = recv(s, &one, 1, 0); // (EAGAIN without the shutdown)
    say("recv: %s", r == 0 ? "EOF" : r < 0 ? err_name(errno) : "data");
    order(p, 'w', 3);
    // (The set reports IN already: wait for the bytes themselves, bounded.)
    int queued = 0;
    for (int i = 0; i < 1000 && queued < 3; ++i)
        if (ioctl(s, FIONREAD, &queued) != 0 || queued < 3) usleep(1000);
    say("peer wrote after: %d queued", queued);
    drain("late data, then", s);
    ssize_t w = send(s, "x", 1, MSG_NOSIGNAL);
    say("send: %s", w < 0 ? err_name(errno) : "taken");
    close(ep);
    finish_case();
}

// A thread blocked in recv wakes when another shuts reading down, and
// reads the end (TCP wakes it through the socket's state change).
static int g_br_fd;
static volatile pid_t g_br_tid;
static const char* g_br_result = "still blocked";
static void* blocked_reader(void* arg) {
    (void)arg;
    g_br_tid = (pid_t)syscall(SYS_gettid);
    char b;
    ssize_t r = recv(g_br_fd, &b, 1, 0);
    g_br_result = r == 0 ? "EOF" : r < 0 ? err_name(errno) : "data";
    return NULL;
}

// The thread's state in /proc is 'S' (asleep) or else: bounded wait for it.
static int asleep(pid_t tid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    for (int i = 0; i < 5000; ++i) {
        FILE* f = fopen(path, "re");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f) fclose(f);
        buf[n] = 0;
        const char* end = strrchr(buf, ')'); // "pid (comm) S ..."
        if (end && end[1] == ' ' && end[2] == 'S') return 1;
        usleep(1000);
    }
    return 0;
}

static void case_shut_rd_blocked(void) {
    start(1);
    g_br_fd = g_peers[0].fd;
    g_br_tid = 0;
    g_br_result = "still blocked";
    if (fcntl(g_br_fd, F_SETFL, fcntl(g_br_fd, F_GETFL) & ~O_NONBLOCK) != 0) die("blocking");
    pthread_t t;
    if (pthread_create(&t, NULL, blocked_reader, NULL) != 0) die("pthread_create");
    for (int i = 0; i < 5000 && !g_br_tid; ++i)
        usleep(1000);
    // (Asleep or not decides only whether this tests the wake-up; a reader
    // that comes after the shutdown reads the end at once, the same line.)
    asleep(g_br_tid);
    say("shutdown SHUT_RD from another thread: %s",
        shutdown(g_br_fd, SHUT_RD) == 0 ? "ok" : err_name(errno));
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += EVENT_MS / 1000 + 1;
    int joined = pthread_timedjoin_np(t, NULL, &until) == 0;
    say("the blocked reader: %s", joined ? g_br_result : "still blocked");
    if (!joined) {
        finish_case();
        fflush(stdout);
        _exit(0); // (a thread stuck in recv: the output already differs)
    }
    finish_case();
}

// epoll_pwait's signal mask: a signal blocked outside the call and
// unblocked by its mask interrupts it (EINTR, the handler runs). A pending
// signal does not win over ready events: they are returned and the old
// mask restored before the signal could be taken. Here the signal is sent
// to this thread (pthread_kill); to the process, it is the next case.
static volatile sig_atomic_t g_handled;
static void on_usr1(int sig) {
    (void)sig;
    ++g_handled;
}

static void raise_usr1(int to_process) {
    if (to_process)
        kill(getpid(), SIGUSR1);
    else
        pthread_kill(pthread_self(), SIGUSR1);
}

static void signal_case(int to_process) {
    start(1);
    int s = g_peers[0].fd, ep = new_set();
    say("add IN: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 1));
    struct sigaction sa = {.sa_handler = on_usr1};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t usr1, old, open_mask;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, &old);
    open_mask = old;
    sigdelset(&open_mask, SIGUSR1);
    g_handled = 0;
    raise_usr1(to_process);
    struct epoll_event ev[8];
    char out[512];
    // No flake: the peer has sent nothing; the signal stays blocked.
    int n = epoll_wait(ep, ev, 8, QUIET_MS);
    say("epoll_wait, signal pending and blocked: %s; handled %d", describe(n, ev, out, sizeof out),
        (int)g_handled);
    n = epoll_pwait(ep, ev, 8, EVENT_MS, &open_mask);
    say("epoll_pwait, mask unblocks it: %s; handled %d", describe(n, ev, out, sizeof out),
        (int)g_handled);
    order(&g_peers[0], 'w', 5);
    raise_usr1(to_process);
    n = epoll_pwait(ep, ev, 8, EVENT_MS, &open_mask);
    say("epoll_pwait, data ready, signal pending: %s; handled %d", describe(n, ev, out, sizeof out),
        (int)g_handled);
    sigprocmask(SIG_SETMASK, &old, NULL);
    say("unblocked: handled %d", (int)g_handled);
    drain("all", s);
    signal(SIGUSR1, SIG_DFL);
    close(ep);
    finish_case();
}

static void case_epoll_pwait_signal(void) {
    signal_case(0);
}

// The same, the signal sent to the process (kill(getpid())): the kernel
// gives a process-directed signal to a thread that does not block it, and
// the probe's only thread does: it stays pending for that thread, as
// above. (A process with another thread that does not block it would run
// the handler there, at once.)
static void case_epoll_pwait_process_signal(void) {
    signal_case(1);
}

static int pwait2(int ep, struct epoll_event* ev, int max, const struct timespec* t,
                  const sigset_t* mask) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    return epoll_pwait2(ep, ev, max, t, mask);
#else
    return (int)syscall(SYS_epoll_pwait2, ep, ev, max, t, mask, mask ? _NSIG / 8 : 0);
#endif
}

// epoll_pwait2: the timeout as a timespec (NULL: none; {0, 0}: a look);
// a relative timeout is never cut short; a tv_nsec out of range is EINVAL.
static void case_epoll_pwait2(void) {
    start(1);
    int s = g_peers[0].fd, ep = new_set();
    say("add IN: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN, 1));
    struct epoll_event ev[8];
    char out[512];
    struct timespec t0, quiet = {0, QUIET_MS * 1000000L}, zero = {0, 0}, bad = {0, 2000000000L},
                        event = {EVENT_MS / 1000, 0};
    // No flake: the peer has sent nothing.
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int n = pwait2(ep, ev, 8, &quiet, NULL);
    long took = ms_since(&t0);
    say("timeout %d ms, nothing sent: %s; waited it out: %s", QUIET_MS,
        describe(n, ev, out, sizeof out), took >= QUIET_MS ? "yes" : "no");
    n = pwait2(ep, ev, 8, &zero, NULL);
    say("timeout {0, 0}: %s", describe(n, ev, out, sizeof out));
    n = pwait2(ep, ev, 8, &bad, NULL);
    say("tv_nsec 2e9: %s", describe(n, ev, out, sizeof out));
    order(&g_peers[0], 'w', 5);
    n = pwait2(ep, ev, 8, &event, NULL);
    say("timeout %d s, data: %s", EVENT_MS / 1000, describe(n, ev, out, sizeof out));
    n = pwait2(ep, ev, 8, NULL, NULL);
    say("no timeout, data: %s", describe(n, ev, out, sizeof out));
    drain("all", s);
    n = pwait2(ep, ev, 8, &zero, NULL);
    say("timeout {0, 0}, all read: %s", describe(n, ev, out, sizeof out));
    close(ep);
    finish_case();
}

// EPOLLOUT edge-triggered: reported at the add (the socket is writable),
// then not again until the send buffer, once full (EAGAIN sets
// SOCK_NOSPACE), has room again: sk_stream_write_space wakes once and
// clears SOCK_NOSPACE, so draining a full buffer is one edge.
static void case_writable_edges(void) {
    start(1);
    struct peer* p = &g_peers[0];
    int s = p->fd, ep = new_set();
    say("add OUT|ET: %s", ctl(ep, EPOLL_CTL_ADD, s, EPOLLOUT | EPOLLET, 1));
    show_wait("at the add", ep, 8, EVENT_MS);
    // No flake: nothing was sent yet, so no acknowledgement can free room.
    show_wait("no new edge", ep, 8, QUIET_MS);
    static char buf[65536];
    memset(buf, 'f', sizeof buf);
    long total = 0;
    const char* end = "no EAGAIN (bounded loop ended)";
    for (int i = 0; i < 16384; ++i) { // (1 GiB at most)
        ssize_t w = send(s, buf, sizeof buf, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            total += w;
            continue;
        }
        end = w < 0 ? err_name(errno) : "0";
        break;
    }
    say("filled: until %s", end);
    order(p, 'r', total); // the peer reads every byte written
    show_wait("peer read all", ep, 8, EVENT_MS);
    // No flake: room came back once (one wake-up, SOCK_NOSPACE cleared)
    // and nothing was written since.
    show_wait("one edge only", ep, 8, QUIET_MS);
    say("write after: %s", send(s, "x", 1, MSG_NOSIGNAL) == 1 ? "taken" : err_name(errno));
    order(p, 'r', 1);
    close(ep);
    finish_case();
}

// A nonblocking connect registered while it is still connecting (wrk,
// redis-benchmark, libuv do this): one OUT edge once it is up, nothing
// more until data comes, then the data's edge. (Under usmc the set holds it
// in user memory from the add on, with no wake-up socket: the handshake's
// end is the edge.) The probe connects to its own listener.
static void case_connect_in_set(void) {
    start(0);
    struct sockaddr_in addr;
    socklen_t len = sizeof addr;
    if (getsockname(g_listener, (struct sockaddr*)&addr, &len) != 0) die("getsockname");
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) die("socket");
    int r = connect(s, (struct sockaddr*)&addr, len);
    say("connect: %s", r == 0 || errno == EINPROGRESS ? "started" : err_name(errno));
    int ep = new_set();
    say("add IN|OUT|ET while connecting: %s",
        ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN | EPOLLOUT | EPOLLET, 7));
    show_wait("up", ep, 8, EVENT_MS);
    if (!wait_fd(g_listener, POLLIN, 2 * EVENT_MS)) die("no connection");
    int a = accept(g_listener, NULL, NULL);
    if (a < 0) die("accept");
    ++g_conns;
    // No flake: nothing was sent yet, and room was there from the start.
    show_wait("no second edge", ep, 8, QUIET_MS);
    if (send(a, "hello", 5, MSG_NOSIGNAL) != 5) die("send");
    show_wait("5 bytes arrived", ep, 8, EVENT_MS);
    drain("them", s);
    say("write: %s", send(s, "x", 1, MSG_NOSIGNAL) == 1 ? "taken" : err_name(errno));
    char c = 0;
    if (!wait_fd(a, POLLIN, EVENT_MS) || recv(a, &c, 1, 0) != 1)
        die("the accepted side read nothing");
    say("the accepted side read '%c'", c);
    close(a);
    close(s);
    close(ep);
    finish_case();
}

static const struct {
    const char* name;
    void (*run)(void);
} g_cases[] = {
    {"lt_readable", case_lt_readable},
    {"et_second_arrival", case_et_second_arrival},
    {"et_after_drain", case_et_after_drain},
    {"oneshot", case_oneshot},
    {"exclusive", case_exclusive},
    {"exclusive_rules", case_exclusive_rules},
    {"two_sleepers", case_two_sleepers},
    {"maxevents_smaller", case_maxevents_smaller},
    {"two_sets", case_two_sets},
    {"dup_separate", case_dup_separate},
    {"close_while_registered", case_close_while_registered},
    {"nested_set", case_nested_set},
    {"mixed_set", case_mixed_set},
    {"pass_fds", case_pass_fds},
    {"exec_writes_to_waiting_peer", case_exec_writes_to_waiting_peer},
    {"set_in_poll", case_set_in_poll},
    {"fork_shared_set", case_fork_shared_set},
    {"exec_inherited_set", case_exec_inherited_set},
    {"peer_exit", case_peer_exit},
    {"peer_abort", case_peer_abort},
    {"peer_shutdown", case_peer_shutdown},
    {"shut_rd", case_shut_rd},
    {"shut_rd_blocked", case_shut_rd_blocked},
    {"epoll_pwait_signal", case_epoll_pwait_signal},
    {"epoll_pwait_process_signal", case_epoll_pwait_process_signal},
    {"epoll_pwait2", case_epoll_pwait2},
    {"writable_edges", case_writable_edges},
    {"connect_in_set", case_connect_in_set},
};
#define NCASES (sizeof g_cases / sizeof g_cases[0])

static void run_case(size_t i) {
    g_case = g_cases[i].name;
    g_conns = 0;
    alarm(90);
    g_cases[i].run();
    alarm(0);
    fflush(stdout);
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    g_self = "/proc/self/exe";
    if (argc == 4 && strcmp(argv[1], "exec-child") == 0) {
        g_case = "exec_inherited_set";
        return exec_child(atoi(argv[2]), atoi(argv[3]));
    }
    if (argc == 3 && strcmp(argv[1], "exec-writer") == 0) {
        g_case = "exec_writes_to_waiting_peer";
        return exec_writer(atoi(argv[2]));
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE|all|list\n", argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "list") == 0) {
        for (size_t i = 0; i < NCASES; ++i)
            puts(g_cases[i].name);
        return 0;
    }
    int found = 0;
    for (size_t i = 0; i < NCASES; ++i)
        if (strcmp(argv[1], "all") == 0 || strcmp(argv[1], g_cases[i].name) == 0) {
            run_case(i);
            found = 1;
        }
    if (!found) {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    return 0;
}
