#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A pre-fork child that stops accepting (its quota served: Apache's
MaxConnectionsPerChild, gunicorn's max_requests) takes no connection its
siblings would accept. usmc's accept queue is per process: a connection a
child took into it (its listen watcher, or a blocking accept() that took
two) could only ever be accepted by that child, and a sibling blocked in
accept() waited for it forever (CI: the pre-fork case of it_python_apps
hung). Here child A serves one connection and then holds the listener
without accepting; a client connects while child B is not accepting yet
either; B then accepts it, and one more. Every reply is checked byte for
byte; every process is stopped by PID."""
import os
import signal
import time

from harness import APPS, PYTHON, Env, check, finish

APP = os.path.join(APPS, "prefork_quota_app.py")


def client(env, port, expect, seed):
    return env.wrap([PYTHON, APP, "client", "--port", str(port), "--expect", expect, "--seed", str(seed)])


def read_line(p, prefix):
    for _ in range(20):  # bounded: the server prints a handful of lines
        line = p.stdout.readline()
        if not line or line.startswith(prefix):
            return line
    return ""


with Env() as env:
    server = env.start(env.wrap([PYTHON, APP, "server", "--b-conns", "2"]))
    ready = read_line(server, "READY").split()
    check(len(ready) == 4, f"the server and its two children are up ({ready})")
    port, pid_a, pid_b = int(ready[1]), int(ready[2]), int(ready[3])

    r = env.run(client(env, port, "A", 1), timeout=60)
    check(r.returncode == 0 and "OK A" in r.stdout, f"child A served the first connection ({r.stdout.strip()} {r.stderr[-300:]})")
    check(read_line(server, "A-SERVED").startswith("A-SERVED"), "child A has stopped accepting")

    late = env.start(client(env, port, "B", 2))
    # Nobody accepts now. A listen watcher in A took such a connection
    # after 10 ms; the pause only gives that defect its chance, and what
    # passes does not depend on it.
    time.sleep(0.3)
    os.kill(pid_b, signal.SIGUSR1)
    out, err = late.communicate(timeout=60)
    check(late.returncode == 0 and "OK B" in out,
          f"the connection made while no child accepted went to B, who accepted next ({out.strip()} {err[-300:]})")
    r = env.run(client(env, port, "B", 3), timeout=60)
    check(r.returncode == 0 and "OK B" in r.stdout, f"B served one more ({r.stdout.strip()} {r.stderr[-300:]})")

    os.kill(pid_a, signal.SIGUSR2)
    out, err = server.communicate(timeout=60)
    check(server.returncode == 0 and "DONE" in out, f"both children exited cleanly ({out.strip()} {err[-300:]})")
    st = env.stats()
    check(st["conn_smcd"] >= 4, f"the first and the last connection ran SMC-D on both ends ({st['conn_smcd']}, {st['fallback_reasons']})")
finish()
