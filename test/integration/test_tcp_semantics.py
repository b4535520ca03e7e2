#!/usr/bin/env python3
"""Behaviours of TCP that programs rely on, kept under usmc (both ends
wrapped): a listener reported readable lets accept() return; the first
send after the peer closed is taken, as TCP takes it."""
import os
import socket
import time

from harness import APPS, PYTHON, Env, check, finish, read_ready

APP = os.path.join(APPS, "semantics_app.py")
BURST = os.path.join(APPS, "burst_app.py")

# 1. socketserver's loop (select, then a blocking accept) while clients
#    connect and close at once, their handshakes broken half way: every
#    accept() after a readable select returns at once (it used to sleep
#    until the next connection when the broken one was dropped).
with Env() as env:
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
with Env() as env:
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
finish()
