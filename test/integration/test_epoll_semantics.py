#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""epoll as Linux gives it over TCP, kept under usmc: each case of
epoll_probe.c (usmc-epoll-probe CASE) runs plainly, then under usmc-run
(the probe and the peer processes it forks, all wrapped, talk SMC-D), and
the two outputs must be the same, line by line. The wrapped run must have
made every one of its connections SMC-D (usmc's counters), or the
comparison proves nothing.

Cases that differ today are in KNOWN_GAPS, each with its reason: for those
the test checks that they still differ, so that the list can only shrink
(one that starts matching fails until it is removed from the list)."""
import difflib
import os
import subprocess

from harness import APPS, BIN, PYTHON, Env, check, finish, read_ready, slow_machine_config

PROBE = os.path.join(BIN, "usmc-epoll-probe")

# case -> why usmc differs from the kernel there (engine/sock/af_smc_poll.cpp:
# an SMC-D connection's registrations are its `sig` datagram socket's, and
# `sig` is readable while a wake-up datagram is queued).
KNOWN_GAPS = {
    # An exec the connection's descriptor survives moves it to TCP
    # (af_smc_move.cpp); the peer hands over what the rings held only at its
    # next call on the connection, so the exec'd program reads none of what
    # came before the exec, and the set still holds the old image's `sig`,
    # readable. The parent (it forked the exec'd child) holds the same
    # socket: it gets the 5 (the peer's resend over TCP, never its own ring
    # as well) and the 3, where TCP gives it 3 (the child read the 5); its
    # set, answered by `sig`, may wake it before they land: 8 or 0 read.
    "exec_inherited_set": "the exec'd program cannot read what arrived before the exec",
    # Passed with SCM_RIGHTS the connection moves to TCP the same way
    # (af_smc.cpp before_pass): the other process reads the 5 that came
    # before the pass only once the peer makes its next call on the
    # connection (here its write of 3, so it reads 8 at once); the set it
    # got falls back to the kernel's and reports the socket.
    "pass_fds": "the receiving process reads what came before the pass only after the peer's next call",
}


def connections(out):
    """The connections the probe says its case made ("CASE: connections N")."""
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "connections":
            return int(parts[2])
    return None


def ran(r):
    """A run of the probe that went through (a semantic result is only
    printed; FAIL is a case that could not run)."""
    return r.returncode == 0 and "FAIL" not in r.stdout


def tail(r):
    return f"rc {r.returncode}: {r.stdout[-400:]!r} {r.stderr[-400:]!r}"


cases = subprocess.run([PROBE, "list"], capture_output=True, text=True, timeout=30).stdout.split()
check(len(cases) >= 21, f"the probe lists its cases ({len(cases)})")
unknown = sorted(set(KNOWN_GAPS) - set(cases))
check(not unknown, f"every known gap names a case of the probe ({unknown})")

with Env(smcd_mechanics=True) as env:
    # Every connection must be SMC-D, on a loaded machine too.
    slow_machine_config(env)
    for case in cases:
        plain = env.run_explained([PROBE, case], timeout=90)
        if not check(ran(plain), f"{case}: runs plainly" + ("" if ran(plain) else f" ({tail(plain)})")):
            continue
        n = connections(plain.stdout)
        before = env.stats()
        wrapped = env.run_explained(env.wrap([PROBE, case]), timeout=90)
        after = env.stats()
        check(ran(wrapped), f"{case}: runs under usmc" + ("" if ran(wrapped) else f" ({tail(wrapped)})"))
        smcd = after["conn_smcd"] - before["conn_smcd"]
        tcp = after["conn_tcp"] - before["conn_tcp"]
        check(n is not None and smcd == 2 * n and tcp == 0,
              f"{case}: under usmc its {n} connection(s) ran SMC-D at both ends "
              f"({smcd} ends SMC-D, {tcp} TCP, {after['fallback_reasons']})")
        same = plain.stdout == wrapped.stdout
        lines = len(plain.stdout.splitlines())
        if case in KNOWN_GAPS:
            check(not same, f"{case}: still differs (known gap: {KNOWN_GAPS[case]})"
                  + ("" if not same else ": it matches plain TCP now, remove it from KNOWN_GAPS"))
        else:
            check(same, f"{case}: the same {lines} lines plain and under usmc")
        if not same:
            for line in difflib.unified_diff(plain.stdout.splitlines(), wrapped.stdout.splitlines(),
                                             "plain", "usmc", lineterm="", n=0):
                print(f"         {line}")
    # A set that gets its first SMC-D connection while a thread of the
    # program sleeps in epoll_wait on it: the sleeper reports it.
    server = env.start(env.wrap([PYTHON, os.path.join(APPS, "echo_app.py"), "server", "--conns", "1",
                                 "--mode", "selectors"]))
    port = read_ready(server)
    late = env.run(env.wrap([PYTHON, os.path.join(APPS, "late_set_app.py"), "--port", str(port)]),
                   timeout=60)
    words = late.stdout.split()
    fd = words[-1] if words else "?"
    check(f"[({fd}, 1)]" in late.stdout,
          f"a connection added while a thread sleeps on the empty set is reported to it "
          f"({late.stdout.strip()!r} {late.stderr[-200:]!r})")
    server.communicate(timeout=30)
finish()
