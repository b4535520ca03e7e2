// SPDX-License-Identifier: MIT
// select() and poll() over usmc's descriptors allocate no memory.
//
// PostgreSQL's postmaster (15 and older) keeps its signals blocked except
// around select(), and its handlers (SIGCHLD's reaper, SIGUSR1's) allocate
// and fork: select() is a system call, so nothing it interrupts can hold a
// lock they need. A shim whose select() calls malloc breaks that: a signal
// taken inside malloc, whose handler forks (fork takes every malloc arena
// lock), hangs the postmaster for good, and with it every new connection.
//
// The probe counts the calls to malloc and its family that the calling
// thread makes inside select() and poll() (its own malloc, in front of
// glibc's, sees the shim's calls too): over a usmc listener, and over an SMC-D connection a forked client
// made to it. Prints "OK <calls>" or what allocated.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
extern void __libc_free(void*);

// Per thread: the engine's own threads allocate as they please.
static __thread int counting;
static __thread long allocations;

void* malloc(size_t n) {
    if (counting) ++allocations;
    return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
    if (counting) ++allocations;
    return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
    if (counting) ++allocations;
    return __libc_realloc(p, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
    if (counting) ++allocations;
    void* p = __libc_memalign(align, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
void* aligned_alloc(size_t align, size_t n) {
    if (counting) ++allocations;
    return __libc_memalign(align, n);
}
void* memalign(size_t align, size_t n) {
    if (counting) ++allocations;
    return __libc_memalign(align, n);
}
void free(void* p) {
    __libc_free(p);
}

static int fail(const char* what) {
    printf("FAIL %s (%s)\n", what, strerror(errno));
    return 1;
}

// select() for reading on `fd` alone: 1 ready, 0 not yet; the allocations
// it made go into `*made`.
static int select_counted(int fd, int timeout_ms, long* made) {
    fd_set r;
    FD_ZERO(&r);
    FD_SET(fd, &r);
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    long before = allocations;
    counting = 1;
    int n = select(fd + 1, &r, NULL, NULL, &tv);
    counting = 0;
    *made += allocations - before;
    return n;
}

static int poll_counted(int fd, int timeout_ms, long* made) {
    struct pollfd p = {fd, POLLIN, 0};
    long before = allocations;
    counting = 1;
    int n = poll(&p, 1, timeout_ms);
    counting = 0;
    *made += allocations - before;
    return n;
}

int main(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr*)&a, sizeof a) != 0 || listen(l, 16) != 0 ||
        getsockname(l, (struct sockaddr*)&a, &len) != 0)
        return fail("listen");
    // Counted from the first call: a signal can come in any of them, and
    // what the engine sets up once per listener or connection (the watch of
    // the peer's end that poll's looks at user memory need) is made
    // without the allocator too.
    long on_listener = 0, on_conn = 0, calls = 0;
    for (int i = 0; i < 20; ++i, calls += 2) {
        select_counted(l, 0, &on_listener);
        poll_counted(l, 0, &on_listener);
    }
    int go[2];
    if (pipe(go) != 0) return fail("pipe");
    pid_t child = fork();
    if (child == 0) { // the client: one byte each way, then its end
        char c;
        if (read(go[0], &c, 1) != 1) _exit(2);
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0 || connect(s, (struct sockaddr*)&a, sizeof a) != 0) _exit(3);
        for (int i = 0; i < 20; ++i)
            if (write(s, "x", 1) != 1 || read(s, &c, 1) != 1) _exit(4);
        close(s);
        _exit(0);
    }
    if (write(go[1], "g", 1) != 1) return fail("start the client");
    // Until the connection is there: select, as the postmaster waits.
    int ready = 0;
    for (int i = 0; i < 600 && !ready; ++i, ++calls)
        ready = select_counted(l, 100, &on_listener) == 1;
    if (!ready) return fail("no connection within 60 s");
    int s = accept(l, NULL, NULL);
    if (s < 0) return fail("accept");
    // Each byte awaited by select and poll in turn.
    for (int i = 0; i < 20; ++i) {
        int got = 0;
        for (int t = 0; t < 600 && !got; ++t, ++calls)
            got = (i % 2 ? poll_counted(s, 100, &on_conn) : select_counted(s, 100, &on_conn)) == 1;
        char c;
        if (!got || read(s, &c, 1) != 1 || write(s, &c, 1) != 1) return fail("echo");
    }
    close(s);
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return fail("the client failed");
    if (on_listener || on_conn) {
        printf("MALLOC %ld allocations in select/poll over the listener, %ld over the "
               "connection (%ld calls)\n",
               on_listener, on_conn, calls);
        return 1;
    }
    printf("OK %ld calls\n", calls);
    return 0;
}
