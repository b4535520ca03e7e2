#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""TCP behaviours programs rely on, for test_tcp_semantics.py.

select-accept: a blocking listener served as socketserver does (select,
    then accept); prints 'ACCEPT <seconds in accept>' for each of --n.
late-answer: accepts one connection, reads its request, waits (at most
    --wait seconds) for the client to give up and close, then answers twice;
    prints 'FIRST <sent|error>' and 'SECOND <sent|error>'.
"""
import argparse
import select
import socket
import sys
import time


def listener():
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    print("READY", ls.getsockname()[1], flush=True)
    return ls


def select_accept(args):
    ls = listener()
    deadline = time.monotonic() + args.deadline
    accepted = 0
    while accepted < args.n and time.monotonic() < deadline:
        r, _, _ = select.select([ls], [], [], 0.5)
        if not r:
            continue
        t0 = time.monotonic()
        c, _ = ls.accept()
        print(f"ACCEPT {time.monotonic() - t0:.3f}", flush=True)
        c.close()
        accepted += 1


def late_answer(args):
    ls = listener()
    c, _ = ls.accept()
    c.recv(100)
    c.settimeout(args.wait)
    if c.recv(100) != b"":  # the client gives up and closes: its end of stream
        print("FIRST no end of stream", flush=True)
        return
    c.settimeout(None)
    for name in ("FIRST", "SECOND"):
        try:
            c.send(b"late answer\n")
            print(name, "sent", flush=True)
        except OSError as e:
            print(name, "error", e.errno, flush=True)
        time.sleep(0.2)  # TCP: the peer's reset comes back before the second


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["select-accept", "late-answer"])
    p.add_argument("--n", type=int, default=6)
    p.add_argument("--wait", type=float, default=1.0)
    p.add_argument("--deadline", type=float, default=30)
    args = p.parse_args()
    (select_accept if args.mode == "select-accept" else late_answer)(args)


if __name__ == "__main__":
    sys.exit(main())
