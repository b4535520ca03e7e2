#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A thread asleep in epoll_wait on a set that holds nothing yet; another
thread connects (to --port, an echo server), sends, and only then adds the
connection to the set. The sleeper must report it, with its data, as the
kernel does (under usmc the set gets its user-memory part while the sleeper
is in the kernel: issue 44). Prints 'EVENTS <list> FD <fd>'."""
import argparse
import select
import socket
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
args = ap.parse_args()
ep = select.epoll()
got = []
asleep = threading.Event()


def waiter():
    asleep.set()
    got.extend(ep.poll(20))


t = threading.Thread(target=waiter)
t.start()
asleep.wait(5)
time.sleep(0.2)  # (into the kernel's wait; earlier only tests less, never fails)
s = socket.create_connection(("127.0.0.1", args.port))
s.sendall(b"x" * 10)
ep.register(s.fileno(), select.EPOLLIN)
t.join(25)
print("EVENTS", sorted(got), "FD", s.fileno(), flush=True)
