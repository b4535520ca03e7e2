// SPDX-License-Identifier: MIT
/* poll() on a connection whose data is already there: under usmc (SMC-D
 * between this process and a forked client) the answer comes from user
 * memory, with no system call at all (no kernel poll, no wake-up socket
 * made, nothing sent to the peer) once the connection's first poll has set
 * up usmc's watch of the peer's end. The poll under test sits between two
 * markers the test finds in strace's output (write(-1, "MARK-A") and
 * write(-1, "MARK-B"), which fail with EBADF). Then a client that writes a
 * byte and is killed: once it is reaped, poll() for POLLIN|POLLOUT|POLLRDHUP
 * reports what plain TCP does (the byte, and the end). Prints "OK" and
 * that answer when poll() first reported POLLIN (and only it). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int client(uint16_t port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char buf[4];
    if (s < 0 || connect(s, (struct sockaddr*)&to, sizeof to) != 0 || write(s, "ping", 4) != 4)
        return 1;
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1 || read(s, buf, 4) != 4 || memcmp(buf, "pong", 4) != 0) return 1;
    close(s);
    return 0;
}

static int killed_client(uint16_t port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || connect(s, (struct sockaddr*)&to, sizeof to) != 0 || write(s, "x", 1) != 1)
        return 1;
    raise(SIGKILL);
    return 1;
}

int main(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in at = {.sin_family = AF_INET};
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof at;
    if (l < 0 || bind(l, (struct sockaddr*)&at, sizeof at) != 0 || listen(l, 4) != 0 ||
        getsockname(l, (struct sockaddr*)&at, &alen) != 0) {
        printf("FAIL listen (errno %d)\n", errno);
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) _exit(client(ntohs(at.sin_port)));
    int fd = accept(l, NULL, NULL);
    if (fd < 0) {
        printf("FAIL accept (errno %d)\n", errno);
        return 1;
    }
    /* Until the four bytes are there (peeked, never taken), 10 s at most. */
    char buf[4];
    int seen = 0;
    for (int i = 0; i < 10000 && seen < 4; ++i) {
        ssize_t r = recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
        seen = r > 0 ? (int)r : 0;
        if (seen < 4) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    if (seen < 4) {
        printf("FAIL the client's bytes did not come\n");
        return 1;
    }
    struct pollfd p = {fd, POLLIN | POLLPRI | POLLRDHUP, 0};
    /* The connection's first poll (usmc then sets up its watch of the
     * peer's end, once per connection); the one after it is measured. */
    if (poll(&p, 1, 0) != 1) {
        printf("FAIL the first poll\n");
        return 1;
    }
    if (write(-1, "MARK-A", 6) != -1) return 1;
    int n = poll(&p, 1, 5000);
    if (write(-1, "MARK-B", 6) != -1) return 1;
    if (n != 1 || p.revents != POLLIN) {
        printf("FAIL poll returned %d, revents %#x\n", n, (unsigned)p.revents);
        return 1;
    }
    if (read(fd, buf, 4) != 4 || memcmp(buf, "ping", 4) != 0 || write(fd, "pong", 4) != 4) {
        printf("FAIL echo\n");
        return 1;
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL client\n");
        return 1;
    }
    close(fd);
    pid = fork();
    if (pid == 0) _exit(killed_client(ntohs(at.sin_port)));
    fd = accept(l, NULL, NULL);
    if (fd < 0 || waitpid(pid, &st, 0) != pid || !WIFSIGNALED(st)) {
        printf("FAIL the killed client\n");
        return 1;
    }
    p.fd = fd;
    p.events = POLLIN | POLLOUT | POLLRDHUP;
    p.revents = 0;
    n = poll(&p, 1, 5000);
    printf("OK killed peer: poll %d revents %#x\n", n, (unsigned)p.revents);
    return 0;
}
