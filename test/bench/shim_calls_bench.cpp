// SPDX-License-Identifier: MIT
// Per-call cost of socket calls, run once plain and once under
// `usmc-run --tcp` by scripts/bench/shim_calls.py: the difference is what the
// shim adds to a call it passes through. Real kernel objects throughout.
#include <benchmark/benchmark.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

namespace {

struct Pair {
    int listener = -1, client = -1, server = -1;
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    Pair() {
        listener = socket(AF_INET, SOCK_STREAM, 0);
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 1024) != 0)
            std::abort();
        getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
        client = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(client, reinterpret_cast<sockaddr*>(&addr), len) != 0) std::abort();
        server = accept(listener, nullptr, nullptr);
        int one = 1;
        setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    ~Pair() {
        close(client);
        close(server);
        close(listener);
    }
};

void BM_send_recv_1B(benchmark::State& state) {
    Pair p;
    char c = 'x';
    for (auto _ : state) {
        if (send(p.client, &c, 1, 0) != 1 || recv(p.server, &c, 1, 0) != 1) std::abort();
    }
}
BENCHMARK(BM_send_recv_1B);

void BM_write_read_16K(benchmark::State& state) {
    Pair p;
    static char buf[16384];
    for (auto _ : state) {
        if (write(p.client, buf, sizeof buf) != sizeof buf) std::abort();
        size_t got = 0;
        while (got < sizeof buf) {
            ssize_t n = read(p.server, buf, sizeof buf - got);
            if (n <= 0) std::abort();
            got += static_cast<size_t>(n);
        }
    }
}
BENCHMARK(BM_write_read_16K);

void BM_getsockopt(benchmark::State& state) {
    Pair p;
    for (auto _ : state) {
        int v;
        socklen_t len = sizeof v;
        benchmark::DoNotOptimize(getsockopt(p.client, SOL_SOCKET, SO_RCVBUF, &v, &len));
    }
}
BENCHMARK(BM_getsockopt);

void BM_fcntl_getfl(benchmark::State& state) {
    Pair p;
    for (auto _ : state) benchmark::DoNotOptimize(fcntl(p.client, F_GETFL));
}
BENCHMARK(BM_fcntl_getfl);

void BM_epoll_wait_ready(benchmark::State& state) {
    Pair p;
    int ep = epoll_create1(0);
    epoll_event ev{};
    ev.events = EPOLLOUT;
    epoll_ctl(ep, EPOLL_CTL_ADD, p.client, &ev);
    for (auto _ : state) benchmark::DoNotOptimize(epoll_wait(ep, &ev, 1, 0));
    close(ep);
}
BENCHMARK(BM_epoll_wait_ready);

void BM_socket_close(benchmark::State& state) {
    for (auto _ : state) close(socket(AF_INET, SOCK_STREAM, 0));
}
BENCHMARK(BM_socket_close);

// A whole short-lived connection, the Connection: close pattern.
void BM_connect_accept_close(benchmark::State& state) {
    Pair p;
    for (auto _ : state) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c, reinterpret_cast<sockaddr*>(&p.addr), p.len) != 0) std::abort();
        int s = accept4(p.listener, nullptr, nullptr, SOCK_NONBLOCK);
        if (s < 0) std::abort();
        close(c);
        close(s);
    }
}
BENCHMARK(BM_connect_accept_close);

} // namespace

BENCHMARK_MAIN();
