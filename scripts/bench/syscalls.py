#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""System calls per request on each side, plain TCP beside usmc (both ends
wrapped), order alternating, median of N runs: nginx (1 worker, CPU 0) +
wrk keep-alive c=100 (CPU 1), and redis-server (CPU 0) + redis-benchmark
GET/SET c=50 (CPU 1). perf stat counts raw_syscalls:sys_enter of the
server (nginx's worker, attached by PID for the client's run) and of the
client (its whole command, usmc-run's start included). --by-call adds, for
the last run of each variant, the calls per request of each side by name
(calls under 0.01 per request left out).

The issue's bound for nginx's worker: TCP's count less its socket calls
(recv*, send*, writev, setsockopt, getsockopt, sendfile, epoll_*,
accept*, shutdown), plus one."""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from apps import children_of, make_nginx, parse_wrk, redis_server_cmd  # noqa: E402
from harness import USMC_RUN, bench_dir, free_port, run_dir, smcd_share, stop_process, wait_port  # noqa: E402

SOCKET_CALLS = re.compile(r"^(recv|send|writev$|readv$|setsockopt|getsockopt|sendfile|epoll_|accept|shutdown)")


def parse_perf(text, by_call):
    """{event: count} from perf stat -x, output."""
    out = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) >= 3 and parts[0].strip().isdigit():
            name = parts[2]
            if by_call:
                name = name.replace("syscalls:sys_enter_", "")
            out[name] = int(parts[0])
    return out


def events(by_call):
    return ["-e", "syscalls:sys_enter_*"] if by_call else ["-e", "raw_syscalls:sys_enter"]


def perf_attach(pid, by_call, out):
    return subprocess.Popen(["perf", "stat", "-x,", "-o", out, *events(by_call), "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def perf_stop(p, out, by_call):
    p.send_signal(signal.SIGINT)
    p.wait(timeout=30)
    with open(out) as f:
        return parse_perf(f.read(), by_call)


def total(counts, by_call):
    return sum(counts.values()) if by_call else counts.get("raw_syscalls:sys_enter", 0)


def measure(d, env, wrap, server_cmd, client_cmd, server_pid_of, requests_of, by_call, timeout):
    if wrap:
        server_cmd = [USMC_RUN, "--", *server_cmd]
        client_cmd = [USMC_RUN, "--", *client_cmd]
    srv = subprocess.Popen(["taskset", "-c", "0", *server_cmd], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        spid = server_pid_of(srv.pid)
        sout = os.path.join(d, "server.perf")
        cout = os.path.join(d, "client.perf")
        sp = perf_attach(spid, by_call, sout)
        time.sleep(0.3)  # perf attaches before the run (its counts start then; a miss only lowers them)
        r = subprocess.run(["perf", "stat", "-x,", "-o", cout, *events(by_call), "--",
                            "taskset", "-c", "1", *client_cmd],
                           env=env, capture_output=True, text=True, timeout=timeout)
        server = perf_stop(sp, sout, by_call)
        with open(cout) as f:
            client = parse_perf(f.read(), by_call)
    finally:
        stop_process(srv)
    return requests_of(r), server, client


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    p.add_argument("--requests", type=int, default=100000, help="redis-benchmark requests per test")
    p.add_argument("--by-call", action="store_true", help="also each call's count per request (last run)")
    args = p.parse_args()
    tmp = bench_dir()
    os.chmod(tmp, 0o755)
    results = {}
    detail = {}
    try:
        for rnd in range(args.runs):
            variants = [("TCP", False), ("SMC-D", True)]
            for name, wrap in (variants if rnd % 2 == 0 else variants[::-1]):
                by_call = args.by_call and rnd == args.runs - 1
                # nginx + wrk
                d, stats_dir, env = run_dir(tmp, f"nginx-{name}-{rnd}")
                port = free_port()

                def nginx_worker(master, port=port):
                    if not wait_port(port):
                        raise SystemExit("nginx did not start")
                    for _ in range(100):
                        kids = children_of(master)
                        if kids:
                            return kids[0]
                        time.sleep(0.05)
                    raise SystemExit("no nginx worker")

                def wrk_requests(r):
                    w = parse_wrk(r.stdout)
                    if w["errors"] or w["non2xx"] or not w["requests"]:
                        raise SystemExit(f"wrk: {w} {r.stderr[-300:]}")
                    return w["requests"]

                n, s, c = measure(d, env, wrap, make_nginx(d, port, workers=1),
                                  ["wrk", "-t", "1", "-c", "100", "-d", f"{args.duration}s",
                                   f"http://127.0.0.1:{port}/index.html"],
                                  nginx_worker, wrk_requests, by_call, args.duration + 60)
                share = f"  ({smcd_share(stats_dir)})" if wrap else ""
                results.setdefault(("nginx worker", name), []).append(total(s, by_call) / n)
                results.setdefault(("wrk", name), []).append(total(c, by_call) / n)
                if by_call:
                    detail[("nginx worker", name)] = {k: v / n for k, v in s.items()}
                    detail[("wrk", name)] = {k: v / n for k, v in c.items()}
                print(f"  run {rnd + 1} {name:6} nginx worker {total(s, by_call) / n:6.2f} "
                      f"wrk {total(c, by_call) / n:6.2f} per request ({n} requests){share}", flush=True)
                # redis
                d, stats_dir, env = run_dir(tmp, f"redis-{name}-{rnd}")
                port = free_port()

                def redis_pid(pid, port=port):
                    if not wait_port(port):
                        raise SystemExit("redis-server did not start")
                    return pid

                n, s, c = measure(d, env, wrap, redis_server_cmd(port),
                                  ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "50", "-n",
                                   str(args.requests), "-t", "get,set", "-q"],
                                  redis_pid, lambda r: 2 * args.requests, by_call, 300)
                share = f"  ({smcd_share(stats_dir)})" if wrap else ""
                results.setdefault(("redis-server", name), []).append(total(s, by_call) / n)
                results.setdefault(("redis-benchmark", name), []).append(total(c, by_call) / n)
                if by_call:
                    detail[("redis-server", name)] = {k: v / n for k, v in s.items()}
                    detail[("redis-benchmark", name)] = {k: v / n for k, v in c.items()}
                print(f"  run {rnd + 1} {name:6} redis-server {total(s, by_call) / n:6.2f} "
                      f"redis-benchmark {total(c, by_call) / n:6.2f} per request{share}", flush=True)
        print()
        print(f"system calls per request, median of {args.runs} runs (server on CPU 0, client on CPU 1)")
        print(f"  {'process':18} {'TCP':>8} {'SMC-D':>8}")
        for proc in ("nginx worker", "wrk", "redis-server", "redis-benchmark"):
            t = statistics.median(results[(proc, "TCP")])
            u = statistics.median(results[(proc, "SMC-D")])
            print(f"  {proc:18} {t:8.2f} {u:8.2f}")
        if detail:
            tcp = detail[("nginx worker", "TCP")]
            sock = sum(v for k, v in tcp.items() if SOCKET_CALLS.match(k))
            print(f"\nnginx worker's bound (TCP's {sum(tcp.values()):.2f} less its socket calls {sock:.2f}, "
                  f"plus one): {sum(tcp.values()) - sock + 1:.2f}")
            for proc in ("nginx worker", "wrk", "redis-server", "redis-benchmark"):
                print(f"\n{proc}, calls per request by name (last run):")
                names = sorted(set(detail[(proc, "TCP")]) | set(detail[(proc, "SMC-D")]),
                               key=lambda k: -max(detail[(proc, "TCP")].get(k, 0), detail[(proc, "SMC-D")].get(k, 0)))
                for k in names:
                    t = detail[(proc, "TCP")].get(k, 0)
                    u = detail[(proc, "SMC-D")].get(k, 0)
                    if max(t, u) >= 0.01:
                        print(f"  {k:22} {t:8.2f} {u:8.2f}")
    finally:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
