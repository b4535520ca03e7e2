#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""iperf3 over plain TCP and over SMC-D (server and client under usmc-run),
in the same run, order alternating, median of N runs: iperf3's defaults
(one stream, 128 KB writes, client sends) for -t seconds, and with
--streams (-P) and --lengths (-l) for other shapes (e.g. --streams 1,2
--lengths 64K,128K,1M). Server on CPU 0, client on CPU 1.

Reports Gbit/s received (iperf3's own sum_received) and the CPU each side
used, % of one core over the run: the server's from /proc/PID/stat, the
client's from its rusage. usmc's counters confirm the SMC-D runs used
SMC-D (the control connection and every data stream)."""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from harness import bench_dir, USMC, USMC_RUN, cpu_children, free_port, run_dir, smcd_share, stop_process, tree_cpu  # noqa: E402


def wait_listening(port, proc, timeout=10.0):
    """Waits for the kernel's listener (ss), not by connecting: iperf3 would
    take a connection of ours for a test's control connection."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
        if out.strip():
            return True
        time.sleep(0.05)
    return False


def run(streams, length, wrap, env, args):
    port = free_port()
    server = ["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port), "-1"]
    client = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(args.duration), "-P", str(streams),
              "-l", length, "-J"]
    if wrap:
        server, client = [USMC_RUN, "--", *server], [USMC_RUN, "--", *client]
    srv = subprocess.Popen(["taskset", "-c", "0", *server], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        if not wait_listening(port, srv):
            raise SystemExit(f"iperf3 server did not start: {server}")
        s0, c0, t0 = tree_cpu(srv.pid), cpu_children(), time.monotonic()
        r = subprocess.run(["taskset", "-c", "1", *client], env=env, capture_output=True, text=True,
                           timeout=args.duration + 60)
        wall = time.monotonic() - t0
        cpu = (100 * (tree_cpu(srv.pid) - s0) / wall, 100 * (cpu_children() - c0) / wall)
    finally:
        stop_process(srv)
    try:
        out = json.loads(r.stdout)
        gbit = out["end"]["sum_received"]["bits_per_second"] / 1e9
    except (ValueError, KeyError) as e:
        raise SystemExit(f"iperf3 failed (rc {r.returncode}, {e}): {r.stdout[-400:]} {r.stderr[-400:]}")
    return gbit, cpu


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--duration", type=int, default=10, help="seconds per iperf3 run (-t)")
    p.add_argument("--streams", default="1", help="iperf3 -P, comma-separated (e.g. 1,2)")
    p.add_argument("--lengths", default="128K", help="iperf3 -l, comma-separated (e.g. 64K,128K,1M)")
    args = p.parse_args()
    rows = [(int(s), l) for s in args.streams.split(",") for l in args.lengths.split(",")]
    tmp = bench_dir()
    variants = [("TCP", False), ("SMC-D", True)]
    names = [n for n, _ in variants]
    results = {}
    try:
        for rnd in range(args.runs):
            for streams, length in rows:
                for name, wrap in (variants if rnd % 2 == 0 else variants[::-1]):
                    label = f"-P {streams} -l {length}"
                    d, stats_dir, env = run_dir(tmp, f"{name}-{streams}-{length}-{rnd}")
                    gbit, cpu = run(streams, length, wrap, env, args)
                    results.setdefault((label, name), []).append((gbit, *cpu))
                    print(f"  run {rnd + 1} {name:6} {label:14} {gbit:7.2f} Gbit/s  cpu server {cpu[0]:4.0f}% "
                          f"client {cpu[1]:4.0f}%" + (f"  ({smcd_share(stats_dir)})" if wrap else ""), flush=True)
        print()
        print(f"iperf3 server on CPU 0, client on CPU 1, -t {args.duration}, median of {args.runs} runs "
              f"(cpu: % of one core)")
        head = "".join(f" {n + ' Gbit/s':>13} {'srv':>5} {'cli':>5}" for n in names)
        ratios = "".join(f" {n + '/TCP':>10}" for n in names[1:])
        print(f"  {'workload':16}{head}{ratios}")
        for streams, length in rows:
            label = f"-P {streams} -l {length}"
            med = {n: [statistics.median(v[i] for v in results[(label, n)]) for i in range(3)] for n in names}
            cols = "".join(f" {med[n][0]:13.2f} {med[n][1]:4.0f}% {med[n][2]:4.0f}%" for n in names)
            rat = "".join(f" {med[n][0] / med['TCP'][0]:10.2f}" for n in names[1:])
            print(f"  {label:16}{cols}{rat}")
    finally:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
