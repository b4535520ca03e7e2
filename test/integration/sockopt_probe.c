// SPDX-License-Identifier: MIT
/* TCP_NODELAY and TCP_CORK on a connection as Linux TCP answers them
 * (test_tcp_semantics.py): both ends run this, plain or under usmc-run.
 *
 *   usmc-sockopt-probe server [--smc]        "READY <port>", accepts one
 *   usmc-sockopt-probe client PORT [--smc]
 *
 * Each side: the values a new connection has (the server's listener set
 * TCP_NODELAY before listen(), which accepted sockets inherit; the client
 * set it before connect()); set and get of both options; the kernel's
 * checks of optval and optlen. The server then shows that TCP_CORK off and
 * TCP_NODELAY on push what a cork holds: the client answers each chunk at
 * once, and the round trip stays well under the cork's 200 ms ceiling.
 * --smc (both ends on SMC-D): the kernel's socket, read past usmc (libc's
 * own getsockopt), saw none of it. Between setsockopt calls on fd -1 and
 * fd -2 (markers for strace) neither option reaches the connection's
 * socket under usmc. Then the server installs a seccomp filter that allows
 * everything (usmc moves its connections to TCP first) and sends the
 * client a byte (over TCP now): on both sides the kernel's socket must
 * hold what the side set last (server: TCP_CORK on, TCP_NODELAY off;
 * client: both off).
 * Prints "FAIL line N: ..." for each failed check, then
 * "PASS|FAIL <side>: N checks, M failed" (status 0 or 1). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int failures, checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        ++checks;                                                                                  \
        if (!(cond)) {                                                                             \
            ++failures;                                                                            \
            printf("FAIL line %d: %s: ", __LINE__, #cond);                                         \
            printf(__VA_ARGS__);                                                                   \
            printf(" (errno %d %s)\n", errno, strerror(errno));                                    \
        }                                                                                          \
    } while (0)

/* libc's getsockopt, past usmc's: what the kernel's socket holds. */
static int (*kernel_getsockopt)(int, int, int, void*, socklen_t*);

static int kget(int fd, int name) {
    int v = -1;
    socklen_t len = sizeof v;
    if (kernel_getsockopt(fd, IPPROTO_TCP, name, &v, &len) != 0) return -100 - errno;
    return v;
}

static int get(int fd, int name) {
    int v = -1;
    socklen_t len = sizeof v;
    if (getsockopt(fd, IPPROTO_TCP, name, &v, &len) != 0) return -100 - errno;
    return v;
}

static int set(int fd, int name, int v) {
    return setsockopt(fd, IPPROTO_TCP, name, &v, sizeof v);
}

/* A setsockopt strace shows (EBADF), around the calls that must not reach
 * the connection's socket. */
static void marker(int fd) {
    (void)set(fd, TCP_NODELAY, 1);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int read_n(int fd, char* buf, int n) {
    int got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, (size_t)(n - got));
        if (r <= 0) return got;
        got += (int)r;
    }
    return got;
}

/* Set and get as the kernel does them. Ends with TCP_CORK on, TCP_NODELAY
 * off. */
static void semantics(int fd, const char* side) {
    for (int i = 0; i < 3; ++i) {
        CHECK(set(fd, TCP_CORK, 1) == 0 && get(fd, TCP_CORK) == 1, "%s: TCP_CORK on", side);
        CHECK(set(fd, TCP_NODELAY, 1) == 0 && get(fd, TCP_NODELAY) == 1, "%s: TCP_NODELAY on",
              side);
        CHECK(get(fd, TCP_CORK) == 1, "%s: TCP_CORK stays on with TCP_NODELAY", side);
        CHECK(set(fd, TCP_CORK, 0) == 0 && get(fd, TCP_CORK) == 0, "%s: TCP_CORK off", side);
        CHECK(set(fd, TCP_NODELAY, 0) == 0 && get(fd, TCP_NODELAY) == 0, "%s: TCP_NODELAY off",
              side);
    }
    CHECK(set(fd, TCP_NODELAY, -1) == 0 && get(fd, TCP_NODELAY) == 1, "%s: -1 is on", side);
    CHECK(set(fd, TCP_CORK, 42) == 0 && get(fd, TCP_CORK) == 1, "%s: 42 is on, read as 1", side);

    int zero = 0;
    errno = 0;
    CHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &zero, 3) == -1 && errno == EINVAL,
          "%s: set with optlen 3: EINVAL", side);
    errno = 0;
    CHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, NULL, sizeof(int)) == -1 && errno == EFAULT,
          "%s: set with optval NULL: EFAULT", side);
    errno = 0;
    CHECK(setsockopt(fd, IPPROTO_TCP, TCP_CORK, NULL, 3) == -1 && errno == EINVAL,
          "%s: optval NULL and optlen 3: EINVAL (the length first)", side);
    errno = 0;
    CHECK(setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, (socklen_t)-1) == -1 && errno == EINVAL,
          "%s: set with optlen negative as an int: EINVAL", side);
    CHECK(get(fd, TCP_NODELAY) == 1 && get(fd, TCP_CORK) == 1, "%s: failed sets change nothing",
          side);
    long wide = 0;
    CHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &wide, sizeof wide) == 0 &&
              get(fd, TCP_NODELAY) == 0,
          "%s: a longer optlen reads the first int", side);

    unsigned char b[8];
    socklen_t len = 2;
    memset(b, 0xaa, sizeof b);
    CHECK(getsockopt(fd, IPPROTO_TCP, TCP_CORK, b, &len) == 0 && len == 2 && b[0] == 1 &&
              b[1] == 0 && b[2] == 0xaa,
          "%s: get with optlen 2: two bytes of the int", side);
    len = 8;
    memset(b, 0xaa, sizeof b);
    CHECK(getsockopt(fd, IPPROTO_TCP, TCP_CORK, b, &len) == 0 && len == 4 && b[0] == 1 &&
              b[4] == 0xaa,
          "%s: get with optlen 8: an int, optlen 4", side);
    len = 0;
    CHECK(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, NULL, &len) == 0 && len == 0,
          "%s: get with optlen 0 and optval NULL", side);
    len = 8;
    errno = 0;
    CHECK(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, NULL, &len) == -1 && errno == EFAULT && len == 4,
          "%s: get with optval NULL: EFAULT, optlen 4 reported", side);
    len = (socklen_t)-1;
    errno = 0;
    CHECK(getsockopt(fd, IPPROTO_TCP, TCP_CORK, b, &len) == -1 && errno == EINVAL &&
              len == (socklen_t)-1,
          "%s: get with optlen negative as an int: EINVAL", side);
    errno = 0;
    CHECK(getsockopt(fd, IPPROTO_TCP, TCP_CORK, b, NULL) == -1 && errno == EFAULT,
          "%s: get with optlen NULL: EFAULT", side);
}

/* A seccomp filter that allows every system call: usmc cannot know that,
 * and moves the connections to TCP first. */
static int allow_all(void) {
    struct sock_filter f[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    struct sock_fprog prog = {.len = 1, .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

/* Corked bytes, then `push` (an option set): the client's answer comes
 * back well before the cork's 200 ms ceiling. */
static void pushed(int fd, const char* chunk, int push_name, int push_value, const char* what) {
    CHECK(write(fd, chunk, 3) == 3, "server: write %s", chunk);
    double t0 = now_ms();
    CHECK(set(fd, push_name, push_value) == 0, "server: %s", what);
    char ack = 0;
    CHECK(read_n(fd, &ack, 1) == 1 && ack == chunk[0], "server: the client's answer to %s", chunk);
    double ms = now_ms() - t0;
    CHECK(ms < 180, "server: %s pushes what the cork held (answer after %.0f ms)", what, ms);
}

static int server(int smc) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof in;
    CHECK(set(l, TCP_NODELAY, 1) == 0, "server: TCP_NODELAY on the listener");
    if (bind(l, (struct sockaddr*)&in, sizeof in) != 0 || listen(l, 4) != 0 ||
        getsockname(l, (struct sockaddr*)&in, &alen) != 0) {
        perror("listen");
        return 1;
    }
    printf("READY %d\n", ntohs(in.sin_port));
    fflush(stdout);
    int a = accept(l, NULL, NULL);
    if (a < 0) {
        perror("accept");
        return 1;
    }
    close(l);
    CHECK(get(a, TCP_NODELAY) == 1,
          "server: the accepted socket inherits the listener's TCP_NODELAY");
    CHECK(get(a, TCP_CORK) == 0, "server: TCP_CORK off at first");
    CHECK(kget(a, TCP_NODELAY) == 1 && kget(a, TCP_CORK) == 0,
          "server: the kernel's socket agrees");

    marker(-1);
    semantics(a, "server");
    if (smc)
        CHECK(kget(a, TCP_NODELAY) == 1 && kget(a, TCP_CORK) == 0,
              "server: the kernel's socket saw none of it (%d, %d)", kget(a, TCP_NODELAY),
              kget(a, TCP_CORK));
    /* Corked (semantics ends so). */
    pushed(a, "abc", TCP_CORK, 0, "TCP_CORK off");
    CHECK(set(a, TCP_CORK, 1) == 0, "server: TCP_CORK on again");
    pushed(a, "def", TCP_NODELAY, 1, "TCP_NODELAY on");
    CHECK(get(a, TCP_CORK) == 1, "server: the cork stays after TCP_NODELAY's push");
    CHECK(set(a, TCP_NODELAY, 0) == 0, "server: TCP_NODELAY off");
    if (smc)
        CHECK(kget(a, TCP_NODELAY) == 1 && kget(a, TCP_CORK) == 0,
              "server: the kernel's socket still saw none of it");
    marker(-2);

    CHECK(allow_all() == 0, "server: seccomp filter installed");
    CHECK(kget(a, TCP_CORK) == 1 && kget(a, TCP_NODELAY) == 0,
          "server: moved to TCP, the kernel's socket holds what was set (cork %d, nodelay %d)",
          kget(a, TCP_CORK), kget(a, TCP_NODELAY));
    CHECK(get(a, TCP_CORK) == 1 && get(a, TCP_NODELAY) == 0, "server: and answers it");
    CHECK(set(a, TCP_CORK, 0) == 0, "server: TCP_CORK off (the byte below goes at once)");
    CHECK(write(a, "m", 1) == 1, "server: the byte after the move");
    char end;
    CHECK(read(a, &end, 1) == 0, "server: the client's end of stream");
    close(a);
    printf("%s server: %d checks, %d failed\n", failures ? "FAIL" : "PASS", checks, failures);
    return failures ? 1 : 0;
}

static int client(int port, int smc) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in in = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)port)};
    CHECK(set(c, TCP_NODELAY, 1) == 0, "client: TCP_NODELAY before connect()");
    if (connect(c, (struct sockaddr*)&in, sizeof in) != 0) {
        perror("connect");
        return 1;
    }
    CHECK(get(c, TCP_NODELAY) == 1, "client: TCP_NODELAY set before connect() holds");
    CHECK(get(c, TCP_CORK) == 0, "client: TCP_CORK off at first");

    marker(-1);
    semantics(c, "client");
    if (smc)
        CHECK(kget(c, TCP_NODELAY) == 1 && kget(c, TCP_CORK) == 0,
              "client: the kernel's socket saw none of it (%d, %d)", kget(c, TCP_NODELAY),
              kget(c, TCP_CORK));
    CHECK(set(c, TCP_CORK, 0) == 0, "client: TCP_CORK off (its answers go at once)");
    marker(-2);

    char buf[4];
    for (int i = 0; i < 2; ++i) {
        CHECK(read_n(c, buf, 3) == 3, "client: chunk %d", i);
        CHECK(write(c, buf, 1) == 1, "client: answer %d", i);
    }
    /* This read finds the server's move and follows it. */
    CHECK(read_n(c, buf, 1) == 1 && buf[0] == 'm', "client: the byte after the server's move");
    CHECK(kget(c, TCP_NODELAY) == 0 && kget(c, TCP_CORK) == 0,
          "client: moved to TCP, the kernel's socket holds what was set (nodelay %d, cork %d)",
          kget(c, TCP_NODELAY), kget(c, TCP_CORK));
    CHECK(get(c, TCP_NODELAY) == 0 && get(c, TCP_CORK) == 0, "client: and answers it");
    close(c);
    printf("%s client: %d checks, %d failed\n", failures ? "FAIL" : "PASS", checks, failures);
    return failures ? 1 : 0;
}

int main(int argc, char** argv) {
    void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    kernel_getsockopt = libc ? dlsym(libc, "getsockopt") : NULL;
    if (!kernel_getsockopt) {
        fprintf(stderr, "libc's getsockopt not found: %s\n", dlerror());
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int smc = argc > 1 && !strcmp(argv[argc - 1], "--smc");
    if (argc >= 2 && !strcmp(argv[1], "server")) return server(smc);
    if (argc >= 3 && !strcmp(argv[1], "client")) return client(atoi(argv[2]), smc);
    fprintf(stderr, "usage: %s server [--smc] | client PORT [--smc]\n", argv[0]);
    return 2;
}
