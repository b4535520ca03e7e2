#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""SMC-D end to end: both ends under usmc-run, data through shared memory.
The counters prove which connections used SMC-D; every reply is verified
byte for byte; every process is stopped by PID."""
import os
import resource
import select
import signal
import socket
import subprocess
import time

from harness import APPS, PYTHON, Env, check, finish, read_ready, slow_machine_config

APP = os.path.join(APPS, "echo_app.py")

# 500 connections at once need descriptors: each SMC-D connection holds
# three of usmc's (in the top quarter of RLIMIT_NOFILE) per side.
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))
MANY = 500 if _hard >= 16384 else 100

CASES = [
    # (name, server args, client args, connections)
    ("blocking echo", ["--mode", "blocking"], [], 4),
    ("select server, nonblocking client", ["--mode", "select"], ["--io", "nonblocking"], 6),
    ("poll server, nonblocking client", ["--mode", "poll"], ["--io", "nonblocking"], 6),
    ("selectors (epoll) server", ["--mode", "selectors"], [], 6),
    ("epoll server, nonblocking client", ["--mode", "selectors"], ["--io", "nonblocking"], 6),
    ("epoll add/delete churn server", ["--mode", "epollchurn"], ["--io", "nonblocking"], 6),
    ("pre-fork server", ["--mode", "prefork", "--workers", "2"], [], 6),
    ("accept-then-fork server", ["--mode", "forkaccept"], [], 4),
    ("server speaks first", ["--mode", "blocking", "--banner"], ["--banner"], 4),
    ("server speaks first, epoll", ["--mode", "selectors", "--banner"], ["--banner", "--io", "nonblocking"], 4),
    ("IPv6", ["--mode", "selectors", "--ipv6"], ["--ipv6"], 4),
    ("1 GiB each way", ["--mode", "blocking"], ["--size", str(1 << 30)], 1),
    (f"{MANY} connections at once", ["--mode", "selectors"], ["--parallel", str(MANY), "--size", "2000"], MANY),
]


def expect_line(p, timeout):
    """p's next stdout line, or "" if none comes within `timeout` seconds."""
    if not select.select([p.stdout], [], [], timeout)[0]:
        return ""
    return p.stdout.readline().strip()


def smc_case(env, name, s_args, c_args, conns, wrap_server=True, wrap_client=True, opts=()):
    before = env.stats()
    s_cmd = [PYTHON, APP, "server", "--conns", str(conns), *s_args]
    server = env.start(env.wrap(s_cmd, *opts) if wrap_server else s_cmd)
    port = read_ready(server)
    c_cmd = [PYTHON, APP, "client", "--port", str(port), "--conns", str(conns), "--blocking-connect", *c_args]
    t0 = time.monotonic()
    r = env.run(env.wrap(c_cmd, *opts) if wrap_client else c_cmd, timeout=180)
    elapsed = time.monotonic() - t0
    out, err = server.communicate(timeout=60)
    ok = r.returncode == 0 and server.returncode == 0 and "DONE" in out
    check(ok, f"{name}: {conns} connections verified ({elapsed:.2f}s)")
    if not ok:
        print("    client:", r.stdout[-2000:], r.stderr[-2000:], "\n    server:", out[-2000:], err[-2000:])
    after = env.stats()
    keys = ("conn_smcd", "conn_tcp", "handshake_errors", "busy_poll_hits")
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys}, after


with Env(smcd_mechanics=True) as env:
    # Every connection must be SMC-D, on a loaded machine too (a Proposal
    # later than the default grace runs TCP, correctly; CI saw it once in
    # "server speaks first, epoll").
    slow_machine_config(env)
    for name, s_args, c_args, conns in CASES:
        d, _ = smc_case(env, name, s_args, c_args, conns)
        if conns == MANY:
            # Hundreds of client threads on 2 cores: a thread descheduled for
            # more than the server's 10 ms grace between connect() and its
            # port announcement runs TCP (correctly, counted). Known, rare.
            check(d["conn_smcd"] >= 2 * conns * 0.99 and d["conn_smcd"] + d["conn_tcp"] == 2 * conns,
                  f"{name}: at least 99% of {2 * conns} ends used SMC-D ({d})")
            continue
        check(d["conn_smcd"] == 2 * conns and d["conn_tcp"] == 0,
              f"{name}: all {2 * conns} ends used SMC-D ({d})")

    # DMB segments (ism.hpp): a process makes shared memory for its first
    # connections to a peer user, and later connections only claim slots of
    # it (no new memfd, no new descriptor); a slot comes back after the
    # peer's close, so one after another never need more than a few.
    seq = 100
    before = env.stats()
    d, after = smc_case(env, f"{seq} connections one after another", ["--mode", "blocking"], [], seq)
    grew = {k: after.get(k, 0) - before.get(k, 0)
            for k in ("dmb_slots", "dmb_segments", "dmb_created", "lgr_reused", "lgr_first_contacts")}
    check(d["conn_smcd"] == 2 * seq, f"{seq} connections one after another: all SMC-D ({d})")
    check(grew["dmb_slots"] == 2 * seq and grew["dmb_created"] == 0,
          f"every DMB was a slot of a segment, none a file of its own ({grew})")
    check(1 <= grew["dmb_segments"] <= 4, f"two processes made at most two segments each ({grew})")
    # Link groups (link_group.hpp): the first connection attaches (first
    # contact), and so does one whose DMB lies in a segment the other side
    # has not seen; every other names its DMBs in CLC, nothing passed. Each
    # side counts its own.
    check(grew["lgr_reused"] + grew["lgr_first_contacts"] == 2 * seq
          and grew["lgr_reused"] >= 2 * (seq - grew["dmb_segments"] - 1),
          f"{seq} connections one after another: all but the first contacts on a link group ({grew})")

    st = env.stats()
    check(st["smcd_bytes_tx"] >= 2 * (1 << 30), f"SMC-D carried the bytes ({st['smcd_bytes_tx']} sent)")
    check(st["notifications_suppressed"] > 0, "wake-ups were suppressed when nobody waited")
    print(f"  info notifications {st['notifications']}, suppressed {st['notifications_suppressed']}, "
          f"cursor updates {st['cursor_updates']}")

    # Busy polling (busy_poll_us): epoll_wait and poll spin before sleeping;
    # the same echoes, and the spins found events.
    # (Not adaptive: a busy machine must not make the spins this checks skip.)
    busy = env.config("busy_poll_us = 200\nbusy_poll_adaptive = false\n", "busy.toml", use=False)
    for name, s_args in (("busy-poll epoll server", ["--mode", "selectors"]),
                         ("busy-poll poll server", ["--mode", "poll"])):
        d, _ = smc_case(env, name, s_args, ["--io", "nonblocking"], 6, opts=("--config", busy))
        check(d["conn_smcd"] == 12 and d["busy_poll_hits"] > 0,
              f"{name}: SMC-D, and spins found events ({d})")

    # Mixed pairs: plain TCP, untouched, counted as such.
    d, st = smc_case(env, "usmc client -> plain server", ["--mode", "selectors"], [], 3, wrap_server=False)
    check(d["conn_smcd"] == 0 and d["conn_tcp"] == 3, f"usmc client -> plain server: TCP ({d})")
    check(st["fallback_reasons"].get("NOLISTENER", 0) >= 3, "reason NOLISTENER recorded")
    d, _ = smc_case(env, "plain client -> usmc server", ["--mode", "selectors"], [], 3, wrap_client=False)
    check(d["conn_smcd"] == 0 and d["conn_tcp"] == 3, f"plain client -> usmc server: TCP ({d})")
    d, _ = smc_case(env, "plain client -> usmc server speaking first", ["--mode", "blocking", "--banner"],
                    ["--banner", "--max-banner-wait", "0.2"], 3, wrap_client=False)
    check(d["conn_tcp"] == 3, "a server that speaks first does not wait for plain clients")

    # A handshake that falls back leaves a TCP connection holding none of
    # usmc's descriptors: nonblocking connects polled with select() while
    # they run, to a server that declines (no DMB memory), all open at once.
    # Its cap holds one DMB of the smallest size (a crowd's DMBs shrink to
    # fit, ism::crowd_size): another client process holds that one first.
    hold = 40
    tiny = env.config('max_dmb_memory = "16K"\n', "tiny.toml", use=False)
    before = env.stats()
    server = env.start(env.wrap([PYTHON, APP, "server", "--conns", str(hold + 1), "--mode", "selectors"],
                                "--config", tiny))
    port = read_ready(server)
    first = env.start(env.wrap([PYTHON, os.path.join(APPS, "hold_app.py"), "--port", str(port),
                                "--conns", "1", "--hold-stdin"]), stdin=subprocess.PIPE)
    ready, _, _ = select.select([first.stdout], [], [], 60)
    first_line = first.stdout.readline() if ready else ""
    check(first_line.startswith("HELD 1"), f"the server's one DMB is held by another client ({first_line!r})")
    r = env.run(env.wrap([PYTHON, os.path.join(APPS, "hold_app.py"), "--port", str(port),
                          "--conns", str(hold)]), timeout=120)
    first.stdin.close()
    first.wait(timeout=60)
    server.communicate(timeout=60)
    held = [l.split() for l in r.stdout.splitlines() if l.startswith("HELD")]
    after = env.stats()
    declined = after["fallback_reasons"].get("PEERDECL", 0) - before["fallback_reasons"].get("PEERDECL", 0)
    check(r.returncode == 0 and held and declined >= hold,
          f"fallbacks: {hold} nonblocking connects declined by the server, all echoed "
          f"({r.stdout.strip()[-200:]} {r.stderr[-300:]}, PEERDECL {declined})")
    # (Per process, not per connection: the link to the server's endpoint,
    # the blocker connecting clients' sockets are tied to, one waker.)
    check(held and int(held[0][3]) <= 3,
          f"fallbacks hold no wake-up socket while open ({held[0][3] if held else '?'} sockets beyond "
          f"the {hold} TCP connections; 2 per connection before 37edda2)")

    # Slot exhaustion: a server whose memory holds 4 DMBs (128 KiB: rmem +
    # wmem) serves the first connections held open at once over SMC-D, the
    # rest over TCP, counted as MAX_DMB (the Proposals all came before any
    # slot was taken: the attach is where the memory runs out).
    cap = env.config('max_dmb_memory = "512K"\nautotune_dmb = false\n', "cap.toml", use=False)
    before = env.stats()
    server = env.start(env.wrap([PYTHON, APP, "server", "--conns", "12", "--mode", "selectors"],
                                "--config", cap))
    port = read_ready(server)
    r = env.run(env.wrap([PYTHON, os.path.join(APPS, "hold_app.py"), "--port", str(port), "--conns", "12"]),
                timeout=120)
    server.communicate(timeout=60)
    after = env.stats()
    grew = {k: after.get(k, 0) - before.get(k, 0) for k in ("conn_smcd", "conn_tcp")}
    reasons = {k: v - before["fallback_reasons"].get(k, 0) for k, v in after["fallback_reasons"].items()
               if v != before["fallback_reasons"].get(k, 0)}
    check(r.returncode == 0 and "HELD 12" in r.stdout and grew["conn_smcd"] == 8 and grew["conn_tcp"] == 16
          and reasons.get("MAX_DMB", 0) == 8,
          f"slots exhausted: 4 of 12 connections held at once SMC-D, 8 TCP with MAX_DMB, all echoed "
          f"({grew}, {reasons}, {r.stdout.strip()[-120:]})")

    # A peer that dies with many connections on one link group (its first
    # connection alone first, so the group exists when the others start):
    # each of them ends (EOF or an error) on the other side, none hangs.
    # Killed: the server (the client reports its ends), then the client
    # (the server finishes once all its ends have ended).
    dying = MANY

    def held_then_killed(kill_server):
        before = env.stats()
        server = env.start(env.wrap([PYTHON, APP, "server", "--conns", str(dying), "--mode", "selectors"]))
        port = read_ready(server)
        client = env.start(env.wrap([PYTHON, os.path.join(APPS, "hold_app.py"), "--port", str(port),
                                     "--conns", str(dying), "--first-alone", "--until-end"]))
        line = client.stdout.readline()
        check(line.startswith(f"HELD {dying}"), f"{dying} connections held open ({line.strip()})")
        grew = {k: env.stats().get(k, 0) - before.get(k, 0)
                for k in ("conn_smcd", "lgr_first_contacts", "lgr_reused", "dmb_segments")}
        check(grew["lgr_reused"] > 0 and grew["conn_smcd"] >= 2 * dying * 0.99,
              f"they run SMC-D, on the link group of the first ({grew})")
        victim, survivor = (server, client) if kill_server else (client, server)
        t0 = time.monotonic()
        victim.kill()
        victim.wait(timeout=30)
        try:
            out, err = survivor.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            env.stop(survivor, signal.SIGKILL)
            out, err = survivor.communicate()
        # (The kernel ends the TCP connections at the kill and peer_watch
        # sees it; 10 s only bounds a slow machine: the figure is printed.)
        return survivor.returncode == 0, out, err, time.monotonic() - t0

    ok, out, err, took = held_then_killed(kill_server=True)
    check(ok and f"ENDED {dying} of {dying}" in out and took < 10,
          f"the server killed: all {dying} connections ended on the client, none hung, "
          f"{took:.2f}s after the kill ({out.strip()} {err[-300:]})")
    ok, out, err, took = held_then_killed(kill_server=False)
    check(ok and "DONE" in out and took < 10,
          f"the client killed: the server saw all {dying} end and finished, none hung, "
          f"{took:.2f}s after the kill ({err[-300:]})")

    # Half close: the client shuts down writing and still reads the echo.
    # (one_connection already does shutdown(SHUT_WR) then reads to EOF: covered
    # above.) Peer killed mid-transfer: the survivor sees EOF or a reset within
    # a second, never a hang.
    server = env.start(env.wrap([PYTHON, "-c", """
import socket, sys, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); print(l.getsockname()[1], flush=True)
c, _ = l.accept()
c.sendall(b"x" * 100000)
time.sleep(60)
"""]))
    port = int(server.stdout.readline())
    reader = env.start(env.wrap([PYTHON, "-c", f"""
import socket, time
s = socket.socket(); s.connect(("127.0.0.1", {port}))
print("connected", flush=True)
got = 0
try:
    while True:
        d = s.recv(65536)
        if not d:
            print("EOF", got, flush=True); break
        got += len(d)
except ConnectionResetError:
    print("RESET", got, flush=True)
"""]))
    line = reader.stdout.readline()
    check(line.startswith("connected"), "reader connected")
    time.sleep(0.3)
    server.send_signal(signal.SIGKILL)
    server.wait(timeout=10)
    t0 = time.monotonic()
    try:
        verdict = reader.stdout.readline().strip()
        reader.wait(timeout=5)
    except subprocess.TimeoutExpired:
        verdict = "HANG"
    took = time.monotonic() - t0
    check(verdict.split()[0] in ("EOF", "RESET") and took < 1.5,
          f"peer killed mid-transfer: reader saw {verdict} after {took:.2f}s")
    # splice() from an SMC socket and sendfile() onto one move the bytes
    # through shared memory, not the TCP connection the peer no longer reads.
    payload = os.path.join(env.dir, "payload.bin")
    with open(payload, "wb") as f:
        f.write(bytes(range(256)) * 4096)  # 1 MiB
    server = env.start(env.wrap([PYTHON, "-c", f"""
import os, socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); print(l.getsockname()[1], flush=True)
c, _ = l.accept()
r, w = os.pipe()
got = b""
while len(got) < 100000:
    n = os.splice(c.fileno(), w, 65536)
    got += os.read(r, n)
with open({payload!r}, "rb") as f:
    sent = c.sendfile(f)
print("spliced", len(got), got == bytes(range(250)) * 400, "sent", sent, flush=True)
c.close()
"""]))
    port = int(server.stdout.readline())
    r = env.run(env.wrap([PYTHON, "-c", f"""
import socket
s = socket.socket(); s.connect(("127.0.0.1", {port}))
s.sendall(bytes(range(250)) * 400)
data = b""
while (d := s.recv(65536)):
    data += d
print(len(data), data == bytes(range(256)) * 4096)
"""]))
    out, _ = server.communicate(timeout=30)
    check(r.stdout.strip() == "1048576 True", f"sendfile onto an SMC socket: {r.stdout.strip()}")
    check(out.strip() == "spliced 100000 True sent 1048576", f"splice from an SMC socket: {out.strip()}")

    # Corking: MSG_MORE and TCP_CORK hold bytes back until the last part or
    # the uncork (the reader sees the whole message at once, as with TCP);
    # a cork never lifted is published after 200 ms (TCP_CORK's ceiling).
    cork_cases = [
        ("MSG_MORE", "s.send(b'part1', socket.MSG_MORE); time.sleep(0.1); s.send(b'part2')",
         "part1part2", 0.08, 0.5),
        ("TCP_CORK", "s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1); s.send(b'part1'); "
         "time.sleep(0.1); s.send(b'part2'); time.sleep(0.05); "
         "s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)", "part1part2", 0.13, 0.5),
        ("TCP_CORK never lifted", "s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1); "
         "s.send(b'part1'); time.sleep(0.6)", "part1", 0.15, 0.55),
    ]
    for name, client_code, want, t_min, t_max in cork_cases:
        before = env.stats()
        server = env.start(env.wrap([PYTHON, "-c", """
import socket, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); print(l.getsockname()[1], flush=True)
c, _ = l.accept()
c.recv(1)  # the client's go byte
t0 = time.monotonic()
first = c.recv(100)
print(first.decode(), round(time.monotonic() - t0, 3), flush=True)
c.recv(100)
"""]))
        port = int(server.stdout.readline())
        r = env.run(env.wrap([PYTHON, "-c", f"""
import socket, time
s = socket.socket(); s.connect(("127.0.0.1", {port}))
s.send(b"g")
{client_code}
s.close()
"""]), timeout=30)
        out, _ = server.communicate(timeout=30)
        got, took = (out.split() + ["", "0"])[:2]
        d = {k: env.stats()[k] - before[k] for k in ("conn_smcd",)}
        check(r.returncode == 0 and got == want and t_min <= float(took) <= t_max and d["conn_smcd"] == 2,
              f"{name}: the reader's first read got {got!r} after {took} s (want {want!r} within "
              f"{t_min}-{t_max} s), SMC-D ({d})")

    # An epoll set closed while it still held an SMC connection: the next
    # set that gets its number (holding only a pipe) must not busy-poll.
    before = env.stats()
    server = env.start(env.wrap([PYTHON, "-c", """
import os, select, socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); print(l.getsockname()[1], flush=True)
c, _ = l.accept()
c.recv(1)  # blocking, no timeout: no poll() of ours counts a spin
a = select.epoll(); a.register(c, select.EPOLLIN)
n = a.fileno(); a.close()  # closed with the connection still in it
b = select.epoll(); r, w = os.pipe(); b.register(r, select.EPOLLIN)
print("reused" if b.fileno() == n else "other", flush=True)
sys.stdin.readline()
for _ in range(20):
    b.poll(0.01)
print("done", flush=True)
"""], "--config", busy), stdin=subprocess.PIPE)
    port = int(server.stdout.readline())
    client = env.start(env.wrap([PYTHON, "-c", f"""
import socket, time
s = socket.socket(); s.connect(("127.0.0.1", {port})); s.send(b"g"); time.sleep(5)
"""], "--config", busy))
    reused = server.stdout.readline().strip()
    mid = env.stats()
    server.stdin.write("go\n")
    server.stdin.flush()
    done = server.stdout.readline().strip()
    after = env.stats()
    spins = sum(after[k] - mid[k] for k in ("busy_poll_hits", "busy_poll_misses"))
    env.stop(client)
    env.stop(server)
    check(reused == "reused" and done == "done" and spins == 0 and mid["conn_smcd"] - before["conn_smcd"] == 2,
          f"a closed epoll set's number, reused without SMC fds, does not spin ({reused}, {spins} spins)")

    # An epoll set closed while it held an SMC connection, its number then
    # reused by a new set (select.epoll() opened and closed around each
    # wait): the connection registers there as a TCP socket would (usmc
    # answered EEXIST from its own books until this test), the new set
    # reports the connection's data, and a delete and re-add work.
    before = env.stats()
    server = env.start(env.wrap([PYTHON, "-c", """
import select, socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); print(l.getsockname()[1], flush=True)
c, _ = l.accept()
c.recv(1)  # the client's first byte; its second stays for the sets below
out = []
for i in range(3):
    e = select.epoll()
    try:
        e.register(c, select.EPOLLIN)
        got = e.poll(5)
        if i == 2:  # a delete, then an add again, in the same set
            e.unregister(c); e.register(c, select.EPOLLIN); got = e.poll(5)
        out.append(f"{e.fileno()}:{'in' if got and got[0][1] & select.EPOLLIN else 'none'}")
    except OSError as x:
        out.append(f"{e.fileno()}:{type(x).__name__}")
    e.close()  # without unregistering
print(" ".join(out), flush=True)
"""]))
    port = int(server.stdout.readline())
    client = env.start(env.wrap([PYTHON, "-c", f"""
import socket, time
s = socket.socket(); s.connect(("127.0.0.1", {port})); s.send(b"gh"); time.sleep(10)
"""]))
    try:
        line = expect_line(server, 30)
    finally:
        env.stop(client)
        env.stop(server)
    rounds = line.split()
    smcd = env.stats()["conn_smcd"] - before["conn_smcd"]
    check(len(rounds) == 3 and len({r.split(":")[0] for r in rounds}) == 1
          and all(r.endswith(":in") for r in rounds) and smcd == 2,
          f"an SMC-D connection registers in a new epoll set with a closed one's number, "
          f"and that set reports its data ({line!r}; SMC-D ends {smcd})")

    # A writer waiting in poll(POLLOUT) on a full ring. The peer's wake-ups
    # that free no space (its shutdown) must not end the wait early: poll
    # returning 0 before its timeout reads as "timed out" (Python's sendall
    # raised TimeoutError that way, ~1 run in 20 of the 1 GiB echo). A peer
    # that closes or dies must end the wait at once: the send then fails.
    writer = """
import select, socket, sys, time
s = socket.socket(); s.connect(("127.0.0.1", PORT)); s.setblocking(False)
filled = 0
try:
    while True:
        filled += s.send(b"w" * 65536)
except BlockingIOError:
    pass
print("full", filled, flush=True)
p = select.poll(); p.register(s, select.POLLOUT)
t0 = time.monotonic()
ev = p.poll(5000)
took = time.monotonic() - t0
mask = ev[0][1] if ev else 0
try:
    s.send(b"x")
    after = "sent"
except (BrokenPipeError, ConnectionResetError):
    after = "EPIPE"
except BlockingIOError:
    after = "EAGAIN"
print(f"poll {mask:#x} after {took:.2f} send {after}", flush=True)
"""
    # The shutdown lands while the writer spins.
    spin = env.config("busy_poll_us = 100000\n", "spin.toml", use=False)
    peers = {
        # shut down writing (a wake-up, no space), then read everything
        "shutdown then read": ("c.recv(1, socket.MSG_PEEK); time.sleep(0.05); c.shutdown(socket.SHUT_WR)\n"
                               "time.sleep(0.4)\nwhile c.recv(1 << 20): pass", ("--config", spin)),
        "close": ("time.sleep(0.3); c.close(); time.sleep(2)", ()),
        "killed": ("time.sleep(60)", ()),
    }
    for name, (peer_code, w_opts) in peers.items():
        before = env.stats()
        server = env.start(env.wrap([PYTHON, "-c", f"""
import socket, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); print(l.getsockname()[1], flush=True)
c, _ = l.accept()
c.recv(0)
print("accepted", flush=True)
{peer_code}
"""]))
        port = int(server.stdout.readline())
        w = env.start(env.wrap([PYTHON, "-c", writer.replace("PORT", str(port))], *w_opts))
        full = w.stdout.readline().split()
        if name == "killed":
            time.sleep(0.3)
            server.send_signal(signal.SIGKILL)
        try:
            out, _ = w.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            out = "HANG"
        env.stop(server)
        f = out.split()  # poll <mask> after <seconds> send <outcome>
        mask, took, after = (int(f[1], 16), float(f[3]), f[5]) if len(f) == 6 else (0, 99.0, out)
        d = env.stats()["conn_smcd"] - before["conn_smcd"]
        if name == "shutdown then read":
            # (The bug returned 0 mid-wait: mask 0. No lower bound on the
            # time: a writer descheduled while filling starts waiting late.)
            ok = mask & select.POLLOUT and took < 3 and after == "sent"
        else:
            ok = mask != 0 and took < 1.5 and after == "EPIPE"
        check(bool(ok) and d == 2 and full[:1] == ["full"],
              f"writer waiting for space, peer {name}: {out.strip()} ({' '.join(full)}, SMC-D ends {d})")

    st = env.stats()
    check(st["handshake_errors"] == 0, "no handshake errors")
finish()
