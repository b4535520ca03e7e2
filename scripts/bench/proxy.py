#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A proxy in front of nginx, over plain TCP and over SMC-D (wrk, the proxy
and the origin all under usmc-run), in the same run, order alternating,
median of N runs: haproxy mode tcp, haproxy mode http, nginx proxy_pass
(HTTP/1.1 to a kept-alive upstream pool), each with wrk keep-alive and
'Connection: close' at each --connections count.

The origin (nginx, 1 worker) and the proxy (haproxy 1 thread, or nginx 1
worker) on CPU 0, wrk (1 thread) on CPU 1. Every request crosses two
connections, so a 'Connection: close' request is two handshakes with
haproxy (nginx reuses its upstream connections). CPU beside each figure, %
of one core over the run: the proxy's and the origin's from /proc/PID/stat
(master and workers), wrk's from its rusage. usmc's counters confirm the
SMC-D runs used SMC-D."""
import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from apps import make_haproxy, make_nginx, parse_wrk  # noqa: E402
from harness import bench_dir, USMC, USMC_RUN, cpu_children, free_port, run_dir, smcd_share, stop_process, tree_cpu, wait_port  # noqa: E402

PROXIES = {"haproxy-tcp": "tcp", "haproxy-http": "http", "nginx": None}


def run(proxy, c, close, wrap, d, env, args, nofile):
    os.mkdir(os.path.join(d, "origin"))
    os.mkdir(os.path.join(d, "proxy"))
    oport, pport = free_port(), free_port()
    origin_cmd = make_nginx(os.path.join(d, "origin"), oport, workers=1, connections=2 * c + 1024, nofile=nofile)
    if PROXIES[proxy] is None:
        proxy_cmd = make_nginx(os.path.join(d, "proxy"), pport, workers=1, connections=2 * c + 1024, nofile=nofile,
                               proxy_to=oport)
    else:
        proxy_cmd = make_haproxy(os.path.join(d, "proxy"), pport, oport, PROXIES[proxy], maxconn=c + 1024,
                                 threads=1)
    wrk = ["wrk", "-t", "1", "-c", str(c), "-d", f"{args.duration}s", "--timeout", "10s",
           *(["-H", "Connection: close"] if close else []), f"http://127.0.0.1:{pport}{args.path}"]
    if wrap:
        origin_cmd, proxy_cmd, wrk = ([USMC_RUN, "--", *cmd] for cmd in (origin_cmd, proxy_cmd, wrk))
    procs = []
    try:
        for cmd, port in ((origin_cmd, oport), (proxy_cmd, pport)):
            procs.append(subprocess.Popen(["taskset", "-c", "0", *cmd], env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
            if not wait_port(port):
                raise SystemExit(f"{cmd[0]} did not start: {cmd}")
        origin, prx = procs
        o0, p0, w0, t0 = tree_cpu(origin.pid), tree_cpu(prx.pid), cpu_children(), time.monotonic()
        r = subprocess.run(["taskset", "-c", "1", *wrk], env=env, capture_output=True, text=True,
                           timeout=args.duration + 120)
        wall = time.monotonic() - t0
        cpu = [100 * (tree_cpu(prx.pid) - p0) / wall, 100 * (tree_cpu(origin.pid) - o0) / wall,
               100 * (cpu_children() - w0) / wall]
    finally:
        for p in reversed(procs):
            # haproxy's graceful stop is SIGUSR1 (SIGTERM kills it by the signal)
            if p is not procs[0] and PROXIES[proxy] is not None and p.poll() is None:
                p.send_signal(signal.SIGUSR1)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    pass
            stop_process(p)
    return parse_wrk(r.stdout), cpu


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    p.add_argument("--connections", default="50", help="wrk -c, comma-separated (e.g. 50,1000)")
    p.add_argument("--proxies", default=",".join(PROXIES))
    p.add_argument("--path", default="/index.html", help="the document wrk asks for")
    args = p.parse_args()
    conns = [int(c) for c in args.connections.split(",")]
    proxies = args.proxies.split(",")
    # wrk -c 1000 through a proxy: two descriptors per connection there.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tmp = bench_dir()
    os.chmod(tmp, 0o755)  # nginx workers run as nobody
    variants = [("TCP", False), ("SMC-D", True)]
    names = [n for n, _ in variants]
    rows = [(proxy, c, close) for proxy in proxies for c in conns for close in (False, True)]
    results = {}
    try:
        for rnd in range(args.runs):
            for proxy, c, close in rows:
                for name, wrap in (variants if rnd % 2 == 0 else variants[::-1]):
                    label = f"{proxy} {'close' if close else 'keep-alive'} c={c}"
                    d, stats_dir, env = run_dir(tmp, f"{name}-{proxy}-{c}-{int(close)}-{rnd}")
                    w, cpu = run(proxy, c, close, wrap, d, env, args, hard)
                    results.setdefault((label, name), []).append((w["rps"], *cpu))
                    print(f"  run {rnd + 1} {name:6} {label:30} {w['rps']:10.0f} req/s  cpu proxy {cpu[0]:4.0f}% "
                          f"origin {cpu[1]:4.0f}% wrk {cpu[2]:4.0f}%  errors {w['errors']} non2xx {w['non2xx']}"
                          + (f"  ({smcd_share(stats_dir)})" if wrap else ""), flush=True)
        print()
        print(f"proxy + origin nginx on CPU 0, wrk (1 thread) on CPU 1, {args.path}, {args.duration}s, "
              f"median of {args.runs} runs (cpu: % of one core)")
        head = "".join(f" {n + ' req/s':>12} {'proxy':>6} {'origin':>6} {'wrk':>5}" for n in names)
        ratios = "".join(f" {n + '/TCP':>10}" for n in names[1:])
        print(f"  {'workload':32}{head}{ratios}")
        for proxy, c, close in rows:
            label = f"{proxy} {'close' if close else 'keep-alive'} c={c}"
            med = {n: [statistics.median(v[i] for v in results[(label, n)]) for i in range(4)] for n in names}
            cols = "".join(f" {med[n][0]:12.0f} {med[n][1]:5.0f}% {med[n][2]:5.0f}% {med[n][3]:4.0f}%" for n in names)
            rat = "".join(f" {med[n][0] / med['TCP'][0]:10.2f}" for n in names[1:])
            print(f"  {label:32}{cols}{rat}")
    finally:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
