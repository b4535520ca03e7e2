#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A server that accepts with accept4(fd, NULL, NULL, 0) through libc (as
nginx asks, without SOCK_CLOEXEC; Python's own accept always adds it):
prints its port, takes one connection, prints FIRST, then waits for a line
on stdin while further connections wait in the listener (in usmc's queue
when wrapped). On that line it prints, for every other socket it holds,
`fd:cloexec|inherit` as /proc/self/fdinfo says (QUEUED ...); then it
accepts --more connections the same way and prints the same for each
(ACCEPTED ...): what a child spawned meanwhile would inherit."""
import argparse
import ctypes
import os
import socket
import sys

O_CLOEXEC = 0o2000000


def fd_flags(fd):
    with open(f"/proc/self/fdinfo/{fd}") as f:
        for line in f:
            if line.startswith("flags:"):
                return int(line.split()[1], 8)
    return 0


def sockets():
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                out.append(int(name))
        except OSError:
            pass
    return sorted(out)


def show(fds):
    return " ".join(f"{fd}:{'cloexec' if fd_flags(fd) & O_CLOEXEC else 'inherit'}" for fd in fds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--more", type=int, default=3)
    args = ap.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(16)
    print(l.getsockname()[1], flush=True)
    first = libc.accept4(l.fileno(), None, None, 0)
    print(f"FIRST {show([first])}", flush=True)
    sys.stdin.readline()
    known = {l.fileno(), first}
    print(f"QUEUED {show([fd for fd in sockets() if fd not in known])}", flush=True)
    got = [libc.accept4(l.fileno(), None, None, 0) for _ in range(args.more)]
    print(f"ACCEPTED {show(got)}", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
