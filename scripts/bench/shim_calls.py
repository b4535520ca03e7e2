#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What the shim adds to a call it passes through: the same Google Benchmark
binary plain and under `usmc-run --tcp`, alternating, median of N runs each,
ns per operation and the ratio."""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from harness import BIN, USMC_RUN  # noqa: E402

BENCH = os.path.join(BIN, "usmc-bench-calls")


def run(wrapped, min_time):
    cmd = [BENCH, "--benchmark_format=json", f"--benchmark_min_time={min_time}"]
    if wrapped:
        cmd = [USMC_RUN, "--tcp", "--", *cmd]
    cmd = ["taskset", "-c", "1", *cmd]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, timeout=600).stdout
    return {b["name"]: b["cpu_time"] for b in json.loads(out)["benchmarks"]}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.3)
    args = p.parse_args()
    plain, shim = {}, {}
    for i in range(args.runs):
        for name, ns in run(False, args.min_time).items():
            plain.setdefault(name, []).append(ns)
        for name, ns in run(True, args.min_time).items():
            shim.setdefault(name, []).append(ns)
        print(f"  run {i + 1} of {args.runs} done", flush=True)
    print(f"\nper-call cost, median of {args.runs} runs (CPU 1)")
    print(f"{'benchmark':28} {'plain ns':>10} {'--tcp ns':>11} {'added ns':>9} {'ratio':>7}")
    for name in plain:
        a, b = statistics.median(plain[name]), statistics.median(shim[name])
        print(f"{name:28} {a:10.1f} {b:11.1f} {b - a:9.1f} {b / a:7.3f}")


if __name__ == "__main__":
    main()
