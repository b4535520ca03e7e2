// SPDX-License-Identifier: MIT
/* A server that sandboxes itself as OpenSSH's preauth child does, with an
 * SMC connection open (test_exec_conn.py): usmc cannot know which system
 * calls the filter lets through, so the connection must go on as plain TCP,
 * byte for byte, bytes written before the filter included.
 *
 *   usmc-seccomp-probe SEND_FILE PRE RECV_FILE errno|kill [4|6]
 *
 * Listens on 127.0.0.1 (::1), port 0: "READY <port>"; accepts one
 * connection: "ACCEPTED". Reads SEND_FILE, opens RECV_FILE, then waits for
 * a line "GO" on stdin. Writes the first PRE bytes of SEND_FILE ("WROTE
 * <PRE>"), then: setrlimit(RLIMIT_NOFILE, {1, 1}) and RLIMIT_NPROC {0, 0},
 * prctl(PR_SET_NO_NEW_PRIVS), and a seccomp filter (prctl(PR_SET_SECCOMP,
 * SECCOMP_MODE_FILTER)) that allows what OpenSSH's preauth sandbox allows
 * a plain read/write loop (read, write, writev, poll, ppoll, select, close,
 * memory, futex, clocks, getpid, ...; open, stat and shm calls fail with
 * EACCES, as there): anything else fails with ENOSYS ("errno") or kills the
 * process ("kill", OpenSSH's own choice):
 * "FILTERED". Then one poll() loop (the socket nonblocking): the rest of SEND_FILE written, all
 * that comes read and written to RECV_FILE, until the peer's end of stream and nothing left to
 * write: "DONE <read> <written>", status 0. A failure: "FAIL <what> <errno>", status 1; no progress
 * for 20 s: "FAIL stalled". (RLIMIT_FSIZE stays: the bytes read go to a file.) */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "seccomp_probe: add this architecture's AUDIT_ARCH"
#endif

/* After the filter: no stdio (it may fstat, allocate), one write() a line. */
static void say(const char* fmt, long a, long b) {
    char line[160];
    int n = snprintf(line, sizeof line, fmt, a, b);
    if (n > 0) (void)!write(1, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static int fail(const char* what) {
    char fmt[128];
    snprintf(fmt, sizeof fmt, "FAIL %s %%ld%%.0ld\n", what);
    say(fmt, errno, 0);
    return 1;
}

#define ALLOW(nr)                                                                                  \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define DENY(nr, e)                                                                                \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1),                                               \
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((e)&SECCOMP_RET_DATA))

static int sandbox(int kill) {
    /* OpenSSH's sandbox-seccomp-filter.c, less what a plain loop over one
     * connected socket needs not (socketcall, ioctl, mmap flags checks). */
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    /* OpenSSH denies these without a kill (libc may try them). */
#ifdef __NR_open
        DENY(__NR_open, EACCES),
#endif
#ifdef __NR_stat
        DENY(__NR_stat, EACCES),
#endif
#ifdef __NR_lstat
        DENY(__NR_lstat, EACCES),
#endif
        DENY(__NR_openat, EACCES),
        DENY(__NR_fstat, EACCES),
        DENY(__NR_newfstatat, EACCES),
        DENY(__NR_statx, EACCES),
        DENY(__NR_shmget, EACCES),
        DENY(__NR_shmat, EACCES),
        DENY(__NR_shmdt, EACCES),
        ALLOW(__NR_read),
        ALLOW(__NR_write),
        ALLOW(__NR_writev),
        ALLOW(__NR_close),
        ALLOW(__NR_exit),
        ALLOW(__NR_exit_group),
        ALLOW(__NR_rt_sigreturn),
        ALLOW(__NR_rt_sigprocmask),
        ALLOW(__NR_brk),
        ALLOW(__NR_mmap),
        ALLOW(__NR_munmap),
        ALLOW(__NR_mremap),
        ALLOW(__NR_mprotect),
        ALLOW(__NR_madvise),
        ALLOW(__NR_ppoll),
        ALLOW(__NR_pselect6),
#ifdef __NR_poll
        ALLOW(__NR_poll),
#endif
#ifdef __NR_select
        ALLOW(__NR_select),
#endif
        ALLOW(__NR_futex),
        ALLOW(__NR_clock_gettime),
        ALLOW(__NR_clock_nanosleep),
        ALLOW(__NR_nanosleep),
        ALLOW(__NR_gettimeofday),
        ALLOW(__NR_getpid),
        ALLOW(__NR_gettid),
        ALLOW(__NR_getuid),
        ALLOW(__NR_geteuid),
        ALLOW(__NR_getpgid),
        ALLOW(__NR_getrandom),
        ALLOW(__NR_shutdown),
        BPF_STMT(BPF_RET | BPF_K, kill ? SECCOMP_RET_KILL_PROCESS
                                       : (SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA))),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof f / sizeof f[0]), .filter = f};
    struct rlimit one = {1, 1}, zero = {0, 0};
    if (setrlimit(RLIMIT_NOFILE, &one) != 0) return fail("setrlimit NOFILE");
    if (setrlimit(RLIMIT_NPROC, &zero) != 0) return fail("setrlimit NPROC");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("PR_SET_NO_NEW_PRIVS");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return fail("PR_SET_SECCOMP");
    return 0;
}

/* All of it, to a file or the (nonblocking) connection; a connection that
 * takes nothing for 20 s fails. */
static int write_full(int fd, const char* p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd q = {fd, POLLOUT, 0};
            if (poll(&q, 1, 20000) != 1) return -1;
            continue;
        }
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s SEND_FILE PRE RECV_FILE errno|kill [4|6]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    size_t pre = strtoul(argv[2], NULL, 10);
    int kill = strcmp(argv[4], "kill") == 0;
    int v6 = argc > 5 && strcmp(argv[5], "6") == 0;

    int in = open(argv[1], O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (in < 0 || fstat(in, &st) != 0) return fail("open SEND_FILE");
    size_t total = (size_t)st.st_size;
    char* data = malloc(total ? total : 1);
    size_t got = 0;
    while (data && got < total) {
        ssize_t r = read(in, data + got, total - got);
        if (r <= 0) return fail("read SEND_FILE");
        got += (size_t)r;
    }
    close(in);
    if (!data || pre > total) return fail("SEND_FILE/PRE");
    int rec = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (rec < 0) return fail("open RECV_FILE");

    struct sockaddr_storage at;
    memset(&at, 0, sizeof at);
    socklen_t alen;
    if (v6) {
        struct sockaddr_in6* a6 = (struct sockaddr_in6*)&at;
        a6->sin6_family = AF_INET6;
        a6->sin6_addr = in6addr_loopback;
        alen = sizeof *a6;
    } else {
        struct sockaddr_in* a4 = (struct sockaddr_in*)&at;
        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        alen = sizeof *a4;
    }
    int l = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0 || bind(l, (struct sockaddr*)&at, alen) != 0 || listen(l, 4) != 0 ||
        getsockname(l, (struct sockaddr*)&at, &alen) != 0)
        return fail("listen");
    printf("READY %d\n", ntohs(v6 ? ((struct sockaddr_in6*)&at)->sin6_port
                                  : ((struct sockaddr_in*)&at)->sin_port));
    struct pollfd lp = {l, POLLIN, 0};
    if (poll(&lp, 1, 10000) != 1) return fail("accept: nobody came in 10 s");
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) return fail("accept");
    close(l);
    printf("ACCEPTED\n");

    char line[64];
    if (!fgets(line, sizeof line, stdin) || strncmp(line, "GO", 2) != 0)
        return fail("no GO on stdin");
    if (write_full(c, data, pre) != 0) return fail("write before the filter");
    printf("WROTE %zu\n", pre);
    if (sandbox(kill) != 0) return 1;
    say("FILTERED%.0ld%.0ld\n", 0, 0);

    /* The sandboxed loop: only read, write, poll, clock_gettime; then exit()
     * (atexit handlers and destructors run: OpenSSH's preauth child ends
     * with exit(0) too). */
    size_t sent = pre, nread = 0;
    int eof = 0;
    struct timespec last, now;
    clock_gettime(CLOCK_MONOTONIC, &last);
    char buf[65536];
    while (!eof || sent < total) {
        struct pollfd p = {c, (short)((eof ? 0 : POLLIN) | (sent < total ? POLLOUT : 0)), 0};
        int n = poll(&p, 1, 1000);
        if (n < 0 && errno != EINTR) return fail("poll");
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (n <= 0) {
            if (now.tv_sec - last.tv_sec >= 20) {
                say("FAIL stalled read %ld sent %ld\n", (long)nread, (long)sent);
                return 1;
            }
            continue;
        }
        last = now;
        if (p.revents & POLLNVAL) return fail("poll: POLLNVAL");
        if (!eof && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t r = read(c, buf, sizeof buf);
            if (r < 0 && errno != EAGAIN && errno != EINTR) return fail("read");
            if (r == 0) eof = 1;
            if (r > 0) {
                if (write_full(rec, buf, (size_t)r) != 0) return fail("write RECV_FILE");
                nread += (size_t)r;
            }
        }
        if (sent < total && (p.revents & (POLLOUT | POLLERR))) {
            size_t chunk = total - sent < 65536 ? total - sent : 65536;
            ssize_t w = write(c, data + sent, chunk);
            if (w < 0 && errno != EAGAIN && errno != EINTR) return fail("write");
            if (w > 0) sent += (size_t)w;
        }
    }
    say("DONE %ld %ld\n", (long)nread, (long)sent);
    close(rec);
    close(c);
    return 0;
}
