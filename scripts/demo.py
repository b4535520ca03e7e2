#!/usr/bin/env python3
"""The usmc demo: real servers and real clients from Debian, every one of
them wrapped in usmc-run, then what usmc saw: each connection's mode and
fallback reason (usmc ss) and the counters (usmc stats)."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
from apps import make_nginx, parse_wrk, redis_server_cmd  # noqa: E402
from harness import USMC, USMC_RUN, free_port, wait_port  # noqa: E402


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
time.sleep(30)
"""


def say(text):
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def show(cmd, env):
    print("$ " + " ".join(os.path.basename(c) if c.startswith(ROOT) else c for c in cmd), flush=True)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    # redis-benchmark redraws a progress line with \r: keep the final lines only
    sys.stdout.write("".join(l for l in r.stdout.splitlines(True) if "rps=" not in l and l.strip()))
    if r.returncode != 0:
        sys.stdout.write(r.stderr)
        raise SystemExit(f"demo step failed: {' '.join(cmd)}")
    return r.stdout


def main():
    tmp = tempfile.mkdtemp(prefix="usmc-demo-")
    os.chmod(tmp, 0o755)
    stats_dir = os.path.join(tmp, "stats")
    os.mkdir(stats_dir)
    os.chmod(stats_dir, 0o1777)  # nginx workers run as nobody
    env = dict(os.environ, USMC_STATS_DIR=stats_dir)
    env.pop("LD_PRELOAD", None)
    usmc = [USMC, "--stats-dir", stats_dir]
    servers = []
    try:
        say("nginx (master + 2 workers) under usmc-run")
        nginx_port = free_port()
        servers.append(subprocess.Popen([USMC_RUN, "-v", "--", *make_nginx(tmp, nginx_port)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        if not wait_port(nginx_port):
            raise SystemExit("nginx did not start")
        print(servers[-1].stderr.readline().rstrip())

        say("redis-server under usmc-run")
        redis_port = free_port()
        servers.append(subprocess.Popen([USMC_RUN, "--", *redis_server_cmd(redis_port)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if not wait_port(redis_port):
            raise SystemExit("redis-server did not start")
        print(f"listening on 127.0.0.1:{redis_port}")

        say("clients under usmc-run: curl, wrk, redis-cli, redis-benchmark")
        show([USMC_RUN, "curl", "-sS", f"http://127.0.0.1:{nginx_port}/index.html"], env)
        out = show([USMC_RUN, "wrk", "-t", "1", "-c", "20", "-d", "2s", f"http://127.0.0.1:{nginx_port}/"], env)
        w = parse_wrk(out)
        if w["errors"] or w["non2xx"]:
            raise SystemExit("wrk saw errors")
        show([USMC_RUN, "redis-cli", "-p", str(redis_port), "SET", "greeting", "hello from usmc"], env)
        show([USMC_RUN, "redis-cli", "-p", str(redis_port), "GET", "greeting"], env)
        show([USMC_RUN, "redis-benchmark", "-p", str(redis_port), "-n", "20000", "-c", "10", "-t", "get,set",
              "-q"], env)

        say("SMC-D: a python echo server and client, data through shared memory")
        echo_port = free_port()
        servers.append(subprocess.Popen([USMC_RUN, "/usr/bin/python3", "-c", ECHO_SERVER, str(echo_port)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if not wait_port(echo_port):
            raise SystemExit("echo server did not start")
        holder = subprocess.Popen([USMC_RUN, "/usr/bin/python3", "-c", ECHO_CLIENT, str(echo_port)], env=env,
                                  stdout=subprocess.PIPE, text=True)
        servers.append(holder)
        print(holder.stdout.readline().rstrip())

        say("SMC-D: sockperf ping-pong, 64-byte messages, 2 s (plain TCP first, then usmc-run)")
        for wrap in ([], [USMC_RUN]):
            sp_port = free_port()
            srv = subprocess.Popen([*wrap, "sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(sp_port)],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            servers.append(srv)
            wait_port(sp_port)
            out = subprocess.run([*wrap, "sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(sp_port), "-m",
                                  "64", "-t", "2"], env=env, capture_output=True, text=True, timeout=60).stdout
            p50 = [l for l in out.splitlines() if "percentile 50.000" in l]
            print(f"{'usmc-run' if wrap else 'plain TCP':9}: p50 latency " + (p50[0].split("=")[-1].strip() + " us" if p50 else "?"))
            srv.terminate()

        say("usmc ss -a: every socket of the wrapped processes, with its mode")
        show([*usmc, "ss", "-a"], env)
        say("usmc stats: all of the above, including the clients that have exited")
        show([*usmc, "stats"], env)
        print("\nMode SMCD: the connection's bytes went through shared memory. curl, wrk,")
        print("redis-cli and redis-benchmark connect nonblocking (client_async_handshakes);")
        print("python and sockperf block in connect(). Connections that ended before `ss` ran")
        print("appear only in the counters; TCP ones are counted by reason.")
    finally:
        for p in servers:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
