#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Client: opens --conns nonblocking connections at once, waits with
select() until each is connected (SMC-D or TCP), echoes a byte through
each, then reports how many sockets this process holds beyond its TCP
connections (usmc's: wake-up pairs, links) while all are still open."""
import argparse
import os
import select
import selectors
import socket
import sys
import time


def sockets_held():
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, default=40)
    p.add_argument("--until-end", action="store_true",
                   help="after HELD, wait (epoll, 60 s at most) until every connection ends "
                        "(EOF or an error) and report how long that took")
    p.add_argument("--first-alone", action="store_true",
                   help="the first connection is up (and echoed) before the others start: "
                        "a link group exists when they do")
    p.add_argument("--hold-stdin", action="store_true",
                   help="after HELD, keep the connections open until stdin closes")
    args = p.parse_args()
    socks = []
    if args.first_alone:
        first = socket.create_connection(("127.0.0.1", args.port), timeout=30)
        first.sendall(b"x")
        if first.recv(1) != b"x":
            print("FAIL bad echo", flush=True)
            return 1
        socks.append(first)
    for _ in range(args.conns - len(socks)):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", args.port))
        except BlockingIOError:
            pass
        socks.append(s)
    pending = set(socks)
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        _, w, _ = select.select([], list(pending), [], 1.0)
        pending -= set(w)
    if pending:
        print(f"FAIL {len(pending)} connections not up in 30 s", flush=True)
        return 1
    for s in socks:
        s.setblocking(True)
        s.settimeout(30)
        s.sendall(b"x")
        if s.recv(1) != b"x":
            print("FAIL bad echo", flush=True)
            return 1
    print(f"HELD {args.conns} extra_sockets {sockets_held() - args.conns}", flush=True)
    if args.until_end:
        return until_end(socks)
    if args.hold_stdin:
        sys.stdin.read()
    for s in socks:
        s.close()
    return 0


def until_end(socks):
    """Every connection must end once the peer is gone: EOF or an error,
    never a hang. Prints when the first and the last ended."""
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    left, first, last = len(socks), None, None
    how = {}
    deadline = time.monotonic() + 60
    while left and time.monotonic() < deadline:
        for key, _ in sel.select(1.0):
            s = key.fileobj
            try:
                data = s.recv(4096)
                if data:
                    continue  # (nothing is sent: a peer that lies)
                kind = "eof"
            except BlockingIOError:
                continue
            except OSError as e:
                kind = os.strerror(e.errno)
            now = time.monotonic()
            first = first or now
            last = now
            how[kind] = how.get(kind, 0) + 1
            sel.unregister(s)
            s.close()
            left -= 1
    spread = (last - first) * 1000 if first else -1
    print(f"ENDED {len(socks) - left} of {len(socks)} spread_ms {spread:.0f} {how}", flush=True)
    return 0 if left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
