#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Child processes of a wrapped server leave its SMC connections alone:
subprocess.run() (vfork: the child shares the server's memory until exec),
fork() while another thread is blocked in recv on the connection, and forked
children that end with the connection open (os._exit, exec): the parent's
close is then the last, its peer reads an end of stream (it read a reset),
and its buffers come back (each connection's leaked: under a small
max_dmb_memory the later ones got smaller DMBs, then ran TCP, MAX_DMB)."""
import json
import os
import select
import subprocess

from harness import APPS, PYTHON, USMC, Env, check, finish, read_ready

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
# 32 DMBs of 128K under the cap: a DMB leaked per connection shows as
# smaller DMBs from the 17th on (downgrades: crowd_size) and later as TCP
# (MAX_DMB).
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
        check(st["conn_smcd"] == 2 * CONNS and st["conn_tcp"] == 0 and st.get("dmb_downgraded", -1) == 0,
              f"{how}: all {CONNS} connections SMC-D on both ends, no buffer leaked "
              f"({st['conn_smcd']}, tcp {st['conn_tcp']}, {st['fallback_reasons']}, "
              f"downgraded {st.get('dmb_downgraded')})")


def line_of(p, timeout=60):
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    return p.stdout.readline().strip() if ready else ""


def server_gauges(env, pid):
    r = env.run([USMC, "--stats-dir", env.stats_dir, "stats", "--json", "--live"], timeout=30)
    mine = [g for g in json.loads(r.stdout)["gauges_by_process"] if g["pid"] == pid]
    return mine[0] if mine else {}


# A fork() that fails (EAGAIN: a pids limit, here a seccomp filter) made
# no child: the connection's reference for it and the listener's
# reservation are given back (af_smc::fork_returned), so the parent's close
# is the last. Its DMB then comes back as a spare; with the child's
# reference left, it was "away" with a child that never existed.
with Env() as env:
    config = os.path.join(env.dir, "usmc.toml")
    with open(config, "w") as f:
        f.write('learn_smc = false\nautotune_dmb = false\n')
    env.env["USMC_CONFIG"] = config
    server = env.start(env.wrap([PYTHON, os.path.join(APPS, "forkfail_app.py")]), stdin=subprocess.PIPE)
    port = read_ready(server)
    client = env.start(env.wrap([PYTHON, os.path.join(APPS, "hold_app.py"), "--port", str(port),
                                 "--conns", "1", "--until-end"]))
    forked = line_of(server)
    if forked.startswith("SKIP"):
        print(f"  skip failed fork: {forked}")
    else:
        check(forked.startswith("FORKFAIL"), f"failed fork: the server's fork() failed ({forked!r})")
        before = server_gauges(env, server.pid)
        server.stdin.write("close\n")
        server.stdin.flush()
        closed = line_of(server)
        after = server_gauges(env, server.pid)
        grew = after.get("dmb_spare_bytes", -1) - before.get("dmb_spare_bytes", 0)
        check(closed == "CLOSED" and grew == 128 * 1024,
              f"failed fork: the parent's close is the last, its DMB a spare again "
              f"({closed!r}, spare bytes {before.get('dmb_spare_bytes')} -> {after.get('dmb_spare_bytes')})")
        out, _ = client.communicate(timeout=60)
        check("ENDED 1 of 1" in out and "'eof': 1" in out,
              f"failed fork: the peer reads an end of stream ({out.strip()[-200:]})")
    server.stdin.close()
    server.wait(timeout=30)
    st = env.stats()
    check(st["conn_smcd"] == 2, f"failed fork: the connection ran SMC-D on both ends ({st['conn_smcd']}, "
                                f"{st['fallback_reasons']})")
finish()
