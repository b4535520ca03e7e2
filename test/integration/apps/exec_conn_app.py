#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A connection that crosses exec() (test_exec_conn.py): a server that
accepts and execs a program with the accepted socket as its stdin and
stdout (inetd style, with or without fork), a client that talks to it in
steps told on its stdin, and the programs exec'd.

Every payload is payload(seed, name, n): random bytes the test computes too.
Each process reports on its stdout, one os.write() a line (a forked child,
an exec'd image and their parent share the pipe).

server --seed S [--family 4|6]
    Listens on 127.0.0.1 (::1), port 0: 'READY <port>'. Commands on stdin:
      ACCEPT      accept() (10 s at most): 'ACCEPTED <peer port>'
      WRITE <m>   writes payload(S, "server", m): 'WROTE <m>' (not read by
                  the client yet: it sits in the client's receive ring)
      EXEC <how> <wrapped 0|1> <target> [<len> | <file>]
                  execs `exec_conn_app.py <target>` (echo, talker or
                  reader: <file> where the reader puts what it read) with the
                  connection on fds 0 and 1 and its report descriptor a dup
                  of this stdout; wrapped 0: LD_PRELOAD removed from its
                  environment (a program that knows nothing of usmc).
                  how: nofork      this process execs (sshd's re-exec);
                       fork-before fork; the parent closes its copy
                                   ('PARENT-CLOSED') and only then lets the
                                   child exec (a pipe): 'FORKED <pid>';
                       fork-after  fork; the child execs at once, the parent
                                   keeps its copy until CLOSE: 'FORKED <pid>'
      CLOSE       the parent closes its copy: 'PARENT-CLOSED'
      DRAIN <file> reads its copy to end of stream into <file>: 'DRAINED
                  <len>' (or 'DRAIN-ERROR <what> <len>')
      REAP        waits (20 s at most) for the forked child: 'CHILD-EXIT
                  <status>' (or 'CHILD-EXIT timeout', the child killed)
      EXIT        ends.

client --port P --seed S --pre N --post N --out FILE [--epoll] [--family 4|6]
    Connects: 'CONNECTED <local port>'. The bytes it sends are
    payload(S, "client", pre + post); all it reads goes to FILE. Commands:
      PRE    sends the first `pre` bytes without blocking: 'PRE_SENT <n>',
             or 'PRE_BLOCKED <sent>' when the connection took no more (the
             rest goes as soon as it takes more, before POST's bytes)
      READ   starts reading to end of stream: 'RECV <len> <sha256>' (or
             'RECV-ERROR <what> <len>')
      POST   sends the `post` bytes after the rest of PRE's, then shuts its
             writing side down: 'POST_SENT <total>' (or 'SEND-ERROR ...')
      EXEC <wrapped 0|1> talker <len>   (first command only) execs a talker
             with the connection on fds 0 and 1, side "client"
      EXIT   ends: status 0 when nothing failed.
    Blocking (default): a truly blocking socket, SO_RCVTIMEO/SO_SNDTIMEO
    bounding each call; a thread sends, a thread reads. --epoll: one thread,
    the socket nonblocking in an edge-triggered epoll set with stdin: every
    read and send is driven by an event of the socket (a 1 s tick only
    checks the deadline, it never retries I/O), so a wake-up that does not
    come shows as 'STALL <state>' and status 1 after --timeout seconds.

echo --report-fd F   (exec'd) 'EXECED <pid> preload=<0|1>' on F; writes
    BANNER, then echoes all it reads on fd 0 to fd 1, at end of stream
    writes 'EXEC-END <len> <sha256>\\n' to fd 1 and reports 'CHILD-DONE <len>
    <sha256>' on F, exits 0 ('CHILD-ERROR ...' and 1 on a failure).
reader --report-fd F --out FILE   (exec'd) 'EXECED ...' on F; waits up to 0.5 s
    for fd 0 to be readable, then reads (without blocking, and without
    touching the file's O_NONBLOCK, which its parent's copy shares) until
    nothing is left, into FILE: 'READER-DONE <len>' on F, exits 0.
talker --report-fd F --seed S --len N --side server|client   (exec'd)
    'EXECED ...' on F; writes payload(S, "talk-<side>", N) to fd 1 and shuts
    writing down, meanwhile reads fd 0 to end of stream: 'TALK-DONE <side>
    <len> <sha256>' on F, exits 0.
Exec'd programs end themselves after 60 s (an alarm, kept across exec)."""
import argparse
import errno
import hashlib
import os
import queue
import random
import select
import signal
import socket
import struct
import sys
import threading
import time

BANNER = b"EXEC-HELLO\n"
APP = os.path.abspath(__file__)


def payload(seed, name, n):
    return random.Random(f"{seed}-{name}").randbytes(n)


def out(*words, fd=1):
    os.write(fd, (" ".join(str(w) for w in words) + "\n").encode())


def errname(e):
    return errno.errorcode.get(getattr(e, "errno", 0) or 0, type(e).__name__)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def bound_calls(s, seconds):
    """SO_RCVTIMEO and SO_SNDTIMEO: a blocking socket whose calls end."""
    tv = struct.pack("ll", int(seconds), 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def exec_target(fd, wrapped, target, extra):
    """Execs `target` with `fd` on 0 and 1, its reports going to a dup of
    our stdout. Does not return."""
    report = os.dup(1)
    os.set_inheritable(report, True)
    os.dup2(fd, 0)
    os.dup2(fd, 1)
    env = dict(os.environ)
    if not wrapped:
        env.pop("LD_PRELOAD", None)
    argv = [sys.executable, APP, target, "--report-fd", str(report), *extra]
    os.execve(sys.executable, argv, env)


# ---- server ----

def server(a):
    fam = socket.AF_INET6 if a.family == 6 else socket.AF_INET
    ls = socket.socket(fam, socket.SOCK_STREAM)
    ls.bind(("::1" if a.family == 6 else "127.0.0.1", 0))
    ls.listen(8)
    out("READY", ls.getsockname()[1])
    conn, child = None, None
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        if w[0] == "ACCEPT":
            ls.settimeout(10)
            conn, peer = ls.accept()
            conn.setblocking(True)
            bound_calls(conn, 20)
            out("ACCEPTED", peer[1])
        elif w[0] == "WRITE":
            m = int(w[1])
            conn.sendall(payload(a.seed, "server", m))
            out("WROTE", m)
        elif w[0] == "EXEC":
            how, wrapped, target = w[1], w[2] == "1", w[3]
            extra = ["--seed", str(a.seed)]  # (the test finds a child left behind by it)
            if target == "talker":
                extra += ["--side", "server", "--len", w[4]]
            elif target == "reader":
                extra += ["--out", w[4]]
            if how == "nofork":
                exec_target(conn.fileno(), wrapped, target, extra)
            go_r, go_w = os.pipe()
            child = os.fork()
            if child == 0:
                try:
                    os.close(go_w)
                    if how == "fork-before":
                        if not select.select([go_r], [], [], 10)[0] or os.read(go_r, 1) != b"g":
                            os._exit(3)
                    os.close(go_r)
                    fd = os.dup(conn.fileno())
                    conn.close()  # inetd style: only fds 0 and 1 (and the report) cross the exec
                    ls.close()
                    exec_target(fd, wrapped, target, extra)
                finally:
                    os._exit(4)
            os.close(go_r)
            if how == "fork-before":
                conn.close()
                conn = None
                out("PARENT-CLOSED")
                os.write(go_w, b"g")
            os.close(go_w)
            out("FORKED", child)
        elif w[0] == "CLOSE":
            conn.close()
            conn = None
            out("PARENT-CLOSED")
        elif w[0] == "DRAIN":
            n = 0
            with open(w[1], "wb") as f:
                try:
                    while True:
                        d = conn.recv(1 << 16)
                        if not d:
                            break
                        f.write(d)
                        n += len(d)
                except OSError as e:
                    out("DRAIN-ERROR", errname(e), n)
                    continue
            out("DRAINED", n)
        elif w[0] == "REAP":
            deadline = time.monotonic() + 20
            status = None
            while time.monotonic() < deadline:
                pid, st = os.waitpid(child, os.WNOHANG)
                if pid:
                    status = os.waitstatus_to_exitcode(st)
                    break
                time.sleep(0.05)
            if status is None:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
                status = "timeout"
            out("CHILD-EXIT", status)
        elif w[0] == "EXIT":
            return 0
    return 0


# ---- client ----

class Client:
    def __init__(self, a):
        self.a = a
        self.data = payload(a.seed, "client", a.pre + a.post)
        self.failed = False
        self.outf = open(a.out, "wb")
        self.h = hashlib.sha256()
        self.n_read = 0
        self.deadline = time.monotonic() + a.timeout

    def connect(self):
        fam = socket.AF_INET6 if self.a.family == 6 else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(("::1" if self.a.family == 6 else "127.0.0.1", self.a.port))
        s.setblocking(True)
        self.s = s
        out("CONNECTED", s.getsockname()[1])

    def got(self, d):
        self.outf.write(d)
        self.h.update(d)
        self.n_read += len(d)

    def end_of_stream(self):
        self.outf.close()
        out("RECV", self.n_read, self.h.hexdigest())

    def send_nonblocking(self, view):
        """Sends what the socket takes now; the rest."""
        while view:
            try:
                view = view[self.s.send(view):]
            except BlockingIOError:
                break
        return view

    # -- blocking: a sender thread and a reader thread --

    def run_blocking(self):
        bound_calls(self.s, self.a.timeout)
        jobs = queue.Queue()
        sender = threading.Thread(target=self.sender, args=(jobs,), daemon=True)
        reader = threading.Thread(target=self.reader, daemon=True)
        sender.start()
        for line in sys.stdin:
            w = line.split()
            if not w:
                continue
            if w[0] == "PRE":
                self.s.setblocking(False)
                rest = self.send_nonblocking(memoryview(self.data)[:self.a.pre])
                self.s.setblocking(True)
                bound_calls(self.s, self.a.timeout)
                if rest:
                    out("PRE_BLOCKED", self.a.pre - len(rest))
                    jobs.put(rest)
                else:
                    out("PRE_SENT", self.a.pre)
            elif w[0] == "READ":
                reader.start()
            elif w[0] == "POST":
                jobs.put(memoryview(self.data)[self.a.pre:])
                jobs.put(None)
            elif w[0] == "EXEC":
                exec_target(self.s.fileno(), w[1] == "1", w[2],
                            ["--seed", str(self.a.seed), "--side", "client", "--len", w[3]])
            elif w[0] == "EXIT":
                break
        jobs.put("end")
        sender.join(5)
        if reader.ident is not None:
            reader.join(5)
        return 1 if self.failed or sender.is_alive() or reader.is_alive() else 0

    def sender(self, jobs):
        while True:
            job = jobs.get()
            if job == "end":
                return
            try:
                if job is None:
                    self.s.shutdown(socket.SHUT_WR)
                    out("POST_SENT", len(self.data))
                else:
                    self.s.sendall(job)
            except OSError as e:
                self.failed = True
                out("SEND-ERROR", errname(e))
                return

    def reader(self):
        try:
            while True:
                d = self.s.recv(1 << 16)
                if not d:
                    break
                self.got(d)
            self.end_of_stream()
        except OSError as e:
            self.failed = True
            out("RECV-ERROR", errname(e), self.n_read)

    # -- one edge-triggered epoll loop --

    def run_epoll(self):
        s = self.s
        s.setblocking(False)
        ep = select.epoll()
        ep.register(s.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP | select.EPOLLET)
        ep.register(0, select.EPOLLIN)
        pending = memoryview(b"")
        reading = eof = shut = want_shut = exiting = False
        pre_reported = True
        linebuf = b""

        def try_send():
            nonlocal pending, shut, pre_reported
            try:
                pending = self.send_nonblocking(pending)
                if not pending and not pre_reported:
                    pre_reported = True
                    out("PRE_DONE")
                if not pending and want_shut and not shut:
                    s.shutdown(socket.SHUT_WR)
                    shut = True
                    out("POST_SENT", len(self.data))
            except OSError as e:
                self.failed = True
                out("SEND-ERROR", errname(e))
                pending = memoryview(b"")

        def try_read():
            nonlocal eof
            try:
                while not eof:
                    try:
                        d = s.recv(1 << 16)
                    except BlockingIOError:
                        return
                    if not d:
                        eof = True
                        self.end_of_stream()
                        return
                    self.got(d)
            except OSError as e:
                self.failed = True
                eof = True
                out("RECV-ERROR", errname(e), self.n_read)

        while not exiting:
            if time.monotonic() > self.deadline:
                out("STALL", f"pending={len(pending)}", f"reading={int(reading)}", f"eof={int(eof)}",
                    f"shut={int(shut)}", f"read={self.n_read}")
                return 1
            for fd, ev in ep.poll(1.0):  # (the tick only looks at the deadline)
                if fd == 0:
                    chunk = os.read(0, 4096)
                    if not chunk:
                        ep.unregister(0)
                        exiting = True
                    linebuf += chunk
                    while b"\n" in linebuf:
                        line, linebuf = linebuf.split(b"\n", 1)
                        w = line.decode().split()
                        if not w:
                            continue
                        if w[0] == "PRE":
                            pending = memoryview(self.data)[:self.a.pre]
                            try_send()
                            if pending:
                                pre_reported = False  # ('PRE_DONE' when the rest went)
                                out("PRE_BLOCKED", self.a.pre - len(pending))
                            else:
                                out("PRE_SENT", self.a.pre)
                        elif w[0] == "READ":
                            reading = True
                            try_read()  # (edges that came before READ were not acted on)
                        elif w[0] == "POST":
                            pending = memoryview(bytes(pending) + self.data[self.a.pre:])
                            want_shut = True
                            try_send()
                        elif w[0] == "EXIT":
                            exiting = True
                    continue
                if ev & select.EPOLLOUT and pending:
                    try_send()
                if ev & (select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR) and reading:
                    try_read()
        return 1 if self.failed or not eof else 0


def client(a):
    c = Client(a)
    try:
        c.connect()
    except OSError as e:
        out("ERROR", "connect", errname(e))
        return 1
    return c.run_epoll() if a.epoll else c.run_blocking()


# ---- exec'd programs ----

def echo(a):
    signal.alarm(60)
    r = a.report_fd
    out("EXECED", os.getpid(), f"preload={int('LD_PRELOAD' in os.environ)}", fd=r)
    h, n = hashlib.sha256(), 0
    try:
        write_all(1, BANNER)
        while True:
            d = os.read(0, 1 << 16)
            if not d:
                break
            h.update(d)
            n += len(d)
            write_all(1, d)
        write_all(1, f"EXEC-END {n} {h.hexdigest()}\n".encode())
    except OSError as e:
        out("CHILD-ERROR", errname(e), n, fd=r)
        return 1
    out("CHILD-DONE", n, h.hexdigest(), fd=r)
    return 0


def reader(a):
    signal.alarm(60)
    r = a.report_fd
    out("EXECED", os.getpid(), f"preload={int('LD_PRELOAD' in os.environ)}", fd=r)
    s = socket.socket(fileno=os.dup(0))
    got = bytearray()
    if select.select([s], [], [], 0.5)[0]:
        while True:
            try:
                d = s.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            if not d:
                break
            got += d
    s.close()
    with open(a.out, "wb") as f:
        f.write(got)
    out("READER-DONE", len(got), fd=r)
    return 0


def talker(a):
    signal.alarm(60)
    r = a.report_fd
    out("EXECED", os.getpid(), f"preload={int('LD_PRELOAD' in os.environ)}", fd=r)
    failed = []

    def send():
        try:
            write_all(1, payload(a.seed, f"talk-{a.side}", a.len))
            s = socket.socket(fileno=os.dup(1))
            s.shutdown(socket.SHUT_WR)
            s.close()
        except OSError as e:
            failed.append(errname(e))
            out("TALK-SEND-ERROR", a.side, errname(e), fd=r)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    h, n = hashlib.sha256(), 0
    try:
        while True:
            d = os.read(0, 1 << 16)
            if not d:
                break
            h.update(d)
            n += len(d)
    except OSError as e:
        out("TALK-RECV-ERROR", a.side, errname(e), n, fd=r)
        return 1
    t.join(30)
    out("TALK-DONE", a.side, n, h.hexdigest(), fd=r)
    return 1 if failed or t.is_alive() else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=("server", "client", "echo", "talker", "reader"))
    ap.add_argument("--family", type=int, default=4, choices=(4, 6))
    ap.add_argument("--port", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pre", type=int, default=0)
    ap.add_argument("--post", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--epoll", action="store_true")
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--report-fd", type=int)
    ap.add_argument("--side")
    ap.add_argument("--len", type=int, default=0)
    a = ap.parse_args()
    return {"server": server, "client": client, "echo": echo, "talker": talker, "reader": reader}[a.role](a)


if __name__ == "__main__":
    sys.exit(main())
