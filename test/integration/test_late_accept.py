#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A server that accepts late (apps/late_accept_app.py), both ends under
usmc-run in processes of their own. The kernel's SMC runs the handshake in
its listen work, without accept(): a client's connect() never waits for the
server application. usmc's client once waited in connect() until accept(),
gave up after 6 s (CLCWAIT) and its Proposal (eyecatcher E2 D4 C3 D9,
EBCDIC "SMCR") reached the server application as data.

1. Late accept: accept() 0, 1.5, 3 and 6 s after the clients started (one
   blocking, one nonblocking polled for completion, one in Python's timeout
   mode), the same programs plain (TCP) and wrapped: usmc's connect() takes
   less than TCP's + 200 ms, the server reads each payload byte for byte,
   and both ends ran SMC-D (no CLCWAIT).
2. A client that gave up: clients (testonly_clc_timeout_ms = 300) that
   connected to the server once already (a warm-up connection: usmc's client
   fetches a listener's announcement memory from the server's engine at its
   first connect to it), the server process then stopped (SIGSTOP: its
   engine too): they connect (as TCP within 1 s, CLCWAIT: the Proposal went
   out), send and close; the server continued then accepts: each stream is
   the payload exactly, no CLC bytes. Also clients whose first contact
   finds the server stopped (TCP without a Proposal, NOLISTENER): exact.
3. Full backlog: listen(1), no accept, 6 clients at once (CLC wait 500 ms);
   after 2 s the server accepts all: each stream is one client's payload.
   The same with plain (unwrapped) clients, and all plain (TCP baseline).
   (The kernel itself loses a connection now and then here: syncookies.)
4. The listener closed unaccepted (after an SMC-D handshake, and after a
   client gave up, as in 2): the client's read ends (EOF or an error) in
   bounded time, never with bytes.
5. fork() between connect and accept: the child accepts and reads the
   payload while the parent never accepts; and the parent accepts after its
   child exited without accepting.
6. Cases 1 (delays 0 and 1.5 s), 2 and 5 on ::1 too.

Every process is stopped by PID, every wait bounded. Each case has a stats
directory of its own (shared by its server and clients: the registry lives
there); the server's counters are read while it runs and its clients have
exited (--live), the clients' are the rest.

    test_late_accept.py [--delays 0,1.5,3,6]   ($USMC_LATE_ACCEPT_DELAYS too)"""
import argparse
import json
import os
import signal
import subprocess
import time

from harness import APPS, PYTHON, USMC, Env, Lines, check, finish, stop_and_wait, tell

APP = os.path.join(APPS, "late_accept_app.py")
MODES = ("blocking", "nonblocking", "timeout")
EYECATCHER = "e2d4c3d9"  # CLC messages begin with EBCDIC "SMCR"
SIZE = 100_000
MARGIN_MS = 200

ap = argparse.ArgumentParser()
ap.add_argument("--delays", default=os.environ.get("USMC_LATE_ACCEPT_DELAYS", "0,1.5,3,6"),
                help="accept delays of case 1, seconds (IPv6 runs those up to 1.5 s)")
opts = ap.parse_args()
DELAYS = [float(d) for d in opts.delays.split(",") if d.strip()]
DELAYS6 = [d for d in DELAYS if d <= 1.5] or DELAYS[:1]


class Run:
    """One case's processes: one stats directory for both sides (the
    registry, where clients find listeners, lives there too), a
    configuration for each. The server's counters are read while it lives
    and the clients have exited (--live), the clients' are the rest."""

    def __init__(self, env, name, server_cfg, client_cfg):
        self.stats_dir = os.path.join(env.dir, f"stats-{name}")
        os.mkdir(self.stats_dir)
        self.server = dict(env.env, USMC_STATS_DIR=self.stats_dir,
                           USMC_CONFIG=env.config(server_cfg, f"{name}-server.toml", use=False))
        self.client = dict(env.env, USMC_STATS_DIR=self.stats_dir,
                           USMC_CONFIG=env.config(client_cfg, f"{name}-client.toml", use=False))
        self.srv = self.cli = {}

    def stats(self, live=False):
        r = subprocess.run([USMC, "--stats-dir", self.stats_dir, "stats", "--json", *(["--live"] if live else [])],
                           capture_output=True, text=True, timeout=30)
        try:
            return json.loads(r.stdout)
        except ValueError:
            return {"error": (r.stdout + r.stderr)[-300:]}

    def split(self):
        """The server's counters (live: call while it runs, the clients
        gone) and the rest's; kept as .srv and .cli."""
        self.srv = self.stats(live=True)
        both = self.stats()
        self.cli = {k: v - self.srv.get(k, 0) for k, v in both.items() if isinstance(v, int)}
        reasons = dict(both.get("fallback_reasons") or {})
        for k, v in (self.srv.get("fallback_reasons") or {}).items():
            reasons[k] = reasons.get(k, 0) - v
        self.cli["fallback_reasons"] = {k: v for k, v in reasons.items() if v}
        return self.srv, self.cli


SERVER_CFG = "clc_detect_timeout_ms = 2000\n"  # a loaded machine's late Proposal stays SMC-D


def brief(st):
    keys = ("conn_smcd", "conn_tcp", "handshake_errors", "hs_unexpected_events", "late_proposals")
    return ", ".join(f"{k} {st.get(k, '?')}" for k in keys) + f", reasons {st.get('fallback_reasons') or {}}"


def start(env, cmd, penv, wrapped, stdin=False):
    p = env.start(env.wrap(cmd) if wrapped else cmd, env=penv,
                  stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
    return p, Lines(p)


def start_server(env, run, wrapped, family=4, backlog=16):
    p, lines = start(env, [PYTHON, APP, "server", "--family", str(family), "--backlog", str(backlog)],
                     run.server, wrapped, stdin=True)
    ready = lines.first("READY", 20)
    if not ready:
        env.stop(p, timeout=5)
        print("    server stderr:", p.stderr.read()[-1500:])
        return p, lines, None
    return p, lines, int(ready.split()[1])


def start_client(env, run, wrapped, port, family=4, mode="blocking", extra=(), stdin=False):
    return start(env, [PYTHON, APP, "client", "--port", str(port), "--family", str(family), "--mode", mode,
                       "--size", str(SIZE), *extra], run.client, wrapped, stdin)


def client_result(env, p, lines, timeout):
    """Waits (bounded) for a client; its report as a dict."""
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        env.stop(p, signal.SIGKILL, timeout=5)
    r = {"rc": p.returncode, "lines": lines.all()}
    for line in r["lines"]:
        w = line.split() or ["-"]
        if w[0] == "PAYLOAD":
            r["len"], r["sha"], r["first16"] = int(w[1]), w[2], w[3]
        elif w[0] == "WARM":
            r["warm"] = (int(w[1]), w[2])
        elif w[0] == "CONNECTED":
            r["connect_ms"] = float(w[1])
        elif w[0] in ("SENT", "READ", "ERROR"):
            r[w[0].lower()] = w[1:]
    if p.returncode != 0:
        r["stderr"] = p.stderr.read()[-800:]
    return r


def conns_of(lines):
    """The server's CONN lines: (role, len, sha, first16)."""
    return [(w[1], int(w[3]), w[4], w[5]) for w in (l.split() for l in lines) if w and w[0] == "CONN"]


def exact(clients, conns):
    """Whether the streams read are the clients' payloads (and warm-up
    streams), one each, byte for byte (sha256 and length), and a description
    of any difference."""
    want = sorted([(c.get("len"), c.get("sha")) for c in clients] + [c["warm"] for c in clients if "warm" in c])
    got = sorted((n, sha) for _, n, sha, _ in conns)
    if want == got:
        return True, f"{len(got)} streams exact"
    bad = [f"len {n} first16 {f16}" + (" (CLC eyecatcher!)" if f16.startswith(EYECATCHER) else "")
           for _, n, sha, f16 in conns if (n, sha) not in want]
    return False, (f"expected {len(want)} streams of {[w[0] for w in want]} bytes, read {len(got)}: "
                   f"{[g[0] for g in got]}; not a client's payload: {bad or 'none'}")


def read_of_clients(clients, conns):
    """The streams read that are not a client's payload (or warm-up), each
    matched at most once, and how many of the clients' streams were not
    read."""
    want = [(c.get("len"), c.get("sha")) for c in clients] + [c["warm"] for c in clients if "warm" in c]
    unknown = []
    for _, n, sha, f16 in conns:
        if (n, sha) in want:
            want.remove((n, sha))
        else:
            unknown.append(f"len {n} first16 {f16}" + (" (CLC eyecatcher!)" if f16.startswith(EYECATCHER) else ""))
    return unknown, len(want)


def kernel_counters():
    """TcpExt counters of /proc/net/netstat (the kernel's own losses)."""
    with open("/proc/net/netstat") as f:
        rows = [l.split() for l in f if l.startswith("TcpExt:")]
    return dict(zip(rows[0][1:], map(int, rows[1][1:]))) if len(rows) >= 2 else {}


def queued(run, pid, want, timeout):
    """The server process's accept_queue gauge (connections usmc
    handshook that the application has not accepted), waited for up to
    `timeout` s to reach `want`."""
    deadline = time.monotonic() + timeout
    while True:
        st = run.stats(live=True)
        mine = [g for g in st.get("gauges_by_process", []) if g.get("pid") == pid]
        n = mine[0].get("accept_queue") if mine else None
        if n == want or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


def stop_server(env, p):
    tell(p, "EXIT")
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        env.stop(p, timeout=5)


def stop_forked(p, lines):
    """A child the server forked, still running (its parent was stopped
    first): stopped by its PID, if it is still the server's child."""
    for line in lines:
        if line.startswith("FORKED"):
            pid = int(line.split()[1])
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == p.pid:
                os.kill(pid, signal.SIGKILL)


def no_unexpected(tag, run):
    check(run.srv.get("hs_unexpected_events") == 0 and run.cli.get("hs_unexpected_events") == 0,
          f"{tag}: no unexpected handshake event (server {run.srv.get('hs_unexpected_events')}, "
          f"clients {run.cli.get('hs_unexpected_events')})")


# ---- 1. Late accept: timings ----

def late_accept_run(env, family, delay, wrapped):
    tag = f"{'usmc' if wrapped else 'tcp'} v{family} accept after {delay} s"
    run = Run(env, f"{'usmc' if wrapped else 'tcp'}-v{family}-{delay}", SERVER_CFG, "")
    server, slines, port = start_server(env, run, wrapped, family)
    if port is None:
        check(False, f"{tag}: the server listens")
        return None
    t0 = time.monotonic()
    clients = {m: start_client(env, run, wrapped, port, family, m) for m in MODES}
    time.sleep(max(0.0, t0 + delay - time.monotonic()))
    if wrapped and delay >= 1:
        n = queued(run, server.pid, len(MODES), 0)
        check(n == len(MODES), f"{tag}: before accept(), usmc's queue holds the {len(MODES)} connections, "
                               f"handshaken (accept_queue {n})")
    tell(server, f"ACCEPT {len(MODES)}")
    done = slines.first(("DONE", "ACCEPT-"), 30)
    results = {m: client_result(env, p, lines, 30) for m, (p, lines) in clients.items()}
    if wrapped:
        run.split()
    stop_server(env, server)
    conns = conns_of(slines.all())
    ok = all(r["rc"] == 0 and r.get("sent") for r in results.values())
    check(ok, f"{tag}: every client connected, sent {SIZE} bytes and closed"
              + ("" if ok else f" ({ {m: (r['rc'], r['lines'][-2:], r.get('stderr', '')) for m, r in results.items()} })"))
    same, why = exact(list(results.values()), conns)
    check(done == f"DONE server {len(MODES)}" and same,
          f"{tag}: the server read each client's payload byte for byte ({done!r}, {why})")
    return results, run


def late_accept_table(env, family, delays):
    rows = []
    n = len(MODES)
    for delay in delays:
        tcp = late_accept_run(env, family, delay, wrapped=False)
        smc = late_accept_run(env, family, delay, wrapped=True)
        if not tcp or not smc:
            continue
        for m in MODES:
            t = tcp[0][m].get("connect_ms")
            u = smc[0][m].get("connect_ms")
            rows.append((delay, m, t, u))
            check(t is not None and u is not None and u < t + MARGIN_MS,
                  f"v{family} accept after {delay} s, {m} client: usmc connect() {u} ms < TCP's {t} ms "
                  f"+ {MARGIN_MS}")
        run = smc[1]
        srv, cli = run.srv, run.cli
        clcwait = {k: v for k, v in list(srv.get("fallback_reasons", {}).items())
                   + list(cli.get("fallback_reasons", {}).items()) if k == "CLCWAIT"}
        check(srv.get("conn_smcd") == n and srv.get("conn_tcp") == 0 and not clcwait,
              f"v{family} accept after {delay} s: the server's {n} connections ran SMC-D, no CLCWAIT "
              f"(server: {brief(srv)})")
        check(cli.get("conn_smcd") == n and cli.get("conn_tcp") == 0,
              f"v{family} accept after {delay} s: the clients' {n} connections ran SMC-D (clients: {brief(cli)})")
        check(srv.get("handshake_errors") == 0 and cli.get("handshake_errors") == 0,
              f"v{family} accept after {delay} s: no handshake error")
        no_unexpected(f"v{family} accept after {delay} s", run)
    print(f"\n  IPv{family}: connect() time while the server accepts late (ms)")
    print(f"  {'accept delay s':>14} {'client':>12} {'TCP':>9} {'usmc':>9}")
    for delay, m, t, u in rows:
        print(f"  {delay:>14} {m:>12} {t if t is not None else '-':>9} {u if u is not None else '-':>9}")
    print(flush=True)


# ---- 2. A client that gave up (CLCWAIT) ----

def warm_clients(env, run, port, family, modes, extra=()):
    """Clients that each made one connection to the server first (so their
    usmc knows the listener: it fetched the announcement memory from the
    server's engine), then wait for GO."""
    clients = [start_client(env, run, True, port, family, m, ("--warmup", *extra), stdin=True) for m in modes]
    warm = [lines.first(("WARM", "ERROR"), 15) for _, lines in clients]
    return clients, warm


def gave_up_run(env, family, warm):
    """warm: the clients connected once before the server was stopped, so
    they send their Proposal and give up waiting for the answer (CLCWAIT).
    Not warm: a client's first connect to a listener asks the server's
    engine for its announcement memory; stopped, it does not answer, and
    the client goes TCP without a Proposal (NOLISTENER) after 500 ms."""
    tag = f"{'gave-up' if warm else 'stopped before first contact'} v{family}"
    run = Run(env, f"gaveup{family}{int(warm)}", SERVER_CFG, "testonly_clc_timeout_ms = 300\n")
    server, slines, port = start_server(env, run, True, family)
    if port is None:
        check(False, f"{tag}: the server listens")
        return
    warmed = []
    if warm:
        clients, warmed = warm_clients(env, run, port, family, MODES)
        check(all(w.startswith("WARM") for w in warmed), f"{tag}: the clients' warm-up connections ({warmed})")
    check(stop_and_wait(server.pid), f"{tag}: the server stopped (SIGSTOP, every thread)")
    try:
        if warm:
            for p, _ in clients:
                tell(p, "GO")
        else:
            clients = [start_client(env, run, True, port, family, m) for m in MODES]
        results = {m: client_result(env, p, lines, 20) for m, (p, lines) in zip(MODES, clients)}
    finally:
        server.send_signal(signal.SIGCONT)
    for m, r in results.items():
        ms = r.get("connect_ms")
        # (Bounded well under CLC_WAIT_TIME, 6 s: a loaded machine may take
        # a second past the 300 ms the clients wait.)
        check(r["rc"] == 0 and r.get("sent") and ms is not None and ms < 4000,
              f"{tag}, {m} client, server stopped: connect() returned in {ms} ms (< 4000), sent, closed "
              f"({r['lines'][-3:]} {r.get('stderr', '')})")
    n = len(MODES) * (2 if warm else 1)
    tell(server, f"ACCEPT {n}")
    done = slines.first(("DONE", "ACCEPT-"), 20)
    run.split()
    stop_server(env, server)
    conns = conns_of(slines.all())
    cli = run.cli
    if warm:
        # (Gave up either way: CLCWAIT, or INTERR when no client worker
        # took the wait in time on a loaded machine; both leave the
        # Proposal and a Decline on the stream.)
        reasons = cli.get("fallback_reasons", {})
        check(reasons.get("CLCWAIT", 0) + reasons.get("INTERR", 0) == len(MODES),
              f"{tag}: the clients sent their Proposal, gave up waiting and ran TCP (clients: {brief(cli)})")
    else:
        print(f"  info {tag}: clients {brief(cli)}")
    same, why = exact(list(results.values()), conns)
    clc = [f16 for _, _, _, f16 in conns if f16.startswith(EYECATCHER)]
    check(done == f"DONE server {n}" and same and not clc,
          f"{tag}: the server, continued, read each payload exactly{' (and the warm-ups)' if warm else ''}, "
          f"no CLC bytes ({done!r}, {why})")
    print(f"  info {tag}: server {brief(run.srv)}")
    no_unexpected(tag, run)


# ---- 3. Full backlog ----

def backlog_run(env, wrapped_server, wrapped_clients, n=6):
    """listen(1): the kernel answers SYNs with syncookies as soon as one
    handshake is pending, and drops the final ACK of one while the accept
    queue is full; a cookie connection whose client sent its data meanwhile
    is sometimes lost for good (TcpExtSyncookiesFailed), plain TCP too. A
    stream not read is usmc's loss unless the kernel counted as many failed
    cookies meanwhile (the TCP baseline shows the same)."""
    tag = f"backlog 1{'' if wrapped_server else ', plain TCP'}" \
          f"{', plain clients' if wrapped_server and not wrapped_clients else ''}"
    run = Run(env, f"backlog{int(wrapped_server)}{int(wrapped_clients)}", SERVER_CFG,
              "testonly_clc_timeout_ms = 500\n")
    server, slines, port = start_server(env, run, wrapped_server, 4, backlog=1)
    if port is None:
        check(False, f"{tag}: the server listens")
        return
    k0 = kernel_counters()
    t0 = time.monotonic()
    clients = [start_client(env, run, wrapped_clients, port, 4, MODES[i % len(MODES)]) for i in range(n)]
    time.sleep(max(0.0, t0 + 2.0 - time.monotonic()))
    tell(server, f"ACCEPT {n} 8")  # (each accept() waits at most 8 s: a lost connection never comes)
    end = slines.first("END", 60)
    results = [client_result(env, p, lines, 40) for p, lines in clients]
    if wrapped_server:
        run.split()
    stop_server(env, server)
    k1 = kernel_counters()
    kernel = {k: k1.get(k, 0) - k0.get(k, 0) for k in ("SyncookiesSent", "SyncookiesFailed", "ListenOverflows")}
    conns = conns_of(slines.all())
    bad = [(r["rc"], r["lines"][-2:], r.get("stderr", "")) for r in results if r["rc"] != 0 or not r.get("sent")]
    unknown, missing = read_of_clients(results, conns)
    print(f"  info {tag}: client connect() ms {[r.get('connect_ms') for r in results]}; server {end!r}; "
          f"kernel {kernel}")
    if not wrapped_server:
        print(f"  info {tag}: {len(conns)} of {n} streams read, {missing} lost, "
              f"{len(unknown)} not a client's payload")
        return
    check(not bad, f"{tag}: {n} clients at once all connected, sent and closed ({bad})")
    check(end and not unknown, f"{tag}: accepted after 2 s, every stream read is exactly one client's payload "
                               f"({len(conns)} read; not a client's: {unknown or 'none'})")
    check(missing <= kernel["SyncookiesFailed"],
          f"{tag}: every client's stream read ({missing} of {n} not read"
          + (f"; the kernel counted {kernel['SyncookiesFailed']} failed syncookies meanwhile: its loss, as "
             f"plain TCP's" if missing else "") + ")")
    print(f"  info {tag}: server {brief(run.srv)}; clients {brief(run.cli)}")
    no_unexpected(tag, run)


# ---- 4. The listener closed unaccepted ----

def listener_close_run(env, wrapped, gave_up):
    tag = f"listener closed ({'usmc' if wrapped else 'tcp'}{', client gave up first' if gave_up else ''})"
    run = Run(env, f"close{int(wrapped)}{int(gave_up)}", SERVER_CFG,
              "testonly_clc_timeout_ms = 300\n" if gave_up else "")
    server, slines, port = start_server(env, run, wrapped, 4)
    if port is None:
        check(False, f"{tag}: the server listens")
        return None
    warmed = ""
    if gave_up:  # (warm: so it sends its Proposal, see gave_up_run)
        [(p, lines)], [warmed] = warm_clients(env, run, port, 4, ["blocking"], ("--then-read", "10"))
        check(stop_and_wait(server.pid), f"{tag}: the server stopped (SIGSTOP, every thread)")
    try:
        if gave_up:
            tell(p, "GO")
        else:
            p, lines = start_client(env, run, wrapped, port, 4, "blocking", ("--then-read", "10"))
        connected = lines.first(("CONNECTED", "ERROR"), 15)
    finally:
        if gave_up:
            server.send_signal(signal.SIGCONT)
    time.sleep(0.3)  # the server's engine has seen the connection (a gave-up one too)
    tell(server, "CLOSE")
    closed = slines.first("CLOSED", 10)
    t_close = time.monotonic()
    read = lines.first(("READ", "ERROR"), 12)
    took = time.monotonic() - t_close
    r = client_result(env, p, lines, 10)
    if wrapped:
        run.split()
    stop_server(env, server)
    w = read.split()
    if not wrapped:
        print(f"  info {tag}: the client read {read!r} {took:.2f} s after the close")
        return read
    check(connected.startswith("CONNECTED") and closed == "CLOSED" and (warmed.startswith("WARM") or not gave_up),
          f"{tag}: client connected ({warmed + ', ' if gave_up else ''}{connected!r}), listener closed "
          f"({closed!r})")
    check(len(w) >= 2 and w[1] in ("EOF", "ERR") and took < 5,
          f"{tag}: the client's read ended in {took:.2f} s (< 5) with end of stream or an error, "
          f"no bytes ({read!r}{' CLC eyecatcher!' if EYECATCHER in read else ''}, rc {r['rc']} "
          f"{r.get('stderr', '')})")
    srv, cli = run.srv, run.cli
    print(f"  info {tag}: server {brief(srv)}; client {brief(cli)}")
    if gave_up:
        reasons = cli.get("fallback_reasons", {})
        check(reasons.get("CLCWAIT", 0) + reasons.get("INTERR", 0) == 1,
              f"{tag}: the client had given up (CLCWAIT) before the close ({brief(cli)})")
    else:
        check(cli.get("conn_smcd") == 1, f"{tag}: the connection ran SMC-D before the close ({brief(cli)})")
    no_unexpected(tag, run)
    return read


# ---- 5. fork() between connect and accept ----

def fork_run(env, family, who, wrapped=True):
    tag = f"fork v{family}, {'child accepts' if who == 'child' else 'parent accepts'}" \
          f"{'' if wrapped else ' (plain TCP)'}"
    run = Run(env, f"fork{family}{who}{int(wrapped)}", SERVER_CFG, "")
    server, slines, port = start_server(env, run, wrapped, family)
    if port is None:
        check(False, f"{tag}: the server listens")
        return
    p, lines = start_client(env, run, wrapped, port, family, "blocking")
    connected = lines.first(("CONNECTED", "ERROR"), 15)
    time.sleep(0.3)  # connected and sending before the fork
    if wrapped:
        n = queued(run, server.pid, 1, 3)
        check(n == 1, f"{tag}: before the fork, usmc's queue holds the connection, handshaken "
                      f"(accept_queue {n})")
    tell(server, f"FORK {who} 1")
    reaped = slines.first("REAPED", 30)
    done = slines.first(("DONE", "ACCEPT-"), 20) if who == "parent" else ""
    r = client_result(env, p, lines, 20)
    if wrapped:
        run.split()
    stop_server(env, server)
    seen = slines.all()
    stop_forked(server, seen)
    if who == "child":
        done = next((l for l in seen if l.startswith(("DONE", "ACCEPT-"))), "")
    conns = conns_of(seen)
    check(connected.startswith("CONNECTED") and r["rc"] == 0 and r.get("sent"),
          f"{tag}: the client connected, sent {SIZE} bytes and closed ({r['lines'][-3:]} {r.get('stderr', '')})")
    same, why = exact([r], conns)
    roles = {c[0] for c in conns}
    check(done == f"DONE {who} 1" and same and roles == {who} and reaped == "REAPED 0",
          f"{tag}: the {who} read the payload exactly ({done!r}, {why}, readers {roles or '-'}, {reaped!r})")
    if wrapped:
        # (A forked child's counters stay private until it is "to be seen"
        # (runtime.cpp): the server end's count may be nowhere.)
        print(f"  info {tag}: server parent {brief(run.srv)}; client and forked child {brief(run.cli)}")
        check(run.cli.get("conn_smcd", 0) >= 1 and run.cli.get("conn_tcp", 0) == 0 and run.srv.get("conn_tcp") == 0,
              f"{tag}: the client's end ran SMC-D, no end TCP (clients: {brief(run.cli)})")
        no_unexpected(tag, run)


t_all = time.monotonic()
with Env(smcd_mechanics=True) as env:
    print(f"1. late accept, delays {DELAYS} s (IPv6: {DELAYS6})", flush=True)
    late_accept_table(env, 4, DELAYS)
    late_accept_table(env, 6, DELAYS6)

    print("2. the client gave up (CLCWAIT), the server accepts later", flush=True)
    gave_up_run(env, 4, warm=False)
    for family in (4, 6):
        gave_up_run(env, family, warm=True)

    print("3. full backlog", flush=True)
    backlog_run(env, wrapped_server=False, wrapped_clients=False)
    backlog_run(env, wrapped_server=True, wrapped_clients=True)
    backlog_run(env, wrapped_server=True, wrapped_clients=False)

    print("4. the listener closes without accepting", flush=True)
    listener_close_run(env, wrapped=False, gave_up=False)
    listener_close_run(env, wrapped=True, gave_up=False)
    listener_close_run(env, wrapped=True, gave_up=True)

    print("5. fork between connect and accept", flush=True)
    for who in ("child", "parent"):
        fork_run(env, 4, who, wrapped=False)
    for family in (4, 6):
        for who in ("child", "parent"):
            fork_run(env, family, who)
print(f"  info whole run {time.monotonic() - t_all:.1f} s")
finish()
