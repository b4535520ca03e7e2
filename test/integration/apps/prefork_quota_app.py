#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A pre-fork server whose children serve a quota and stop accepting (as
Apache's MaxConnectionsPerChild or gunicorn's max_requests), and its client.

server: listens, forks children A and B, closes its own copy, prints
        'READY <port> <pid A> <pid B>' and reaps both.
        A accepts one connection, serves it, prints 'A-SERVED', and then
        holds the listener without accepting until SIGUSR2.
        B holds the listener without accepting until SIGUSR1, then accepts
        and serves --b-conns connections and exits.
        Serving: a 4-byte length and a payload in, the child's letter and
        the payload back. Prints 'DONE' once both children exited with 0.
client: one connection; sends a payload, checks the letter (--expect) and
        the payload byte for byte; prints 'OK <letter>'.
"""
import argparse
import hashlib
import os
import signal
import socket
import struct
import sys

TIMEOUT = 20.0  # seconds any single step may wait


def read_exact(conn, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def serve_one(lst, letter):
    conn, _ = lst.accept()
    conn.settimeout(TIMEOUT)
    (n,) = struct.unpack("!I", read_exact(conn, 4))
    data = read_exact(conn, n)
    conn.sendall(letter + data)
    conn.close()


def child(lst, letter, wait_for, conns):
    # Signals only where this child waits for them (sigwait): nothing else
    # of Python's runs in between.
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1, signal.SIGUSR2])
    signal.alarm(int(TIMEOUT * 3))
    try:
        if letter == b"A":
            serve_one(lst, letter)
            print("A-SERVED", flush=True)
            signal.sigwait([wait_for])
        else:
            signal.sigwait([wait_for])
            for _ in range(conns):
                serve_one(lst, letter)
        os._exit(0)
    except BaseException as e:  # noqa: BLE001 - the exit status says it
        print(f"{letter.decode()} failed: {e!r}", file=sys.stderr, flush=True)
        os._exit(1)


def server(args):
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0))
    lst.listen(16)
    port = lst.getsockname()[1]
    pids = []
    for letter, sig, conns in ((b"A", signal.SIGUSR2, 1), (b"B", signal.SIGUSR1, args.b_conns)):
        pid = os.fork()
        if pid == 0:
            child(lst, letter, sig, conns)
        pids.append(pid)
    lst.close()
    print(f"READY {port} {pids[0]} {pids[1]}", flush=True)
    ok = True
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        ok = ok and os.waitstatus_to_exitcode(status) == 0
    print("DONE" if ok else "FAILED", flush=True)
    sys.exit(0 if ok else 1)


def client(args):
    data = (hashlib.sha256(str(args.seed).encode()).digest() * 64)[: 1000 + args.seed]
    c = socket.create_connection(("127.0.0.1", args.port), timeout=TIMEOUT)
    c.sendall(struct.pack("!I", len(data)) + data)
    reply = read_exact(c, 1 + len(data))
    c.close()
    if reply[:1] != args.expect.encode() or reply[1:] != data:
        print(f"BAD reply from {reply[:1]!r}, {len(reply)} bytes", flush=True)
        sys.exit(1)
    print(f"OK {args.expect}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--b-conns", type=int, default=2)
    p.add_argument("--expect", default="A")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    main()
