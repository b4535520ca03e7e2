# SPDX-License-Identifier: MIT
"""A wrapped listener killed, its port then taken by a plain server: a
wrapped client that knew the listener (its registry entry cached in the
client process) must talk plain TCP to the new server, byte for byte, and
never send it a CLC Proposal. The client asks whether the publisher is
alive only when it would try SMC; this test holds it to that."""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PYTHON, Env, check, finish

SERVER = r"""
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen()
print("ready", l.getsockname()[1], flush=True)
while True:
    c, _ = l.accept()
    got = b""
    while not got.endswith(b"\n"):
        d = c.recv(4096)
        if not d:
            break
        got += d
    print("got", got.hex(), flush=True)
    c.sendall(got)
    c.close()
"""

# One process for every connect, so its lookup cache carries over.
CLIENT = r"""
import socket, sys
for line in sys.stdin:
    n = line.strip()
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    msg = f"hello {n}\n".encode()
    s.sendall(msg)
    got = b""
    while len(got) < len(msg):
        d = s.recv(4096)
        if not d:
            break
        got += d
    print("reply", n, got == msg, flush=True)
    s.close()
"""


def ready_port(p):
    line = p.stdout.readline()
    return int(line.split()[1]) if line.startswith("ready") else 0


with Env(smcd_mechanics=True) as env:
    server = env.start(env.wrap([PYTHON, "-c", SERVER, "0"]))
    port = ready_port(server)
    check(port > 0, f"wrapped server listening ({port})")
    client = env.start(env.wrap([PYTHON, "-c", CLIENT, str(port)]), stdin=__import__("subprocess").PIPE)

    def ask(n):
        client.stdin.write(f"{n}\n")
        client.stdin.flush()
        return client.stdout.readline().strip()

    check(ask(1) == "reply 1 True", "first connect answered")
    check(server.stdout.readline().strip() == "got " + b"hello 1\n".hex(), "wrapped server got the bytes")
    before = env.stats()
    check(before["conn_smcd"] == 2, f"first connection SMC-D ({before['conn_smcd']} ends)")

    server.send_signal(signal.SIGKILL)
    server.wait(timeout=10)
    plain = env.start([PYTHON, "-c", SERVER, str(port)])  # not wrapped
    check(ready_port(plain) == port, "plain server took the port")

    for n in (2, 3):
        check(ask(n) == f"reply {n} True", f"connect {n} answered")
        got = plain.stdout.readline().strip()
        check(got == "got " + f"hello {n}\n".encode().hex(),
              f"plain server got exactly the client's bytes, no CLC ({got[:60]})")
    after = env.stats()
    check(after["conn_smcd"] == before["conn_smcd"], "no SMC-D connection to the plain server")
    check(after["fallback_reasons"].get("NOLISTENER", 0) >= 2,
          f"the dead listener's entry was not believed (NOLISTENER {after['fallback_reasons']})")
    client.stdin.close()
    client.wait(timeout=10)
    env.stop(plain)
finish()
