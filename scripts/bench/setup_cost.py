#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where the client's CPU goes per short-lived connection, SMC-D against TCP.

nginx (1 worker, CPU 0) + wrk (1 thread, CPU 1) with 'Connection: Close',
as short_lived.py runs them: plain TCP, and both under usmc-run with every
connection SMC-D (limit_smc_hs = false, learn_smc = false). For each, after
a second of warm-up, `perf record -a --call-graph dwarf` for a few seconds;
then wrk's samples (every thread of its process: usmc's loop included) are
attributed to the steps of a connection by the functions on their stacks,
and shown as CPU microseconds per request. nginx's process total is shown
too. One sample may count under two steps where their functions nest (the
table's "of which" rows); the totals count each sample once.

wrk is the side that saturates its CPU in this workload, so its CPU per
request is what sets the rate: see short_lived.py for the throughput itself
(median of several runs; a profile is one run).

Needs perf (Debian: linux-perf) and root or kernel.perf_event_paranoid <= -1.
"""
import argparse
import os
import re
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from apps import make_nginx, parse_wrk  # noqa: E402
from harness import bench_dir, USMC_RUN, free_port, run_dir, stop_process, wait_port  # noqa: E402

# (step, a function on the stack that marks it; "  " rows nest in the row above)
STEPS = [
    ("socket()", "__GI_socket"),
    ("connect() (usmc's `sig` block, unblock too)", "__libc_connect"),
    ("  usmc: the Proposal (CLC over TCP)", "usmc::smc_send_proposal"),
    ("  usmc: `sig` taken, blocked, drained", "usmc::smc_conn_init_wakeups"),
    ("  usmc: the listener's publisher alive (pidfd)", "usmc::registry::publisher_alive"),
    ("  usmc: the connect watch armed", "usmc::connect_watch::add"),
    ("  usmc: the socket's flags (F_GETFL)", "usmc::af_smc::detail::fd_nonblocking"),
    ("getsockname()", "__GI_getsockname"),
    ("usmc loop: the Accept read", "usmc::clc::take_whole_message"),
    ("usmc loop: the peer watch armed", "usmc::peer_watch::add"),
    ("usmc loop: `sig` unblocked", "usmc::wakeup::unblock"),
    ("usmc loop: the peer's FIN seen", "usmc::peer_watch::deliver"),
    ("write() / the request's wake-up of nginx", "__GI___libc_write|usmc::smcd::PeerSignals::wake_reader"),
    ("read() / recv()", "__GI___libc_read|__libc_recv"),
    ("epoll_ctl()", "__GI_epoll_ctl"),
    ("epoll_wait() (usmc's loop's too)", "epoll_wait"),
    ("fcntl()", "__GI___libc_fcntl64"),
    ("setsockopt()", "__GI___setsockopt"),
    ("close()", "__GI___close|usmc::shim::close_fd"),
    ("  usmc: the connection released", "usmc::af_smc::detail::release"),
]
CONFIG = "limit_smc_hs = false\nlearn_smc = false\n"


def run(tmp, variant, conns, seconds, freq, hard):
    d, _, env = run_dir(tmp, f"setup-{variant}")
    port = free_port()
    nginx = make_nginx(d, port, workers=1, connections=conns + 1024, nofile=hard)
    wrk = ["wrk", "-t", "1", "-c", str(conns), "-d", f"{seconds + 3}s", "--timeout", "10s",
           "-H", "Connection: Close", f"http://127.0.0.1:{port}/index.html"]
    if variant != "tcp":
        cfg = os.path.join(d, "usmc.toml")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        os.chmod(cfg, 0o644)
        env["USMC_CONFIG"] = cfg
        nginx, wrk = [USMC_RUN, "--", *nginx], [USMC_RUN, "--", *wrk]
    data = os.path.join(d, "perf.data")
    server = subprocess.Popen(["taskset", "-c", "0", *nginx], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_port(port):
            raise SystemExit(f"nginx ({variant}) did not start")
        client = subprocess.Popen(["taskset", "-c", "1", *wrk], env=env, stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        rec = subprocess.run(["perf", "record", "-a", "-F", str(freq), "--call-graph", "dwarf,16384",
                              "-o", data, "--", "sleep", str(seconds)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        out, _ = client.communicate(timeout=seconds + 120)
        if rec.returncode != 0:
            raise SystemExit(f"perf record failed: {rec.stderr[-500:]}")
        workers = children(server.pid)
    finally:
        stop_process(server)
    w = parse_wrk(out)
    rps = w["rps"]
    script = subprocess.run(["perf", "script", "-i", data, "-F", "pid,tid,comm,ip,sym"],
                            capture_output=True, text=True).stdout
    os.remove(data)
    return rps, client.pid, workers, samples_of(script)


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {int(x) for x in f.read().split()}
    except OSError:
        return set()


def samples_of(script):
    """(pid, thread name, frames) per sample of `perf script -F pid,tid,comm,ip,sym`."""
    out, pid, tid, frames = [], None, None, []
    for line in script.splitlines():
        if not line.strip():
            if pid is not None:
                out.append((pid, tid, frames))
            pid, tid, frames = None, None, []
        elif not line[0].isspace():
            m = re.match(r"\s*(\S.*?)\s+(\d+)/(\d+)", line)
            pid, tid = (int(m.group(2)), m.group(1)) if m else (-1, "")
        else:
            frames.append(re.sub(r"^[0-9a-f]+\s+", "", line.strip()).split("(")[0].strip())
    if pid is not None:
        out.append((pid, tid, frames))
    return out


def per_request(n, rps, seconds, freq):
    return n / freq / (rps * seconds) * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--seconds", type=int, default=3, help="seconds recorded")
    p.add_argument("--freq", type=int, default=499, help="samples per second and CPU")
    args = p.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tmp = bench_dir()
    os.chmod(tmp, 0o755)  # nginx workers run as nobody
    cols = {}
    for variant in ("tcp", "smc-d"):
        rps, wrk_pid, nginx_pids, samples = run(tmp, variant, args.connections, args.seconds, args.freq, hard)
        mine = [f for pid, _, f in samples if pid == wrk_pid]
        own_thread = sum(1 for pid, name, _ in samples if pid == wrk_pid and not name.startswith("usmc"))
        theirs = [f for pid, _, f in samples if pid in nginx_pids]  # the worker (the master's child)
        rows = {}
        for name, pattern in STEPS:
            rx = re.compile(r"^(?:%s)$" % pattern)
            rows[name] = per_request(sum(1 for f in mine if any(rx.match(x) for x in f)), rps, args.seconds,
                                     args.freq)
        rows["wrk in all (its usmc threads included)"] = per_request(len(mine), rps, args.seconds, args.freq)
        rows["  of which wrk's threads (not usmc's)"] = per_request(own_thread, rps, args.seconds, args.freq)
        rows["nginx's worker in all"] = per_request(len(theirs), rps, args.seconds, args.freq)
        cols[variant] = (rps, rows)
        print(f"{variant}: {rps:.0f} req/s during the profile", flush=True)
    print()
    print(f"CPU µs per request, c={args.connections}, 'Connection: Close', {args.seconds} s at {args.freq} Hz")
    print(f"{'':52} {'TCP':>8} {'SMC-D':>8}")
    for name in [n for n, _ in STEPS] + ["wrk in all (its usmc threads included)", "  of which wrk's threads (not usmc's)",
                                         "nginx's worker in all"]:
        print(f"{name:52} {cols['tcp'][1][name]:8.1f} {cols['smc-d'][1][name]:8.1f}")
    print(f"{'req/s':52} {cols['tcp'][0]:8.0f} {cols['smc-d'][0]:8.0f}  ({cols['smc-d'][0] / cols['tcp'][0]:.2f}x)")


if __name__ == "__main__":
    main()
