#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The learned SMC choice (engine/sock/learn.hpp): streams of one-request
connections learn plain TCP (reason LEARNED), long-lived ones bring SMC-D
back through probes, learn_smc = false and an explicit smcd mode keep every
connection SMC-D, and a server that accepts and forks (the child closes the
connection) learns from its children's reports. Every answer is checked;
the client runs its phases in lockstep with this script (stdin/stdout), so
counters are read between phases, never raced."""
import json
import os
import select
import subprocess
import time

from harness import APPS, PYTHON, Env, check, finish, read_ready

APP = os.path.join(APPS, "learn_app.py")
KPROBE = 64  # learn::kProbeEvery
KWINDOW = 16  # learn::kWindow
# Learned TCP holds this long in (a), (b) and (d), so the 2 s default
# cannot run out in the middle of a phase on a slow machine.
# Probes every kProbeEvery-th connect however fast they come (the built-in
# 250 ms between probes would make the counts below depend on the speed).
LONG_HOLD = "testonly_learn_hold_ms = 600000\ntestonly_learn_probe_gap_ms = 1\n"


def start_server(env, *extra):
    p = env.start(env.wrap([PYTHON, APP, "server", *extra]), stdin=subprocess.PIPE)
    return p, read_ready(p)


def line_of(p, prefix, timeout=120.0):
    """The client's next line starting with `prefix` (bounded wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            break
        line = p.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line.strip()
    return f"no {prefix} line (rc {p.poll()})"


def ask(p, text, prefix):
    p.stdin.write(text + "\n")
    p.stdin.flush()
    return line_of(p, prefix)


def counts(env):
    st = env.stats()
    return {"smcd": st["conn_smcd"], "learned": st["fallback_reasons"].get("LEARNED", 0),
            "paid": st["learn_paid"], "unpaid": st["learn_unpaid"], "probes": st["learn_probes"],
            "reasons": st["fallback_reasons"]}


def delta(a, b):
    return {k: b[k] - a[k] for k in a if k != "reasons"} | {"reasons": b["reasons"]}


def ss_entry(env, port):
    """`usmc ss` of the client's connection from local port `port`."""
    for e in json.loads(env.ss("-a", "-j") or '{"sockets": []}')["sockets"]:
        if e["local"].endswith(f":{port}") and e["role"] == "client":
            return e
    return {}


def quit(p):
    p.stdin.write("quit\n")
    p.stdin.close()
    p.wait(timeout=30)


def start_client(env, port):
    return env.start(env.wrap([PYTHON, APP, "client", "--port", str(port)]), stdin=subprocess.PIPE)


# (a) + (b): one client process, one server.
with Env() as env:
    env.config(LONG_HOLD)
    server, port = start_server(env)
    client = start_client(env, port)
    c0 = counts(env)
    done = ask(client, "300 1", "PHASE")
    c1 = counts(env)
    a = delta(c0, c1)
    smc = a["smcd"] // 2  # both ends count an SMC-D connection
    check(done == "PHASE ok=300 bad=0", f"(a) 300 one-request connections, every answer right ({done})")
    # The first window is SMC-D; then TCP, but for one probe in kProbeEvery.
    probes = (300 - KWINDOW) // KPROBE
    check(KWINDOW <= smc <= KWINDOW + probes + 2,
          f"(a) SMC-D only for the first window and the probes ({smc}; {a})")
    check(a["learned"] == 300 - smc, f"(a) the rest ran TCP with reason LEARNED ({a['learned']})")
    check(a["probes"] >= probes - 1, f"(a) probes re-measured ({a['probes']})")
    check(a["unpaid"] == a["smcd"] and a["paid"] == 0,
          f"(a) each end of each SMC-D connection reported it unpaid, once ({a['unpaid']}, paid {a['paid']})")
    held = ask(client, "hold", "HOLD")
    hport = held.split()[1] if held.startswith("HOLD") else "?"
    e = ss_entry(env, hport)
    check(held.endswith("ok") and e.get("mode") == "TCP" and (e.get("fallback") or {}).get("name") == "LEARNED"
          and e["fallback"]["code"] == 0x0a0a0000,
          f"(a) usmc ss shows the reason of a learned-TCP connection: {e}")
    ask(client, "", "RELEASED")

    # (b) Long-lived connections to the same server: the next probe pays,
    # both learners end their TCP hold, the listener's entry follows at its
    # next accept; from then on every connection is SMC-D.
    c2 = counts(env)
    done = ask(client, "120 100", "PHASE")
    c3 = counts(env)
    b = delta(c2, c3)
    smc = b["smcd"] // 2
    check(done == "PHASE ok=120 bad=0", f"(b) 120 connections of 100 round trips, every answer right ({done})")
    check(b["learned"] <= KPROBE + 2 and smc == 120 - b["learned"],
          f"(b) SMC-D again within {KPROBE + 2} connections (TCP {b['learned']}, SMC-D {smc}; {b})")
    check(b["paid"] == b["smcd"] and b["unpaid"] == 0,
          f"(b) each end of each SMC-D connection reported it paid, once ({b['paid']}, unpaid {b['unpaid']})")
    held = ask(client, "hold", "HOLD")
    hport = held.split()[1] if held.startswith("HOLD") else "?"
    e = ss_entry(env, hport)
    check(e.get("mode") == "SMCD" and not e.get("fallback"), f"(b) a new connection is SMC-D: {e}")
    ask(client, "", "RELEASED")
    quit(client)
    env.stop(server)

# (c) learn_smc = false, and an explicit smcd mode: every connection SMC-D.
for name, cfg in (("learn_smc = false", "learn_smc = false\n"),
                  ("policy mode smcd", '[[policy]]\nmode = "smcd"\n')):
    with Env() as env:
        env.config(LONG_HOLD + cfg)
        server, port = start_server(env)
        client = start_client(env, port)
        done = ask(client, "100 1", "PHASE")
        c = counts(env)
        check(done == "PHASE ok=100 bad=0" and c["smcd"] == 200 and c["learned"] == 0,
              f"(c) {name}: 100 one-request connections, all SMC-D ({done}; {c})")
        quit(client)
        env.stop(server)

# (d) A server that accepts and forks; the child serves and closes the
# connection. Clients of one connection each never decide on their own
# (one report is no window): what turns them to TCP is the listener's
# learner, fed by the forked children.
with Env() as env:
    env.config(LONG_HOLD)
    server, port = start_server(env, "--fork")
    n = 40
    good = 0
    for i in range(n):
        client = start_client(env, port)
        done = ask(client, "1 1", "PHASE")
        good += done == "PHASE ok=1 bad=0"
        quit(client)
    c = counts(env)
    check(good == n, f"(d) {n} one-connection clients of a forking server, every answer right ({good})")
    # The parent closes its copy first; the child, closing last, reports.
    check(c["unpaid"] == c["smcd"] and c["unpaid"] >= 2 * KWINDOW,
          f"(d) each end of each SMC-D connection reported it once, children included ({c['unpaid']})")
    check(c["learned"] >= n - 3 * KWINDOW // 2,
          f"(d) later clients ran TCP: the listener learned from its children ({c['learned']} of {n}; {c})")
    env.stop(server)

# (e) Nobody probes (one-connection clients): the learned TCP runs out by
# itself and new connections are SMC-D again, which re-learns. One client
# at a time, its mode read from the counters after it; bounded in time (the
# hold is a clock: how many clients fit in it depends on the machine) and in
# count.
with Env() as env:
    env.config("testonly_learn_hold_ms = 3000\n")
    server, port = start_server(env)
    modes = []
    before = counts(env)
    deadline = time.monotonic() + 30
    for i in range(2000):
        if time.monotonic() > deadline:
            break
        client = start_client(env, port)
        done = ask(client, "1 1", "PHASE")
        quit(client)
        now = counts(env)
        modes.append("bad" if done != "PHASE ok=1 bad=0" else
                     "L" if now["learned"] > before["learned"] else "S")
        before = now
        if "L" in modes and modes[-1] == "S":
            break
    seq = "".join(m[0] for m in modes)
    check("b" not in seq, f"(e) every answer right ({seq})")
    check(seq.startswith("S" * KWINDOW) and "L" in seq and seq.endswith("S"),
          f"(e) learned TCP, then SMC-D again once the hold ran out ({seq})")
    env.stop(server)
finish()
