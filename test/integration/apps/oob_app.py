#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Urgent data (MSG_OOB) as Linux TCP delivers it, for test_tcp_semantics.py.

receiver: listens, prints 'READY <port>', accepts one connection per case
    (in CASES order), runs the case's receiving side and prints one line per
    observation: 'OBS <case> <name> <value>' (value: bytes repr, an errno
    name, True/False, a number, or poll bits as text); 'DONE' at the end.
sender --port P: connects once per case and sends the case's stream.

Every step waits on an event (the urgent byte's arrival seen by select's
exceptfds, a byte from the other side, MSG_WAITALL), never on a sleep.
"""
import argparse
import array
import errno
import fcntl
import select
import socket
import sys
import termios
import time

SIOCATMARK = 0x8905
OOB = socket.MSG_OOB
CASES = ["plain", "inline", "superseded", "superseded-at-mark", "superseded-after-oob", "lone-byte"]
TIMEOUT = 10.0


def atmark(s):
    buf = array.array("i", [0])
    fcntl.ioctl(s, SIOCATMARK, buf, True)
    return bool(buf[0])


def inq(s):
    buf = array.array("i", [0])
    fcntl.ioctl(s, termios.FIONREAD, buf, True)
    return buf[0]


def poll_bits(s, events=select.POLLIN | select.POLLPRI):
    p = select.poll()
    p.register(s, events)
    got = p.poll(0)
    bits = got[0][1] if got else 0
    names = [n for n, b in (("IN", select.POLLIN), ("PRI", select.POLLPRI)) if bits & b]
    return "|".join(names) or "-"


def recv_oob(s, flags=0):
    try:
        return s.recv(1, OOB | flags)
    except OSError as e:
        return errno.errorcode[e.errno]


def recv_nb(s, n):
    try:
        return s.recv(n, socket.MSG_DONTWAIT)
    except OSError as e:
        return errno.errorcode[e.errno]


def wait_urgent(s):
    """Blocks until select reports an exceptional condition (urgent data)."""
    _, _, x = select.select([], [], [s], TIMEOUT)
    return bool(x)


def wait_oob_byte(s, want):
    """Until recv(MSG_OOB | MSG_PEEK) shows `want` (a later urgent byte that
    moves the mark): select on exceptfds, then peek."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if wait_urgent(s) and recv_oob(s, socket.MSG_PEEK) == want:
            return True
    return False


class Receiver:
    def __init__(self, case, s):
        self.case, self.s = case, s

    def obs(self, name, value):
        print("OBS", self.case, name, repr(value) if isinstance(value, bytes) else value, flush=True)

    def go(self):
        self.s.sendall(b"g")


def recv_plain(r):
    s = r.s
    r.obs("oob-none", recv_oob(s))
    r.go()
    r.obs("arrived", wait_urgent(s))
    r.obs("poll-pri", "PRI" in poll_bits(s))
    r.obs("atmark-before", atmark(s))
    r.obs("inq-before", inq(s))
    # MSG_WAITALL for more than is there: the read still ends at the mark.
    r.obs("read-to-mark", s.recv(64, socket.MSG_WAITALL))
    r.obs("atmark-at", atmark(s))
    r.obs("inq-at", inq(s))
    r.obs("poll-pri-at", "PRI" in poll_bits(s))
    r.obs("oob-peek", recv_oob(s, socket.MSG_PEEK))
    r.obs("oob", recv_oob(s))
    r.obs("oob-again", recv_oob(s))
    r.obs("poll-pri-after-oob", "PRI" in poll_bits(s))
    r.obs("atmark-after-oob", atmark(s))
    r.obs("read-after-mark", s.recv(3, socket.MSG_WAITALL))
    r.obs("atmark-past", atmark(s))
    r.obs("oob-past", recv_oob(s))


def recv_inline(r):
    s = r.s
    s.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)
    r.go()
    r.obs("arrived", wait_urgent(s))
    r.obs("oob", recv_oob(s))
    r.obs("read-to-mark", s.recv(64, socket.MSG_WAITALL))
    r.obs("atmark-at", atmark(s))
    r.obs("poll-pri-at", "PRI" in poll_bits(s))
    r.obs("read-from-mark", s.recv(4, socket.MSG_WAITALL))
    r.obs("atmark-past", atmark(s))
    r.obs("poll-pri-past", "PRI" in poll_bits(s))


def recv_superseded(r):
    s = r.s
    r.go()
    r.obs("second-mark", wait_oob_byte(s, b"D"))
    r.obs("read-to-mark", s.recv(64, socket.MSG_WAITALL))  # the first urgent byte is inline now
    r.obs("atmark", atmark(s))
    r.obs("oob", recv_oob(s))
    r.obs("read-after-mark", s.recv(1, socket.MSG_WAITALL))


def recv_superseded_at_mark(r):
    s = r.s
    r.go()
    r.obs("arrived", wait_urgent(s))
    r.obs("read-to-mark", s.recv(64))
    r.obs("atmark", atmark(s))
    r.go()
    r.obs("second-mark", wait_oob_byte(s, b"D"))
    # We stood at the first mark: the first urgent byte is dropped.
    r.obs("read-to-mark2", s.recv(64, socket.MSG_WAITALL))
    r.obs("atmark2", atmark(s))
    r.obs("oob", recv_oob(s))
    r.obs("read-after-mark", s.recv(1, socket.MSG_WAITALL))


def recv_superseded_after_oob(r):
    s = r.s
    r.go()
    r.obs("arrived", wait_urgent(s))
    r.obs("oob", recv_oob(s))  # read out of band, the reader not at the mark
    r.go()
    r.obs("second-mark", wait_oob_byte(s, b"D"))
    # Superseded before the reader got to it: A comes inline too.
    r.obs("read-to-mark", s.recv(64, socket.MSG_WAITALL))
    r.obs("oob2", recv_oob(s))
    r.obs("read-after-mark", s.recv(1, socket.MSG_WAITALL))  # (nothing left unread)


def recv_lone_byte(r):
    s = r.s
    r.go()
    r.obs("arrived", wait_urgent(s))
    r.obs("poll", poll_bits(s))  # the urgent byte alone is not readable data
    r.obs("atmark", atmark(s))
    r.obs("inq", inq(s))
    r.obs("read-nonblocking", recv_nb(s, 64))
    r.obs("atmark-after-read", atmark(s))
    r.obs("oob-after-read", recv_oob(s))
    r.go()  # a second lone urgent byte, read out of band this time
    r.obs("arrived2", wait_urgent(s))
    r.obs("oob", recv_oob(s))
    r.obs("poll-after-oob", poll_bits(s))
    r.obs("atmark-after-oob", atmark(s))
    r.obs("read-nonblocking2", recv_nb(s, 64))
    r.obs("atmark-past", atmark(s))
    r.go()
    r.obs("tail", s.recv(64, socket.MSG_WAITALL))
    r.obs("eof", s.recv(64))


RECEIVERS = {"plain": recv_plain, "inline": recv_inline, "superseded": recv_superseded,
             "superseded-at-mark": recv_superseded_at_mark,
             "superseded-after-oob": recv_superseded_after_oob, "lone-byte": recv_lone_byte}


def receiver(args):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    print("READY", ls.getsockname()[1], flush=True)
    for case in CASES:
        c, _ = ls.accept()
        # Blocking, no timeout: Python's timeout mode polls for POLLIN
        # before every recv, and recv(MSG_OOB) never waits for data. The
        # test bounds the whole run.
        c.settimeout(None)
        RECEIVERS[case](Receiver(case, c))
        c.close()
    print("DONE", flush=True)


def sender(args):
    for case in CASES:
        s = socket.create_connection(("127.0.0.1", args.port), timeout=TIMEOUT)
        s.settimeout(None)

        def wait_go():
            if s.recv(1) != b"g":
                raise RuntimeError(f"{case}: the receiver went away")

        def send(data, flags=0):
            n = s.send(data, flags)
            print("SENT", case, data.decode(), "oob" if flags & OOB else "", n, flush=True)

        wait_go()
        if case in ("plain", "inline"):
            send(b"abc")
            send(b"XYZ", OOB)  # three bytes into the stream, 'Z' urgent
            send(b"def")
        elif case == "superseded":
            for data, flags in ((b"x", 0), (b"A", OOB), (b"bc", 0), (b"D", OOB), (b"e", 0)):
                send(data, flags)
        elif case == "superseded-at-mark":
            send(b"x")
            send(b"A", OOB)
            wait_go()
            for data, flags in ((b"bc", 0), (b"D", OOB), (b"e", 0)):
                send(data, flags)
        elif case == "superseded-after-oob":
            send(b"x")
            send(b"A", OOB)
            wait_go()
            send(b"bc")
            send(b"D", OOB)
            send(b"e")
        elif case == "lone-byte":
            send(b"A", OOB)
            wait_go()
            send(b"B", OOB)
            wait_go()
            send(b"z")
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # until the receiver closes
        s.close()
    print("DONE", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["receiver", "sender"])
    p.add_argument("--port", type=int)
    args = p.parse_args()
    (receiver if args.mode == "receiver" else sender)(args)


if __name__ == "__main__":
    sys.exit(main())
