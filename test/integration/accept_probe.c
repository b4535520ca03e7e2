// SPDX-License-Identifier: MIT
/* Accepts connections from a forked child (both under usmc-run: SMC-D)
 * with flags and address buffers that change from call to call. A
 * handshake is queued by one accept() and handed out by a later one: every
 * accepted socket must have the flags of the call that returned it, and
 * the address the kernel gives (cut to the buffer, with the full length).
 * Then the kernel's argument errors: unknown flags (EINVAL, nothing
 * taken), an address without a length (EFAULT; the kernel takes the
 * connection and closes it). Then O_NONBLOCK changed by another process
 * (a forked child: the same open file) behind the listener's back: made
 * blocking there, accept() here sleeps until a connection comes, never
 * EAGAIN; made nonblocking there, accept() here returns EAGAIN at once.
 * Prints "OK <n>" or the first failure. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 24

static int fail(const char* what, int k) {
    printf("FAIL %s (call %d, errno %d)\n", what, k, errno);
    return 1;
}

static int read_full(int fd, void* buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 10000) != 1) return -1;
        ssize_t r = read(fd, (char*)buf + got, n - got);
        if (r <= 0 && !(r < 0 && errno == EAGAIN)) return -1;
        if (r > 0) got += (size_t)r;
    }
    return 0;
}

static int client(uint16_t port) {
    for (int i = 0; i < N; ++i) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
        to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (s < 0 || connect(s, (struct sockaddr*)&to, sizeof to) != 0) return 1;
        struct sockaddr_in me;
        socklen_t len = sizeof me;
        char ack;
        if (getsockname(s, (struct sockaddr*)&me, &len) != 0 ||
            write(s, &me.sin_port, sizeof me.sin_port) != sizeof me.sin_port ||
            read_full(s, &ack, 1) != 0)
            return 1;
        close(s);
    }
    /* One more, which the server's accept without a length closes. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char end;
    if (s < 0 || connect(s, (struct sockaddr*)&to, sizeof to) != 0) return 1;
    if (read_full(s, &end, 1) == 0) return 1; /* closed: EOF or a reset, never a byte */
    close(s);
    return 0;
}

/* The state letter of process `pid` (/proc/PID/stat), 0 if unreadable. */
static char proc_state(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char* r = strrchr(buf, ')');
    return r && r[1] == ' ' ? r[2] : 0;
}

/* A child that sets (or clears) O_NONBLOCK on the listener, as another
 * process holding the same open file may. */
static int flip_elsewhere(int l, int nonblock) {
    pid_t pid = fork();
    if (pid == 0) {
        int fl = fcntl(l, F_GETFL);
        _exit(fl < 0 || fcntl(l, F_SETFL, nonblock ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK)) != 0);
    }
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Connects once the process `waiter` sleeps (in its accept()), or after 10 s. */
static int connect_when_asleep(pid_t waiter, uint16_t port) {
    for (int i = 0; i < 10000 && proc_state(waiter) != 'S'; ++i) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char ack;
    if (s < 0 || connect(s, (struct sockaddr*)&to, sizeof to) != 0 || write(s, "b", 1) != 1 ||
        read_full(s, &ack, 1) != 0)
        return 1;
    close(s);
    return 0;
}

/* The listener's O_NONBLOCK as set by another process: it is the kernel's
 * open file, whatever this process last set. */
static int flags_behind_our_back(int l, uint16_t port) {
    int on = 1, off = 0;
    if (ioctl(l, FIONBIO, &on) != 0) return fail("FIONBIO", -1);
    if (accept(l, NULL, NULL) != -1 || errno != EAGAIN) return fail("nonblocking, empty", -1);
    if (flip_elsewhere(l, 0) != 0) return fail("made blocking elsewhere", -1);
    pid_t self = getpid(), pid = fork();
    if (pid == 0) _exit(connect_when_asleep(self, port));
    int fd = accept(l, NULL, NULL);
    if (fd < 0) return fail("made blocking elsewhere: accept()", -1);
    char b;
    if (read_full(fd, &b, 1) != 0 || b != 'b' || write(fd, "k", 1) != 1)
        return fail("made blocking elsewhere: the connection", -1);
    close(fd);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return fail("made blocking elsewhere: client", -1);
    if (ioctl(l, FIONBIO, &off) != 0 || flip_elsewhere(l, 1) != 0)
        return fail("made nonblocking elsewhere", -1);
    if (accept(l, NULL, NULL) != -1 || errno != EAGAIN)
        return fail("made nonblocking elsewhere: accept() did not return EAGAIN", -1);
    return 0;
}

int main(void) {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in at = {.sin_family = AF_INET};
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof at;
    if (l < 0 || bind(l, (struct sockaddr*)&at, sizeof at) != 0 || listen(l, 64) != 0 ||
        getsockname(l, (struct sockaddr*)&at, &alen) != 0)
        return fail("listen", -1);
    pid_t pid = fork();
    if (pid == 0) _exit(client(ntohs(at.sin_port)));
    int done = 0, k = 0;
    time_t until = time(NULL) + 60;
    while (done < N && time(NULL) < until) {
        int flags = (k % 2) ? (SOCK_NONBLOCK | SOCK_CLOEXEC) : 0;
        int mode = k % 3; /* 0: a whole buffer, 1: 4 bytes of it, 2: none */
        struct sockaddr_in from;
        memset(&from, 0xee, sizeof from);
        socklen_t len = mode == 1 ? 4 : sizeof from;
        int fd =
            accept4(l, mode == 2 ? NULL : (struct sockaddr*)&from, mode == 2 ? NULL : &len, flags);
        ++k;
        if (fd < 0) {
            if (errno != EAGAIN) return fail("accept4", k);
            struct pollfd p = {l, POLLIN, 0};
            poll(&p, 1, 1000);
            continue;
        }
        int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
        if (!!(fl & O_NONBLOCK) != !!(flags & SOCK_NONBLOCK)) return fail("O_NONBLOCK", k);
        if (!!(fdfl & FD_CLOEXEC) != !!(flags & SOCK_CLOEXEC)) return fail("FD_CLOEXEC", k);
        uint16_t port;
        if (read_full(fd, &port, sizeof port) != 0) return fail("read", k);
        if (mode != 2 && len != sizeof from) return fail("address length", k);
        if (mode != 2 && (from.sin_family != AF_INET || from.sin_port != port))
            return fail("address", k);
        if (mode == 0 && from.sin_addr.s_addr != htonl(INADDR_LOOPBACK))
            return fail("address (host)", k);
        if (mode == 1 && from.sin_addr.s_addr != 0xeeeeeeee) return fail("cut at 4 bytes", k);
        if (write(fd, "k", 1) != 1) return fail("write", k);
        close(fd);
        ++done;
    }
    if (accept4(l, NULL, NULL, 0x4000) != -1 || errno != EINVAL) return fail("unknown flags", k);
    int efault = 0;
    for (int tries = 0; tries < 100 && !efault; ++tries) {
        struct sockaddr_in from;
        int fd = accept4(l, (struct sockaddr*)&from, NULL, 0);
        if (fd >= 0) return fail("an address without a length was accepted", k);
        if (errno == EFAULT)
            efault = 1;
        else if (errno != EAGAIN)
            return fail("an address without a length", k);
        else {
            struct pollfd p = {l, POLLIN, 0};
            poll(&p, 1, 1000);
        }
    }
    if (!efault) return fail("an address without a length: no EFAULT", k);
    int st = 0;
    waitpid(pid, &st, 0);
    if (done < N || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return fail("client", k);
    if (flags_behind_our_back(l, ntohs(at.sin_port)) != 0) return 1;
    printf("OK %d in %d calls\n", done, k);
    return 0;
}
