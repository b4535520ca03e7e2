#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Client for the link-group tests: phases of --conns connections one after
another to an echo server (each echo checked byte for byte), stopping after
each phase ("PHASE i DONE") until a line on stdin says go on, so the test
can read usmc's counters between phases.

--fork: after phase 1 the process holds one more connection open and forks;
the child echoes through the inherited connection, runs phase 2 and exits;
the parent waits for it, echoes through the held connection again and runs
phase 3. Every socket operation has a timeout."""
import argparse
import os
import socket
import sys

TIMEOUT = 20.0


def echo(s, size):
    data = os.urandom(size)
    s.sendall(data)
    got = b""
    while len(got) < size:
        d = s.recv(size - len(got))
        if not d:
            raise RuntimeError("EOF before the echo")
        got += d
    if got != data:
        raise RuntimeError("echo differs")


def one(port):
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        echo(s, 50000)


def phase(i, port, conns):
    for _ in range(conns):
        one(port)
    print(f"PHASE {i} DONE pid {os.getpid()}", flush=True)
    if not sys.stdin.readline():
        raise RuntimeError("stdin closed")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, default=20)
    p.add_argument("--phases", type=int, default=2)
    p.add_argument("--fork", action="store_true")
    args = p.parse_args()
    if not args.fork:
        for i in range(1, args.phases + 1):
            phase(i, args.port, args.conns)
        return 0
    held = socket.create_connection(("127.0.0.1", args.port), timeout=TIMEOUT)
    echo(held, 1000)
    phase(1, args.port, args.conns)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            echo(held, 1000)
            phase(2, args.port, args.conns)
            code = 0
        except Exception as e:
            print("CHILD FAIL", e, flush=True)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        print(f"FAIL child exit status {status}", flush=True)
        return 1
    echo(held, 1000)
    phase(3, args.port, args.conns)
    held.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
