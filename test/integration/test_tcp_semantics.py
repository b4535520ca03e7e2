#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Behaviours of TCP that programs rely on, kept under usmc (both ends
wrapped): a listener reported readable lets accept() return; the first
send after the peer closed is taken, as TCP takes it; a socket closed with
syscall(SYS_close), as libuv closes, is closed; a server that execs into a
program knowing nothing of usmc, its listener inherited, gets plain bytes
from a client that talked SMC-D to it before; urgent data (MSG_OOB,
SIOCATMARK, SO_OOBINLINE, POLLPRI) behaves as Linux TCP's, pinned down
against plain TCP first; TCP_NODELAY and TCP_CORK answer as the kernel's,
kept by usmc with no system call while a connection is SMC-D and handed to
the kernel's socket when it moves to TCP."""
import os
import re
import shutil
import socket
import subprocess
import time

from harness import APPS, BIN, PYTHON, Env, Lines, _descendants, check, finish, read_ready

APP = os.path.join(APPS, "semantics_app.py")
RAWCLOSE = os.path.join(APPS, "rawclose_app.py")
OOBAPP = os.path.join(APPS, "oob_app.py")
BURST = os.path.join(APPS, "burst_app.py")
EXEC = os.path.join(APPS, "exec_app.py")
REFUSE = os.path.join(APPS, "refuse_app.py")


# 1. socketserver's loop (select, then a blocking accept) while clients
#    connect and close at once, their handshakes broken half way: every
#    accept() after a readable select returns at once (it used to sleep
#    until the next connection when the broken one was dropped).
with Env(smcd_mechanics=True) as env:
    server = env.start(env.wrap([PYTHON, APP, "select-accept", "--n", "7"]))
    port = read_ready(server)
    r = env.run(env.wrap([PYTHON, BURST, "client", "--port", str(port), "-n", "6", "--abandon"]), timeout=30)
    # The last accept must not be the only one that returns: nothing else
    # connects for a while.
    deadline = time.monotonic() + 3
    lines = []
    while time.monotonic() < deadline and len(lines) < 6:
        line = server.stdout.readline()
        if line.startswith("ACCEPT"):
            lines.append(float(line.split()[1]))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # one more, so a stuck accept() ends and the server exits
    except OSError:
        pass  # the server is gone: its exit status says why
    out, err = server.communicate(timeout=30)
    lines += [float(l.split()[1]) for l in out.splitlines() if l.startswith("ACCEPT")]
    slow = [t for t in lines[:6] if t > 1.0]
    check(len(lines) >= 6 and not slow and server.returncode == 0,
          f"select said readable: 6 accepts returned at once ({lines}, rc {server.returncode} {err[-300:]})")
    st = env.stats()
    print(f"    (handshake errors {st['handshake_errors']}, fallbacks {st['fallback_reasons']})")

# 2. The first send after the peer closed is taken, the second fails.
with Env(smcd_mechanics=True) as env:
    server = env.start(env.wrap([PYTHON, APP, "late-answer", "--wait", "20"]))
    port = read_ready(server)
    client = env.run(env.wrap([PYTHON, "-c", f"""
import socket
s = socket.create_connection(("127.0.0.1", {port}))
s.sendall(b"request\\n")
s.settimeout(0.3)
try:
    s.recv(100)
except socket.timeout:
    pass
s.close()
"""]), timeout=30)
    out, err = server.communicate(timeout=30)
    st = env.stats()
    check("FIRST sent" in out and "SECOND error" in out,
          f"after the client closed: first send taken, second fails ({out.split()}, {err[-200:]})")
    check(st["conn_smcd"] == 2, f"the connection ran SMC-D ({st['conn_smcd']}, {st['fallback_reasons']})")

# 3. A connection closed through syscall(SYS_close) (libuv's close, so every
#    Node.js server's) is closed as by close(): the client reads the answer
#    and then its end of stream (it read ECONNRESET: wrk's read errors), the
#    socket leaves the server's epoll set, nothing of it stays behind (each
#    kept two eventfds, a DMB and a mapping until the top quarter of
#    RLIMIT_NOFILE filled and later connections ran as TCP, reason FDLIMIT),
#    and a descriptor that gets its number is that descriptor (a pipe's read
#    went to the dead connection).
N = 20
with Env(smcd_mechanics=True) as env:
    server = env.start(env.wrap([PYTHON, RAWCLOSE, "server", "--n", str(N)]))
    port = read_ready(server)
    client = env.run(env.wrap([PYTHON, RAWCLOSE, "client", "--n", str(N), "--port", str(port)]),
                     timeout=60)
    out, err = server.communicate(timeout=30)
    replies = [l.split() for l in client.stdout.splitlines() if l.startswith("REPLY")]
    conns = [l.split() for l in out.splitlines() if l.startswith("CONN")]
    pipe = [l.split(None, 2) for l in out.splitlines() if l.startswith("PIPE")]
    st = env.stats()
    whole = [r[2] == "eof" and int(r[3]) == len(f"reply to request {r[1]}") for r in replies]
    check(len(replies) == N and all(whole),
          f"each answer, then end of stream ({[' '.join(r[1:]) for r in replies][:3]}, "
          f"{len(replies)} of {N}, {client.stderr[-200:]})")
    regs = [int(c[5]) for c in conns]
    check(len(regs) == N and regs == regs[:1] * N,
          f"closed sockets leave the epoll set: registrations with one socket in it {regs}")
    fds = [int(c[3]) for c in conns]
    diff = [l for l in out.splitlines() if l.startswith("FDDIFF")]
    # A connection whose handshake overlaps the previous one's close takes a
    # new `sig` where it would have taken the spare that close parks next:
    # the process then keeps one more spare (bounded by the spare pool, not
    # by the connections). Anything else is a leak.
    new_part = diff[0].split(" gone ")[0] if diff else ""
    spares = len(re.findall(r"'@usmc-s-[0-9a-f]+'", new_part))
    extra = fds[-1] - fds[0] if fds else 0
    check(len(fds) == N and (extra == 0 or (0 < extra <= 2 and extra == spares and
                                            len(re.findall(r"\(\d+, ", new_part)) == spares)),
          f"nothing stays behind: open descriptors with the first connection {fds[:1]}, with the "
          f"last {fds[-1:]} ({diff} {err[-200:]})")
    check(len(pipe) == 1 and pipe[0][2] == "pipe bytes",
          f"a pipe at the last socket's number reads its own bytes ({pipe})")
    check(st["conn_smcd"] == 2 * N,
          f"every connection ran SMC-D ({st['conn_smcd']} of {2 * N}, {st['fallback_reasons']})")
# 4. A server execs into a program that knows nothing of usmc, keeping its
#    listener (the new program inherits the socket). A client that talked
#    SMC-D to it before, and so holds the listener's entry and announcement
#    memory, must now send plain bytes: the new program reads every byte of
#    its connection as data.
with Env(smcd_mechanics=True) as env:
    server = env.start(env.wrap([PYTHON, EXEC, "server"]), stdin=subprocess.PIPE)
    port = read_ready(server)
    server_lines = Lines(server)
    client = env.start(env.wrap([PYTHON, EXEC, "client", "--port", str(port)]),
                       stdin=subprocess.PIPE)
    client_lines = Lines(client)
    first = client_lines.first("FIRST")
    check(first == "FIRST " + b"hello-1".hex(), f"before the exec: the echo ({first!r})")
    st = env.stats()
    check(st["conn_smcd"] == 2, f"before the exec: SMC-D ({st['conn_smcd']}, {st['fallback_reasons']})")
    server.stdin.write("EXEC\n")
    server.stdin.flush()
    execed = server_lines.first("EXECED")
    check(execed == "EXECED", f"the server exec'd into the plain program ({execed!r})")
    client.stdin.write("AGAIN\n")
    client.stdin.flush()
    got = server_lines.first("GOT")
    second = client_lines.first("SECOND")
    check(got == "GOT " + b"hello-2".hex(),
          f"after the exec: the plain program read exactly what the client sent ({got!r})")
    check(second == "SECOND " + b"hello-2".hex(), f"after the exec: the echo ({second!r})")
    env.stop(client)
    env.stop(server)

# 5. Urgent data as Linux TCP delivers it (issue 13 #10: send(MSG_OOB) on
#    SMC-D failed with EOPNOTSUPP). The observations are what plain TCP on
#    127.0.0.1 shows (run first, so a kernel that differs is seen as such);
#    both ends wrapped must show the same, over SMC-D.
OOB_EXPECTED = {
    # send(b"abc"), send(b"XYZ", MSG_OOB), send(b"def"): all bytes in the
    # stream, 'Z' urgent; without SO_OOBINLINE it leaves the stream.
    "plain": {"oob-none": "EINVAL", "arrived": "True", "poll-pri": "True",
              "atmark-before": "False", "inq-before": "5",
              "read-to-mark": "b'abcXY'",  # MSG_WAITALL(64) stops at the mark
              "atmark-at": "True", "inq-at": "0", "poll-pri-at": "True",
              "oob-peek": "b'Z'", "oob": "b'Z'", "oob-again": "EINVAL",
              "poll-pri-after-oob": "False", "atmark-after-oob": "True",
              "read-after-mark": "b'def'", "atmark-past": "False", "oob-past": "EINVAL"},
    # SO_OOBINLINE: the urgent byte stays in the stream, MSG_OOB is EINVAL.
    "inline": {"arrived": "True", "oob": "EINVAL", "read-to-mark": "b'abcXY'",
               "atmark-at": "True", "poll-pri-at": "True", "read-from-mark": "b'Zdef'",
               "atmark-past": "False", "poll-pri-past": "False"},
    # x, A(urgent), bc, D(urgent), e before any read: the later mark wins and
    # A is ordinary data.
    "superseded": {"second-mark": "True", "read-to-mark": "b'xAbc'", "atmark": "True",
                   "oob": "b'D'", "read-after-mark": "b'e'"},
    # The same with the reader standing at A's mark when D comes: A is dropped.
    "superseded-at-mark": {"arrived": "True", "read-to-mark": "b'x'", "atmark": "True",
                           "second-mark": "True", "read-to-mark2": "b'bc'",
                           "atmark2": "True", "oob": "b'D'", "read-after-mark": "b'e'"},
    # A read out of band, then D before the reader got to A: A is data too.
    "superseded-after-oob": {"arrived": "True", "oob": "b'A'", "second-mark": "True",
                             "read-to-mark": "b'xAbc'", "oob2": "b'D'",
                             "read-after-mark": "b'e'"},
    # A lone urgent byte: POLLPRI without POLLIN; a normal read passes it.
    "lone-byte": {"arrived": "True", "poll": "PRI", "atmark": "True", "inq": "0",
                  "read-nonblocking": "EAGAIN", "atmark-after-read": "False",
                  "oob-after-read": "EINVAL", "arrived2": "True", "oob": "b'B'",
                  "poll-after-oob": "-", "atmark-after-oob": "True",
                  "read-nonblocking2": "EAGAIN", "atmark-past": "False",
                  "tail": "b'z'", "eof": "b''"},
}


def oob_run(env, wrapped):
    w = env.wrap if wrapped else (lambda cmd: cmd)
    receiver = env.start(w([PYTHON, OOBAPP, "receiver"]))
    port = read_ready(receiver)
    sender = env.start(w([PYTHON, OOBAPP, "sender", "--port", str(port)]))

    def collect(p, timeout):
        # A side that waits for its peer forever (the other failed) is
        # stopped by PID: the checks below then say what was missing.
        try:
            return p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            env.stop(p, timeout=5)
            return p.communicate()

    s_out, s_err = collect(sender, 60)
    out, err = collect(receiver, 15)  # (its waits are bounded by 10 s each)
    obs = {}
    for line in out.splitlines():
        if line.startswith("OBS "):
            _, case, name, value = line.split(" ", 3)
            obs.setdefault(case, {})[name] = value
    sent = [l.split() for l in s_out.splitlines() if l.startswith("SENT")]
    return obs, sent, receiver.returncode, sender.returncode, err[-300:] + s_err[-300:]


for wrapped in (False, True):
    label = "wrapped (SMC-D)" if wrapped else "plain TCP"
    with Env(smcd_mechanics=True) as env:
        obs, sent, rc_r, rc_s, err = oob_run(env, wrapped)
        check(rc_r == 0 and rc_s == 0, f"{label}: urgent-data receiver and sender ran ({rc_r}, {rc_s}, {err})")
        short = [s for s in sent if s[-1] != str(len(s[2]))]
        check(sent and not short, f"{label}: send(MSG_OOB) takes every byte ({short or len(sent)})")
        for case, want in OOB_EXPECTED.items():
            got = obs.get(case, {})
            diff = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
            check(not diff, f"{label}: urgent data, {case} (differs as (got, TCP): {diff})")
        if wrapped:
            st = env.stats()
            n = 2 * len(OOB_EXPECTED)
            check(st["conn_smcd"] == n,
                  f"{label}: every connection ran SMC-D ({st['conn_smcd']} of {n}, {st['fallback_reasons']})")
# A connect refused by a listener whose registry entry still stands (it
# shut its socket down, nothing closed): the application learns it as from
# TCP, by POLLERR, a second connect() and SO_ERROR, or from a blocking
# connect(). (A Proposal sent into the failed socket would take its error
# with it: POLLERR gone, a second connect ECONNABORTED, a write EPIPE.)
with Env(smcd_mechanics=True) as env:
    server = env.start(env.wrap([PYTHON, REFUSE, "server"]), stdin=subprocess.PIPE)
    port = int(server.stdout.readline())
    first = env.run(env.wrap([PYTHON, "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}))"]),
                    timeout=60)
    server.stdin.write("\n")
    server.stdin.flush()
    shut = server.stdout.readline().strip()
    plain = env.run([PYTHON, REFUSE, "client", str(port)], timeout=60).stdout.strip()
    wrapped = env.run(env.wrap([PYTHON, REFUSE, "client", str(port)]), timeout=60).stdout.strip()
    st = env.stats()
    check(first.returncode == 0 and shut == "SHUT", f"the listener took a connection, then stopped ({shut!r})")
    check(plain == " ".join(["ERR/ECONNREFUSED/0"] * 3 + ["ECONNREFUSED"] * 3),
          f"plain TCP: every connect refused ({plain!r})")
    check(wrapped == plain, f"wrapped: the same outcomes as plain TCP ({wrapped!r})")
    check(st.get("client_async_handshakes", 0) >= 3,
          f"the wrapped nonblocking connects were candidates for SMC-D "
          f"({st.get('client_async_handshakes')} handshakes begun)")
    check(st.get("hs_unexpected_events", 1) == 0, "no handshake saw an event it did not expect")
    server.stdin.close()
    env.stop(server, timeout=5)
# Connections usmc accepted for an application that asks for no
# close-on-exec (nginx: accept4 without SOCK_CLOEXEC) wait in usmc's queue
# as descriptors where the kernel's queue held none: until accept() hands
# them out they must be close-on-exec, or a child spawned meanwhile keeps
# them open past the application's close (e474683 took the application's
# flags there; 95f22a7). Handed out, they are as the call asked.
with Env(smcd_mechanics=True) as env:
    server = env.start(env.wrap([PYTHON, os.path.join(APPS, "queued_flags_app.py"), "--more", "3"]),
                       stdin=subprocess.PIPE)
    port = int(server.stdout.readline())
    client_code = f"""
import socket, sys
s = socket.create_connection(("127.0.0.1", {port})); s.send(b"x")
sys.stdin.readline()
"""
    clients = [env.start(env.wrap([PYTHON, "-c", client_code]), stdin=subprocess.PIPE)]
    first = server.stdout.readline().strip()
    clients += [env.start(env.wrap([PYTHON, "-c", client_code]), stdin=subprocess.PIPE)
                for _ in range(3)]
    deadline = time.monotonic() + 20
    while env.stats().get("accept_queue", 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)  # polling a gauge, bounded by the deadline
    queued_gauge = env.stats().get("accept_queue", 0)
    server.stdin.write("show\n")
    server.stdin.flush()
    queued = server.stdout.readline().strip()
    accepted = server.stdout.readline().strip()
    st = env.stats()
    for c in clients:
        env.stop(c)
    env.stop(server)
    check(first.startswith("FIRST") and first.endswith(":inherit"),
          f"the first connection, accepted without SOCK_CLOEXEC, has none ({first!r})")
    waiting = queued.split()[1:]
    check(queued_gauge >= 3 and len(waiting) >= 3 and all(w.endswith(":cloexec") for w in waiting),
          f"connections waiting in usmc's queue are close-on-exec ({queued!r}, gauge {queued_gauge})")
    check(accepted.startswith("ACCEPTED") and len(accepted.split()) == 4
          and all(w.endswith(":inherit") for w in accepted.split()[1:]),
          f"handed out by accept4(0), they are not ({accepted!r})")
    check(st["conn_smcd"] >= 8, f"the connections ran SMC-D ({st['conn_smcd']}, {st['fallback_reasons']})")
# accept() of connections whose handshakes finish between calls: each
# socket has the flags of the call that returned it, and the address as the
# kernel gives it, cut to that call's buffer (accept_probe.c). The probe
# and its forked client both run under usmc-run.
with Env(smcd_mechanics=True) as env:
    r = env.run(env.wrap([os.path.join(BIN, "usmc-accept-probe")]), timeout=120)
    st = env.stats()
    check(r.returncode == 0 and r.stdout.startswith("OK"),
          f"accept(): flags and address of the returning call ({r.stdout.strip()} {r.stderr[-300:]})")
    check(st["conn_smcd"] >= 2 * 20,
          f"accept(): the probe's connections ran SMC-D ({st['conn_smcd']}, {st['fallback_reasons']})")
# TCP_NODELAY and TCP_CORK (nginx toggles both around each response):
# usmc keeps them for an SMC-D connection and answers getsockopt from them
# as the kernel would (values inherited from the listener or set before
# connect() included), with no setsockopt system call on the connection;
# when it moves to TCP (a seccomp filter here) the kernel's socket gets
# what the application set (sockopt_probe.c). Plain TCP first: the probe's
# expectations are the kernel's. strace, where it runs, counts the calls.
SOCKOPT = os.path.join(BIN, "usmc-sockopt-probe")
TCP_OPT_CALL = re.compile(r"setsockopt\((-?\d+), (?:SOL_TCP|IPPROTO_TCP), (TCP_NODELAY|TCP_CORK), \[(-?\d+)\]")


def strace_runs():
    if not shutil.which("strace"):
        return False
    return subprocess.run(["strace", "-f", "-qq", "-e", "trace=none", "true"], capture_output=True,
                          timeout=30).returncode == 0


def sockopt_run(env, smcd, trace):
    """Both ends of the probe; {side: (status, stdout, stderr, strace path)}."""
    def cmd(side, *args):
        c = [SOCKOPT, side, *args, *(["--smc"] if smcd else [])]
        c = env.wrap(c) if smcd else c
        path = os.path.join(env.dir, f"{side}.strace")
        return (["strace", "-f", "-qq", "-e", "trace=setsockopt", "-o", path, *c] if trace else c), path
    server_cmd, server_trace = cmd("server")
    server = env.start(server_cmd)
    port = read_ready(server)
    client_cmd, client_trace = cmd("client", str(port))
    client = env.start(client_cmd)
    got = {}
    for side, p, path in (("client", client, client_trace), ("server", server, server_trace)):
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            for pid in reversed(_descendants([p.pid])):  # (strace's tracees too)
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            out, err = p.communicate()
        got[side] = (p.returncode, out, err, path)
    return got


def tcp_opt_calls(path):
    """(fd, option, value) of each setsockopt(IPPROTO_TCP, TCP_NODELAY or
    TCP_CORK) strace saw, in order; the probe's markers are fds -1, -2."""
    with open(path) as f:
        return [(int(m[1]), m[2], int(m[3])) for m in map(TCP_OPT_CALL.search, f) if m]


trace = strace_runs()
if not trace:
    print("  (strace missing or not allowed here: the system calls are not counted)")
for smcd in (False, True):
    label = "wrapped (SMC-D)" if smcd else "plain TCP"
    with Env(smcd_mechanics=True) as env:
        got = sockopt_run(env, smcd, trace and smcd)
        for side, (rc, out, err, _) in got.items():
            check(rc == 0, f"{label}: TCP_NODELAY and TCP_CORK, {side} "
                           f"({out.strip().splitlines()[-6:]} {err[-300:]})")
        if not smcd:
            continue
        st = env.stats()
        check(st["conn_smcd"] == 2, f"{label}: the probe's connection ran SMC-D "
                                    f"({st['conn_smcd']}, {st['fallback_reasons']})")
        check(st.get("moved_to_tcp", 0) == 2,
              f"{label}: and both sides moved to TCP ({st.get('moved_to_tcp')})")
        if not trace:
            continue
        expect_after = {"server": {("TCP_CORK", 1), ("TCP_NODELAY", 0)}, "client": {("TCP_NODELAY", 0)}}
        for side, (_, _, _, path) in got.items():
            calls = tcp_opt_calls(path)
            fds = [c[0] for c in calls]
            if not check(-1 in fds and -2 in fds and fds.index(-1) > 0,
                         f"{label}: strace saw the {side}'s markers and its call before them ({calls})"):
                continue
            begin, end = fds.index(-1), fds.index(-2)
            check(calls[begin + 1:end] == [],
                  f"{label}: no TCP_NODELAY or TCP_CORK reached the {side}'s socket while SMC-D "
                  f"({calls[begin + 1:end][:6]})")
            after = {(c[1], c[2]) for c in calls[end + 1:]}
            check(expect_after[side] <= after,
                  f"{label}: the {side}'s move to TCP told the kernel's socket {sorted(expect_after[side])} "
                  f"({calls[end + 1:]})")
# select() and poll() over a usmc listener and an SMC-D connection allocate
# nothing (select_probe.c: the postmaster of PostgreSQL 15 forks from signal
# handlers it runs only inside select()).
with Env(smcd_mechanics=True) as env:
    r = env.run(env.wrap([os.path.join(BIN, "usmc-select-probe")]), timeout=120)
    st = env.stats()
    check(r.returncode == 0 and r.stdout.startswith("OK"),
          f"select()/poll() allocate no memory ({r.stdout.strip()} {r.stderr[-300:]})")
    check(st["conn_smcd"] >= 2,
          f"select()/poll(): the probe's connection ran SMC-D ({st['conn_smcd']}, {st['fallback_reasons']})")
# poll() on an SMC-D connection whose data is already there answers from
# user memory: after the connection's first poll (which sets up usmc's
# watch of the peer's end), no system call between the probe's markers (no
# kernel poll, no wake-up socket made, nothing sent to the peer), and the same answer
# as plain TCP (poll_look_probe.c); so does a poll() once the peer was
# killed (its byte, and the end).
POLL_LOOK = os.path.join(BIN, "usmc-poll-look-probe")
with Env(smcd_mechanics=True) as env:
    plain = env.run([POLL_LOOK], timeout=60)
    check(plain.returncode == 0 and plain.stdout.startswith("OK"),
          f"plain TCP: poll() on a connection with data waiting ({plain.stdout.strip()} {plain.stderr[-300:]})")
    trace = os.path.join(env.dir, "poll-look.strace")
    if strace_runs():
        cmd = ["strace", "-qq", "-o", trace, "-e", "trace=write,poll,ppoll,socket,bind,sendto,sendmsg,recvmmsg,epoll_ctl,epoll_wait",
               *env.wrap([POLL_LOOK])]
    else:
        cmd = env.wrap([POLL_LOOK])
    r = env.run(cmd, timeout=60)
    st = env.stats()
    check(r.returncode == 0 and r.stdout.startswith("OK"),
          f"wrapped (SMC-D): poll() on a connection with data waiting ({r.stdout.strip()} {r.stderr[-300:]})")
    check(r.stdout == plain.stdout,
          f"wrapped (SMC-D): poll() after the peer was killed answers as plain TCP ({r.stdout.strip()!r} "
          f"against {plain.stdout.strip()!r})")
    check(st["conn_smcd"] >= 2, f"wrapped (SMC-D): the probe's connection ran SMC-D ({st['conn_smcd']})")
    if os.path.exists(trace):
        lines = open(trace).read().splitlines()
        a = [i for i, x in enumerate(lines) if '"MARK-A"' in x]
        b = [i for i, x in enumerate(lines) if '"MARK-B"' in x]
        between = lines[a[0] + 1:b[0]] if a and b else None
        check(between == [], f"wrapped (SMC-D): no system call inside that poll() ({between})")
finish()
