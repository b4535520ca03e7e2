#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A server that accepts late, and clients that connect to it and send a
known payload (test_late_accept.py).

server [--family 4|6] [--backlog N]
    Listens on 127.0.0.1 or ::1, port 0, prints 'READY <port>', then does
    nothing with the listener until told on stdin (its main thread blocks in
    readline(): no accept, no poll on the listener). Commands, one a line:
      ACCEPT <n> [<timeout s>]  accept n connections (blocking accept(); with
                                a timeout > 0: sock.settimeout, so poll() then
                                accept()), each read to EOF on a thread of its
                                own: 'CONN <role> <pid> <len> <sha256>
                                <first 16 bytes hex> <ms from ACCEPT to EOF>';
                                then 'DONE <role> <n>' (or 'ACCEPT-TIMEOUT
                                <role> <got>' / 'ACCEPT-ERROR ...' before
                                the reads end); last 'END <role> <got>'.
      CLOSE                     closes the listener unaccepted: 'CLOSED'.
      FORK child <n>            forks ('FORKED <child pid>'); the child
                                accepts (blocking, ended by an alarm after
                                20 s) and reads n connections (as ACCEPT,
                                role child) and exits; the parent never
                                accepts: it reaps the child ('REAPED
                                <exit status>') and waits for more.
      FORK parent <n>           forks ('FORKED <child pid>'); the child
                                exits at once (os._exit);
                                the parent reaps it ('REAPED <status>'), then
                                accepts n with a 10 s timeout (role parent).
      EXIT                      ends.

client --port P [--family 4|6] [--mode blocking|nonblocking|timeout]
       [--size N] [--first N] [--then-read S] [--warmup]
    Prints 'PAYLOAD <len> <sha256> <first 16 bytes hex>' (random bytes),
    connects (blocking: connect(); nonblocking: connect_ex() then poll() for
    POLLOUT and SO_ERROR, the socket left nonblocking for the sends too;
    timeout: sock.settimeout(5), Python's own poll loop), sends its first
    --first bytes at once and prints 'CONNECTED <connect ms>', sends the
    rest, prints 'SENT <len>' and closes ('CLOSED'). With --then-read S it
    sends only the first chunk, then reads for up to S seconds and prints
    'READ EOF|ERR <name>|DATA <n> <hex>|TIMEOUT <ms>' instead. With
    --warmup it first connects, sends 2000 random bytes and closes ('WARM
    <len> <sha256> <first 16 bytes hex> <ms>'), then waits for 'GO' on
    stdin before all of the above. Failures:
    'ERROR <stage> <what>' and exit status 1."""
import argparse
import errno
import hashlib
import os
import select
import signal
import socket
import sys
import threading
import time


def out(*words):
    # One write per line: a forked child and its parent share the pipe.
    os.write(1, (" ".join(str(w) for w in words) + "\n").encode())


def addr_of(family, port):
    return ("::1", port) if family == 6 else ("127.0.0.1", port)


def sock_of(family):
    return socket.socket(socket.AF_INET6 if family == 6 else socket.AF_INET, socket.SOCK_STREAM)


# ---- server ----

def read_to_eof(c, role, t0, done):
    h = hashlib.sha256()
    n = 0
    first = b""
    try:
        c.settimeout(60)  # bounded: a stream that never ends is reported
        while True:
            d = c.recv(1 << 16)
            if not d:
                break
            if len(first) < 16:
                first += d[:16 - len(first)]
            h.update(d)
            n += len(d)
        out("CONN", role, os.getpid(), n, h.hexdigest(), first.hex() or "-",
            f"{(time.monotonic() - t0) * 1000:.1f}")
    except OSError as e:
        out("CONN-ERROR", role, os.getpid(), n, first.hex() or "-", type(e).__name__,
            errno.errorcode.get(e.errno or 0, str(e.errno)))
    finally:
        c.close()
        done.release()


def accept_n(ls, n, timeout, role):
    t0 = time.monotonic()
    ls.settimeout(timeout if timeout > 0 else None)
    done = threading.Semaphore(0)
    got = 0
    for _ in range(n):
        try:
            c, _ = ls.accept()
        except socket.timeout:
            out("ACCEPT-TIMEOUT", role, got)
            break
        except OSError as e:
            out("ACCEPT-ERROR", role, got, errno.errorcode.get(e.errno or 0, str(e.errno)))
            break
        got += 1
        c.settimeout(None)
        threading.Thread(target=read_to_eof, args=(c, role, t0, done), daemon=True).start()
    for _ in range(got):
        done.acquire()
    if got == n:
        out("DONE", role, n)
    out("END", role, got)
    return got


def server(a):
    ls = sock_of(a.family)
    ls.bind(addr_of(a.family, 0))
    ls.listen(a.backlog)
    out("READY", ls.getsockname()[1])
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        w = line.split()
        if not w:
            continue
        if w[0] == "ACCEPT":
            accept_n(ls, int(w[1]), float(w[2]) if len(w) > 2 else 0, "server")
        elif w[0] == "CLOSE":
            ls.close()
            out("CLOSED")
        elif w[0] == "FORK":
            who, n = w[1], int(w[2])
            pid = os.fork()
            if pid == 0:
                code = 0
                if who == "child":
                    # A pre-fork worker's blocking accept(), bounded by an
                    # alarm (its default action ends the child).
                    signal.alarm(20)
                    code = 0 if accept_n(ls, n, 0, "child") == n else 1
                os._exit(code)
            out("FORKED", pid)
            _, status = os.waitpid(pid, 0)
            out("REAPED", os.waitstatus_to_exitcode(status))
            if who == "parent":
                accept_n(ls, n, 10, "parent")
        elif w[0] == "EXIT":
            return


# ---- client ----

def errname(e):
    return errno.errorcode.get(e.errno or 0, type(e).__name__)


def wait_writable(s, deadline):
    p = select.poll()
    p.register(s, select.POLLOUT)
    left = deadline - time.monotonic()
    if left <= 0 or not p.poll(int(left * 1000)):
        raise TimeoutError("not writable in time")


def send_all(s, data, mode, deadline):
    if mode != "nonblocking":
        s.sendall(data)
        return
    view = memoryview(data)
    while view:
        try:
            view = view[s.send(view):]
        except BlockingIOError:
            wait_writable(s, deadline)


def warm_up(a):
    """One connection to the server first (blocking, 2000 bytes, closed):
    this process then knows the listener (usmc fetches its announcement
    memory from the server's engine at the first connect to it)."""
    data = os.urandom(2000)
    t0 = time.monotonic()
    with sock_of(a.family) as s:
        s.connect(addr_of(a.family, a.port))
        s.sendall(data)
    out("WARM", len(data), hashlib.sha256(data).hexdigest(), data[:16].hex(),
        f"{(time.monotonic() - t0) * 1000:.1f}")
    if sys.stdin.readline().strip() != "GO":
        raise SystemExit(1)


def client(a):
    if a.warmup:
        warm_up(a)
    payload = os.urandom(a.size)
    out("PAYLOAD", len(payload), hashlib.sha256(payload).hexdigest(), payload[:16].hex() or "-")
    s = sock_of(a.family)
    where = addr_of(a.family, a.port)
    deadline = time.monotonic() + 30
    t0 = time.monotonic()
    try:
        if a.mode == "blocking":
            s.connect(where)
        elif a.mode == "timeout":
            s.settimeout(5)
            s.connect(where)
        else:
            s.setblocking(False)
            rc = s.connect_ex(where)
            if rc == errno.EINPROGRESS:
                p = select.poll()
                p.register(s, select.POLLOUT)
                if not p.poll(10000):
                    raise TimeoutError("connect did not complete in 10 s")
                rc = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if rc:
                raise OSError(rc, os.strerror(rc))
    except OSError as e:
        out("ERROR", "connect", errname(e), f"{(time.monotonic() - t0) * 1000:.1f}")
        return 1
    took = (time.monotonic() - t0) * 1000
    first = payload[:a.first]
    try:
        send_all(s, first, a.mode, deadline)
    except OSError as e:
        out("ERROR", "first-send", errname(e))
        return 1
    out("CONNECTED", f"{took:.1f}")
    if a.then_read is not None:
        # What the peer's end gives: end of stream or an error, never bytes.
        s.setblocking(True)
        s.settimeout(a.then_read)
        t1 = time.monotonic()
        try:
            d = s.recv(1 << 16)
            verdict = ["EOF"] if not d else ["DATA", len(d), d[:32].hex()]
        except socket.timeout:
            verdict = ["TIMEOUT"]
        except OSError as e:
            verdict = ["ERR", errname(e)]
        out("READ", *verdict, f"{(time.monotonic() - t1) * 1000:.1f}")
        s.close()
        return 0
    try:
        send_all(s, payload[a.first:], a.mode, deadline)
    except OSError as e:
        out("ERROR", "send", errname(e))
        return 1
    out("SENT", len(payload))
    s.close()
    out("CLOSED")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=("server", "client"))
    ap.add_argument("--family", type=int, default=4, choices=(4, 6))
    ap.add_argument("--backlog", type=int, default=16)
    ap.add_argument("--port", type=int)
    ap.add_argument("--mode", default="blocking", choices=("blocking", "nonblocking", "timeout"))
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--first", type=int, default=1000)
    ap.add_argument("--then-read", type=float)
    ap.add_argument("--warmup", action="store_true")
    a = ap.parse_args()
    if a.role == "server":
        server(a)
        return 0
    return client(a)


if __name__ == "__main__":
    sys.exit(main())
