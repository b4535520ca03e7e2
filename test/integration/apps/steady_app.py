#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A long-running echo server and a checking client, for tests that attack
a server while others use it (test_hostile.py).

server: one thread, selectors (epoll; poll with --selector poll), nonblocking sockets, buffered echo of
        every connection until its EOF. Runs until SIGTERM (then prints
        'DONE served=<n>' and exits 0) or --seconds. A failing accept()
        (EMFILE) is retried after 50 ms, as servers back off.
client: rounds of -n sequential connections; each sends --size bytes,
        reads exactly those bytes back (byte for byte) and closes. Prints
        'ROUND <k> ok=<n> bad=<n> max_ms=<ms> first_error=<...>' per round
        (max_ms: the slowest connection, from connect to the last byte).
        --pause-ms: wait that long between connect and the first send.
        Every socket operation times out after --timeout seconds.
        Without --interactive one round, exit 0 iff it was all ok; with it,
        one round per line on stdin, until EOF or 'quit'.
"""
import argparse
import errno
import os
import selectors
import signal
import socket
import sys
import time



def server(args):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(args.backlog)
    ls.setblocking(False)
    print("READY", ls.getsockname()[1], flush=True)
    sel = selectors.PollSelector() if args.selector == "poll" else selectors.DefaultSelector()
    sel.register(ls, selectors.EVENT_READ, None)
    out = {}  # socket -> bytes still to echo
    served = accept_errors = 0
    paused_until = 0.0
    deadline = time.monotonic() + args.seconds
    while not stop and time.monotonic() < deadline:
        if paused_until and time.monotonic() >= paused_until:
            sel.register(ls, selectors.EVENT_READ, None)
            paused_until = 0.0
        for key, ev in sel.select(0.05):
            if key.data is None:
                try:
                    c, _ = ls.accept()
                except BlockingIOError:
                    continue
                except OSError as e:
                    accept_errors += 1
                    if accept_errors == 1:
                        print("accept:", os.strerror(e.errno), file=sys.stderr, flush=True)
                    if e.errno in (errno.EMFILE, errno.ENFILE):
                        sel.unregister(ls)
                        paused_until = time.monotonic() + 0.05
                    continue
                c.setblocking(False)
                out[c] = bytearray()
                sel.register(c, selectors.EVENT_READ, "conn")
                continue
            c = key.fileobj
            buf = out[c]
            eof = False
            if ev & selectors.EVENT_READ:
                try:
                    data = c.recv(65536)
                    buf += data
                    eof = not data
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    eof = True
            if buf and not eof:
                try:
                    del buf[:c.send(buf)]
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    eof = True
            if eof:
                sel.unregister(c)
                c.close()
                del out[c]
                served += 1
            else:
                want = selectors.EVENT_READ | (selectors.EVENT_WRITE if buf else 0)
                if key.events != want:
                    sel.modify(c, want, "conn")
    print(f"DONE served={served} accept_errors={accept_errors}", flush=True)


def one_connection(port, payload, timeout, pause):
    """Returns None if the echo came back byte for byte, else what went wrong."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        time.sleep(pause)  # the client's own behaviour: it speaks this late
        c.sendall(payload)
        got = bytearray()
        while len(got) < len(payload):
            chunk = c.recv(len(payload) - len(got))
            if not chunk:
                break
            got += chunk
    if got != payload:
        return f"echo mismatch: {len(got)} of {len(payload)} bytes, starts {bytes(got[:16]).hex()}"
    return None


def run_round(args, k):
    ok = bad = 0
    worst = 0.0
    first_error = "-"
    for i in range(args.n):
        payload = (f"round {k} conn {i} pid {os.getpid()} ".encode() * (args.size // 24 + 1))[:args.size]
        t0 = time.monotonic()
        try:
            error = one_connection(args.port, payload, args.timeout, args.pause_ms / 1000)
        except OSError as e:
            error = repr(e)
        worst = max(worst, time.monotonic() - t0)
        if error is None:
            ok += 1
        else:
            bad += 1
            if first_error == "-":
                first_error = error.replace(" ", "_")
    print(f"ROUND {k} ok={ok} bad={bad} max_ms={worst * 1000:.0f} first_error={first_error}", flush=True)
    return bad == 0


def client(args):
    if not args.interactive:
        return 0 if run_round(args, 1) else 1
    k = 0
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        k += 1
        run_round(args, k)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--backlog", type=int, default=128)
    p.add_argument("--seconds", type=float, default=120)
    p.add_argument("-n", type=int, default=3)
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--timeout", type=float, default=5, help="per socket operation (s)")
    p.add_argument("--pause-ms", type=float, default=0, help="between connect and the first send")
    p.add_argument("--interactive", action="store_true")
    p.add_argument("--selector", choices=["epoll", "poll"], default="epoll", help="server: how it waits")
    args = p.parse_args()
    if args.role == "server":
        server(args)
        return 0
    return client(args)


if __name__ == "__main__":
    sys.exit(main())
