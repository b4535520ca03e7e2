#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Server and client for the learned SMC choice (test_learned_choice.py).

server: answers every line with "ECHO <line>" until the client closes;
  --fork accepts in the parent and serves each connection in a forked
  child, which closes it (the PostgreSQL model). Prints "READY <port>",
  stops when its stdin closes or after --seconds.
client: runs phases read from stdin, one per line, "<conns> <turns>": that
  many connections one after the other, each making <turns> round trips of
  a line and checking every answer; then prints "PHASE ok=N bad=M".
  "hold": one more connection, one round trip, kept open; prints
  "HOLD <local port>" and closes it at the next line. "quit" ends it.
Every socket operation has a timeout."""
import argparse
import os
import select
import signal
import socket
import sys
import time

IO_TIMEOUT = 20.0


def serve_conn(conn):
    conn.settimeout(IO_TIMEOUT)
    f = conn.makefile("rb")
    try:
        for line in f:
            conn.sendall(b"ECHO " + line)
    finally:
        f.close()
        conn.close()


def server(args):
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0))
    lst.listen(128)
    if args.fork:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print("READY", lst.getsockname()[1], flush=True)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        r, _, _ = select.select([lst, sys.stdin], [], [], 1.0)
        if sys.stdin in r and not sys.stdin.readline():
            break  # the test closed our stdin: stop
        if lst not in r:
            continue
        conn, _ = lst.accept()
        if not args.fork:
            serve_conn(conn)
            continue
        pid = os.fork()
        if pid == 0:
            lst.close()
            try:
                serve_conn(conn)
            finally:
                os._exit(0)
        conn.close()  # the child holds it now and closes it last


def one(port, i, turns, keep=False):
    s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    f = s.makefile("rb")
    ok = True
    for t in range(turns):
        msg = f"{i}-{t}\n".encode()
        s.sendall(msg)
        if f.readline() != b"ECHO " + msg:
            ok = False
            break
    if keep:
        return ok, s, f
    f.close()
    s.close()
    return ok


def client(args):
    i = 0
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "hold":
            ok, s, f = one(args.port, i, 1, keep=True)
            print("HOLD", s.getsockname()[1], "ok" if ok else "bad", flush=True)
            sys.stdin.readline()
            f.close()
            s.close()
            print("RELEASED", flush=True)
            continue
        conns, turns = int(words[0]), int(words[1])
        good = bad = 0
        for _ in range(conns):
            if one(args.port, i, turns):
                good += 1
            else:
                bad += 1
            i += 1
        print(f"PHASE ok={good} bad={bad}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--fork", action="store_true")
    ap.add_argument("--seconds", type=float, default=120)
    args = ap.parse_args()
    server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    main()
