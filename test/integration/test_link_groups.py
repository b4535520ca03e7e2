#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Link groups (engine/smcd/link_group.hpp) across fork and across users.

A process's first SMC-D connection to a peer process attaches (a first
contact, counted on both sides), later ones claim slots and name them in
CLC (reused). A forked child is a process of its own: its connections make
a link group of their own, and the parent's group serves the parent as
before, after the child has gone too. A client of another user gets a new
link group with segments of its own on the server (a segment serves peers
of one user only), and the first user's group is not disturbed.

Counters are read between the client's phases (link_group_app.py waits on
stdin): a phase's first contacts can only come from a new process's first
connection or from a segment new on either side (dmb_segments), so the
checks hold however the machine schedules the closes."""
import os
import pwd
import subprocess
import time

from harness import APPS, PYTHON, Env, check, finish, read_ready

APP = os.path.join(APPS, "link_group_app.py")
ECHO = os.path.join(APPS, "echo_app.py")
K = 20
KEYS = ("conn_smcd", "conn_tcp", "lgr_first_contacts", "lgr_reused", "dmb_segments", "forks",
        "server_begins_here", "lgr_peer_gone", "lgr_no_confirm")


def delta(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in KEYS}


class Client:
    def __init__(self, env, port, *args, **kw):
        self.p = env.start(env.wrap([PYTHON, APP, "--port", str(port), "--conns", str(K), *args]),
                           stdin=subprocess.PIPE, **kw)

    def wait_phase(self, i):
        line = self.p.stdout.readline()
        return check(line.startswith(f"PHASE {i} DONE"), f"phase {i} ran ({line.strip() or self.tail()})")

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def end(self, env):
        self.go()
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            env.stop(self.p)
        return check(self.p.returncode == 0, f"the client ended well (exit {self.p.returncode}, {self.tail()})")

    def tail(self):
        if self.p.poll() is None:
            return "running"
        return (self.p.stdout.read() + self.p.stderr.read())[-600:]


def server(env, conns):
    s = env.start(env.wrap([PYTHON, ECHO, "server", "--conns", str(conns), "--mode", "selectors"]))
    return s, read_ready(s)


def reuse_only_for_new_segments(d):
    # Each segment new on either side may need one attach (counted on both sides).
    return d["lgr_first_contacts"] <= 2 * d["dmb_segments"] and d["lgr_first_contacts"] + d["lgr_reused"] == 2 * K


def last_phase(env, client, srv, phase, since, what, served):
    """The client's last phase: its link group still serves it (no first
    contact but for a new segment); then the client and the server end."""
    client.go()
    if not client.wait_phase(phase):
        return
    now = env.stats()
    d = delta(since, now)
    check(d["conn_smcd"] == 2 * K and reuse_only_for_new_segments(d),
          f"{what} ({d}, fallbacks so far {now.get('fallback_reasons')})")
    # Their Proposals came whole: each handshake began where it was found
    # (accept() or the event loop), none waited for a worker to begin.
    check(d["server_begins_here"] > 0, f"{what}: handshakes begun with no worker ({d})")
    # The client named its DMB in the Proposal (its group with the server
    # known): the server took it with the Accept, and no Confirm was sent.
    check(0 < d["lgr_no_confirm"] <= d["lgr_reused"],
          f"{what}: connections up at the Accept, without a Confirm ({d})")
    client.end(env)
    out, err = srv.communicate(timeout=60)
    check(srv.returncode == 0 and "DONE" in out, f"the server echoed all {served} ({err[-300:]})")


def case_fork(env):
    srv, port = server(env, 3 * K + 1)
    before = env.stats()
    c = Client(env, port, "--fork")
    if not c.wait_phase(1):
        return
    mid = env.stats()
    d = delta(before, mid)
    check(d["conn_smcd"] == 2 * (K + 1) and d["lgr_first_contacts"] >= 2
          and d["lgr_reused"] >= 2 * (K + 1) - 2 - 2 * d["dmb_segments"],
          f"fork: the parent's first connection attached, the others reused its link group ({d})")
    c.go()
    if not c.wait_phase(2):
        return
    after_child = env.stats()
    d = delta(mid, after_child)
    check(d["forks"] >= 1 and d["conn_smcd"] == 2 * K and d["conn_tcp"] == 0,
          f"fork: the child's {K} connections ran SMC-D, the inherited one echoed ({d}, "
          f"fallbacks so far {after_child.get('fallback_reasons')})")
    check(d["lgr_first_contacts"] >= 2 and d["lgr_first_contacts"] + d["lgr_reused"] == 2 * K
          and d["lgr_reused"] >= 2 * K - 2 - 2 * d["dmb_segments"],
          f"fork: the child made a link group of its own (a first contact), then reused it ({d})")
    last_phase(env, c, srv, 3, after_child,
               "fork: after the child exited the parent's link group still serves it", 3 * K + 1)


def case_other_user(env):
    other = pwd.getpwnam("nobody")
    os.chmod(env.dir, 0o755)  # the other user reaches the config and the stats dir
    os.chmod(env.stats_dir, 0o1777)
    srv, port = server(env, 3 * K)
    before = env.stats()
    mine = Client(env, port, "--phases", "2")
    if not mine.wait_phase(1):
        return
    mid = env.stats()
    d = delta(before, mid)
    check(d["conn_smcd"] == 2 * K and d["lgr_first_contacts"] >= 2,
          f"other user: our client's first connection attached, a link group made ({d})")
    theirs = Client(env, port, "--phases", "1", user=other.pw_uid, group=other.pw_gid, extra_groups=[])
    ok = theirs.wait_phase(1)
    after_other = env.stats()
    if ok:
        theirs.end(env)
    d = delta(mid, after_other)
    # Its own segment and one the server makes for its user: it could not
    # reach our user's connections even if it tried (THREAT-MODEL.md).
    check(d["conn_smcd"] == 2 * K and d["lgr_first_contacts"] >= 2 and d["dmb_segments"] >= 2
          and d["lgr_first_contacts"] + d["lgr_reused"] == 2 * K,
          f"other user: user {other.pw_name}'s client got a new link group and segments of its own ({d})")
    last_phase(env, mine, srv, 2, after_other,
               "other user: our client's link group still serves it afterwards", 3 * K)


def peer_files_mapped(pid):
    """Distinct DMB segment files (memfds) process `pid` maps."""
    inodes = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "memfd:usmc-dmb" in parts[5]:
                inodes.add(parts[4])
    return len(inodes)


def case_exiting_clients(env, n=12):
    """Client processes that each make one connection and exit (a curl per
    request): the server drops each one's link group when the process
    exits, and unmaps its segment (which holds what the server sent it),
    rather than keeping it until the group has been idle for a minute."""
    srv, port = server(env, n + 1)  # (it exits after n + 1: it must outlive the n)
    before = env.stats()
    for i in range(n):
        r = env.run(env.wrap([PYTHON, ECHO, "client", "--port", str(port), "--conns", "1",
                              "--size", "200000"]), timeout=60)
        if not check(r.returncode == 0, f"exiting clients: client {i} echoed ({r.stderr[-300:]})"):
            return
    deadline = time.monotonic() + 10
    while True:  # (each exit reaches the server's loop as its pidfd turns readable)
        d = delta(before, env.stats())
        mapped = peer_files_mapped(srv.pid)
        if (d["lgr_peer_gone"] >= n and mapped <= 2) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    check(d["conn_smcd"] == 2 * n and d["lgr_peer_gone"] == n,
          f"exiting clients: the server dropped the link group of each exited client ({d})")
    check(1 <= mapped <= 2,
          f"exiting clients: the server maps only its own segments, none of theirs ({mapped} files)")
    r = env.run(env.wrap([PYTHON, ECHO, "client", "--port", str(port), "--conns", "1"]), timeout=60)
    out, err = srv.communicate(timeout=30)
    check(r.returncode == 0 and srv.returncode == 0,
          f"exiting clients: the server echoed all {n + 1} ({r.stderr[-300:]} {err[-300:]})")


with Env(smcd_mechanics=True) as env:
    # clc_detect_timeout_ms generous: a loaded machine must not turn a
    # connection into TCP between phases (this checks counts of SMC-D).
    env.config("clc_detect_timeout_ms = 2000\n")
    print("fork with a link group")
    case_fork(env)
    print("client processes that exit")
    case_exiting_clients(env)
    print("a peer of another user")
    if os.geteuid() == 0:
        case_other_user(env)
    else:
        print("  skip (needs root to run a client as nobody)")
finish()
