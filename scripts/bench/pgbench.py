#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PostgreSQL + pgbench over plain TCP and over SMC-D (both ends under
usmc-run), in the same run, order rotated each round, median of N runs: TPC-B with
persistent connections (-c 8 -j 2), TPC-B with a connection per transaction
(-C) and select-only (-S, persistent). The server (postmaster and its
backends) on CPU 0, pgbench on CPU 1, TCP on 127.0.0.1 (-h), durability
off (fsync, synchronous_commit), as the postgres user.

CPU beside each figure, % of one core over the run: the server's from
/proc/PID/stat (postmaster, reaped and live backends), pgbench's from its
rusage. usmc's counters confirm the SMC-D runs used SMC-D.

--busy: the busy machine. While each workload runs, a second pgbench
(TPC-B, -c 4 -j 1, same wrapping as the column) works on another database
of the same server, unpinned: the backends of both compete for CPU 0,
both clients for the cores, so a process that waits is often not
running when its peer wakes it. The server CPU then includes the load's
backends.

Columns (--variants, comma-separated; default tcp,smcd):
  tcp     neither side wrapped
  smcd    both under usmc-run, the default configuration
  shim    both under usmc-run with mode = "tcp": interposition alone
  always  both under usmc-run with learn_smc = false: every connection
          tries SMC-D
--workloads picks among tpcb, tpcb-C, select (default: all three).
--unpinned: nothing pinned (the scheduler places the server and pgbench
on either core), as a user's machine runs them."""
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
from apps import PG_BIN, as_postgres, postgres_cmd, prepare_cluster, stop_postgres, wait_postgres  # noqa: E402
from harness import bench_dir, USMC, USMC_RUN, cpu_children, free_port, smcd_share, tree_cpu  # noqa: E402

WORKLOADS = {
    "tpcb": ("TPC-B c=8", []),
    "tpcb-C": ("TPC-B -C c=8", ["-C"]),
    "select": ("select-only c=8", ["-S"]),
}
# Column name -> the usmc configuration it runs with (None: not wrapped).
VARIANTS = {
    "tcp": ("TCP", None),
    "smcd": ("SMC-D", ""),
    "shim": ("shim", 'mode = "tcp"\n'),
    "always": ("always", "learn_smc = false\n"),
}


def parse_pgbench(r):
    tps = re.search(r"^tps = ([\d.]+)", r.stdout, re.M)
    failed = re.search(r"number of failed transactions: (\d+)", r.stdout)
    if r.returncode != 0 or not tps or (failed and int(failed.group(1))):
        raise SystemExit(f"pgbench failed (rc {r.returncode}): {r.stdout[-400:]} {r.stderr[-400:]}")
    return float(tps.group(1))


def pgbench_cmd(port, db, args, wrap):
    cmd = [f"{PG_BIN}/pgbench", "-h", "127.0.0.1", "-p", str(port), *args, db]
    return as_postgres([USMC_RUN, "--", *cmd] if wrap is not None else cmd)


def busy_started(pgdir, port, clients, proc, timeout=30):
    """Waits until the busy load's connections are in pg_stat_activity."""
    deadline = time.monotonic() + timeout
    q = "SELECT count(*) FROM pg_stat_activity WHERE datname = 'busy'"
    while time.monotonic() < deadline and proc.poll() is None:
        r = subprocess.run([f"{PG_BIN}/psql", "-h", pgdir, "-p", str(port), "-U", "postgres", "-AtX", "-c", q,
                            "postgres"], capture_output=True, text=True, timeout=timeout)
        if r.stdout.strip().isdigit() and int(r.stdout) >= clients:
            return True
        time.sleep(0.05)
    return False


def history_rows(pgdir, port, db):
    """Transactions TPC-B has committed in `db` so far (asked over the Unix
    socket: no TCP connection is counted)."""
    r = subprocess.run(as_postgres([f"{PG_BIN}/psql", "-h", pgdir, "-p", str(port), "-U", "postgres", "-AtX",
                                    "-c", "SELECT count(*) FROM pgbench_history", db]),
                       capture_output=True, text=True, timeout=60)
    return int(r.stdout.strip()) if r.stdout.strip().isdigit() else 0


def pin(args, cpu):
    return [] if args.unpinned else ["taskset", "-c", cpu]


def run(pgdir, env, wrap, args, results, name, rnd, stats_dir):
    port = free_port()
    server = postgres_cmd(pgdir, port, max_connections=50)
    if wrap is not None:
        server = [USMC_RUN, "--", *server]
    log = open(os.path.join(pgdir, "postgres.log"), "a")
    srv = subprocess.Popen([*pin(args, "0"), *as_postgres(server)], env=env, stdout=log, stderr=log)
    try:
        if not wait_postgres(pgdir, port, srv):
            raise SystemExit(f"postgres ({name}) did not start; see {pgdir}/postgres.log")
        for workload, extra in args.workload_list:
            busy = None
            if args.busy:
                busy = subprocess.Popen(pgbench_cmd(port, "busy", ["-n", "-c", "4", "-j", "1", "-T",
                                                                   str(args.duration + 120)], wrap),
                                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if not busy_started(pgdir, port, 4, busy):
                    raise SystemExit("the busy pgbench did not connect")
            try:
                cmd = pgbench_cmd(port, "postgres", ["-n", "-c", "8", "-j", "2", "-T", str(args.duration), *extra],
                                  wrap)
                busy0 = history_rows(pgdir, port, "busy") if busy else 0
                srv0, cli0, t0 = tree_cpu(srv.pid), cpu_children(), time.monotonic()
                r = subprocess.run([*pin(args, "1"), *cmd], env=env, capture_output=True, text=True,
                                   timeout=args.duration + 120)
                wall = time.monotonic() - t0
                srv_cpu = 100 * (tree_cpu(srv.pid) - srv0) / wall
                cli_cpu = 100 * (cpu_children() - cli0) / wall
                busy_tps = (history_rows(pgdir, port, "busy") - busy0) / wall if busy else 0
            finally:
                if busy:
                    busy.terminate()
                    busy.wait(timeout=30)
            tps = parse_pgbench(r)
            results.setdefault((workload, name), []).append((tps, srv_cpu, cli_cpu, busy_tps))
            print(f"  run {rnd + 1} {name:6} {workload:16} {tps:10.0f} tps  cpu server {srv_cpu:4.0f}% "
                  f"pgbench {cli_cpu:4.0f}%" + (f"  busy load {busy_tps:6.0f} tps" if busy else "")
                  + (f"  ({smcd_share(stats_dir)})" if wrap is not None else ""), flush=True)
    finally:
        stop_postgres(srv)
        log.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--duration", type=int, default=10, help="seconds per pgbench run (-T)")
    p.add_argument("--scale", type=int, default=10, help="pgbench -i scale (10: 1M accounts)")
    p.add_argument("--busy", action="store_true", help="a second pgbench on another database meanwhile")
    p.add_argument("--unpinned", action="store_true", help="pin neither side to a CPU")
    p.add_argument("--variants", default="tcp,smcd")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    args = p.parse_args()
    args.workload_list = [WORKLOADS[w] for w in args.workloads.split(",")]
    variants = [VARIANTS[v] for v in args.variants.split(",")]
    if variants[0][1] is not None:
        raise SystemExit("--variants must start with tcp: every ratio is against it")
    tmp = bench_dir()
    os.chmod(tmp, 0o755)  # postgres (not root) runs in it
    names = [n for n, _ in variants]
    results = {}
    try:
        # One cluster for every run, initialised once over the Unix socket.
        pgdir = prepare_cluster(tmp)
        port = free_port()
        srv = subprocess.Popen(as_postgres(postgres_cmd(pgdir, port)), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        try:
            if not wait_postgres(pgdir, port, srv):
                raise SystemExit("postgres did not start")
            sock = ["-h", pgdir, "-p", str(port)]
            subprocess.run(as_postgres([f"{PG_BIN}/createdb", *sock, "busy"]), check=True)
            for db in ("postgres", "busy"):
                subprocess.run(as_postgres([f"{PG_BIN}/pgbench", *sock, "-i", "-q", "-s", str(args.scale), db]),
                               check=True, capture_output=True)
        finally:
            stop_postgres(srv)
        for rnd in range(args.runs):
            for name, wrap in variants[rnd % len(variants):] + variants[:rnd % len(variants)]:
                d = os.path.join(tmp, f"{name}-{rnd}")
                os.mkdir(d)
                stats_dir = os.path.join(d, "stats")
                os.mkdir(stats_dir)
                os.chmod(d, 0o755)
                os.chmod(stats_dir, 0o1777)  # postgres writes its stats segments there
                env = dict(os.environ, USMC_STATS_DIR=stats_dir)
                env.pop("LD_PRELOAD", None)
                env.pop("USMC_CONFIG", None)
                if wrap:
                    cfg = os.path.join(d, "usmc.toml")
                    with open(cfg, "w") as f:
                        f.write(wrap)
                    os.chmod(cfg, 0o644)
                    env["USMC_CONFIG"] = cfg
                run(pgdir, env, wrap, args, results, name, rnd, stats_dir)
        print()
        where = ("postgres and pgbench unpinned" if args.unpinned else "postgres on CPU 0, pgbench on CPU 1")
        print(f"{where} (pgbench -j 2, -T {args.duration}), scale {args.scale}, "
              f"median of {args.runs} runs{', busy (a second pgbench meanwhile)' if args.busy else ''}")
        print("(cpu: % of one core, server = postmaster + backends, client = pgbench"
              + ("; load: the busy pgbench's own tps meanwhile)" if args.busy else ")"))
        load = lambda n: f" {'load':>6}" if args.busy else ""  # noqa: E731
        head = "".join(f" {n + ' tps':>11} {'srv':>5} {'cli':>5}{load(n)}" for n in names)
        ratios = "".join(f" {n + '/TCP':>10}" for n in names[1:])
        print(f"  {'workload':18}{head}{ratios}")
        for workload, _ in args.workload_list:
            med = {n: [statistics.median(v[i] for v in results[(workload, n)]) for i in range(4)] for n in names}
            cols = "".join(f" {med[n][0]:11.0f} {med[n][1]:4.0f}% {med[n][2]:4.0f}%"
                           + (f" {med[n][3]:6.0f}" if args.busy else "") for n in names)
            rat = "".join(f" {med[n][0] / med['TCP'][0]:10.2f}" for n in names[1:])
            print(f"  {workload:18}{cols}{rat}")
    finally:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
