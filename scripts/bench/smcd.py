#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""SMC-D against plain TCP with sockperf (both ends under usmc-run for the
SMC-D columns): ping-pong latency with 64-byte messages and streaming
throughput with 64 KB messages. Same run, alternating, median of N runs;
CPU use (both processes, % of one core) beside each figure so the cost of
polling is visible. --hogs N runs N CPU-burning processes (unpinned) beside
every run, TCP's included: the cores oversubscribed, as on a busy machine.
--blockers N oversubscribes them with blocking work instead: N pairs of
processes passing a byte back and forth over pipes, each doing --work-us of
CPU work per message (as database backends and their clients do), so that
threads keep waking up and waiting for a CPU."""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from hogs import cpu_hogs  # noqa: E402
from harness import bench_dir, USMC, USMC_RUN, free_port, wait_port  # noqa: E402

VARIANTS = [
    ("TCP", None),
    ("SMC-D default", ""),
    ("SMC-D rmem=1M", 'rmem = "1M"\n'),
    ("SMC-D busy_poll_us=0", "busy_poll_us = 0\n"),   # no spinning (the default spins 20 us)
    ("SMC-D spin every wait", "busy_poll_adaptive = false\n"),  # before adaptive spinning
]


# One pair of the blocking load: the two sides take turns, each burning
# `work` microseconds per turn; the child ends when its parent does (EOF).
BLOCKER = r"""
import os, sys, time
work = float(sys.argv[1]) / 1e6
a_r, a_w = os.pipe()
b_r, b_w = os.pipe()
def burn():
    until = time.perf_counter() + work
    while time.perf_counter() < until:
        pass
if os.fork() == 0:
    os.close(a_w); os.close(b_r)
    try:
        while os.read(a_r, 1):
            burn()
            os.write(b_w, b"x")
    except BrokenPipeError:  # the parent was stopped first
        pass
    os._exit(0)
os.close(a_r); os.close(b_w)
while True:
    os.write(a_w, b"x")
    if not os.read(b_r, 1):
        break
    burn()
"""


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_one(mode, config, env, seconds, tmp):
    port = free_port()
    server = ["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(port)]
    client = ["sockperf", "ping-pong" if mode == "pp" else "throughput", "--tcp", "-i", "127.0.0.1", "-p",
              str(port), "-m", "64" if mode == "pp" else "65000", "-t", str(seconds)]
    if config is not None:
        path = os.path.join(tmp, "bench.toml")
        with open(path, "w") as f:
            f.write(config)
        server = [USMC_RUN, "--config", path, "--", *server]
        client = [USMC_RUN, "--config", path, "--", *client]
    cpu0, t0 = cpu_children(), time.monotonic()
    srv = subprocess.Popen(["taskset", "-c", "0", *server], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        if not wait_port(port):
            raise SystemExit("sockperf server did not start")
        out = subprocess.run(["taskset", "-c", "1", *client], env=env, capture_output=True, text=True,
                             timeout=seconds + 30).stdout
    finally:
        srv.terminate()
        srv.wait(timeout=10)
    wall = time.monotonic() - t0
    cpu = 100 * (cpu_children() - cpu0) / wall
    if mode == "pp":
        m = re.search(r"percentile 50.000 =\s+([\d.]+)", out)
    else:
        m = re.search(r"BandWidth is ([\d.]+) MBps", out)
    if not m:
        raise SystemExit(f"cannot parse sockperf output:\n{out}")
    return float(m.group(1)), cpu


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=int, default=3)
    p.add_argument("--hogs", type=int, default=0, help="CPU-burning processes beside every run")
    p.add_argument("--blockers", type=int, default=0, help="pairs of blocking processes beside every run")
    p.add_argument("--work-us", type=float, default=50, help="CPU work per message of a blocker")
    args = p.parse_args()
    blockers = [[sys.executable, "-c", BLOCKER, str(args.work_us)] for _ in range(args.blockers)]
    with cpu_hogs(args.hogs, blockers):
        measure(args)


def measure(args):
    tmp = bench_dir()
    stats = os.path.join(tmp, "stats")
    os.mkdir(stats)
    env = dict(os.environ, USMC_STATS_DIR=stats)
    env.pop("LD_PRELOAD", None)
    results = {}
    for mode in ("pp", "tp"):
        for r in range(args.runs):
            for name, config in VARIANTS:
                value, cpu = run_one(mode, config, env, args.seconds, tmp)
                results.setdefault((mode, name), []).append((value, cpu))
                print(f"  run {r + 1} {mode} {name:24} {value:10.2f} cpu {cpu:5.0f}%", flush=True)
    st = subprocess.run([USMC, "--stats-dir", stats, "stats", "--json"], capture_output=True, text=True).stdout
    print("\nusmc counters over all runs:", st.strip())
    print(f"\nsockperf, server on CPU 0, client on CPU 1, {args.seconds} s per run, median of {args.runs}"
          + (f", {args.hogs} CPU hogs beside every run" if args.hogs else "")
          + (f", {args.blockers} blocking pairs ({args.work_us:g} us per message) beside every run"
             if args.blockers else ""))
    for mode, label, unit in (("pp", "ping-pong 64 B, p50 latency", "us"), ("tp", "throughput 64 KB messages", "MB/s")):
        base = statistics.median(v for v, _ in results[(mode, "TCP")])
        print(f"\n{label}")
        print(f"  {'variant':24} {unit:>10} {'ratio':>7} {'cpu':>6}")
        for name, _ in VARIANTS:
            vals = results[(mode, name)]
            v = statistics.median(x for x, _ in vals)
            cpu = statistics.median(c for _, c in vals)
            print(f"  {name:24} {v:10.2f} {v / base:7.2f} {cpu:5.0f}%")
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
