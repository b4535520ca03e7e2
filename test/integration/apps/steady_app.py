#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A long-running echo server and a checking client, for tests that attack
a server while others use it (test_hostile.py).

server: one thread, selectors (epoll; poll with --selector poll), nonblocking sockets, buffered echo of
        every connection until its EOF. Runs until SIGTERM (then prints
        'DONE served=<n>' and exits 0) or --seconds. A failing accept()
        (EMFILE) is retried after 50 ms, as servers back off.
client: rounds of -n sequential connections; each sends --size bytes,
        reads exactly those bytes back (byte for byte) and closes. Prints
        'ROUND <k> ok=<n> bad=<n> max_ms=<ms> first_error=<...>' per round
        (max_ms: the slowest connection, from connect to the last byte).
        --pause-ms: wait that long between connect and the first send.
        Every socket operation times out after --timeout seconds.
        Without --interactive one round, exit 0 iff it was all ok; with it,
        one round per line on stdin, until EOF or 'quit'.
conns:  -n connections held open, each echoed once ('CONNECTED <n>'); then
        per line 'run <seconds>' on stdin, echo round trips on them for that
        long: connection 0 rests the whole run and is used at its end; of
        the others one at a time rests for --rest-ms while the rest are
        busy (each busy step sends on every busy connection, then reads
        every echo back), and is then used again, alone or within a busy
        step by turns. Each round trip sends 1 to --size random bytes and
        checks them byte for byte. Prints 'RUN <k> ok=<n> bad=<n>
        max_ms=<ms> rested=<n> rested_max_ms=<ms> first_error=<...>' (a
        round trip's time: from its send to its last byte; 'rested': round
        trips on a connection that had rested); stops a run at its first
        error. 'quit' or EOF closes them; exit 0 iff every run was all ok.
"""
import argparse
import errno
import os
import selectors
import signal
import socket
import sys
import time



def server(args):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(args.backlog)
    ls.setblocking(False)
    print("READY", ls.getsockname()[1], flush=True)
    sel = selectors.PollSelector() if args.selector == "poll" else selectors.DefaultSelector()
    sel.register(ls, selectors.EVENT_READ, None)
    out = {}  # socket -> bytes still to echo
    served = accept_errors = 0
    paused_until = 0.0
    deadline = time.monotonic() + args.seconds
    while not stop and time.monotonic() < deadline:
        if paused_until and time.monotonic() >= paused_until:
            sel.register(ls, selectors.EVENT_READ, None)
            paused_until = 0.0
        for key, ev in sel.select(0.05):
            if key.data is None:
                try:
                    c, _ = ls.accept()
                except BlockingIOError:
                    continue
                except OSError as e:
                    accept_errors += 1
                    if accept_errors == 1:
                        print("accept:", os.strerror(e.errno), file=sys.stderr, flush=True)
                    if e.errno in (errno.EMFILE, errno.ENFILE):
                        sel.unregister(ls)
                        paused_until = time.monotonic() + 0.05
                    continue
                c.setblocking(False)
                out[c] = bytearray()
                sel.register(c, selectors.EVENT_READ, "conn")
                continue
            c = key.fileobj
            buf = out[c]
            eof = False
            if ev & selectors.EVENT_READ:
                try:
                    data = c.recv(65536)
                    buf += data
                    eof = not data
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    eof = True
            if buf and not eof:
                try:
                    del buf[:c.send(buf)]
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    eof = True
            if eof:
                sel.unregister(c)
                c.close()
                del out[c]
                served += 1
            else:
                want = selectors.EVENT_READ | (selectors.EVENT_WRITE if buf else 0)
                if key.events != want:
                    sel.modify(c, want, "conn")
    print(f"DONE served={served} accept_errors={accept_errors}", flush=True)


def one_connection(port, payload, timeout, pause):
    """Returns None if the echo came back byte for byte, else what went wrong."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        time.sleep(pause)  # the client's own behaviour: it speaks this late
        c.sendall(payload)
        got = bytearray()
        while len(got) < len(payload):
            chunk = c.recv(len(payload) - len(got))
            if not chunk:
                break
            got += chunk
    if got != payload:
        return f"echo mismatch: {len(got)} of {len(payload)} bytes, starts {bytes(got[:16]).hex()}"
    return None


def run_round(args, k):
    ok = bad = 0
    worst = 0.0
    first_error = "-"
    for i in range(args.n):
        payload = (f"round {k} conn {i} pid {os.getpid()} ".encode() * (args.size // 24 + 1))[:args.size]
        t0 = time.monotonic()
        try:
            error = one_connection(args.port, payload, args.timeout, args.pause_ms / 1000)
        except OSError as e:
            error = repr(e)
        worst = max(worst, time.monotonic() - t0)
        if error is None:
            ok += 1
        else:
            bad += 1
            if first_error == "-":
                first_error = error.replace(" ", "_")
    print(f"ROUND {k} ok={ok} bad={bad} max_ms={worst * 1000:.0f} first_error={first_error}", flush=True)
    return bad == 0


class Held:
    """Round trips on held connections, timed and checked (conns)."""

    def __init__(self, args):
        self.args = args
        self.socks = []
        self.reset()

    def reset(self):
        self.ok = self.bad = self.rested = 0
        self.worst = self.rested_worst = 0.0
        self.first_error = "-"

    def fail(self, error):
        self.bad += 1
        if self.first_error == "-":
            self.first_error = error.replace(" ", "_")

    def step(self, idx, rested=()):
        """Sends on every connection of `idx`, then reads each echo back;
        False at the first error."""
        sent = []
        for i in idx:
            payload = os.urandom(1 + int.from_bytes(os.urandom(2), "little") % self.args.size)
            t0 = time.monotonic()
            try:
                self.socks[i].sendall(payload)
            except OSError as e:
                self.fail(f"conn {i} send: {e!r}")
                return False
            sent.append((i, payload, t0))
        for i, payload, t0 in sent:
            got = bytearray()
            try:
                while len(got) < len(payload):
                    chunk = self.socks[i].recv(len(payload) - len(got))
                    if not chunk:
                        break
                    got += chunk
            except OSError as e:
                self.fail(f"conn {i} after {len(got)} of {len(payload)} bytes: {e!r}")
                return False
            ms = time.monotonic() - t0
            if got != payload:
                self.fail(f"conn {i} echo mismatch: {len(got)} of {len(payload)} bytes")
                return False
            self.ok += 1
            self.worst = max(self.worst, ms)
            if i in rested:
                self.rested += 1
                self.rested_worst = max(self.rested_worst, ms)
        return True

    def run(self, seconds):
        """One 'run' (see conns above); False at the first error."""
        n = len(self.socks)
        others = list(range(1, n))
        resting, since, alone = (others[0] if others else None), time.monotonic(), True
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            busy = [i for i in others if i != resting]
            if not self.step(busy):
                return False
            if resting is not None and time.monotonic() - since >= self.args.rest_ms / 1000:
                # Idle while the others were busy: now used again.
                if not self.step([resting] if alone else [resting, *busy], rested=(resting,)):
                    return False
                alone = not alone
                resting = others[(others.index(resting) + 1) % len(others)]
                since = time.monotonic()
        return self.step([0], rested=(0,)) and self.step(range(n))


def conns(args):
    held = Held(args)
    for i in range(args.n):
        held.socks.append(socket.create_connection(("127.0.0.1", args.port), timeout=args.timeout))
    good = held.step(range(args.n))
    print(f"CONNECTED {held.ok}" if good else f"ERROR {held.first_error}", flush=True)
    k = 0
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "run":
            break
        k += 1
        held.reset()
        good = held.run(float(words[1])) and good
        print(f"RUN {k} ok={held.ok} bad={held.bad} max_ms={held.worst * 1000:.0f} "
              f"rested={held.rested} rested_max_ms={held.rested_worst * 1000:.0f} "
              f"first_error={held.first_error}", flush=True)
    for c in held.socks:
        c.close()
    return 0 if good else 1


def client(args):
    if not args.interactive:
        return 0 if run_round(args, 1) else 1
    k = 0
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        k += 1
        run_round(args, k)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client", "conns"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--backlog", type=int, default=128)
    p.add_argument("--seconds", type=float, default=120)
    p.add_argument("-n", type=int, default=3)
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--timeout", type=float, default=5, help="per socket operation (s)")
    p.add_argument("--pause-ms", type=float, default=0, help="between connect and the first send")
    p.add_argument("--interactive", action="store_true")
    p.add_argument("--rest-ms", type=float, default=300, help="conns: how long a connection rests")
    p.add_argument("--selector", choices=["epoll", "poll"], default="epoll", help="server: how it waits")
    args = p.parse_args()
    if args.role == "server":
        server(args)
        return 0
    return conns(args) if args.role == "conns" else client(args)


if __name__ == "__main__":
    sys.exit(main())
