#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One connection in lockstep, for usmc's observer tests (test_observe.py):
the client sends each message of --sizes in one send() call and waits for a
one-byte ack (one recv() call); the server takes each in one recv(MSG_WAITALL)
call and acks it with one send(). So each side's request counts and byte
counts are known exactly. Then, on "GO" from stdin, one message of --big
bytes (larger than the DMB ring) that the server reads only after a second
"GO". With --fork a child forked after accept() serves it. Each step is announced on stdout; "QUIT" on stdin ends the run.
Blocking sockets, bounded by an alarm."""
import argparse
import os
import signal
import socket
import sys


def say(*args):
    print(*args, flush=True)


def wait_line(word):
    line = sys.stdin.readline()
    if line.strip() != word:
        raise SystemExit(f"expected {word}, got {line!r}")


def recv_exact(conn, n):
    got = b""
    while len(got) < n:
        chunk = conn.recv(n - len(got), socket.MSG_WAITALL)
        if not chunk:
            raise SystemExit("EOF")
        got += chunk
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--sizes", default="100,10000,40000,100000")
    ap.add_argument("--big", type=int, default=0)
    ap.add_argument("--fork", action="store_true", help="server: a forked child serves the connection")
    args = ap.parse_args()
    signal.alarm(120)
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.role == "server":
        lst = socket.socket()
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind(("127.0.0.1", args.port))
        lst.listen(1)
        say("READY", lst.getsockname()[1])
        conn, _ = lst.accept()
        if args.fork:
            pid = os.fork()
            if pid:
                conn.close()  # the child's now
                _, status = os.waitpid(pid, 0)
                sys.exit(os.waitstatus_to_exitcode(status))
            say("CHILD", os.getpid())
        total = 0
        for n in sizes:
            data = conn.recv(n, socket.MSG_WAITALL)  # one call: MSG_WAITALL
            if len(data) != n or data != bytes([n % 251]) * n:
                raise SystemExit(f"short or wrong message: {len(data)} of {n}")
            total += n
            if conn.send(b"k") != 1:
                raise SystemExit("ack not sent")
        say("RECEIVED", total)
        if args.big:
            wait_line("GO")
            data = recv_exact(conn, args.big)
            if data != bytes([7]) * args.big:
                raise SystemExit("big message corrupted")
            say("RECEIVED_BIG", len(data))
        wait_line("QUIT")
        conn.close()
        lst.close()
        say("DONE")
    else:
        conn = socket.create_connection(("127.0.0.1", args.port))
        total = 0
        for n in sizes:
            sent = conn.send(bytes([n % 251]) * n)  # one call: the ring is empty
            if sent != n:
                raise SystemExit(f"partial send {sent} of {n}")
            total += n
            if conn.recv(1) != b"k":
                raise SystemExit("no ack")
        say("SENT", total)
        if args.big:
            wait_line("GO")
            say("SENDING_BIG")
            conn.sendall(bytes([7]) * args.big)
            say("SENT_BIG", args.big)
        wait_line("QUIT")
        conn.close()
        say("DONE")


if __name__ == "__main__":
    main()
