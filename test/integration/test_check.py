#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`usmc check`, as a first-hour user meets it: on this (healthy) host it
says SMC-D works (exit 0, JSON too); on hosts where SMC-D cannot work,
simulated by the environment (a configuration with mode "tcp", a policy
rule, USMC_MODES with a bad value, USMC_PRELOAD_LIB pointing at nothing, a
stats directory that does not exist), it fails with the right reason and
exit 1. `usmc check ADDRESS PORT` against a wrapped server (SMC-D), a plain
one (NOLISTENER), a policy rule (POLICY) and a server that has learned TCP
(LEARNED); and `usmc ss` shows a LEARNED client's reason on its server's
row. Every output is printed (the transcript); waits are bounded; every
process is stopped by PID."""
import json
import os
import subprocess

from harness import PYTHON, USMC, Env, check, finish, read_ready

# A server that holds each connection until its client closes it, then
# closes its end (each such connection is one that did not pay, for the
# listener's learner).
SERVER = r"""
import selectors, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
sel = selectors.DefaultSelector()
sel.register(s, selectors.EVENT_READ)
print("READY", s.getsockname()[1], flush=True)
while True:
    for key, _ in sel.select(timeout=60):
        if key.fileobj is s:
            c, _ = s.accept()
            sel.register(c, selectors.EVENT_READ)
        else:
            if not key.fileobj.recv(4096):
                sel.unregister(key.fileobj)
                key.fileobj.close()
"""

# A client that connects and holds the connection until told.
HOLDER = r"""
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("CONNECTED", c.getsockname()[1], flush=True)
sys.stdin.readline()
"""


def usmc_check(env, *args, extra_env=None, show=True):
    e = dict(env.env, **(extra_env or {}))
    r = env.run([USMC, "check", *args], env=e, timeout=90)
    if show:
        print(f"$ {' '.join(f'{k}={v}' for k, v in (extra_env or {}).items())} usmc check {' '.join(args)}".replace("$  ", "$ "))
        print("    " + (r.stdout + r.stderr).strip().replace("\n", "\n    "), flush=True)
    return r


def check_json(env, *args, extra_env=None):
    r = usmc_check(env, "--json", *args, extra_env=extra_env, show=False)
    try:
        return r.returncode, json.loads(r.stdout)
    except ValueError:
        print("    not JSON:", r.stdout, r.stderr)
        return r.returncode, {"checks": [], "smcd_works": None}


def item(doc, name):
    return next((c for c in doc["checks"] if c["name"] == name), {})


def reason_of(doc, name):
    return (item(doc, name).get("reason") or {}).get("name")


def write(env, name, text):
    path = os.path.join(env.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


with Env() as env:
    # --- this host: SMC-D works ---
    r = usmc_check(env)
    check(r.returncode == 0 and "verdict: SMC-D works on this host" in r.stdout,
          "usmc check on this host: SMC-D works, exit 0")
    check(not any(l.startswith("FAIL") for l in r.stdout.splitlines()), "no FAIL line")
    rc, doc = check_json(env)
    check(rc == 0 and doc["smcd_works"] is True, "--json: smcd_works true, exit 0")
    check(doc.get("schema") == 1, f"--json: schema 1 ({doc.get('schema')})")
    check(all(c["status"] in ("ok", "info") for c in doc["checks"])
          and item(doc, "test pair client").get("detail") == "SMC-D"
          and item(doc, "test pair server").get("detail") == "SMC-D",
          f"--json: every check ok, both ends of the pair SMC-D ({[c['name'] for c in doc['checks']]})")
    check(not [n for n in os.listdir(env.stats_dir) if n.startswith("usmc-check.")],
          "the pair's own directory is gone")
    check(env.stats()["total_connections"] == 0, "the pair's connections are not in the user's counters")

    # --- hosts where SMC-D cannot work ---
    tcp_cfg = write(env, "tcp.toml", 'mode = "tcp"\n')
    r = usmc_check(env, extra_env={"USMC_CONFIG": tcp_cfg})
    rc, doc = check_json(env, extra_env={"USMC_CONFIG": tcp_cfg})
    check(r.returncode == 1 and rc == 1 and doc["smcd_works"] is False, "mode = \"tcp\": exit 1")
    check(reason_of(doc, "configuration") == "POLICY" and reason_of(doc, "test pair client") == "POLICY"
          and "mode = \"auto\"" in item(doc, "configuration").get("remedy", ""),
          "mode = \"tcp\": FAIL configuration and the pair's client with POLICY, remedy names mode = \"auto\"")

    rule_cfg = write(env, "rule.toml", '[[policy]]\naddress = "127.0.0.0/8"\nmode = "tcp"\n')
    r = usmc_check(env, extra_env={"USMC_CONFIG": rule_cfg})
    check(r.returncode == 1 and f"(the rule at {rule_cfg}:1) [POLICY 0x0a010000]" in r.stdout,
          "a policy rule: the pair's ends FAIL with POLICY, naming the rule's line")

    r = usmc_check(env, extra_env={"USMC_MODES": "fast"})
    check(r.returncode == 1 and "FAIL  environment" in r.stdout and "[POLICY 0x0a010000]" in r.stdout,
          "USMC_MODES=fast: FAIL environment, POLICY (what the shim then does)")

    rc, doc = check_json(env, extra_env={"USMC_PRELOAD_LIB": "/nonexistent/libusmc-preload.so"})
    usmc_check(env, extra_env={"USMC_PRELOAD_LIB": "/nonexistent/libusmc-preload.so"})
    check(rc == 1 and item(doc, "preload library").get("status") == "fail"
          and item(doc, "data path").get("status") == "fail",
          "USMC_PRELOAD_LIB at nothing: FAIL preload library, the data went over TCP, exit 1")

    missing = os.path.join(env.dir, "no-such-dir")
    rc, doc = check_json(env, extra_env={"USMC_STATS_DIR": missing})
    usmc_check(env, extra_env={"USMC_STATS_DIR": missing})
    check(rc == 1 and reason_of(doc, "stats directory") == "NOLISTENER"
          and doc["verdict"].startswith("SMC-D does not work on this host: NOLISTENER"),
          "a stats directory that does not exist: FAIL with NOLISTENER, exit 1")

    # --- usmc check ADDRESS PORT ---
    server_py = write(env, "server.py", SERVER)
    wrapped = env.start(env.wrap([PYTHON, server_py]))
    wport = read_ready(wrapped)
    plain = env.start([PYTHON, server_py])
    pport = read_ready(plain)

    r = usmc_check(env, "127.0.0.1", str(wport))
    rc, doc = check_json(env, f"127.0.0.1:{wport}")
    check(r.returncode == 0 and rc == 0 and doc["smcd_works"] is True
          and item(doc, "registry").get("status") == "ok"
          and item(doc, "connection").get("status") == "ok" and "SMC-D" in item(doc, "connection")["detail"],
          "a wrapped server: published, and one connection confirms SMC-D (exit 0)")

    r = usmc_check(env, "127.0.0.1", str(pport))
    rc, doc = check_json(env, "127.0.0.1", str(pport))
    check(r.returncode == 1 and reason_of(doc, "registry") == "NOLISTENER"
          and reason_of(doc, "connection") == "NOLISTENER",
          "a plain server: not published, the connection runs TCP with NOLISTENER (exit 1)")

    r = usmc_check(env, "10.255.255.1", "80")
    check(r.returncode == 1 and "is not an address of this host [NOLISTENER" in r.stdout,
          "another host's address: TCP, SMC-D is one host only")

    port_cfg = write(env, "port.toml", f'[[policy]]\nrole = "client"\nport = {wport}\nmode = "tcp"\n')
    r = usmc_check(env, "127.0.0.1", str(wport), "--no-connect", extra_env={"USMC_CONFIG": port_cfg})
    check(r.returncode == 1 and f"the rule at {port_cfg}:1 selects TCP" in r.stdout
          and "[POLICY 0x0a010000]" in r.stdout,
          "a policy rule for the port: POLICY, naming the rule (no connection made)")

    # A server that learns TCP: every connection of the checks above and
    # below closes without a byte, so after a window of them its listener
    # says TCP (a hold long enough for this test, in its own configuration).
    learn_cfg = write(env, "learn.toml", "testonly_learn_hold_ms = 60000\n")
    learner = env.start(env.wrap([PYTHON, server_py], "--config", learn_cfg))
    lport = read_ready(learner)
    learned = None
    for _ in range(40):  # a window is 16 connections; bounded
        rc, doc = check_json(env, "127.0.0.1", str(lport))
        if reason_of(doc, "learned") == "LEARNED":
            learned = doc
            break
    check(learned is not None and learned["smcd_works"] is False
          and learned["verdict"].startswith(f"a wrapped client here gets plain TCP from 127.0.0.1:{lport}: LEARNED"),
          "a server whose connections never paid: LEARNED, exit 1")
    usmc_check(env, "127.0.0.1", str(lport), "--no-connect")

    # usmc ss: the server's row of a LEARNED client's connection names it.
    holder_py = write(env, "holder.py", HOLDER)
    holder = env.start(env.wrap([PYTHON, holder_py, str(lport)]), stdin=subprocess.PIPE)
    line = holder.stdout.readline().split()
    hport = line[1] if line[:1] == ["CONNECTED"] else "?"
    rows = env.ss_json()
    client = next((x for x in rows if x["role"] == "client" and x["local"].endswith(f":{hport}")), {})
    server = next((x for x in rows if x["role"] == "server" and x["peer"].endswith(f":{hport}")), {})
    text = env.ss()
    print("$ usmc ss\n    " + text.strip().replace("\n", "\n    "))
    check((client.get("fallback") or {}).get("name") == "LEARNED", f"the client's own reason: LEARNED ({client})")
    check((server.get("fallback") or {}).get("name") == "PEERNOSMC"
          and (server.get("client_fallback") or {}).get("name") == "LEARNED",
          f"the server's row: PEERNOSMC, and its client's LEARNED ({server})")
    check(any(f":{hport}" in l and "PEERNOSMC 0x03010000 client:LEARNED" in l for l in text.splitlines()),
          "usmc ss text: PEERNOSMC 0x03010000 client:LEARNED")
    holder.stdin.close()
    env.stop(holder)
finish()
