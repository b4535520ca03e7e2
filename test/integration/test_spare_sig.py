#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Spare `sig`s (wakeup::park): a connection that ends leaves its `sig`
to the next connection of its process. Sequential connections take them
(counted); a spare is in no epoll set any more; a `sig` whose epoll set
was closed while it lived on elsewhere (a dup) is never a spare; a fork
neither shares nor loses them. Both ends under usmc-run, every echo
checked, every process stopped by PID."""
import os

from harness import APPS, PYTHON, Env, check, finish, read_ready

ECHO = os.path.join(APPS, "echo_app.py")
APP = os.path.join(APPS, "spare_sig_app.py")
SEQ = 30
KEYS = ("conn_smcd", "conn_tcp", "sigs_spared", "sigs_reused")


def delta(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in KEYS}


with Env(smcd_mechanics=True) as env:
    # One after another: the client's connection ends (close() returns)
    # before its next begins, so each of its later ones takes a spare.
    before = env.stats()
    server = env.start(env.wrap([PYTHON, ECHO, "server", "--conns", str(SEQ), "--mode", "blocking"]))
    port = read_ready(server)
    r = env.run(env.wrap([PYTHON, ECHO, "client", "--port", str(port), "--conns", str(SEQ),
                          "--blocking-connect"]), timeout=120)
    out, _ = server.communicate(timeout=60)
    d = delta(before, env.stats())
    check(r.returncode == 0 and "DONE" in out, f"{SEQ} echoes one after another verified")
    check(d["conn_smcd"] == 2 * SEQ and d["sigs_reused"] >= SEQ - 1
          and d["sigs_spared"] >= d["sigs_reused"],
          f"later connections took spare sigs, at least the client's {SEQ - 1} ({d})")

    # 3 connections for reuse and dup-guard (A, B, and B's echo needs none
    # more), 5 for fork (3 warm-up, child, parent).
    for case, conns in (("reuse", 2), ("dup-guard", 2), ("fork", 5)):
        before = env.stats()
        server = env.start(env.wrap([PYTHON, ECHO, "server", "--conns", str(conns), "--mode", "selectors"]))
        port = read_ready(server)
        r = env.run(env.wrap([PYTHON, APP, "--port", str(port), case]), timeout=60)
        env.stop(server)
        d = delta(before, env.stats())
        check(r.returncode == 0, f"{case}: {(r.stdout + r.stderr).strip()[-600:]}")
        check(d["conn_tcp"] == 0 and d["conn_smcd"] == 2 * conns, f"{case}: every end SMC-D ({d})")
        if case == "reuse":
            check(d["sigs_reused"] >= 1, f"reuse: B took A's sig ({d})")

finish()
