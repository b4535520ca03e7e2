#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""FTP under usmc: pyftpdlib's server and Python's ftplib client, both under
usmc-run, on 127.0.0.1 and on ::1, in passive mode (the client connects to
the server's data port) and in active mode (PORT/EPRT: the server connects
back to the client, which listens and accepts only after the server's
reply on the control connection; usmc once put the server's CLC Proposal
into such a data stream). Uploads and downloads of 0 B, 1 B, ~100 KB and
4 MiB of random data, each compared byte for byte (a difference is printed
with both SHA-256 digests, its first differing bytes in hex and any CLC
eyecatcher found in the data). The matrix runs --rounds times (default 3, or
$USMC_FTP_ROUNDS), with pass counts per mode.

The server runs once per I/O loop of pyftpdlib (--loops):
  poll   every connection, control and data, both modes, tries SMC-D and
         must run it (the active-mode handshake is exercised);
  epoll  pyftpdlib's default on Linux. It puts each socket in its epoll set
         before listen() or connect(): usmc runs those connects as TCP
         (EPOLLEARLY, the active-mode data connections), and a listener
         must still hand out its connections through the set.
Every end tries SMC-D however short its connection (learn_smc = false, a
CLC wait long enough for a loaded machine); usmc's counters of the server
and of the client must show SMC-D and no handshake error.

Second part: CPython's own test_ftplib (Debian's libpython3.11-testsuite)
under usmc-run, its FTP server thread and clients in one process, with
upstream's fix of its dummy server's decoding (apps/cpython_ftplib_app.py);
skipped with a message when the test suite is not installed.

    test_ftp.py [--rounds N] [--modes passive,active] [--loops poll,epoll] [--skip-cpython]"""
import argparse
import json
import os
import re
import select
import subprocess
import time

from harness import APPS, PYTHON, USMC, Env, check, finish, slow_machine_config

SERVER = os.path.join(APPS, "ftp_server_app.py")
CLIENT = os.path.join(APPS, "ftp_client_app.py")
CPYTHON_FTPLIB = os.path.join(APPS, "cpython_ftplib_app.py")
SIZES = [0, 1, 100_000, 4 << 20]
SLOW_OP_S = 2.0  # an operation on loopback taking longer waited for something

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=int(os.environ.get("USMC_FTP_ROUNDS", "3")))
ap.add_argument("--modes", default="passive,active")
ap.add_argument("--loops", default="poll,epoll", help="pyftpdlib I/O loops to run the server with")
ap.add_argument("--skip-cpython", action="store_true", help="do not run CPython's test_ftplib")
opts = ap.parse_args()
MODES = opts.modes.split(",")


def read_ports(p, timeout=20.0):
    """The server's 'READY <ipv4 port> <ipv6 port>' line, bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            break
        line = p.stdout.readline()
        if line.startswith("READY"):
            return int(line.split()[1]), int(line.split()[2])
        if not line:
            break
    return None


def tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"({e})"


def stats(env, live):
    r = env.run([USMC, "--stats-dir", env.stats_dir, "stats", "--json", *(["--live"] if live else [])],
                timeout=30)
    return json.loads(r.stdout)


def minus(a, b):
    """Counters of `a` less those of `b` (fallback reasons too)."""
    d = {k: v - b.get(k, 0) for k, v in a.items() if isinstance(v, int)}
    reasons = dict(a.get("fallback_reasons") or {})
    for k, v in (b.get("fallback_reasons") or {}).items():
        reasons[k] = reasons.get(k, 0) - v
    d["fallback_reasons"] = {k: v for k, v in reasons.items() if v}
    return d


def show(name, st):
    keys = ("client_connects", "server_accepts", "conn_smcd", "conn_tcp", "handshake_errors",
            "hs_unexpected_events", "late_proposals", "smcd_bytes_tx", "smcd_bytes_rx")
    print(f"  info {name}: " + ", ".join(f"{k} {st.get(k, 0)}" for k in keys)
          + f", fallback reasons {st.get('fallback_reasons') or '{}'}", flush=True)


def ftp_matrix(loop):
    """One pyftpdlib server (I/O loop `loop`), one ftplib client running the
    whole matrix, then the checks of their counters."""
    print(f"-- pyftpdlib ({loop} loop) <-> ftplib, {opts.rounds} rounds", flush=True)
    with Env(smcd_mechanics=True) as env:
        slow_machine_config(env)  # learn_smc = false, clc_detect_timeout_ms = 2000
        root = os.path.join(env.dir, "root")
        os.mkdir(root)
        for size in SIZES:
            with open(os.path.join(root, f"dl-{size}.bin"), "wb") as f:
                f.write(os.urandom(size))
        server_log = os.path.join(env.dir, "server.log")
        server_err = open(os.path.join(env.dir, "server.stderr"), "w")
        server = env.start(env.wrap([PYTHON, SERVER, "--root", root, "--log", server_log, "--loop", loop,
                                     "--seconds", "3600"]), stderr=server_err)
        ports = read_ports(server)
        if not check(ports is not None and ports[0] > 0, f"{loop}: pyftpdlib serves (ports {ports})"):
            env.stop(server)
            server_err.close()
            print(tail(server_err.name))
            return
        port4, port6 = ports
        if not port6:
            print(f"  info no IPv6 listener ({tail(server_err.name, 3).strip()}): IPv4 only")
        families = 2 if port6 else 1

        cmd = [PYTHON, CLIENT, "--port4", str(port4), "--port6", str(port6), "--root", root,
               "--rounds", str(opts.rounds), "--modes", opts.modes, "--sizes", ",".join(str(s) for s in SIZES)]
        t0 = time.monotonic()
        r = env.run_explained(env.wrap(cmd), timeout=180 + 20 * opts.rounds, watch=[server.pid],
                              logs=[server_log, server_err.name])
        took = time.monotonic() - t0
        ops = [l for l in r.stdout.splitlines() if l.startswith("OP ")]
        failed = [l for l in ops if l.split()[6] != "ok"]
        print(f"  info the client ran {len(ops)} operations in {took:.1f} s, rc {r.returncode}")
        for l in [l for l in failed if "SKIPPED" not in l][:10]:
            print("    " + l[:1200])
        if len(failed) > 10:
            print(f"    ({len(failed)} failed operations in all)")
        if r.returncode not in (0, 1) or not ops:
            print("    client stderr:", r.stderr[-3000:])
            print("    server log:\n" + tail(server_log))

        # Pass counts per mode: operations, and rounds in which all of a
        # mode's operations (both families) passed.
        per_op = []
        for l in ops:
            fields = l.split()
            o = dict(kv.split("=", 1) for kv in fields[1:6])
            o["ok"] = fields[6] == "ok"
            m = re.search(r"\(([0-9.]+) s\)$", l)
            o["took"] = float(m.group(1)) if m else 0.0
            per_op.append(o)
        expected_ops = families * (2 * len(SIZES) + 1) * opts.rounds
        for mode in MODES:
            mine = [o for o in per_op if o["mode"] == mode]
            good = sum(o["ok"] for o in mine)
            slow = sum(o["took"] > SLOW_OP_S for o in mine)
            rounds_ok = sum(1 for rnd in range(1, opts.rounds + 1)
                            if any(o["round"] == str(rnd) for o in mine)
                            and all(o["ok"] for o in mine if o["round"] == str(rnd)))
            by = {}
            for o in mine:
                by.setdefault((o["op"], o["family"]), [0, 0])[0 if o["ok"] else 1] += 1
            detail = " ".join(f"{op}/{fam} {v[0]}/{v[0] + v[1]}" for (op, fam), v in sorted(by.items()))
            print(f"  info {loop} {mode}: {good}/{len(mine)} operations passed, {rounds_ok}/{opts.rounds} rounds "
                  f"all passed, {slow} took over {SLOW_OP_S:.0f} s ({detail})")
            check(good == len(mine) == expected_ops,
                  f"{loop}, {mode} mode: every upload and download byte for byte ({good}/{expected_ops} "
                  f"operations, {rounds_ok}/{opts.rounds} rounds)")

        # usmc's counters: the server still runs (--live: its own), the
        # client has exited (all less live: its own).
        srv = stats(env, live=True)
        both = stats(env, live=False)
        cli = minus(both, srv)
        show("server (pyftpdlib)", srv)
        show("client (ftplib)", cli)
        for name, st in (("server", srv), ("client", cli)):
            check(st["conn_smcd"] > 0, f"{loop}: {name} connections ran SMC-D ({st['conn_smcd']})")
            check(st["handshake_errors"] == 0 and st.get("hs_unexpected_events", 0) == 0,
                  f"{loop}: {name}: no handshake error ({st['handshake_errors']}), no unexpected handshake "
                  f"event ({st.get('hs_unexpected_events', 0)})")
        reasons = both.get("fallback_reasons") or {}
        print(f"  info {loop}: fallback reasons seen: {reasons or 'none'}")
        check("LEARNED" not in reasons, f"{loop}: no connection ran TCP by what usmc learned")
        # Each session: a control connection, a data connection per transfer
        # and one for NLST, each with two ends.
        sessions = families * opts.rounds
        per_session = 2 * len(SIZES) + 2
        conns = sessions * len(MODES) * per_session
        if loop != "epoll":
            check(both["conn_tcp"] == 0 and both["conn_smcd"] >= 2 * conns,
                  f"{loop}: every end of the control and data connections ran SMC-D ({both['conn_smcd']} "
                  f"SMC-D, {both['conn_tcp']} TCP; {2 * conns} ends expected)")
        else:
            # TCP only where the connect came after epoll_ctl (the server's
            # active-mode data connects: EPOLLEARLY, their peers PEERNOSMC).
            active = sessions * (per_session - 1) if "active" in MODES else 0
            other = set(reasons) - {"EPOLLEARLY", "PEERNOSMC"}
            check(not other and reasons.get("EPOLLEARLY", 0) == reasons.get("PEERNOSMC", 0)
                  and both["conn_smcd"] >= 2 * (conns - active),
                  f"{loop}: every end ran SMC-D but those of connects made after epoll_ctl ({both['conn_smcd']} "
                  f"SMC-D, {both['conn_tcp']} TCP; at least {2 * (conns - active)} SMC-D ends expected; "
                  f"reasons {reasons or 'none'})")
        moved = opts.rounds * families * len(MODES) * 2 * sum(SIZES)
        if loop == "epoll" and "active" in MODES:
            moved //= 2  # (active-mode data ran TCP)
        check(both["smcd_bytes_rx"] >= moved,
              f"{loop}: the files went through shared memory ({both['smcd_bytes_rx']} bytes received over "
              f"SMC-D, {moved} expected)")

        rc = env.stop(server)
        server_err.close()
        check(rc == 0, f"{loop}: the FTP server stopped cleanly on SIGTERM (rc {rc})")
        errors = [l for l in open(server_log, errors="replace") if " ERROR " in l or "Traceback" in l]
        check(not errors, f"{loop}: the server logged no error ({len(errors)}"
                          f"{': ' + errors[0].strip()[:300] if errors else ''})")


def cpython_test_ftplib():
    print("-- CPython's test_ftplib under usmc-run", flush=True)
    probe = subprocess.run([PYTHON, "-c", "import test.support, test.test_ftplib"], capture_output=True,
                           text=True, timeout=60)
    if probe.returncode != 0:
        print("  SKIP CPython's test_ftplib is not installed (Debian package libpython3.11-testsuite; "
              f"scripts/install-deps.sh installs it): {probe.stderr.strip().splitlines()[-1:]}", flush=True)
        return
    with Env(smcd_mechanics=True) as env:
        slow_machine_config(env)
        t0 = time.monotonic()
        r = env.run_explained(env.wrap([PYTHON, CPYTHON_FTPLIB]), timeout=240)
        took = time.monotonic() - t0
        out = (r.stdout + "\n" + r.stderr).splitlines()  # (unittest reports on stderr)
        summary = [l.strip() for l in out if re.match(r"(Ran \d+ tests|OK|FAILED|test_ftplib:)", l.strip())]
        print(f"  info test_ftplib took {took:.1f} s: {' | '.join(summary)}")
        for l in out:
            if l.startswith(("ERROR: ", "FAIL: ")):
                print("    " + l)
        ok = r.returncode == 0 and re.search(r"^OK\b", r.stderr, re.M) is not None
        if not ok:
            print(r.stderr[-3000:] if any(l.startswith(("ERROR: ", "FAIL: ")) for l in out)
                  else r.stdout[-4000:] + r.stderr[-2000:])
        check(ok, f"CPython's test_ftplib passes under usmc-run (rc {r.returncode})")
        st = env.stats()
        show("test_ftplib", st)
        check(st["conn_smcd"] > 0, f"test_ftplib's connections ran SMC-D ({st['conn_smcd']})")
        check(st.get("hs_unexpected_events", 0) == 0,
              f"test_ftplib: no unexpected handshake event ({st.get('hs_unexpected_events', 0)})")


for loop in [l for l in opts.loops.split(",") if l]:
    ftp_matrix(loop)
if opts.skip_cpython:
    print("-- CPython's test_ftplib: not run (--skip-cpython)")
else:
    cpython_test_ftplib()
finish()
