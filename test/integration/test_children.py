#!/usr/bin/env python3
"""Child processes of a wrapped server leave its SMC connections alone:
subprocess.run() (vfork: the child shares the server's memory until exec),
fork() while another thread is blocked in recv on the connection, and forked
children that end with the connection open (os._exit, exec): the parent's
close is then the last, its peer reads an end of stream (it read a reset),
and its buffers come back (each connection's leaked: under a small
max_dmb_memory the later ones ran TCP, MAX_DMB)."""
import os

from harness import APPS, PYTHON, Env, check, finish, read_ready

APP = os.path.join(APPS, "children_app.py")


def run(env, children, lines, *client_args, conns=1):
    n = ["--conns", str(conns)]
    server = env.start(env.wrap([PYTHON, APP, "server", "--children", children, "--lines", str(lines), *n]))
    port = read_ready(server)
    r = env.run(env.wrap([PYTHON, APP, "client", "--port", str(port), "--lines", str(lines), *n, *client_args]),
                timeout=120)
    out, err = server.communicate(timeout=30)
    return r, out, err, env.stats()


with Env() as env:
    r, out, err, st = run(env, "spawn", 20)
    check(r.returncode == 0 and "DONE ok=1" in r.stdout,
          f"subprocess.run() before every answer: all 20 answers arrive ({r.stdout.strip()} {r.stderr[-300:]} {err[-300:]})")
    check(st["conn_smcd"] == 2, f"the connection ran SMC-D on both ends ({st['conn_smcd']}, {st['fallback_reasons']})")

with Env() as env:
    r, out, err, st = run(env, "fork-blocked", 5, "--wait-go")
    child = [l for l in out.splitlines() if l.startswith("CHILD")]
    check(child and child[0].split()[1] == "0" and float(child[0].split()[2]) < 5,
          f"fork while a thread is blocked in recv: the child's close returns ({child} {err[-300:]})")
    check(r.returncode == 0 and "DONE ok=1" in r.stdout,
          f"the parent's connection still works after the child closed its copy ({r.stdout.strip()} {r.stderr[-300:]})")
    check(st["conn_smcd"] == 2, f"the connection ran SMC-D on both ends ({st['conn_smcd']}, {st['fallback_reasons']})")
# 32 DMBs of 128K under the cap: a DMB leaked per connection shows as TCP
# (MAX_DMB) from the 33rd on.
CONNS = 40
for how in ("fork-exit", "fork-exec"):
    with Env() as env:
        config = os.path.join(env.dir, "usmc.toml")
        with open(config, "w") as f:
            f.write('max_dmb_memory = "4M"\nlearn_smc = false\nautotune_dmb = false\n')
        env.env["USMC_CONFIG"] = config
        r, out, err, st = run(env, how, 3, "--expect-eof", conns=CONNS)
        check(r.returncode == 0 and f"DONE ok={CONNS}" in r.stdout,
              f"{how}: a child that ended with the connection open; the parent's answers, then "
              f"an end of stream ({r.stdout.strip()} {r.stderr[-300:]} {err[-300:]})")
        check(st["conn_smcd"] == 2 * CONNS and st["conn_tcp"] == 0,
              f"{how}: all {CONNS} connections SMC-D on both ends, no buffer leaked "
              f"({st['conn_smcd']}, tcp {st['conn_tcp']}, {st['fallback_reasons']})")
finish()
