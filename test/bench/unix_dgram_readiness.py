#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The kernel behaviour a readiness object of one Unix datagram socket per
connection side would rely on (docs/DESIGN-NOTES.md, "Readiness: the
candidates, measured", the third candidate):
`sig`, unconnected and bound to an abstract name, with the smallest send
buffer; a sink of the peer's, bound and connected to `sig`. Prints each
step and exits non-zero if the kernel behaves otherwise. Needs nothing but
python3; touches only sockets it makes."""
import os
import select
import socket
import sys


def name(what):
    return b"\0usmc-dgram-probe-" + what + b"-" + str(os.getpid()).encode()


def dgram():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setblocking(False)
    return s


def main():
    sig, sink, waker, other = dgram(), dgram(), dgram(), dgram()
    sig.bind(name(b"sig"))
    sig.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)  # the minimum
    sink.bind(name(b"sink"))
    sink.connect(name(b"sig"))
    ep = select.epoll()
    ep.register(sig.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLET)
    failures = []

    def level():
        p = select.poll()
        p.register(sig.fileno(), select.POLLIN | select.POLLOUT)
        r = p.poll(0)
        return {"IN": bool(r and r[0][1] & select.POLLIN), "OUT": bool(r and r[0][1] & select.POLLOUT)}

    def edges(timeout=0.1):
        got = set()
        for _, e in ep.poll(timeout):
            if e & select.EPOLLIN:
                got.add("IN")
            if e & select.EPOLLOUT:
                got.add("OUT")
        return got

    def expect(what, cond, seen):
        print(f"  {'ok  ' if cond else 'FAIL'} {what}: {seen}")
        if not cond:
            failures.append(what)

    expect("a new sig is writable, not readable", edges() == {"OUT"}, level())
    sig.sendto(b"F" * 2048, name(b"sink"))
    lv = level()
    expect("filled: neither readable nor writable", lv == {"IN": False, "OUT": False}, lv)
    try:
        other.sendto(b"h", name(b"sink"))
        expect("another socket cannot send into the sink", False, "sent")
    except OSError as e:
        expect("another socket cannot send into the sink", e.errno == 1, os.strerror(e.errno))
    waker.sendto(b"w", name(b"sig"))
    e = edges()
    expect("a waker's datagram: an IN edge, still not writable", e == {"IN"} and not level()["OUT"], e)
    sig.recv(16)
    expect("drained: not readable", not level()["IN"], level())
    sink.recv(4096)
    e = edges()
    expect("the sink drained: an OUT edge", e == {"OUT"} and level()["OUT"], e)
    print(f"kernel {os.uname().release}; net.unix.max_dgram_qlen "
          f"{open('/proc/sys/net/unix/max_dgram_qlen').read().strip()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
