#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""python3 servers and clients in every I/O style (blocking, select, poll,
selectors/epoll, nonblocking clients, pre-fork, accept-then-fork, server
speaks first, IPv6), both ends under usmc-run, each reply verified byte for
byte; plus wrapped client <-> plain server and plain client <-> wrapped server."""
import os
import time

from harness import APPS, PYTHON, Env, check, finish, read_ready

APP = os.path.join(APPS, "echo_app.py")

CASES = [
    # (name, server args, client args, connections)
    ("blocking", ["--mode", "blocking"], ["--io", "blocking"], 4),
    ("select + nonblocking client", ["--mode", "select"], ["--io", "nonblocking"], 6),
    ("poll + nonblocking client", ["--mode", "poll"], ["--io", "nonblocking"], 6),
    ("selectors(epoll)", ["--mode", "selectors"], ["--io", "blocking"], 6),
    ("pre-fork server", ["--mode", "prefork", "--workers", "2"], ["--io", "blocking"], 6),
    ("accept-then-fork server", ["--mode", "forkaccept"], ["--io", "nonblocking"], 4),
    ("server speaks first", ["--mode", "blocking", "--banner"], ["--banner"], 4),
    ("server speaks first, multiplexed", ["--mode", "selectors", "--banner"], ["--banner", "--io", "nonblocking"], 4),
    ("IPv6", ["--mode", "selectors", "--ipv6"], ["--ipv6"], 4),
    ("32 MiB each way", ["--mode", "blocking"], ["--size", str(32 << 20)], 1),
]


def run_case(env, name, server_args, client_args, conns, wrap_server=True, wrap_client=True):
    s_cmd = [PYTHON, APP, "server", "--conns", str(conns), *server_args]
    server = env.start(env.wrap(s_cmd) if wrap_server else s_cmd)
    port = read_ready(server)
    c_cmd = [PYTHON, APP, "client", "--port", str(port), "--conns", str(conns), *client_args]
    t0 = time.monotonic()
    r = env.run(env.wrap(c_cmd) if wrap_client else c_cmd, timeout=120)
    elapsed = time.monotonic() - t0
    out, err = server.communicate(timeout=30)
    ok = r.returncode == 0 and server.returncode == 0 and "DONE" in out
    check(ok, f"{name}: {conns} connections verified ({elapsed:.2f}s)")
    if not ok:
        print("    client:", r.stdout, r.stderr, "\n    server:", out, err)


with Env() as env:
    total = 0
    for name, s_args, c_args, conns in CASES:
        run_case(env, name, s_args, c_args, conns)
        total += conns
    st = env.stats()
    check(st["client_connects"] == total, f"every client connection went through the shim ({st['client_connects']}/{total})")
    check(st["server_accepts"] == total, f"every accepted connection went through the shim ({st['server_accepts']}/{total})")
    check(st["forks"] >= 2, f"forked children made stats of their own ({st['forks']})")

    before = env.stats()
    run_case(env, "wrapped client -> plain server", ["--mode", "selectors"], [], 3, wrap_server=False)
    run_case(env, "plain client -> wrapped server", ["--mode", "selectors"], [], 3, wrap_client=False)
    after = env.stats()
    check(after["client_connects"] - before["client_connects"] == 3, "only the wrapped client counted")
    check(after["server_accepts"] - before["server_accepts"] == 3, "only the wrapped server counted")
finish()
