#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Descriptors per connection: nginx (1 worker, CPU 0) holding N keep-alive
connections from wrk (1 thread, CPU 1), both under usmc-run, default
configuration. While wrk runs, every descriptor of the nginx worker and of
wrk is read from /proc/PID/fd and sorted: TCP sockets (the connections
themselves, and listeners), Unix sockets (usmc's wake-up pairs and links),
memfds (DMBs), eventfds, epoll sets, others. Reports, per process, how many
of its connections are SMC-D (usmc ss) and the descriptors usmc adds per
SMC-D connection: everything but the TCP sockets, less what the same
program holds under plain TCP at the same N (its own epoll set, log files,
...), over the SMC-D connections. Median of --runs; plain TCP measured in
the same run. The machine's RLIMIT_NOFILE bounds N (nginx and wrk get the
hard limit)."""
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
from apps import make_nginx  # noqa: E402
from harness import bench_dir, USMC, USMC_RUN, free_port, run_dir, stop_process, wait_port  # noqa: E402

KINDS = ("tcp", "unix", "memfd", "eventfd", "epoll", "other")


def socket_inodes(*tables):
    inodes = set()
    for t in tables:
        try:
            with open(t) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    # /proc/net/tcp: inode is field 9; /proc/net/unix: field 6
                    inodes.add(parts[9] if "tcp" in t else parts[6])
        except (OSError, StopIteration, IndexError):
            pass
    return inodes


def descriptors(pid):
    tcp = socket_inodes("/proc/net/tcp", "/proc/net/tcp6")
    unix = socket_inodes("/proc/net/unix")
    counts = dict.fromkeys(KINDS, 0)
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return counts
    for fd in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            ino = target[8:-1]
            counts["tcp" if ino in tcp else "unix" if ino in unix else "other"] += 1
        elif target.startswith("/memfd:"):
            counts["memfd"] += 1
        elif target == "anon_inode:[eventfd]":
            counts["eventfd"] += 1
        elif target == "anon_inode:[eventpoll]":
            counts["epoll"] += 1
        else:
            counts["other"] += 1
    return counts


def worker_of(master):
    try:
        with open(f"/proc/{master}/task/{master}/children") as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except OSError:
        return None


def smcd_of(stats_dir, pid):
    r = subprocess.run([USMC, "--stats-dir", stats_dir, "ss", "--json"], capture_output=True, text=True,
                       timeout=60)
    socks = json.loads(r.stdout or '{"sockets": []}')["sockets"]
    return sum(1 for s in socks if s.get("pid") == pid and s.get("mode") == "SMCD")


def one(tmp, name, n, wrapped, duration, hard, max_dmb_memory=None):
    d, stats_dir, env = run_dir(tmp, name)
    if max_dmb_memory:
        cfg = os.path.join(d, "usmc.toml")
        with open(cfg, "w") as f:
            f.write(f'max_dmb_memory = "{max_dmb_memory}"\n')
        os.chmod(cfg, 0o644)
        env["USMC_CONFIG"] = cfg
    port = free_port()
    cmd = make_nginx(d, port, workers=1, connections=n + 1024, nofile=hard)
    wrk = ["wrk", "-t", "1", "-c", str(n), "-d", f"{duration}s", "--timeout", "10s",
           f"http://127.0.0.1:{port}/index.html"]
    if wrapped:
        cmd, wrk = [USMC_RUN, "--", *cmd], [USMC_RUN, "--", *wrk]
    nginx = subprocess.Popen(["taskset", "-c", "0", *cmd], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    w = None
    try:
        if not wait_port(port):
            raise SystemExit(f"nginx ({name}) did not start")
        w = subprocess.Popen(["taskset", "-c", "1", *wrk], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        # wrk opens its connections at once; the sample is taken once the
        # worker holds them all (bounded by the run), then once more.
        worker, deadline = None, time.monotonic() + duration * 0.8
        out = {}
        while time.monotonic() < deadline:
            worker = worker or worker_of(nginx.pid)
            if worker and descriptors(worker)["tcp"] >= n:
                break
            time.sleep(0.2)
        time.sleep(0.5)
        if w.poll() is not None:
            # (A sample of an ended wrk counts nothing: at 10 000 connections
            # under usmc the set-up takes most of a 4 s run.)
            raise SystemExit(f"wrk ({name}, c={n}) ended before the sample: give a longer --duration")
        for who, pid in (("nginx", worker), ("wrk", w.pid)):
            c = descriptors(pid) if pid else dict.fromkeys(KINDS, 0)
            c["smcd"] = smcd_of(stats_dir, pid) if wrapped and pid else 0
            out[who] = c
        w.wait(timeout=duration + 60)
        return out
    finally:
        if w and w.poll() is None:
            stop_process(w)
        stop_process(nginx)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--duration", type=int, default=6, help="seconds per wrk run")
    p.add_argument("--connections", default="1000,3000,10000")
    p.add_argument("--max-dmb-memory", default=None,
                   help="usmc's max_dmb_memory for both programs (default: the built-in 256M, "
                        "room for ~2 000 connections of 128 KiB)")
    args = p.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"RLIMIT_NOFILE {hard}", flush=True)
    tmp = bench_dir()
    os.chmod(tmp, 0o755)  # nginx workers run as nobody
    rows = []
    try:
        for n in [int(c) for c in args.connections.split(",")]:
            got = {"tcp": [], "usmc": []}
            for rnd in range(args.runs):
                for variant in (("tcp", "usmc") if rnd % 2 == 0 else ("usmc", "tcp")):
                    r = one(tmp, f"{variant}-{n}-{rnd}", n, variant == "usmc", args.duration, hard,
                            args.max_dmb_memory)
                    got[variant].append(r)
                    print(f"  c={n} run {rnd} {variant:4} " + "  ".join(
                        f"{who}: " + " ".join(f"{k} {v}" for k, v in c.items()) for who, c in r.items()),
                        flush=True)
            for who in ("nginx", "wrk"):
                def med(variant, key):
                    return statistics.median(r[who][key] for r in got[variant])
                base = sum(med("tcp", k) for k in KINDS if k != "tcp")
                extra = sum(med("usmc", k) for k in KINDS if k != "tcp") - base
                smcd = med("usmc", "smcd")
                rows.append((n, who, med("usmc", "tcp"), smcd, extra,
                             extra / smcd if smcd else float("nan"),
                             {k: med("usmc", k) for k in KINDS if k != "tcp"}))
    finally:
        subprocess.run(["rm", "-rf", tmp])
    print(f"\nnginx (1 worker, CPU 0) + wrk (1 thread, CPU 1) keep-alive, median of {args.runs} runs, "
          f"RLIMIT_NOFILE {hard}")
    print(f"  {'c':>6} {'process':7} {'TCP sockets':>11} {'SMC-D':>6} {'usmc fds':>8} {'per SMC-D':>9}  of which")
    for n, who, tcp, smcd, extra, per, kinds in rows:
        print(f"  {n:6} {who:7} {tcp:11.0f} {smcd:6.0f} {extra:8.0f} {per:9.2f}  "
              + " ".join(f"{k} {v:.0f}" for k, v in kinds.items()))


if __name__ == "__main__":
    main()
