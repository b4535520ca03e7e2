#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An accept-then-fork server (as PostgreSQL's postmaster) and its client.

server --order parent-first: accept, fork; the parent closes its copy of
        the connection at once and then lets the child go on (a pipe), so
        the child always closes last.
server --order child-first: the parent keeps its copy until the child has
        closed its own and said so (a pipe), then closes last.
        Either way the child reads one request (4-byte length, payload),
        echoes the payload, closes and _exits; the parent reaps every child
        (waitpid) before it accepts the next connection. Prints
        'READY <port>', and after --conns connections 'SERVED <n>
        reaped=<n> failed=<n>'; then waits for its stdin to close (so its
        counters can be read while it lives) and exits.
client: --conns sequential connections, each with its own payload (its
        number and length vary), each echo compared byte for byte; prints
        'DONE ok=<n> bad=<n>'.
"""
import argparse
import hashlib
import os
import select
import socket
import struct
import sys

TIMEOUT = 10.0  # seconds any single step may wait


def read_exact(conn, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def wait_readable(fd, what):
    r, _, _ = select.select([fd], [], [], TIMEOUT)
    if not r:
        raise TimeoutError(what)


def payload(i):
    seed = hashlib.sha256(str(i).encode()).digest()
    size = 16 + (i * 37) % 3000
    return (seed * (size // len(seed) + 1))[:size]


def child(conn, go_r, done_w, order):
    try:
        if order == "parent-first":
            wait_readable(go_r, "parent's go")
            os.read(go_r, 1)
        conn.settimeout(TIMEOUT)
        (n,) = struct.unpack("!I", read_exact(conn, 4))
        conn.sendall(read_exact(conn, n))
        conn.close()
        os.write(done_w, b"d")
        os._exit(0)
    except BaseException as e:  # never back into the parent's loop
        print(f"child error: {e!r}", file=sys.stderr, flush=True)
        os._exit(1)


def serve(args):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    print(f"READY {ls.getsockname()[1]}", flush=True)
    served = reaped = failed = 0
    while served < args.conns:
        wait_readable(ls.fileno(), "a connection")
        conn, _ = ls.accept()
        go_r, go_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            ls.close()
            os.close(go_w)
            os.close(done_r)
            child(conn, go_r, done_w, args.order)
        os.close(go_r)
        os.close(done_w)
        if args.order == "parent-first":
            conn.close()
            os.write(go_w, b"g")
            wait_readable(done_r, "the child's exit")
        else:
            wait_readable(done_r, "the child's close")
            if os.read(done_r, 1) != b"d":
                failed += 1
            conn.close()
        # The child is done (or its write end closed at exit): reap it.
        _, status = os.waitpid(pid, 0)
        reaped += 1
        if status != 0:
            failed += 1
        os.close(go_w)
        os.close(done_r)
        served += 1
    print(f"SERVED {served} reaped={reaped} failed={failed}", flush=True)
    ls.close()
    select.select([sys.stdin], [], [], 60)


def client(args):
    ok = bad = 0
    for i in range(args.conns):
        data = payload(i)
        with socket.create_connection(("127.0.0.1", args.port), timeout=TIMEOUT) as s:
            s.sendall(struct.pack("!I", len(data)) + data)
            got = read_exact(s, len(data))
            if got == data and s.recv(1) == b"":
                ok += 1
            else:
                bad += 1
                if bad <= 3:
                    print(f"connection {i}: {len(got)} of {len(data)} bytes, equal={got == data}",
                          file=sys.stderr, flush=True)
    print(f"DONE ok={ok} bad={bad}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--order", choices=["parent-first", "child-first"], default="parent-first")
    ap.add_argument("--port", type=int)
    ap.add_argument("--conns", type=int, default=5000)
    args = ap.parse_args()
    serve(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    main()
