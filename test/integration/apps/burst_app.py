#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Short-lived connections in bursts, for the listen-path tests.

server: echo server on an event loop; listen(--backlog); with --go FILE it
        accepts nothing until FILE exists (a server that does not accept).
client: -n nonblocking connects at once; each sends one line and checks the
        echo, then closes. Prints how many were writable after --probe-at
        seconds, then 'DONE ok=<n> bad=<n>'.
"""
import argparse
import fcntl
import os
import selectors
import socket
import sys
import time


def server(args):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(args.backlog)
    ls.setblocking(False)
    print("READY", ls.getsockname()[1], flush=True)
    deadline = time.monotonic() + args.seconds
    while args.go and not os.path.exists(args.go):
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)
    sel = selectors.DefaultSelector()
    sel.register(ls, selectors.EVENT_READ, None)
    while time.monotonic() < deadline:
        for key, _ in sel.select(0.2):
            if key.data is None:
                while True:
                    try:
                        c, _ = ls.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ, b"")
                continue
            c = key.fileobj
            try:
                data = c.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(c)
                c.close()
                continue
            c.setblocking(True)
            c.sendall(data)
            c.setblocking(False)


def abandon(args):
    """-n nonblocking connects, then close them all at once, handshakes
    and TCP connects still in progress; prints how long the closes took."""
    socks = []
    for _ in range(args.n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", args.port))
        socks.append(s)
    t0 = time.monotonic()
    for s in socks:
        s.close()
    print(f"CLOSED {len(socks)} in {time.monotonic() - t0:.3f} s", flush=True)
    return 0


def client(args):
    if args.abandon:
        return abandon(args)
    sel = selectors.PollSelector() if args.selector == "poll" else selectors.DefaultSelector()
    start = time.monotonic()
    conns = {}
    for i in range(args.n):
        if args.nonblock_by == "socket":  # socket(SOCK_NONBLOCK): no call after it
            s = socket.socket(type=socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        elif args.nonblock_by == "fcntl":  # fcntl(F_SETFL) (Python's own is ioctl)
            s = socket.socket()
            fcntl.fcntl(s.fileno(), fcntl.F_SETFL, fcntl.fcntl(s.fileno(), fcntl.F_GETFL) | os.O_NONBLOCK)
        else:  # ioctl(FIONBIO)
            s = socket.socket()
            s.setblocking(False)
        s.connect_ex(("127.0.0.1", args.port))
        msg = f"request {i} {os.getpid()} {'x' * (i % 50)}\n".encode()
        conns[s] = {"msg": msg, "got": b"", "sent": False, "writable_at": None}
        sel.register(s, selectors.EVENT_WRITE)
    ok = bad = 0
    probed = False
    deadline = start + args.seconds
    while conns and time.monotonic() < deadline:
        if args.probe_at and not probed and time.monotonic() - start >= args.probe_at:
            n = sum(1 for st in list(conns.values()) if st["writable_at"] is not None) + ok + bad
            print("WRITABLE", n, flush=True)
            probed = True
            if args.probe_file:
                open(args.probe_file, "w").close()
        for key, ev in sel.select(0.05):
            s = key.fileobj
            st = conns[s]
            if ev & selectors.EVENT_WRITE:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    bad += 1
                    print("connect error", os.strerror(err), file=sys.stderr)
                    sel.unregister(s)
                    s.close()
                    del conns[s]
                    continue
                if st["writable_at"] is None:
                    st["writable_at"] = time.monotonic()
                s.send(st["msg"])
                sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError as e:
                data = b""
                print("recv error", e, file=sys.stderr)
            st["got"] += data
            if not data or len(st["got"]) >= len(st["msg"]):
                if st["got"] == st["msg"]:
                    ok += 1
                else:
                    bad += 1
                    print("bad reply", st["got"][:40], file=sys.stderr)
                sel.unregister(s)
                s.close()
                del conns[s]
    if args.probe_at and not probed:
        print("WRITABLE", ok + bad, flush=True)
    print(f"DONE ok={ok} bad={bad} unfinished={len(conns)}", flush=True)
    return 0 if bad == 0 and not conns else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--backlog", type=int, default=128)
    p.add_argument("--go", default="")
    p.add_argument("-n", type=int, default=10)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--probe-at", type=float, default=0)
    p.add_argument("--probe-file", default="")
    p.add_argument("--abandon", action="store_true", help="close every connect at once")
    p.add_argument("--selector", choices=["epoll", "poll"], default="epoll", help="client: how it waits")
    p.add_argument("--nonblock-by", choices=["ioctl", "fcntl", "socket"], default="ioctl",
                   help="how the client's sockets are made nonblocking")
    args = p.parse_args()
    if args.role == "server":
        server(args)
        return 0
    return client(args)


if __name__ == "__main__":
    sys.exit(main())
