#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Cost of the shim where it cannot help: nginx + wrk, keep-alive and
'Connection: close', plain TCP against both ends under `usmc-run --tcp`
(every socket call intercepted, every connection TCP) and under plain
`usmc-run` (SMC allowed: nginx publishes its listener and looks at each
accepted connection's first bytes; wrk connects nonblocking, so TCP), in the
same run, alternating, median of N runs, printed as ratios."""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from apps import make_nginx, parse_wrk  # noqa: E402
from harness import bench_dir, USMC_RUN, free_port, wait_port  # noqa: E402




def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    p.add_argument("--connections", type=int, default=50)
    args = p.parse_args()

    tmp = bench_dir()
    os.chmod(tmp, 0o755)  # nginx workers run as nobody
    stats_dir = os.path.join(tmp, "stats")
    os.mkdir(stats_dir)
    os.chmod(stats_dir, 0o1777)
    env = dict(os.environ, USMC_STATS_DIR=stats_dir)
    env.pop("LD_PRELOAD", None)
    procs = {}
    try:
        variants = {"tcp": None, "usmc --tcp": ["--tcp"], "usmc auto": []}
        for variant in variants:
            d = os.path.join(tmp, variant.replace(" ", "_"))
            os.mkdir(d)
            port = free_port()
            cmd = make_nginx(d, port, workers=1)
            if variants[variant] is not None:
                cmd = [USMC_RUN, *variants[variant], "--", *cmd]
            # One core each for server and client: less noise on a 2-core VM.
            cmd = ["taskset", "-c", "0", *cmd]
            procs[variant] = (subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)
            if not wait_port(port):
                raise SystemExit(f"nginx ({variant}) did not start")
        results = {}
        for workload, extra in (("keep-alive", []), ("Connection: close", ["-H", "Connection: close"])):
            for rnd in range(args.runs):
                # Rotate the order each round: whoever runs first/last gets no edge.
                names = list(variants)
                for variant in names[rnd % len(names):] + names[:rnd % len(names)]:
                    proc, port = procs[variant]
                    wrk = ["wrk", "-t", "1", "-c", str(args.connections), "-d", f"{args.duration}s", *extra,
                           f"http://127.0.0.1:{port}/index.html"]
                    if variants[variant] is not None:
                        wrk = [USMC_RUN, *variants[variant], "--", *wrk]
                    wrk = ["taskset", "-c", "1", *wrk]
                    r = subprocess.run(wrk, env=env, capture_output=True, text=True, timeout=args.duration + 60)
                    w = parse_wrk(r.stdout)
                    if r.returncode != 0 or w["errors"] or w["non2xx"]:
                        raise SystemExit(f"wrk failed ({variant}, {workload}): {r.stdout} {r.stderr}")
                    results.setdefault((workload, variant), []).append(w["rps"])
                    print(f"  run {rnd + 1} {workload:18} {variant:9} {w['rps']:10.0f} req/s", flush=True)
        print()
        print(f"nginx (1 worker, CPU 0) + wrk (1 thread, CPU 1, c={args.connections}, {args.duration}s), "
              f"median of {args.runs}")
        print(f"{'workload':20} {'TCP req/s':>12} {'usmc --tcp':>10} {'ratio':>7} {'usmc auto':>10} {'ratio':>7}")
        for workload in ("keep-alive", "Connection: close"):
            tcp = statistics.median(results[(workload, "tcp")])
            t = statistics.median(results[(workload, "usmc --tcp")])
            a = statistics.median(results[(workload, "usmc auto")])
            print(f"{workload:20} {tcp:12.0f} {t:10.0f} {t / tcp:7.3f} {a:10.0f} {a / tcp:7.3f}")
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
