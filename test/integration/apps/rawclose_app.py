#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Descriptors closed with syscall(SYS_close), as libuv (Node.js) closes
them, for test_tcp_semantics.py.

server: accepts --n connections one after another; for each, registers it
    in an epoll set, prints 'CONN <i> fds <open descriptors but its own> epoll
    <registrations in the set>', reads the request, answers and closes it
    through libc's syscall() (no shutdown first). Then opens a pipe, which
    gets the last socket's number, and prints 'PIPE <fd> <what it read>'.
client: --n times: connects, sends a request, reads until end of stream;
    prints 'REPLY <i> <eof|error errno|connect-error errno> <bytes>'.
"""
import argparse
import ctypes
import os
import resource
import select
import socket

SYS_CLOSE = {"x86_64": 3, "aarch64": 57}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def raw_close(fd):
    if libc.syscall(ctypes.c_long(SYS_CLOSE), ctypes.c_long(fd)) != 0:
        raise OSError(ctypes.get_errno(), "syscall(SYS_close)")


def open_fds():
    """{fd: what it is} for this process's descriptors (the listing's own
    descriptor is gone by the time it is read back)."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass
    return out


def epoll_registrations(ep):
    """The set's registrations of the application's descriptors: usmc's own
    (an epoll set kept in user memory has its bell there) live in the top
    quarter of RLIMIT_NOFILE, and are left out."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    with open(f"/proc/self/fdinfo/{ep.fileno()}") as f:
        return sum(1 for line in f
                   if line.startswith("tfd:") and int(line.split()[1]) < limit - limit // 4)


def server(args):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    print("READY", ls.getsockname()[1], flush=True)
    ep = select.epoll()
    for i in range(args.n):
        c, _ = ls.accept()
        ep.register(c.fileno(), select.EPOLLIN)
        regs = epoll_registrations(ep)
        # Listed once the request is read: by then the connection's handshake
        # is over, and with it the engine's making of descriptors (a socket
        # is made at the lowest free number before it moves to usmc's
        # quarter, so one made while this thread accepted can shift the
        # accepted socket's number). The accepted socket itself is left out
        # for that reason: what is compared is everything else.
        req = c.recv(100)
        now = {fd: what for fd, what in open_fds().items() if fd != c.fileno()}
        fds = len(now)
        if i == 0:
            first = now
        elif i == args.n - 1 and fds != len(first):
            # What the count's difference is made of (for the test's message).
            new = {fd: what for fd, what in now.items() if first.get(fd) != what}
            gone = {fd: what for fd, what in first.items() if now.get(fd) != what}
            # (Sockets named by their abstract names: a spare `sig` the
            # engine keeps for the next connection is `usmc-s-...`.)
            names = {}
            with open("/proc/net/unix") as f:
                for line in f.read().splitlines()[1:]:
                    parts = line.split()
                    if len(parts) >= 8:
                        names[f"socket:[{parts[6]}]"] = parts[7]
            new = {fd: names.get(what, what) for fd, what in new.items() if fd not in gone}
            print(f"FDDIFF new {sorted(new.items())} gone {sorted(gone.items())}", flush=True)
        c.sendall(b"reply to " + req)
        raw_close(c.detach())  # the socket object lets go; libc's syscall() closes
        print(f"CONN {i} fds {fds} epoll {regs}", flush=True)
    # The lowest free number, the last socket's, goes to a pipe.
    r, w = os.pipe()
    os.write(w, b"pipe bytes")
    try:
        got = os.read(r, 100).decode()
    except OSError as e:
        got = f"error {e.errno}"
    print(f"PIPE {r} {got}", flush=True)


def client(args):
    for i in range(args.n):
        try:
            s = socket.create_connection(("127.0.0.1", args.port), timeout=10)
        except OSError as e:
            print(f"REPLY {i} connect-error {e.errno} 0", flush=True)
            return
        s.sendall(b"request %d" % i)
        got = b""
        end = "eof"
        try:
            while True:
                b = s.recv(100)
                if not b:
                    break
                got += b
        except OSError as e:
            end = f"error {e.errno}"
        s.close()
        print(f"REPLY {i} {end} {len(got)}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "client"])
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    {"server": server, "client": client}[args.mode](args)


if __name__ == "__main__":
    main()
