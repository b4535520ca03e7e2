#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A server that execs into another program with its listener inherited,
and a client that connects before and after, for test_tcp_semantics.py.

server: listens, prints 'READY <port>', echoes one connection; then, on a
    line 'EXEC' on stdin, execs `exec_app.py plain-echo --fd <listener>`
    with LD_PRELOAD removed from its environment (a program that knows
    nothing of usmc, inheriting the socket).
plain-echo: prints 'EXECED', then for --n connections: reads until the
    client shuts down its side, prints 'GOT <bytes as hex>', sends them
    back and closes.
client: connects, sends 'hello-1', shuts down writing, reads the echo and
    prints 'FIRST <hex>'; on a line 'AGAIN' on stdin does the same with
    'hello-2' and prints 'SECOND <hex>'.
"""
import argparse
import os
import socket
import sys


def echo_once(conn):
    data = b""
    while True:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    conn.sendall(data)
    conn.close()
    return data


def server(args):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    print("READY", ls.getsockname()[1], flush=True)
    conn, _ = ls.accept()
    echo_once(conn)
    if sys.stdin.readline().strip() != "EXEC":
        return 1
    ls.set_inheritable(True)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), "plain-echo",
                               "--fd", str(ls.fileno())], env)


def plain_echo(args):
    ls = socket.socket(fileno=args.fd)
    print("EXECED", flush=True)
    for _ in range(args.n):
        conn, _ = ls.accept()
        conn.settimeout(10)
        print("GOT", echo_once(conn).hex(), flush=True)
    return 0


def one(port, payload):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return data
            data += chunk


def client(args):
    print("FIRST", one(args.port, b"hello-1").hex(), flush=True)
    if sys.stdin.readline().strip() != "AGAIN":
        return 1
    print("SECOND", one(args.port, b"hello-2").hex(), flush=True)
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "plain-echo", "client"])
    p.add_argument("--port", type=int)
    p.add_argument("--fd", type=int)
    p.add_argument("--n", type=int, default=1)
    a = p.parse_args()
    sys.exit({"server": server, "plain-echo": plain_echo, "client": client}[a.mode](a) or 0)
