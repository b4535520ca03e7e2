// SPDX-License-Identifier: MIT
// What a readiness object costs, for the choice of what an application's
// epoll set watches for an SMC connection (docs/DESIGN-NOTES.md, "Readiness:
// the candidates, measured").
//
//   usmc-bench-wakeup wake [turns]
//       Two processes (CPUs 0 and 1) wake each other in turn: one write of a
//       byte (8 for an eventfd), poll, and one read to drain it. Socket pair
//       (usmc today), the connection's own loopback TCP socket, eventfd.
//       Prints the round trip and the CPU per wake-up plus drain.
//   usmc-bench-wakeup fill [rounds] [rcvbuf]
//       A loopback TCP socket made unwritable by filling it (TCP_NOTSENT_LOWAT
//       1, SO_SNDBUF minimal, the peer's SO_RCVBUF = rcvbuf, 0 = autotuned):
//       the bytes that took, and how long after the peer read them all the
//       socket was writable again.
//   usmc-bench-wakeup fill-many [pairs] [rcvbuf] [rounds]
//       The same on many pairs at once: all filled, then each read in turn;
//       the median, 99th percentile and worst time to writable again, and how
//       many took longer than 1 ms.
#include "bench_common.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// A connected loopback TCP pair of its own: *c the connecting end, *s the
// accepted one.
static void own_tcp_pair(int* c, int* s, int sndbuf, int rcvbuf) {
    struct sockaddr_in sa;
    int l = tcp_listener(&sa);
    int fds[2];
    tcp_pair(l, &sa, sndbuf, rcvbuf, fds);
    close(l);
    *c = fds[0];
    *s = fds[1];
}

static void turns(int rd, int wr, int is_eventfd, int first, int n) {
    for (int i = 0; i < n; ++i) {
        if (!first || i > 0) {
            struct pollfd p = {rd, POLLIN, 0};
            if (poll(&p, 1, 10000) != 1) die("poll");
            uint64_t v;
            if (is_eventfd ? read(rd, &v, 8) != 8 : recv(rd, &v, 1, 0) != 1) die("drain");
        }
        uint64_t one = 1;
        if (is_eventfd ? write(wr, &one, 8) != 8 : send(wr, "x", 1, 0) != 1) die("wake");
    }
}

static void wake(const char* name, int a_rd, int a_wr, int b_rd, int b_wr, int is_eventfd, int n) {
    double t0 = now();
    pid_t kid = fork();
    if (kid == 0) {
        pin(1);
        turns(b_rd, b_wr, is_eventfd, 0, n);
        _exit(0);
    }
    pin(0);
    struct rusage r0, r1, rk;
    getrusage(RUSAGE_SELF, &r0);
    turns(a_rd, a_wr, is_eventfd, 1, n);
    getrusage(RUSAGE_SELF, &r1);
    int status;
    wait4(kid, &status, 0, &rk);
    double elapsed = now() - t0;
    double cpu = cpu_of(&r1) - cpu_of(&r0) + cpu_of(&rk);
    printf("%-11s round trip %6.2f us   CPU per wake-up + drain %5.2f us\n", name,
           elapsed / n * 1e6, cpu / (2.0 * n) * 1e6);
}

static void fill(int rounds, int rcvbuf) {
    int c, s;
    own_tcp_pair(&c, &s, 1, rcvbuf);
    int lowat = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
    fcntl(c, F_SETFL, O_NONBLOCK);
    fcntl(s, F_SETFL, O_NONBLOCK);
    static char buf[1 << 16];
    memset(buf, 'j', sizeof buf);
    for (int round = 0; round < rounds; ++round) {
        long filled = 0, drained = 0;
        for (int i = 0; i < 100000; ++i) {
            struct pollfd p = {c, POLLOUT, 0};
            if (poll(&p, 1, 0) == 0) break;
            ssize_t n = send(c, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) filled += n;
        }
        double t0 = now(), waited = -1;
        while (now() - t0 < 5.0) {
            ssize_t n = recv(s, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) drained += n;
            struct pollfd p = {c, POLLOUT, 0};
            if (poll(&p, 1, 0) == 1) {
                waited = now() - t0;
                break;
            }
        }
        // What is still on its way, so the next round starts empty.
        for (double t = now(); now() - t < 0.01;) {
            ssize_t n = recv(s, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) t = now();
        }
        if (waited < 0)
            printf("rcvbuf %6d: unwritable after %7ld bytes; not writable 5 s after reading %ld\n",
                   rcvbuf, filled, drained);
        else
            printf("rcvbuf %6d: unwritable after %7ld bytes; writable %9.1f us after the peer "
                   "began reading (%ld read)\n",
                   rcvbuf, filled, waited * 1e6, drained);
    }
    close(c);
    close(s);
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

// Fills `c` until it is unwritable (bounded); returns the bytes it took.
static long fill_one(int c, char* buf, size_t len) {
    long filled = 0;
    for (int i = 0; i < 1000; ++i) {
        struct pollfd p = {c, POLLOUT, 0};
        if (poll(&p, 1, 0) == 0) break;
        ssize_t n = send(c, buf, len, MSG_DONTWAIT);
        if (n > 0) filled += n;
    }
    return filled;
}

static void fill_many(int pairs, int rcvbuf, int rounds) {
    int* c = calloc((size_t)pairs, sizeof(int));
    int* s = calloc((size_t)pairs, sizeof(int));
    double* t = calloc((size_t)pairs * (size_t)rounds, sizeof(double));
    static char buf[1 << 16];
    memset(buf, 'j', sizeof buf);
    for (int i = 0; i < pairs; ++i) {
        own_tcp_pair(&c[i], &s[i], 1, rcvbuf);
        int lowat = 1;
        setsockopt(c[i], IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
        fcntl(c[i], F_SETFL, O_NONBLOCK);
        fcntl(s[i], F_SETFL, O_NONBLOCK);
    }
    int n = 0, slow = 0, stuck = 0;
    long bytes = 0;
    for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < pairs; ++i)
            bytes += fill_one(c[i], buf, sizeof buf);
        for (int i = 0; i < pairs; ++i) {
            double t0 = now(), waited = -1;
            while (now() - t0 < 3.0) {
                (void)!recv(s[i], buf, sizeof buf, MSG_DONTWAIT);
                struct pollfd p = {c[i], POLLOUT, 0};
                if (poll(&p, 1, 0) == 1) {
                    waited = now() - t0;
                    break;
                }
            }
            if (waited < 0) {
                ++stuck;
                waited = 3.0;
            }
            if (waited > 1e-3) ++slow;
            t[n++] = waited;
            while (recv(s[i], buf, sizeof buf, MSG_DONTWAIT) > 0) {
            }
        }
    }
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    printf("rcvbuf %6d, %d pairs x %d rounds: %ld KB filled per pair; writable again: median %.1f "
           "us, p99 %.1f us, worst %.1f us; %d over 1 ms, %d not within 3 s\n",
           rcvbuf, pairs, rounds, bytes / n / 1024, t[n / 2] * 1e6, t[(n * 99) / 100] * 1e6,
           t[n - 1] * 1e6, slow, stuck);
    for (int i = 0; i < pairs; ++i) {
        close(c[i]);
        close(s[i]);
    }
    free(c);
    free(s);
    free(t);
}

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "fill-many") == 0) {
        fill_many(argc > 2 ? atoi(argv[2]) : 1000, argc > 3 ? atoi(argv[3]) : 32768,
                  argc > 4 ? atoi(argv[4]) : 3);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "fill") == 0) {
        fill(argc > 2 ? atoi(argv[2]) : 12, argc > 3 ? atoi(argv[3]) : 0);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "wake") != 0) {
        fprintf(stderr,
                "usage: %s wake [turns] | fill [rounds] [rcvbuf] | fill-many [pairs] [rcvbuf] "
                "[rounds]\n",
                argv[0]);
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 200000;
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp)) die("socketpair");
    wake("socket pair", sp[0], sp[0], sp[1], sp[1], 0, n);
    close(sp[0]);
    close(sp[1]);
    int c, s;
    own_tcp_pair(&c, &s, 0, 0);
    wake("tcp", c, c, s, s, 0, n);
    close(c);
    close(s);
    int e1 = eventfd(0, 0), e2 = eventfd(0, 0);
    if (e1 < 0 || e2 < 0) die("eventfd");
    wake("eventfd", e1, e2, e2, e1, 1, n);
    return 0;
}
