#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Client for test_spare_sig.py: connections to an echo_app server whose
`sig` (usmc's readiness descriptor) a later connection of the process may
take over (wakeup::park). What it checks, each case printing OK or FAIL:

  reuse     A in epoll set E, A closed, B connected: B's `sig` may be A's,
            so E must report nothing for it (A's registration deleted).
  dup-guard A in E, E duplicated to E2, E closed, A closed, B connected:
            E2 still holds A's registration (the kernel keeps the set), so
            A's `sig` must not be B's (E2 would report B's events with A's
            data).
  fork      a child forked while the parent has spares connects, and the
            parent after it: each echoes its bytes (neither takes a `sig`
            the other holds).

Every wait is bounded; exit 0 only if every case said OK."""
import argparse
import os
import select
import socket
import sys

TIMEOUT = 10.0


def echo_once(port, payload):
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return s, got == payload


def readable_in(ep, fd, timeout):
    """Waits (bounded) for `fd` (registered with data fd) to be reported."""
    for fd_, ev in ep.poll(timeout):
        if fd_ == fd and ev & select.EPOLLIN:
            return True
    return False


def b_echo_seen(port, tag):
    """Connects B, registers it in a new set, makes it readable (an echo),
    and waits for the set to say so. Returns (B, its set) or (None, None)."""
    b = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    e3 = select.epoll()
    e3.register(b.fileno(), select.EPOLLIN)
    b.sendall(tag)
    if not readable_in(e3, b.fileno(), TIMEOUT):
        return None, None
    return b, e3


def a_in_set(port):
    """Connection A, registered in a new epoll set E."""
    a = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    e = select.epoll()
    e.register(a.fileno(), select.EPOLLIN)
    return a, e


def stale_events(port, tag, watched):
    """Connects B and makes it readable; returns what `watched` (a set
    that held only A) reports meanwhile, or a string if B never turned
    readable."""
    b, e3 = b_echo_seen(port, tag)
    if not b:
        return "B never turned readable"
    stale = watched.poll(0.2)
    b.close()
    e3.close()
    return stale


def case_sets(port, dup):
    """reuse (dup False) and dup-guard (dup True): what the set that held A
    (E, or its duplicate after E's close) reports once B is readable."""
    a, watched = a_in_set(port)
    if dup:
        e = watched
        watched = select.epoll.fromfd(os.dup(e.fileno()))
        e.close()
    a.close()
    stale = stale_events(port, b"guard" if dup else b"reuse", watched)
    watched.close()
    if isinstance(stale, str) or not stale:
        return stale or None
    return (f"the duplicated set reported {stale}: A's registration on B's sig" if dup
            else f"set E reported {stale} after A closed")


def case_fork(port):
    # Spares first: a few connections, closed.
    for i in range(3):
        s, ok = echo_once(port, b"warm %d" % i)
        s.close()
        if not ok:
            return "warm-up echo failed"
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            s, ok = echo_once(port, b"child" * 100)
            s.close()
            code = 0 if ok else 1
        finally:
            os._exit(code)
    s, ok = echo_once(port, b"parent" * 100)
    s.close()
    _, status = os.waitpid(pid, 0)
    if not ok:
        return "the parent's echo after the fork failed"
    if status != 0:
        return f"the child's echo failed (status {status})"
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("case", choices=["reuse", "dup-guard", "fork"])
    a = p.parse_args()
    cases = {"reuse": lambda p: case_sets(p, False), "dup-guard": lambda p: case_sets(p, True),
             "fork": case_fork}
    why = cases[a.case](a.port)
    print(f"{a.case}: {'OK' if why is None else 'FAIL ' + why}", flush=True)
    sys.exit(0 if why is None else 1)


if __name__ == "__main__":
    main()
