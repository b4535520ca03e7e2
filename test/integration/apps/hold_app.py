#!/usr/bin/env python3
"""Client: opens --conns nonblocking connections at once, waits with
select() until each is connected (SMC-D or TCP), echoes a byte through
each, then reports how many sockets this process holds beyond its TCP
connections (usmc's: wake-up pairs, links) while all are still open."""
import argparse
import os
import select
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
    args = p.parse_args()
    socks = []
    for _ in range(args.conns):
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
    for s in socks:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
