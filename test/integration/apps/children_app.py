#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A server that makes child processes while its connections are open.

server --children spawn: echoes line by line on each accepted connection
        and runs subprocess.run(["true"]) before every answer (Python's
        _posixsubprocess: vfork, close_range in the child, exec).
server --children fork-blocked: one thread blocks in recv on the accepted
        connection while the main thread forks; the child closes its copy
        and exits. Prints 'CHILD <exit status> <seconds>', says "go", then
        echoes.
server --children fork-exit / fork-exec: forks after each accept; the child
        ends with the connection open, by os._exit (a multiprocessing
        worker's end) or by exec'ing `true` (the socket is close-on-exec);
        the parent reaps it, echoes, and closes. --conns connections in turn.
client: --conns connections in turn, each --lines request/answer rounds,
        each checked (with --wait-go, after the server's "go" line; with
        --expect-eof, then an end of stream, not a reset); prints
        'DONE ok=<n>' (connections with every answer right).
"""
import argparse
import os
import socket
import subprocess
import sys
import threading
import time


def serve_spawn(conn, lines):
    f = conn.makefile("rb")
    for _ in range(lines):
        line = f.readline()
        if not line:
            return
        subprocess.run(["true"], check=True)
        conn.sendall(line)


def thread_sleeping(tid):
    """Asleep in the kernel, and not on a futex (the GIL): inside recv."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    with open(f"/proc/self/task/{tid}/wchan") as f:
        wchan = f.read()
    return state == "S" and "futex" not in wchan


def serve_fork_blocked(conn, lines):
    got = []
    tids = []

    def read():
        tids.append(threading.get_native_id())
        got.append(conn.recv(65536))

    reader = threading.Thread(target=read)
    reader.start()
    # Fork once the reader sleeps inside recv (holding the receive lock).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (tids and thread_sleeping(tids[0])):
        time.sleep(0.005)
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        conn.close()
        os._exit(0)
    status = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        status = "hung"
    print("CHILD", status, f"{time.monotonic() - t0:.2f}", flush=True)
    conn.sendall(b"go\n")  # the client sends only now: the reader was blocked all along
    reader.join(timeout=30)
    if got and got[0]:
        conn.sendall(got[0])
    f = conn.makefile("rb")
    for _ in range(lines - 1):
        line = f.readline()
        if not line:
            return
        conn.sendall(line)


def serve_child_ends(conn, lines, how):
    pid = os.fork()
    if pid == 0:
        if how == "fork-exec":
            os.execv("/bin/true", ["true"])
        os._exit(0)
    os.waitpid(pid, 0)
    f = conn.makefile("rb")
    for _ in range(lines):
        line = f.readline()
        if not line:
            return
        conn.sendall(line)


def server(args):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    print("READY", ls.getsockname()[1], flush=True)
    for _ in range(args.conns):
        conn, _ = ls.accept()
        if args.children == "spawn":
            serve_spawn(conn, args.lines)
        elif args.children == "fork-blocked":
            serve_fork_blocked(conn, args.lines)
        else:
            serve_child_ends(conn, args.lines, args.children)
        conn.close()


def one_client(args):
    s = socket.create_connection(("127.0.0.1", args.port), timeout=args.deadline)
    f = s.makefile("rb")
    if args.wait_go and f.readline() != b"go\n":
        print("no go", flush=True)
        return False
    for i in range(args.lines):
        line = f"line {i} {'x' * (i % 97)}\n".encode()
        s.sendall(line)
        if f.readline() != line:
            print(f"answer {i} wrong", flush=True)
            return False
    if args.expect_eof:
        try:
            end = s.recv(100)
        except OSError as e:
            print(f"after the answers: {e!r}, not an end of stream", flush=True)
            return False
        if end != b"":
            print(f"after the answers: {end!r}, not an end of stream", flush=True)
            return False
    s.close()
    return True


def client(args):
    ok = 0
    for _ in range(args.conns):
        if not one_client(args):
            break
        ok += 1
    print(f"DONE ok={ok}", flush=True)
    return 0 if ok == args.conns else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--children", choices=["spawn", "fork-blocked", "fork-exit", "fork-exec"],
                   default="spawn")
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--expect-eof", action="store_true", help="an end of stream after the answers")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--lines", type=int, default=20)
    p.add_argument("--deadline", type=float, default=30)
    p.add_argument("--wait-go", action="store_true", help="send only after the server's 'go'")
    args = p.parse_args()
    return server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    sys.exit(main())
