// SPDX-License-Identifier: MIT
/* Checks, inside one process run under usmc-run, that AF_SMC and IPPROTO_SMC
 * sockets work as TCP and that SOL_SMC/SMC_LIMIT_HS behave as the kernel's.
 * Usage: af_smc_probe EXPECTED_DEFAULT_LIMIT_HS   (0 or 1)
 *        af_smc_probe --bare   (report what the kernel says to AF_SMC) */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define AF_SMC_ 43
#define SOL_SMC_ 286
#define SMC_LIMIT_HS_ 1
#define IPPROTO_SMC_ 256

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

static int get_int(int fd, int level, int name) {
    int v = -1;
    socklen_t len = sizeof v;
    if (getsockopt(fd, level, name, &v, &len) != 0) return -100 - errno;
    return v;
}

static void echo_pair(int family, int protocol_domain, int protocol, const char* what) {
    int s = socket(protocol_domain, SOCK_STREAM, protocol);
    CHECK(s >= 0, "%s listener socket", what);
    if (s < 0) return;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in* in = (struct sockaddr_in*)&ss;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof *in;
    } else {
        struct sockaddr_in6* in6 = (struct sockaddr_in6*)&ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = in6addr_loopback;
        len = sizeof *in6;
    }
    CHECK(bind(s, (struct sockaddr*)&ss, len) == 0, "%s bind", what);
    CHECK(listen(s, 8) == 0, "%s listen", what);
    len = sizeof ss;
    CHECK(getsockname(s, (struct sockaddr*)&ss, &len) == 0 && ss.ss_family == family, "%s getsockname family", what);
    int c = socket(protocol_domain, SOCK_STREAM, protocol);
    CHECK(c >= 0, "%s client socket", what);
    CHECK(connect(c, (struct sockaddr*)&ss, len) == 0, "%s connect", what);
    int a = accept(s, NULL, NULL);
    CHECK(a >= 0, "%s accept", what);
    char buf[16] = {0};
    CHECK(write(c, "hello", 5) == 5, "%s write", what);
    CHECK(read(a, buf, sizeof buf) == 5 && !memcmp(buf, "hello", 5), "%s read", what);
    CHECK(send(a, "world", 5, 0) == 5, "%s send", what);
    CHECK(recv(c, buf, sizeof buf, 0) == 5 && !memcmp(buf, "world", 5), "%s recv", what);
    close(a);
    close(c);
    close(s);
}

int main(int argc, char** argv) {
    if (argc == 2 && !strcmp(argv[1], "--bare")) {
        int s = socket(AF_SMC_, SOCK_STREAM, 0);
        printf("socket(AF_SMC) = %d errno %d (%s)\n", s, s < 0 ? errno : 0, s < 0 ? strerror(errno) : "ok");
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s EXPECTED_DEFAULT_LIMIT_HS | --bare\n", argv[0]);
        return 2;
    }
    int expect_default = atoi(argv[1]);

    int s = socket(AF_SMC_, SOCK_STREAM, 0);
    CHECK(s >= 0, "socket(AF_SMC, SOCK_STREAM, SMCPROTO_SMC)");
    CHECK(get_int(s, SOL_SOCKET, SO_DOMAIN) == AF_SMC_, "SO_DOMAIN reports AF_SMC");
    CHECK(get_int(s, SOL_SOCKET, SO_PROTOCOL) == 0, "SO_PROTOCOL reports SMCPROTO_SMC");
    CHECK(get_int(s, SOL_SOCKET, SO_TYPE) == SOCK_STREAM, "SO_TYPE is the kernel's");
    CHECK(get_int(s, SOL_SMC_, SMC_LIMIT_HS_) == expect_default, "default SMC_LIMIT_HS");

    int one = 1, zero = 0;
    CHECK(setsockopt(s, SOL_SMC_, SMC_LIMIT_HS_, &one, sizeof one) == 0, "set SMC_LIMIT_HS=1");
    CHECK(get_int(s, SOL_SMC_, SMC_LIMIT_HS_) == 1, "get SMC_LIMIT_HS after set");
    errno = 0;
    CHECK(setsockopt(s, SOL_SMC_, SMC_LIMIT_HS_, &zero, 2) == -1 && errno == EINVAL, "short optlen is EINVAL");
    CHECK(get_int(s, SOL_SMC_, SMC_LIMIT_HS_) == 1, "failed set changes nothing");
    errno = 0;
    CHECK(setsockopt(s, SOL_SMC_, 99, &one, sizeof one) == -1 && errno == EOPNOTSUPP, "unknown option set");
    CHECK(get_int(s, SOL_SMC_, 99) == -100 - EOPNOTSUPP, "unknown option get");
    unsigned char byte = 0xff;
    socklen_t blen = 1;
    CHECK(getsockopt(s, SOL_SMC_, SMC_LIMIT_HS_, &byte, &blen) == 0 && blen == 1 && byte == 1,
          "getsockopt with optlen 1 copies one byte");

    int d = dup(s);
    CHECK(d >= 0 && get_int(d, SOL_SMC_, SMC_LIMIT_HS_) == 1, "dup'd fd is the same socket");
    close(d);
    int d2 = fcntl(s, F_DUPFD, 100);
    CHECK(d2 >= 100 && get_int(d2, SOL_SMC_, SMC_LIMIT_HS_) == 1, "F_DUPFD'd fd is the same socket");
    close(d2);
    CHECK(get_int(d2, SOL_SMC_, SMC_LIMIT_HS_) == -100 - EBADF, "closed fd: EBADF from the kernel");

    /* accepted sockets start from the global default, as smc_sk_init() does */
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof in;
    CHECK(bind(s, (struct sockaddr*)&in, sizeof in) == 0 && listen(s, 4) == 0, "listen");
    getsockname(s, (struct sockaddr*)&in, &len);
    int c = socket(AF_SMC_, SOCK_STREAM, 0);
    CHECK(connect(c, (struct sockaddr*)&in, len) == 0, "connect");
    int a = accept(s, NULL, NULL);
    CHECK(a >= 0 && get_int(a, SOL_SMC_, SMC_LIMIT_HS_) == expect_default, "accepted socket's SMC_LIMIT_HS");
    CHECK(get_int(a, SOL_SOCKET, SO_DOMAIN) == AF_SMC_, "accepted socket is AF_SMC too");
    close(a);
    close(c);
    close(s);

    errno = 0;
    CHECK(socket(AF_SMC_, SOCK_DGRAM, 0) == -1 && errno == ESOCKTNOSUPPORT, "AF_SMC datagram refused");
    errno = 0;
    CHECK(socket(AF_SMC_, SOCK_STREAM, 7) == -1 && errno == EPROTONOSUPPORT, "AF_SMC bad protocol refused");

    int u = socket(AF_INET, SOCK_DGRAM, 0);
    errno = 0;
    CHECK(setsockopt(u, SOL_SMC_, SMC_LIMIT_HS_, &one, sizeof one) == -1 && errno == ENOPROTOOPT,
          "SOL_SMC on UDP is the kernel's answer");
    close(u);
    errno = 0;
    CHECK(setsockopt(0, SOL_SMC_, SMC_LIMIT_HS_, &one, sizeof one) == -1, "SOL_SMC on a non-socket fails");

    echo_pair(AF_INET, AF_SMC_, 0, "AF_SMC/SMCPROTO_SMC");
    echo_pair(AF_INET6, AF_SMC_, 1, "AF_SMC/SMCPROTO_SMC6");
    echo_pair(AF_INET, AF_INET, IPPROTO_SMC_, "AF_INET/IPPROTO_SMC");
    echo_pair(AF_INET, AF_INET, 0, "AF_INET/TCP");

    int p6 = socket(AF_SMC_, SOCK_STREAM, 1);
    CHECK(get_int(p6, SOL_SOCKET, SO_PROTOCOL) == 1, "SMCPROTO_SMC6 reported");
    close(p6);
    int ip = socket(AF_INET, SOCK_STREAM, IPPROTO_SMC_);
    CHECK(get_int(ip, SOL_SOCKET, SO_PROTOCOL) == IPPROTO_SMC_, "IPPROTO_SMC reported");
    CHECK(get_int(ip, SOL_SOCKET, SO_DOMAIN) == AF_INET, "IPPROTO_SMC socket is AF_INET");
    close(ip);

    printf("%s: %d checks, %d failed\n", failures ? "FAIL" : "PASS", checks, failures);
    return failures ? 1 : 0;
}
