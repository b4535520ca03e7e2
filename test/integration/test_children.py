#!/usr/bin/env python3
"""Child processes of a wrapped server leave its SMC connections alone:
subprocess.run() (vfork: the child shares the server's memory until exec)
and fork() while another thread is blocked in recv on the connection."""
import os

from harness import APPS, PYTHON, Env, check, finish, read_ready

APP = os.path.join(APPS, "children_app.py")


def run(env, children, lines, *client_args):
    server = env.start(env.wrap([PYTHON, APP, "server", "--children", children, "--lines", str(lines)]))
    port = read_ready(server)
    r = env.run(env.wrap([PYTHON, APP, "client", "--port", str(port), "--lines", str(lines), *client_args]), timeout=60)
    out, err = server.communicate(timeout=30)
    return r, out, err, env.stats()


with Env() as env:
    r, out, err, st = run(env, "spawn", 20)
    check(r.returncode == 0 and "DONE ok=20" in r.stdout,
          f"subprocess.run() before every answer: all 20 answers arrive ({r.stdout.strip()} {r.stderr[-300:]} {err[-300:]})")
    check(st["conn_smcd"] == 2, f"the connection ran SMC-D on both ends ({st['conn_smcd']}, {st['fallback_reasons']})")

with Env() as env:
    r, out, err, st = run(env, "fork-blocked", 5, "--wait-go")
    child = [l for l in out.splitlines() if l.startswith("CHILD")]
    check(child and child[0].split()[1] == "0" and float(child[0].split()[2]) < 5,
          f"fork while a thread is blocked in recv: the child's close returns ({child} {err[-300:]})")
    check(r.returncode == 0 and "DONE ok=5" in r.stdout,
          f"the parent's connection still works after the child closed its copy ({r.stdout.strip()} {r.stderr[-300:]})")
    check(st["conn_smcd"] == 2, f"the connection ran SMC-D on both ends ({st['conn_smcd']}, {st['fallback_reasons']})")
finish()
