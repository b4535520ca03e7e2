#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Echo server and client in the I/O styles real programs use, for the usmc
integration tests. Every run is bounded: servers stop after --conns
connections, every socket operation has a timeout, and the client checks each
byte it gets back (SHA-256 of what it sent against what it received)."""
import argparse
import hashlib
import os
import select
import selectors
import signal
import socket
import sys
import threading
import time

BANNER = b"220 usmc-test ready\r\n"
IO_TIMEOUT = 20.0


def log(*args):
    print(*args, flush=True)


def listen(port, family=socket.AF_INET, host="127.0.0.1"):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(128)
    return s


def echo_blocking(conn, banner):
    conn.settimeout(IO_TIMEOUT)
    if banner:
        conn.sendall(BANNER)
    while True:
        data = conn.recv(65536)
        if not data:
            break
        conn.sendall(data)
    conn.close()


def serve_blocking(lst, args):
    for _ in range(args.conns):
        conn, _ = lst.accept()
        echo_blocking(conn, args.banner)


def serve_prefork(lst, args):
    # listen in the parent, accept in children (the nginx/apache model)
    per_child = args.conns // args.workers
    children = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            try:
                for _ in range(per_child):
                    conn, _ = lst.accept()
                    echo_blocking(conn, args.banner)
            finally:
                os._exit(0)
        children.append(pid)
    lst.close()
    for pid in children:
        os.waitpid(pid, 0)


def serve_forkaccept(lst, args):
    # accept in the parent, hand each connection to a fresh child
    children = []
    for _ in range(args.conns):
        conn, _ = lst.accept()
        pid = os.fork()
        if pid == 0:
            lst.close()
            echo_blocking(conn, args.banner)
            os._exit(0)
        conn.close()
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)


class Pending:
    def __init__(self, conn, banner):
        self.conn = conn
        self.out = bytearray(BANNER if banner else b"")
        self.eof = False


def serve_multiplexed(lst, args):
    """select / poll / selectors (epoll): one thread, nonblocking sockets."""
    lst.setblocking(False)
    conns = {}
    served = 0
    deadline = time.monotonic() + args.deadline

    def want(p):
        return (True, bool(p.out))

    while served < args.conns or conns:
        if time.monotonic() > deadline:
            raise SystemExit("server deadline passed")
        rlist = [lst] if served + len(conns) < args.conns else []
        wlist = []
        for p in conns.values():
            r, w = want(p)
            if r and not p.eof:
                rlist.append(p.conn)
            if w:
                wlist.append(p.conn)
        readable, writable = wait(args.mode, rlist, wlist)
        for s in readable:
            if s is lst:
                try:
                    c, _ = lst.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                conns[c.fileno()] = Pending(c, args.banner)
                continue
            p = conns.get(s.fileno())
            if p is None:
                continue
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            if data:
                p.out += data
            else:
                p.eof = True
        for s in writable:
            p = conns.get(s.fileno())
            if p is None or not p.out:
                continue
            try:
                n = s.send(p.out)
                del p.out[:n]
            except BlockingIOError:
                pass
        for fd, p in list(conns.items()):
            if p.eof and not p.out:
                p.conn.close()
                del conns[fd]
                served += 1


_selector = None
_poller = None
_epoll = None
_epoll_rounds = 0


def wait_epoll_churn(rlist, wlist):
    """Raw epoll the way ae/libevent loops use it: every descriptor added
    before the wait and deleted after it; the epoll set itself closed and made
    anew every few rounds (the new one usually gets the old number). Checks
    EEXIST on a second add and ENOENT on a modify after delete."""
    global _epoll, _epoll_rounds
    _epoll_rounds += 1
    if _epoll is None or _epoll_rounds % 7 == 0:
        if _epoll is not None:
            _epoll.close()
        _epoll = select.epoll()
    objs = {s.fileno(): s for s in rlist + wlist}
    for fd, s in objs.items():
        ev = (select.EPOLLIN if s in rlist else 0) | (select.EPOLLOUT if s in wlist else 0)
        _epoll.register(fd, ev)
        try:
            _epoll.register(fd, ev)
            raise SystemExit("epoll: a second add did not fail with EEXIST")
        except FileExistsError:
            pass
    ready = _epoll.poll(1.0)
    for fd in objs:
        _epoll.unregister(fd)
    for fd in list(objs)[:1]:
        try:
            _epoll.modify(fd, select.EPOLLIN)
            raise SystemExit("epoll: a modify after delete did not fail with ENOENT")
        except FileNotFoundError:
            pass
    r = [objs[fd] for fd, ev in ready if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR)]
    w = [objs[fd] for fd, ev in ready if ev & select.EPOLLOUT]
    return r, w


def wait(mode, rlist, wlist):
    global _selector, _poller
    if mode == "epollchurn":
        return wait_epoll_churn(rlist, wlist)
    if mode == "select":
        r, w, _ = select.select(rlist, wlist, [], 1.0)
        return r, w
    if mode == "poll":
        if _poller is None:
            _poller = select.poll()
        objs = {}
        for s in rlist + wlist:
            objs[s.fileno()] = s
        for fd in objs:
            ev = (select.POLLIN if objs[fd] in rlist else 0) | (select.POLLOUT if objs[fd] in wlist else 0)
            _poller.register(fd, ev)
        ready = _poller.poll(1000)
        for fd in objs:
            _poller.unregister(fd)
        r = [objs[fd] for fd, ev in ready if ev & (select.POLLIN | select.POLLHUP | select.POLLERR)]
        w = [objs[fd] for fd, ev in ready if ev & select.POLLOUT]
        return r, w
    # selectors: epoll on Linux, registrations kept and modified (EPOLL_CTL_MOD)
    if _selector is None:
        _selector = selectors.DefaultSelector()
    wanted = {}
    for s in rlist:
        wanted[s] = wanted.get(s, 0) | selectors.EVENT_READ
    for s in wlist:
        wanted[s] = wanted.get(s, 0) | selectors.EVENT_WRITE
    for key in list(_selector.get_map().values()):
        if key.fileobj not in wanted or key.fileobj.fileno() < 0:
            _selector.unregister(key.fileobj)
    for s, ev in wanted.items():
        try:
            key = _selector.get_key(s)
            if key.events != ev:
                _selector.modify(s, ev)
        except KeyError:
            _selector.register(s, ev)
    r, w = [], []
    for key, ev in _selector.select(1.0):
        if ev & selectors.EVENT_READ:
            r.append(key.fileobj)
        if ev & selectors.EVENT_WRITE:
            w.append(key.fileobj)
    return r, w


def server(args):
    signal.signal(signal.SIGALRM, lambda *_: os._exit(3))
    signal.alarm(int(args.deadline) + 5)
    family = socket.AF_INET6 if args.ipv6 else socket.AF_INET
    lst = listen(args.port, family, "::1" if args.ipv6 else "127.0.0.1")
    log("READY", lst.getsockname()[1])
    if args.mode == "blocking":
        serve_blocking(lst, args)
    elif args.mode == "prefork":
        serve_prefork(lst, args)
    elif args.mode == "forkaccept":
        serve_forkaccept(lst, args)
    else:
        serve_multiplexed(lst, args)
    log("DONE")


def payload(seed, size):
    # deterministic, incompressible-looking bytes
    out = bytearray()
    block = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block * 64
    return bytes(out[:size])


def payload_chunks(seed, size, chunk=65536):
    """payload(seed, size) in pieces, never all in memory (1 GiB transfers)."""
    block = hashlib.sha256(str(seed).encode()).digest()
    buf = bytearray()
    produced = 0
    while produced < size:
        while len(buf) < chunk:
            block = hashlib.sha256(block).digest()
            buf += block * 64
        take = min(chunk, size - produced)
        yield bytes(buf[:take])
        del buf[:take]
        produced += take


def one_connection(args, index):
    family = socket.AF_INET6 if args.ipv6 else socket.AF_INET
    host = "::1" if args.ipv6 else "127.0.0.1"
    if args.blocking_connect:
        # A blocking connect (no timeout yet), then timeouts for the I/O:
        # the shape SMC-D handshakes in the connect call need.
        c = socket.socket(family, socket.SOCK_STREAM)
        c.connect((host, args.port))
        c.settimeout(IO_TIMEOUT)
    else:
        c = socket.socket(family, socket.SOCK_STREAM)
        c.settimeout(IO_TIMEOUT)
        c.connect((host, args.port))
    if args.banner:
        t0 = time.monotonic()
        got = b""
        while not got.endswith(b"\r\n"):
            chunk = c.recv(100)
            if not chunk:
                raise SystemExit("connection closed before the banner")
            got += chunk
        waited = time.monotonic() - t0
        if got != BANNER:
            raise SystemExit(f"bad banner {got!r}")
        if waited > args.max_banner_wait:
            raise SystemExit(f"banner took {waited:.3f}s (limit {args.max_banner_wait}s)")
    if args.io == "blocking":
        sent = hashlib.sha256()
        data = range(args.size)  # only its length is used below

        def sender():
            for piece in payload_chunks(index, args.size):
                sent.update(piece)
                c.sendall(piece)
            c.shutdown(socket.SHUT_WR)
        t = threading.Thread(target=sender)
        t.start()
        h = hashlib.sha256()
        got = 0
        while True:
            chunk = c.recv(262144)
            if not chunk:
                break
            h.update(chunk)
            got += len(chunk)
        t.join()
        sent_hash = sent.hexdigest()
    else:
        data = payload(index, args.size)
        sent_hash = hashlib.sha256(data).hexdigest()
        c.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(c, selectors.EVENT_READ | selectors.EVENT_WRITE)
        view = memoryview(data)
        off = 0
        h = hashlib.sha256()
        got = 0
        deadline = time.monotonic() + IO_TIMEOUT
        done_writing = False
        while True:
            if time.monotonic() > deadline:
                raise SystemExit("client deadline passed")
            for key, ev in sel.select(1.0):
                if ev & selectors.EVENT_WRITE and not done_writing:
                    try:
                        off += c.send(view[off:off + 65536])
                    except BlockingIOError:
                        pass
                    if off == len(view):
                        c.shutdown(socket.SHUT_WR)
                        done_writing = True
                        sel.modify(c, selectors.EVENT_READ)
                if ev & selectors.EVENT_READ:
                    try:
                        chunk = c.recv(262144)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.close()
                        c.close()
                        if got != len(data) or h.hexdigest() != sent_hash:
                            raise SystemExit(f"connection {index}: echo mismatch ({got} of {len(data)} bytes)")
                        return
                    h.update(chunk)
                    got += len(chunk)
    c.close()
    if got != len(data) or h.hexdigest() != sent_hash:
        raise SystemExit(f"connection {index}: echo mismatch ({got} of {len(data)} bytes)")


def client(args):
    signal.signal(signal.SIGALRM, lambda *_: os._exit(3))
    signal.alarm(int(args.deadline) + 5)
    if args.parallel > 1:
        errors = []

        def worker(k):
            try:
                for i in range(k, args.conns, args.parallel):
                    one_connection(args, i)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(args.parallel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise SystemExit(f"{len(errors)} worker(s) failed: {errors[:3]}")
    else:
        for i in range(args.conns):
            one_connection(args, i)
    log(f"OK {args.conns} connections x {args.size} bytes verified")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--mode", default="blocking",
                   choices=["blocking", "select", "poll", "selectors", "epollchurn", "prefork", "forkaccept"])
    p.add_argument("--io", default="blocking", choices=["blocking", "nonblocking"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--conns", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--size", type=int, default=100000)
    p.add_argument("--banner", action="store_true", help="server speaks first")
    p.add_argument("--max-banner-wait", type=float, default=0.5)
    p.add_argument("--ipv6", action="store_true")
    p.add_argument("--blocking-connect", action="store_true", help="connect without a timeout")
    p.add_argument("--parallel", type=int, default=1, help="connections at once (threads)")
    p.add_argument("--deadline", type=float, default=60)
    args = p.parse_args()
    server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    main()
