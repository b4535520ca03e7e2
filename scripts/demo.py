#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The usmc demo: real servers and real clients from Debian, every one of
them wrapped in usmc-run, each measured beside the same programs over plain
TCP in the same run; then what usmc saw: each connection's mode and
fallback reason (usmc ss) and the counters (usmc stats)."""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from apps import make_nginx, parse_wrk, redis_server_cmd  # noqa: E402
from harness import USMC, USMC_RUN, free_port, wait_port  # noqa: E402

# Servers on CPU 0, clients on CPU 1 (when there are two), the same for
# plain TCP and usmc, so the two columns differ only in usmc.
NCPU = os.cpu_count() or 1
SERVER_CPU = ["taskset", "-c", "0"]
CLIENT_CPU = ["taskset", "-c", "1" if NCPU > 1 else "0"]

# A blocking connect: the SMC-D handshake runs inside connect().
ECHO_SERVER = """
import socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen()
while True:
    c, _ = l.accept()
    while (d := c.recv(65536)):
        c.sendall(d)
    c.close()
"""
ECHO_CLIENT = """
import socket, sys, time
s = socket.socket(); s.connect(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"hello over shared memory")
print("echo client got:", s.recv(100).decode(), flush=True)
time.sleep(60)
"""


ROUNDS = 3  # each measurement, plain and usmc alternating, medians compared
SAME = 0.05  # a ratio this close to 1 is within a short round's noise


def alternating():
    """(name, wrap) pairs: plain, usmc, usmc, plain, plain, usmc, ..."""
    pair = [("plain", []), ("usmc", [USMC_RUN])]
    for r in range(ROUNDS):
        yield from (pair if r % 2 == 0 else pair[::-1])


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def say(text):
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def shown(cmd):
    """The command as a user would type it: tool paths by their name."""
    return " ".join(os.path.basename(c) if c.startswith(ROOT) else c for c in cmd)


def run(cmd, env, echo=True):
    if echo:
        print("$ " + shown(cmd), flush=True)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.stdout.write(r.stdout + r.stderr)
        raise SystemExit(f"demo step failed: {shown(cmd)}")
    return r.stdout


def redis_rps(output):
    """{"SET": rps, "GET": rps} from redis-benchmark -q (which redraws its
    progress with \\r; the final figure follows the last one)."""
    rps = {}
    for line in output.replace("\r", "\n").splitlines():
        m = re.match(r"\s*(SET|GET): ([0-9.]+) requests per second", line)
        if m:
            rps[m.group(1)] = float(m.group(2))
    return rps


def sockperf_p50(output):
    for line in output.splitlines():
        if "percentile 50.000" in line:
            return float(line.split("=")[-1])
    raise SystemExit("sockperf printed no p50")


class Servers:
    """Every server the demo starts, stopped by PID at the end."""

    def __init__(self, env):
        self.env = env
        self.procs = []

    def start(self, cmd, port, **kw):
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
        p = subprocess.Popen(cmd, env=self.env, **kw)
        self.procs.append(p)
        if port and not wait_port(port):
            raise SystemExit(f"{shown(cmd)} did not start")
        return p

    def stop(self, p):
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                self.stop(p)


def main():
    tmp = tempfile.mkdtemp(prefix="usmc-demo-")
    os.chmod(tmp, 0o755)
    stats_dir = os.path.join(tmp, "stats")
    os.mkdir(stats_dir)
    os.chmod(stats_dir, 0o1777)  # nginx workers run as nobody
    env = dict(os.environ, USMC_STATS_DIR=stats_dir)
    env.pop("LD_PRELOAD", None)
    usmc = [USMC, "--stats-dir", stats_dir]
    servers = Servers(env)
    figures = []  # (workload, unit, plain TCP, usmc, higher is better)
    try:
        say("servers: nginx (master + 2 workers) and redis-server, each twice: plain, and under usmc-run")
        ports = {}
        for name, wrap in (("plain", []), ("usmc", [USMC_RUN, "--verbose", "--"])):
            d = os.path.join(tmp, name)
            os.mkdir(d)
            ports[name] = {"nginx": free_port(), "redis": free_port()}
            p = servers.start([*SERVER_CPU, *wrap, *make_nginx(d, ports[name]["nginx"])], ports[name]["nginx"],
                              stderr=subprocess.PIPE if wrap else subprocess.DEVNULL, text=True)
            if wrap:
                print(p.stderr.readline().rstrip())
            servers.start([*SERVER_CPU, *wrap, *redis_server_cmd(ports[name]["redis"])], ports[name]["redis"])
            print(f"{name:5}: nginx on 127.0.0.1:{ports[name]['nginx']}, redis on 127.0.0.1:{ports[name]['redis']}")

        say("clients under usmc-run: curl, redis-cli")
        print(run([USMC_RUN, "curl", "-sS", f"http://127.0.0.1:{ports['usmc']['nginx']}/index.html"], env), end="")
        run([USMC_RUN, "redis-cli", "-p", str(ports["usmc"]["redis"]), "SET", "greeting", "hello from usmc"], env)
        print(run([USMC_RUN, "redis-cli", "-p", str(ports["usmc"]["redis"]), "GET", "greeting"], env), end="")

        say(f"wrk against nginx, keep-alive, 20 connections, 3 s: plain TCP and both ends under usmc-run, "
            f"{ROUNDS} rounds each, alternating")
        wrk = {"plain": [], "usmc": []}
        for name, wrap in alternating():
            cmd = [*CLIENT_CPU, *wrap, "wrk", "-t", "1", "-c", "20", "-d", "3s", f"http://127.0.0.1:{ports[name]['nginx']}/"]
            w = parse_wrk(run(cmd, env, echo=not wrk[name]))
            if w["errors"] or w["non2xx"] or not w["requests"]:
                raise SystemExit(f"wrk saw errors: {w}")
            wrk[name].append(w["rps"])
            print(f"  {name:5}: {w['rps']:,.0f} requests/s")
        figures.append(("nginx + wrk keep-alive", "req/s", median(wrk["plain"]), median(wrk["usmc"]), True))

        say(f"redis-benchmark SET and GET, 10 clients, 50 000 requests each: plain TCP and under usmc-run, "
            f"{ROUNDS} rounds each, alternating")
        rb = {"plain": [], "usmc": []}
        for name, wrap in alternating():
            cmd = [*CLIENT_CPU, *wrap, "redis-benchmark", "-p", str(ports[name]["redis"]), "-n", "50000", "-c", "10",
                   "-t", "set,get", "-q"]
            r = redis_rps(run(cmd, env, echo=not rb[name]))
            if set(r) != {"SET", "GET"}:
                raise SystemExit(f"redis-benchmark printed no figures: {r}")
            rb[name].append(r)
            print(f"  {name:5}: SET {r['SET']:,.0f}, GET {r['GET']:,.0f} requests/s")
        for op in ("SET", "GET"):
            figures.append((f"redis-benchmark {op}", "req/s", median([r[op] for r in rb["plain"]]),
                            median([r[op] for r in rb["usmc"]]), True))

        say(f"sockperf ping-pong, 64-byte messages, 2 s: plain TCP and both ends under usmc-run, "
            f"{ROUNDS} rounds each, alternating")
        lat = {"plain": [], "usmc": []}
        for name, wrap in alternating():
            port = free_port()
            srv = servers.start([*SERVER_CPU, *wrap, "sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(port)],
                                port)
            cmd = [*CLIENT_CPU, *wrap, "sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port), "-m", "64",
                   "-t", "2"]
            lat[name].append(sockperf_p50(run(cmd, env, echo=not lat[name])))
            print(f"  {name:5}: p50 latency {lat[name][-1]:.2f} us")
            servers.stop(srv)
        figures.append(("sockperf ping-pong 64 B, p50", "us", median(lat["plain"]), median(lat["usmc"]), False))

        say("a python echo server and client under usmc-run (a blocking connect), held open")
        echo_port = free_port()
        servers.start([USMC_RUN, "/usr/bin/python3", "-c", ECHO_SERVER, str(echo_port)], echo_port)
        holder = servers.start([USMC_RUN, "/usr/bin/python3", "-c", ECHO_CLIENT, str(echo_port)], None,
                               stdout=subprocess.PIPE, text=True)
        print(holder.stdout.readline().rstrip())

        say("usmc ss -a: every socket of the wrapped processes, with its mode")
        print(run([*usmc, "ss", "-a"], env), end="")
        say("usmc stats: all of the above, including the clients that have exited")
        print(run([*usmc, "stats"], env), end="")

        say("the figures, plain TCP beside usmc, measured above in this run")
        print(f"{'workload':32} {'plain TCP':>17} {'usmc':>17} {'usmc / TCP':>11}")
        for workload, unit, tcp, ours, higher in figures:
            ratio = ours / tcp if tcp else float("nan")
            if abs(ratio - 1) < SAME:
                verdict = "as fast as TCP, within this demo's noise"
            else:
                verdict = "faster" if (ratio > 1) == higher else "SLOWER than TCP"
            print(f"{workload:32} {tcp:>11,.2f} {unit:<5} {ours:>11,.2f} {unit:<5} {ratio:>10.2f}x  ({verdict})")
        print(f"\nMedians of {ROUNDS} short rounds each, alternating, on whatever else this machine is doing;")
        print("scripts/bench/ measures the same workloads properly (more runs, CPU use); README, Results.")
        print("Epoll servers keep readiness in user memory: a message costs no system call while")
        print("both sides are awake, and a side that sleeps is woken by one datagram per sleep, not")
        print("one per message. nginx gains least: its file calls (open, fstat, pread, close) stay.")
        print("Mode SMCD in `usmc ss`: the connection's bytes went through shared memory.")
        print("Connections that ended before `ss` ran appear only in the counters; TCP ones")
        print("are counted by reason (the PEERNOSMC ones are this demo's own readiness probes,")
        print("which are not wrapped).")
    finally:
        servers.stop_all()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
