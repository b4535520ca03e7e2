#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""redis-server, redis-benchmark and redis-cli under usmc-run: the benchmark
completes with no errors and values round-trip byte for byte."""
import os

from apps import redis_server_cmd
from harness import Env, check, finish, free_port, wait_port

with Env() as env:
    port = free_port()
    server = env.start(env.wrap(redis_server_cmd(port)))
    check(wait_port(port), "redis-server under usmc-run listens")
    cli = ["redis-cli", "-p", str(port)]

    r = env.run(env.wrap(["redis-benchmark", "-p", str(port), "-n", "20000", "-c", "20", "-t", "set,get",
                          "-q", "--csv"]), timeout=120)
    lines = [l for l in r.stdout.splitlines() if l.startswith('"SET"') or l.startswith('"GET"')]
    check(r.returncode == 0 and len(lines) == 2, "redis-benchmark SET and GET completed: " + " ".join(lines))

    value = os.urandom(512 * 1024).hex()  # 1 MiB of text
    path = os.path.join(env.dir, "value.txt")
    with open(path, "w") as f:
        f.write(value)
    with open(path) as f:
        r = env.run(env.wrap([*cli, "-x", "SET", "big"]), stdin=f)
    check(r.stdout.strip() == "OK", "SET of a 1 MiB value")
    r = env.run(env.wrap([*cli, "--no-raw", "STRLEN", "big"]))
    check(r.stdout.strip() == f"(integer) {len(value)}", "STRLEN matches")
    r = env.run(env.wrap([*cli, "GET", "big"]))
    check(r.stdout.rstrip("\n") == value, "GET returns the same bytes")
    r = env.run([*cli, "GET", "big"])  # a plain client sees the same
    check(r.stdout.rstrip("\n") == value, "plain redis-cli reads the same value")

    st = env.stats()
    check(st["server_accepts"] >= 24, f"redis-server's accepts counted ({st['server_accepts']})")
    check(st["conn_smcd"] >= 24, f"redis clients used SMC-D ({st['conn_smcd']} ends, {st['fallback_reasons']})")
    env.stop(server)
    check(server.returncode == 0, f"redis-server stopped cleanly (rc {server.returncode})")
finish()
