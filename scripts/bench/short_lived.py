#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nginx (1 worker, CPU 0) + wrk (1 thread, CPU 1) with 'Connection: Close'
at c=1000 and c=10000, the workload of the kernel's short-lived-connection
series. Columns, in the same run, order rotated each round, median of N:

  tcp            neither side wrapped
  off            both under usmc-run, the default configuration
                 (limit_smc_hs = false, learn_smc = true: these one-request
                 connections learn plain TCP after the first few)
  always         off with learn_smc = false: every connection tries SMC-D
                 (not run by default: --variants ...,always)
  on             both under usmc-run, limit_smc_hs = true
  on+delay       limit_smc_hs = true and every server handshake delayed
                 (testonly_server_handshake_delay_ms): the congested regime
  off+delay      the same delay without the bypass: what the series fixed
  (on, on+delay and off+delay measure the handshake path and its
  SMC_LIMIT_HS bypass, so they run with learn_smc = false: every
  connection tries SMC-D, as the kernel's series measured it)
  shim           both under usmc-run with mode = "tcp" (intercept, never SMC):
                 what interposition alone costs, the floor of every bypass
                 (not run by default: --variants ...,shim)

Reports req/s, the ratio to TCP, wrk's socket errors, the kernel's listen
overflows/drops (nstat) during the run, the CPU time per request of wrk and
of nginx (a run where neither is near duration / requests waited on
something), the context switches per request of each (every thread, usmc's
included), and how nginx's connections ended up (SMC-D / TCP / bypassed)
from usmc's counters."""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from apps import make_nginx, parse_wrk  # noqa: E402
from harness import bench_dir, USMC, USMC_RUN, free_port, run_dir, stop_process, wait_port  # noqa: E402

VARIANTS = {
    "tcp": None,
    "off": "limit_smc_hs = false\n",
    "always": "limit_smc_hs = false\nlearn_smc = false\n",
    "on": "limit_smc_hs = true\nlearn_smc = false\n",
    "on+delay": "limit_smc_hs = true\nlearn_smc = false\ntestonly_server_handshake_delay_ms = {delay}\n",
    "off+delay": "limit_smc_hs = false\nlearn_smc = false\ntestonly_server_handshake_delay_ms = {delay}\n",
    "shim": 'mode = "tcp"\n',
}
DEFAULT_VARIANTS = ["tcp", "off", "on", "on+delay", "off+delay"]


def nstat():
    out = subprocess.run(["nstat", "-az", "TcpExtListenOverflows", "TcpExtListenDrops"],
                         capture_output=True, text=True).stdout
    vals = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith("TcpExt"):
            vals[parts[0]] = int(parts[1])
    return vals


def process_cpu(pid):
    """CPU seconds (user + system) of process `pid` and its direct children
    (nginx's master and worker), read from /proc before it is stopped."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def process_switches(pid):
    """Context switches (voluntary + involuntary) of every thread of process
    `pid` and of its direct children, read from /proc before it is stopped."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if int(entry) != pid and ppid != pid:
                continue
            for tid in os.listdir(f"/proc/{entry}/task"):
                with open(f"/proc/{entry}/task/{tid}/status") as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            total += int(line.split()[1])
        except OSError:
            continue
    return total


def counters(stats_dir):
    r = subprocess.run([USMC, "--stats-dir", stats_dir, "stats", "--json"], capture_output=True, text=True)
    return json.loads(r.stdout)


def top_reasons(st, n=4):
    """The most frequent fallback reasons of both sides (connection ends)."""
    reasons = sorted(st.get("fallback_reasons", {}).items(), key=lambda kv: -kv[1])
    return ",".join(f"{k}:{v}" for k, v in reasons[:n] if v) or "-"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    p.add_argument("--connections", default="1000,10000")
    p.add_argument("--delay-ms", type=int, default=5, help="injected server handshake delay")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    args = p.parse_args()
    conns = [int(c) for c in args.connections.split(",")]
    names = args.variants.split(",")
    # wrk -c 10000 and nginx need descriptors: as many as this machine allows.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"RLIMIT_NOFILE {hard}", flush=True)

    tmp = bench_dir()
    os.chmod(tmp, 0o755)  # nginx workers run as nobody
    results, notes = {}, {}
    try:
        for c in conns:
            for rnd in range(args.runs):
                for variant in names[rnd % len(names):] + names[:rnd % len(names)]:
                    d, stats_dir, env = run_dir(tmp, f"{variant}-{c}-{rnd}".replace("+", "_"))
                    if VARIANTS[variant] is not None:
                        cfg = os.path.join(d, "usmc.toml")
                        with open(cfg, "w") as f:
                            f.write(VARIANTS[variant].format(delay=args.delay_ms))
                        os.chmod(cfg, 0o644)
                        env["USMC_CONFIG"] = cfg
                    port = free_port()
                    cmd = make_nginx(d, port, workers=1, connections=c + 1024, nofile=hard)
                    wrk = ["wrk", "-t", "1", "-c", str(c), "-d", f"{args.duration}s", "--timeout", "10s",
                           "-H", "Connection: Close", f"http://127.0.0.1:{port}/index.html"]
                    if VARIANTS[variant] is not None:
                        cmd = [USMC_RUN, "--", *cmd]
                        wrk = [USMC_RUN, "--", *wrk]
                    nginx = subprocess.Popen(["taskset", "-c", "0", *cmd], env=env,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    try:
                        if not wait_port(port):
                            raise SystemExit(f"nginx ({variant}) did not start")
                        before = nstat()
                        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                        r = subprocess.run(["taskset", "-c", "1", *wrk], env=env, capture_output=True,
                                           text=True, timeout=args.duration + 120)
                        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                        after = nstat()
                        # CPU per request of each side: where a saturated
                        # side is the limit, and whether both sat idle.
                        wrk_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
                        wrk_cs = (ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw)
                        nginx_cpu = process_cpu(nginx.pid)
                        nginx_cs = process_switches(nginx.pid)
                        w = parse_wrk(r.stdout)
                        st = counters(stats_dir) if VARIANTS[variant] is not None else {}
                    finally:
                        stop_process(nginx)
                    drops = sum(after.get(k, 0) - before.get(k, 0) for k in after)
                    key = (c, variant)
                    results.setdefault(key, []).append(w["rps"])
                    smc = st.get("conn_smcd", 0) // 2
                    total = st.get("server_accepts", 0)
                    reqs = max(w["requests"], 1)
                    note = (f"errors {w['errors']:>5} non2xx {w['non2xx']} drops {drops:>6}"
                            f"  cpu us/req wrk {wrk_cpu / reqs * 1e6:4.0f} nginx {nginx_cpu / reqs * 1e6:4.0f}"
                            f"  switches/req wrk {wrk_cs / reqs:4.1f} nginx {nginx_cs / reqs:4.1f}"
                            + (f"  smc-d {smc}/{total} bypassed {st.get('hs_limit_bypassed', 0)}"
                               f"+{st.get('hs_client_bypassed', 0)}"
                               f" link-group reuse {st.get('lgr_reused', 0)}"
                               f"/{st.get('lgr_reused', 0) + st.get('lgr_first_contacts', 0)}"
                               f" downgraded {st.get('rx', {}).get('buffer_downgrade', 0)}"
                               f" fallbacks {top_reasons(st)}"
                               if st else ""))
                    notes.setdefault(key, []).append(note)
                    print(f"  c={c:<6} run {rnd + 1} {variant:10} {w['rps']:10.0f} req/s  {note}", flush=True)
        print()
        print(f"nginx (1 worker, CPU 0) + wrk (1 thread, CPU 1), 'Connection: Close', {args.duration}s, "
              f"median of {args.runs}, injected delay {args.delay_ms} ms")
        print(f"{'c':>6} " + " ".join(f"{n:>18}" for n in names))
        for c in conns:
            tcp = statistics.median(results[(c, "tcp")]) if (c, "tcp") in results else None
            cells = []
            for n in names:
                v = statistics.median(results[(c, n)])
                cells.append(f"{v:9.0f}" + (f" ({v / tcp:5.2f}x)" if tcp else ""))
            print(f"{c:>6} " + " ".join(f"{x:>18}" for x in cells))
    finally:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
