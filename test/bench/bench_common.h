// SPDX-License-Identifier: MIT
// Helpers of the C benchmark programs beside it (wakeup_objects.c,
// doorbell_rr.c): clocks, CPU time, pinning, loopback TCP pairs.
#pragma once
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline double cpu_of(const struct rusage* r) {
    return (double)(r->ru_utime.tv_sec + r->ru_stime.tv_sec) +
           (double)(r->ru_utime.tv_usec + r->ru_stime.tv_usec) * 1e-6;
}

static inline void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static inline void die(const char* what) {
    perror(what);
    exit(1);
}

// A listener on 127.0.0.1 (an ephemeral port), its address in *sa.
static inline int tcp_listener(struct sockaddr_in* sa) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr*)&a, sizeof a) || listen(l, 4096) ||
        getsockname(l, (struct sockaddr*)&a, &len))
        die("listen");
    *sa = a;
    return l;
}

// A connected pair through listener `l`: fds[0] connected, fds[1] accepted,
// both TCP_NODELAY; a nonzero sndbuf / rcvbuf is set on fds[0] / fds[1].
static inline void tcp_pair(int l, const struct sockaddr_in* sa, int sndbuf, int rcvbuf,
                            int fds[2]) {
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[0] < 0) die("socket");
    if (sndbuf) setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (connect(fds[0], (const struct sockaddr*)sa, sizeof *sa)) die("connect");
    fds[1] = accept(l, NULL, NULL);
    if (fds[1] < 0) die("accept");
    if (rcvbuf) setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    int one = 1;
    setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fds[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
