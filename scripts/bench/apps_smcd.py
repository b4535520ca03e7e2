#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nginx + wrk (keep-alive, c=100) and redis-server + redis-benchmark (GET
and SET, c=50) over plain TCP and over SMC-D (both ends under usmc-run), in
the same run, order alternating, median of N runs. Server on CPU 0, client
on CPU 1; CPU use of both (% of one core) beside each figure; usmc's
counters confirm the SMC-D runs really used SMC-D. --hogs N runs N
CPU-burning processes (unpinned) beside every run, TCP's included: the
cores oversubscribed, as on a busy machine."""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from apps import make_nginx, parse_wrk, redis_server_cmd  # noqa: E402
from hogs import cpu_hogs  # noqa: E402
from harness import bench_dir, USMC, USMC_RUN, cpu_children, free_port, run_dir, smcd_share, stop_process, wait_port  # noqa: E402


def run(server_cmd, client_cmd, port, wrap, env, parse, timeout):
    if wrap is not None:
        server_cmd = [USMC_RUN, *wrap, "--", *server_cmd]
        client_cmd = [USMC_RUN, *wrap, "--", *client_cmd]
    cpu0, t0 = cpu_children(), time.monotonic()
    srv = subprocess.Popen(["taskset", "-c", "0", *server_cmd], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        if not wait_port(port):
            raise SystemExit(f"server did not start: {server_cmd}")
        r = subprocess.run(["taskset", "-c", "1", *client_cmd], env=env, capture_output=True, text=True,
                           timeout=timeout)
    finally:
        stop_process(srv)
    wall = time.monotonic() - t0
    return parse(r), 100 * (cpu_children() - cpu0) / wall


def parse_redis(r):
    # redis-benchmark --csv: "test","rps",...
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r'"(\w+)","([\d.]+)"', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    p.add_argument("--requests", type=int, default=200000, help="redis-benchmark requests per test")
    p.add_argument("--busy-poll-us", type=int, default=0,
                   help="a third column with busy_poll_us set to this (default 0: no spinning, "
                        "against the default's 20 us; -1: no third column)")
    p.add_argument("--hogs", type=int, default=0, help="CPU-burning processes beside every run")
    args = p.parse_args()
    with cpu_hogs(args.hogs):
        measure(args)


def measure(args):
    tmp = bench_dir()
    os.chmod(tmp, 0o755)
    busy_cfg = os.path.join(tmp, "busy.toml")
    with open(busy_cfg, "w") as f:
        f.write(f"busy_poll_us = {args.busy_poll_us}\n")
    os.chmod(busy_cfg, 0o644)
    # (column name, usmc-run options; None = not wrapped)
    variants = [("TCP", None), ("SMC-D", [])]
    if args.busy_poll_us >= 0:
        variants.append((f"busy{args.busy_poll_us}", ["--config", busy_cfg]))
    names = [n for n, _ in variants]
    results = {}
    try:
        for rnd in range(args.runs):
            for name, wrap in (variants if rnd % 2 == 0 else variants[::-1]):
                d, stats_dir, env = run_dir(tmp, f"{name}-{rnd}")
                # nginx + wrk keep-alive, c=100
                port = free_port()
                w, cpu = run(make_nginx(d, port, workers=1),
                             ["wrk", "-t", "1", "-c", "100", "-d", f"{args.duration}s",
                              f"http://127.0.0.1:{port}/index.html"],
                             port, wrap, env, lambda r: parse_wrk(r.stdout), args.duration + 60)
                if w["errors"] or w["non2xx"]:
                    raise SystemExit(f"wrk errors ({name}): {w}")
                results.setdefault(("nginx+wrk keep-alive c=100", name), []).append((w["rps"], cpu))
                print(f"  run {rnd + 1} {name:6} nginx+wrk   {w['rps']:10.0f} req/s cpu {cpu:4.0f}%"
                      + (f"  ({smcd_share(stats_dir)})" if wrap is not None else ""), flush=True)
                # redis-server + redis-benchmark GET/SET, c=50
                port = free_port()
                rb, cpu = run(redis_server_cmd(port),
                              ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "50", "-n",
                               str(args.requests), "-t", "get,set", "--csv", "-q"],
                              port, wrap, env, parse_redis, 300)
                for test in ("SET", "GET"):
                    results.setdefault((f"redis-benchmark {test} c=50", name), []).append((rb.get(test, 0), cpu))
                print(f"  run {rnd + 1} {name:6} redis       SET {rb.get('SET', 0):9.0f} GET {rb.get('GET', 0):9.0f} "
                      f"cpu {cpu:4.0f}%" + (f"  ({smcd_share(stats_dir)})" if wrap is not None else ""), flush=True)
        print()
        print(f"server on CPU 0, client on CPU 1, median of {args.runs} runs (cpu: both processes, % of one core)"
              + (f", {args.hogs} CPU hogs beside every run" if args.hogs else ""))
        head = "".join(f" {n:>10} {'cpu':>5}" for n in names)
        ratios = "".join(f" {n + '/TCP':>10}" for n in names[1:])
        print(f"  {'workload':30}{head}{ratios}")
        for workload in ("nginx+wrk keep-alive c=100", "redis-benchmark SET c=50", "redis-benchmark GET c=50"):
            med = {n: (statistics.median(v for v, _ in results[(workload, n)]),
                       statistics.median(c for _, c in results[(workload, n)])) for n in names}
            cols = "".join(f" {med[n][0]:10.0f} {med[n][1]:4.0f}%" for n in names)
            rat = "".join(f" {med[n][0] / med['TCP'][0]:10.2f}" for n in names[1:])
            print(f"  {workload:30}{cols}{rat}")
    finally:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
