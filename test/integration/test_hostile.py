#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A wrapped server under attack by a hostile local peer
(test/hostile/hostile_peer.py) must go on serving everyone else: echoes
byte for byte, within a bounded time, no crash (exit codes checked), and
only the hostile connection affected.

    test_hostile.py CASE      CASE: flags links silent lookalike owner_refs pending_uid cursors forged_reuse stray
              late_half_clc late_rcvtimeo move_lies bells

The server is a single-threaded selectors echo server (apps/steady_app.py)
under usmc-run on 127.0.0.1; its clients are plain (unwrapped) processes,
fresh wrapped processes, and one wrapped process that lives through the
whole attack and makes a round of connections whenever asked. Every process
is stopped by PID; every wait is bounded and ends on an event (a line read,
a process exiting) where there is one."""
import os
import pwd
import re
import resource
import select
import signal
import subprocess
import sys
import time

from harness import APPS, HERE, PYTHON, Env, check, finish, stop_and_wait

APP = os.path.join(APPS, "steady_app.py")
PEER = os.path.join(HERE, "..", "hostile", "hostile_peer.py")
SKIP = 77  # ctest SKIP_RETURN_CODE
HOSTILE_USER = "usmc-hostile"
SERVED_MS = 2000  # what "served within a bounded time" means, per connection


# ---------------------------------------------------------------- processes

def log_file(env, name):
    return open(os.path.join(env.dir, f"{name}.stderr"), "w")


def tail(env, name, n=1500):
    try:
        with open(os.path.join(env.dir, f"{name}.stderr")) as f:
            return f.read()[-n:]
    except OSError:
        return ""


class Abort(Exception):
    """A precondition of the case failed (checked already): stop here."""


_unread = {}  # pid -> what was read from its stdout and not yet returned as a line


def expect(p, prefix, timeout):
    """The next line of p's stdout that starts with `prefix` (a string or a
    tuple of them), or None if p ends or `timeout` passes first. Reads the
    pipe itself: p.stdout.readline could block past the deadline."""
    deadline = time.monotonic() + timeout
    buf = _unread.get(p.pid, b"")
    try:
        while True:
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = raw.decode(errors="replace")
                if line.startswith(prefix):
                    return line
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
                return None
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                return None
            buf += chunk
    finally:
        _unread[p.pid] = buf


def start_server(env, config="", nofile=None, extra=()):
    """The wrapped echo server; returns (process, port)."""
    senv = dict(env.env)
    if config:
        path = os.path.join(env.dir, "server.toml")
        with open(path, "w") as f:
            f.write(config)
        senv["USMC_CONFIG"] = path
    limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))) if nofile else None
    p = env.start(env.wrap([PYTHON, APP, "server", "--seconds", "280", *extra]), env=senv,
                  stderr=log_file(env, "server"), preexec_fn=limit)
    ready = expect(p, "READY", 15)
    if not check(ready, f"the wrapped server started ({ready or tail(env, 'server')!r})"):
        raise Abort()
    return p, int(ready.split()[1])


def stop_server(env, server):
    """SIGTERM: a server that still works says DONE and exits 0."""
    rc = env.stop(server, timeout=5)
    done = expect(server, "DONE", 1)
    check(rc == 0 and done is not None, f"the server exits cleanly on SIGTERM (exit {rc}, {done}; "
                                        f"stderr: {tail(env, 'server', 300)!r})")


ROUND = re.compile(r"ROUND \d+ ok=(\d+) bad=(\d+) max_ms=(\d+) first_error=(\S+)")


def parse_round(line):
    m = ROUND.match(line or "")
    return {"ok": int(m[1]), "bad": int(m[2]), "max_ms": int(m[3]), "error": m[4]} if m else None


def client_cmd(port, n, *extra):
    return [PYTHON, APP, "client", "--port", str(port), "-n", str(n), *extra]


def one_round(env, port, wrapped, n=2, extra=()):
    """A fresh client process: its round, exit status (and for a wrapped
    one, in the round, how many connection ends ran SMC-D: info only)."""
    cmd = client_cmd(port, n, *extra)
    before = env.stats() if wrapped else None
    r = env.run(env.wrap(cmd) if wrapped else cmd, timeout=60)
    result = parse_round(r.stdout.strip())
    if result and wrapped:
        result["smcd_ends"] = stat_delta(before, env.stats(), "conn_smcd")
    return result, r.returncode


class Resident:
    """A wrapped client that lives through the attack: one round of
    connections per request."""

    def __init__(self, env, port):
        self.env = env
        self.p = env.start(env.wrap(client_cmd(port, 2, "--interactive")), stdin=subprocess.PIPE,
                           stderr=log_file(env, "resident"))

    def round(self):
        if self.p.poll() is not None:
            return None, self.p.returncode
        self.p.stdin.write("go\n")
        self.p.stdin.flush()
        line = expect(self.p, "ROUND", 30)
        if line is None:  # did it die? (its exit status says how)
            try:
                self.p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        return parse_round(line), self.p.poll()

    def stop(self):
        """Ends it (EOF on stdin): exit 0 unless it crashed."""
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        rc = self.env.stop(self.p, timeout=5)
        check(rc == 0, f"the resident wrapped client exits cleanly (exit {rc}; "
                       f"stderr: {tail(self.env, 'resident', 300)!r})")


def check_round(when, who, r, rc, max_ms=SERVED_MS):
    check(r is not None and r["bad"] == 0 and r["max_ms"] <= max_ms and rc in (0, None),
          f"{when}: a {who} is served, each echo within {max_ms} ms ({r}, exit {rc})")


def check_served(env, port, when, resident=None, max_ms=SERVED_MS, n=2, plain_args=()):
    """A plain and a fresh wrapped client (n connections each), then the
    resident wrapped client (2), get their echoes byte for byte, every
    connection within max_ms."""
    check_round(when, "plain client", *one_round(env, port, False, n, plain_args), max_ms)
    check_round(when, "fresh wrapped client", *one_round(env, port, True, n), max_ms)
    if resident:
        check_round(when, "resident wrapped client", *resident.round(), max_ms)


def hostile(env, mode, port, *args, **kw):
    """The peer (unwrapped); one that holds keeps it until end_peer (or,
    at the latest, past any case's checks)."""
    return env.start([PYTHON, PEER, mode, "--port", str(port), "--hold", "250", *args],
                     stdin=subprocess.PIPE, stderr=log_file(env, "hostile"), **kw)


def held(env, peer, timeout=30):
    """Waits for the peer's HELD line: the number of things it holds."""
    line = expect(peer, ("HELD", "ERROR"), timeout)
    if not check(line and line.startswith("HELD"),
                 f"the hostile peer set up its attack ({line or tail(env, 'hostile', 500)!r})"):
        raise Abort()
    return int(line.split()[1])


def end_peer(env, peer):
    """Lets a holding peer close everything (EOF on its stdin) and checks
    that it ran to its end."""
    if peer.poll() is None:
        peer.stdin.close()
        expect(peer, "CLOSED", 10)
    try:
        peer.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    rc = env.stop(peer, timeout=5)
    check(rc == 0, f"the hostile peer ran to its end (exit {rc})")


def run_peer(env, mode, port, *args, timeout=120, **kw):
    """A peer that does not hold: its stdout, once it has exited."""
    p = hostile(env, mode, port, *args, **kw)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        env.stop(p, timeout=5)
        out = ""
    if not check(p.returncode == 0, f"the hostile peer ({mode}) ran to its end (exit {p.returncode}; "
                                    f"{out.strip()[-300:]!r} {tail(env, 'hostile', 300)!r})"):
        raise Abort()
    return out


HS_SERVER_GAUGES = ("hs_server_await_proposal", "hs_server_begin", "hs_server_await_confirm",
                    "hs_server_blocking")


def handshake_waits(env, until, timeout=15):
    """Where the live processes' server handshakes wait (usmc stats gauges),
    once `until(waits)` holds or `timeout` seconds passed; with the count of
    events a handshake did not expect (a bug of ours), which must stay 0."""
    deadline = time.monotonic() + timeout
    while True:
        st = env.stats()
        waits = {k[len("hs_server_"):]: st.get(k, 0) for k in HS_SERVER_GAUGES}
        if until(waits) or time.monotonic() > deadline:
            waits["unexpected_events"] = st.get("hs_unexpected_events", 0)
            return waits
        time.sleep(0.05)  # polling a condition, bounded by the deadline


def stat_delta(before, after, key):
    return after.get(key, 0) - before.get(key, 0)


def reasons_delta(before, after):
    b, a = before.get("fallback_reasons", {}), after.get("fallback_reasons", {})
    return {k: a[k] - b.get(k, 0) for k in a if a[k] != b.get(k, 0)}


def cpu_and_switches(pid):
    """CPU seconds (all threads) and context switches of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                switches += sum(int(l.split()[1]) for l in f if "ctxt_switches" in l)
        except OSError:
            pass
    return cpu, switches


# -------------------------------------------------------------------- cases

def case_flags(env):
    """The peer fills the queue of the server's wake-up socket (by name: no
    descriptor of the server's is shared since the datagram wake-ups) and
    asks to be woken for everything. (2ccbe20: eventfds, whose O_NONBLOCK a
    peer could clear; then socket pairs, whose far end the peer held.)"""
    server, port = start_server(env)
    resident = Resident(env, port)
    check_served(env, port, "before the attack", resident)
    peer = hostile(env, "flip-flags", port)
    held(env, peer)
    check_served(env, port, "wake-up socket full, hostile connection open", resident)
    end_peer(env, peer)
    check_served(env, port, "after the hostile connection closed", resident)
    resident.stop()
    stop_server(env, server)


def case_links(env):
    """1100 idle links to the endpoint of a server limited to 1024
    descriptors."""
    server, port = start_server(env, nofile=1024)
    resident = Resident(env, port)
    check_served(env, port, "before the attack", resident)
    peer = hostile(env, "flood-links", port, "--count", "1100")
    n = held(env, peer, timeout=60)
    print(f"  info the peer holds {n} links")
    cpu0, sw0 = cpu_and_switches(server.pid)
    time.sleep(2)  # measuring an idle interval: there is no event to wait for
    cpu1, sw1 = cpu_and_switches(server.pid)
    check(cpu1 - cpu0 < 0.2, f"the idle server does not spin while the links are held "
                             f"({cpu1 - cpu0:.2f} s CPU, {sw1 - sw0} context switches in 2 s)")
    check_served(env, port, f"{n} idle links held", resident)
    end_peer(env, peer)
    check_served(env, port, "after the links closed", resident)
    resident.stop()
    stop_server(env, server)


def case_silent(env):
    """12 connections send a Proposal and then never answer. Half of them
    announce their client port (as usmc clients do: the server waits for
    their handshakes), half do not (as clients between connect() and the
    announcement: the server then gives unknown connections a grace)."""
    server, port = start_server(env)
    resident = Resident(env, port)
    check_served(env, port, "before the attack", resident)
    peer = hostile(env, "silent-after-proposal", port, "--count", "12", "--unported", "6")
    held(env, peer)
    # Each silent handshake waits on the server's event loop, none holds a
    # worker (intake and the Accept race the peer's HELD: waited for). An
    # unported one whose Proposal came after its grace went TCP instead;
    # the six ported ones are always handshaken.
    waits = handshake_waits(env, lambda w: w["await_confirm"] == 12, timeout=5)
    check(waits["await_confirm"] >= 6 and waits["blocking"] == 0 and waits["begin"] == 0,
          f"the server waits for the silent Confirms on its event loop, no worker blocks ({waits})")
    # A plain client whose bytes are there when the server accepts runs TCP
    # at once; this one waits 100 ms before it speaks (as clients of a
    # server that speaks first do), so the server cannot tell it at accept.
    check_served(env, port, "12 silent handshakes open", resident, max_ms=1000, n=3,
                 plain_args=("--pause-ms", "100"))
    end_peer(env, peer)
    waits = handshake_waits(env, lambda w: not any(w.values()))
    check(not any(w for k, w in waits.items() if k != "unexpected_events"),
          f"their hang-ups end the 12 handshakes ({waits})")
    check_served(env, port, "after the silent connections closed", resident)
    check(env.stats().get("hs_unexpected_events", 1) == 0, "no handshake saw an event it did not expect")
    resident.stop()
    stop_server(env, server)


def case_late_half_clc(env):
    """8 announced connections stay silent until the server has given up
    waiting for their Proposals and handed them to its application as TCP
    (a late CLC message is still skipped before the first read); then each
    sends a CLC header and nothing more. The single-threaded
    nonblocking server reads them at once: until this round each read
    waited a second for the rest of the frame, the event loop with it."""
    server, port = start_server(env, config="clc_detect_timeout_ms = 20\n")
    resident = Resident(env, port)
    check_served(env, port, "before the attack", resident)
    peer = hostile(env, "late-half-clc", port, "--count", "8")
    line = expect(peer, ("CONNECTED", "ERROR"), 30)
    check(line == "CONNECTED 8", f"the peer made its 8 announced connections ({line})")
    # The server waits for their first bytes on its loop, then hands them
    # out: nothing waits for a Proposal any more.
    waits = handshake_waits(env, lambda w: not any(w.values()), timeout=10)
    check(not any(w for k, w in waits.items() if k != "unexpected_events"),
          f"the silent connections were handed out as TCP ({waits})")
    peer.stdin.write("go\n")
    peer.stdin.flush()
    held(env, peer)
    check_served(env, port, "8 late connections holding half a CLC frame", resident, max_ms=500)
    end_peer(env, peer)
    check_served(env, port, "after they closed", resident)
    check(server.poll() is None, f"the server is alive (exit {server.poll()})")
    resident.stop()
    stop_server(env, server)


def case_late_rcvtimeo(env):
    """A blocking server's read of a connection handed out as TCP while a
    late CLC message may still come (its client announced it and stays
    silent) keeps the socket's SO_RCVTIMEO, as plain TCP does: with
    nothing there it fails with EAGAIN once the 300 ms run out (until
    7f16ab9 it waited for ever); after the peer sends the 8-byte header of
    a CLC frame and nothing more, the read gives those 8 bytes, as TCP's,
    having waited for the rest of the frame no longer than the timeout
    (it waited a second)."""
    senv = dict(env.env)
    path = os.path.join(env.dir, "server.toml")
    with open(path, "w") as f:
        f.write("clc_detect_timeout_ms = 20\n")
    senv["USMC_CONFIG"] = path
    server = env.start(env.wrap([PYTHON, os.path.join(APPS, "rcvtimeo_app.py"),
                                 "--timeout-ms", "300"]),
                       env=senv, stdin=subprocess.PIPE, stderr=log_file(env, "server"))
    ready = expect(server, "READY", 15)
    if not check(ready, f"the wrapped server started ({ready or tail(env, 'server')!r})"):
        raise Abort()
    peer = hostile(env, "late-half-clc", int(ready.split()[1]), "--count", "1")
    line = expect(peer, ("CONNECTED", "ERROR"), 30)
    check(line == "CONNECTED 1", f"the peer made its announced connection ({line})")
    accepted = expect(server, "ACCEPTED", 15)
    check(accepted, "the server accepted it (as TCP: no Proposal came)")

    def recv(what):
        server.stdin.write("recv\n")
        server.stdin.flush()
        line = expect(server, "RECV", 15)  # (a read that never returns: None)
        got = dict(kv.split("=", 1) for kv in (line or "").split()[1:] if "=" in kv)
        print(f"    {what}: {line}")
        return line, int(got.get("ms", -1))

    line, ms = recv("nothing sent")
    check(line is not None and line.startswith("RECV EAGAIN"),
          f"a read with nothing there fails with EAGAIN when SO_RCVTIMEO runs out ({line})")
    check(ms < 5000, f"... after about its 300 ms, not a wait of its own ({ms} ms)")
    peer.stdin.write("go\n")
    peer.stdin.flush()
    held(env, peer)
    line, ms = recv("half a CLC frame sent")
    want = "RECV n=8 e2d4c3d904002c20"  # the Decline's header, as the peer sent it
    check(line is not None and line.startswith(want),
          f"the 8 bytes reach the application as TCP gives them ({line})")
    check(ms < 900, f"... having waited for the rest at most its 300 ms timeout ({ms} ms)")
    end_peer(env, peer)
    server.stdin.close()  # (EOF: it closes and exits)
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    rc = env.stop(server, timeout=5)
    check(rc == 0, f"the server ran to its end (exit {rc}; {tail(env, 'server', 300)!r})")


def case_lookalike(env):
    """A plain client whose first 8 bytes parse as a CLC Proposal header
    gets TCP exactly: its bytes echoed, nothing lost, nothing prepended.
    Whether the server sees those bytes when it accepts is a race; here it
    does: the server is stopped (SIGSTOP) until all ten connections have
    sent."""
    server, port = start_server(env)
    check(stop_and_wait(server.pid), "the server stopped (SIGSTOP, every thread)")
    try:
        peer = hostile(env, "plain-lookalike", port, "--count", "10")
        sent = expect(peer, ("SENT", "ERROR"), 30)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    check(sent == "SENT 10", f"10 look-alike connections sent their bytes to the stopped server ({sent})")
    lines = []
    while not (lines and lines[-1].startswith("DONE")):
        line = expect(peer, ("LOOKALIKE", "DONE"), 90)
        if not line:
            break
        lines.append(line)
    end_peer(env, peer)
    check(lines and lines[-1] == "DONE ok=10 bad=0", f"all 10 echoed byte for byte ({lines[-1:]})")
    for line in [l for l in lines if " bad " in l][:3]:
        print("    " + line)
    check_served(env, port, "after the look-alikes")
    stop_server(env, server)


def server_connections(env, pid):
    """The server's sockets other than its listener, as usmc ss lists them."""
    rows = [l.split() for l in env.ss("-a").splitlines()[1:]]
    return [r for r in rows if r and r[0] == str(pid) and r[3] != "LISTEN"]


def case_owner_refs(env):
    """Connections whose peer wrote a huge owner_refs into the server's
    control line, then closed: the server's DMB memory (512K, four DMBs)
    must not run out for later connections."""
    server, port = start_server(env, config='max_dmb_memory = "512K"\n')
    check_served(env, port, "before the attack")
    out = run_peer(env, "owner-refs", port, "--count", "6")
    written = out.count("owner_refs written")
    if not check(written >= 4, f"the peer wrote owner_refs on {written} of 6 connections (4 fill 512K)"):
        return
    deadline = time.monotonic() + 10
    while server_connections(env, server.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the server has closed them (usmc ss shows its sockets)
    check(not server_connections(env, server.pid), "the server closed the hostile connections")
    before = env.stats()
    r, rc = one_round(env, port, True, n=4)
    after = env.stats()
    check(r is not None and r["bad"] == 0 and rc == 0, f"after the attack: a wrapped client is served ({r})")
    smcd, reasons = stat_delta(before, after, "conn_smcd"), reasons_delta(before, after)
    check(smcd == 8 and not reasons, f"after the attack: its 4 connections run SMC-D at both ends "
                                     f"({smcd} SMC-D ends, fallbacks {reasons})")
    check_served(env, port, "after the attack")
    stop_server(env, server)


def case_forged_reuse(env):
    """After a first contact (a link group with the server), connections
    whose Confirm names a DMB without attaching, with names that do not
    check out (engine/smcd/link_group.hpp): the server resets each of those
    connections and serves everyone else. The same names in a Proposal
    (clc.hpp, NamedDmb): the server does not take them."""
    server, port = start_server(env)
    resident = Resident(env, port)
    check_served(env, port, "before the attack", resident)
    out = run_peer(env, "forged-reuse", port)
    check("REFUSED attach-by-sig-token" in out, f"an attach naming the server's offer by its `sig` "
                                                f"token (a public name) is refused ({out.strip()[-300:]!r})")
    for what in ("wrong-token", "sig-token", "slot-past-the-file", "no-group"):
        check(f"REFUSED {what}" in out, f"a Confirm naming a DMB with {what.replace('-', ' ')}: the "
                                       f"server reset that connection ({out.strip()[-300:]!r})")
    check("ECHOED right-names" in out, f"a connection whose names check out is believed without an "
                                       f"attach, and echoes ({out.strip()[-300:]!r})")
    for what in ("named-wrong-token", "named-sig-token", "named-slot-past-the-file"):
        check(f"LEFT {what}" in out, f"a Proposal naming a DMB with {what[6:].replace('-', ' ')}: the "
                                     f"server did not take it ({out.strip()[-300:]!r})")
    check("ECHOED named-right" in out, f"a DMB named in the Proposal whose name checks out is taken "
                                       f"with the Accept and echoes without a Confirm "
                                       f"({out.strip()[-300:]!r})")
    check_served(env, port, "after the forged names", resident)
    resident.stop()
    stop_server(env, server)


def hostile_user():
    """The second user (created if absent): (its pwd entry, whether we created it)."""
    try:
        return pwd.getpwnam(HOSTILE_USER), False
    except KeyError:
        r = subprocess.run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", HOSTILE_USER],
                           capture_output=True, timeout=30)
        if r.returncode != 0:  # (another case, run beside this one, made it first?)
            return pwd.getpwnam(HOSTILE_USER), False
        return pwd.getpwnam(HOSTILE_USER), True


def case_pending_uid(env):
    """Another user tries to truncate the listener's announcement memory
    (2ccbe20: a world-writable .pending file; both the server and a client
    that had it mapped died of SIGBUS) while the server and a client map it,
    then zeroes it over and over while our user's clients connect."""
    if os.geteuid() != 0:
        print(f"SKIP pending_uid: needs root (creates user {HOSTILE_USER} and runs the peer as it)")
        sys.exit(SKIP)
    user, created = hostile_user()
    try:
        os.chmod(env.dir, 0o755)  # the other user reaches the stats dir
        os.chmod(env.stats_dir, 0o1777)
        env.config("learn_smc = false\n")  # every connection SMC-D, however short
        server, port = start_server(env)
        resident = Resident(env, port)
        check_served(env, port, "before the attack", resident)
        out = run_peer(env, "truncate-pending", port, user=user.pw_uid, group=user.pw_gid,
                       extra_groups=[])
        check("memfd" in out, f"user {HOSTILE_USER} got the announcement memory to try ({out.strip()})")
        check("TRUNCATED" not in out, f"nothing could be truncated ({out.strip()})")
        # The resident client first: it has the file mapped (a connect to
        # the server, which maps it too, would otherwise go first).
        check_round("after the truncation", "resident wrapped client", *resident.round())
        check_served(env, port, "after the truncation")
        check(server.poll() is None, f"the server is alive (exit {server.poll()})")
        # The other user zeroes its announcement memory over and over: the
        # counts, ports and deadlines of our user's clients are elsewhere
        # (until this round all users shared one memory, and a connection
        # whose count was zeroed went to the server as plain TCP, its
        # Proposal as data).
        peer = hostile(env, "zero-pending", port, user=user.pw_uid, group=user.pw_gid,
                       extra_groups=[])
        held(env, peer)
        n = 8
        r, rc = one_round(env, port, True, n)
        check_round("while another user zeroes its announcements", "fresh wrapped client", r, rc)
        check(r is not None and r["smcd_ends"] == 2 * n,
              f"while another user zeroes its announcements, all {n} connections of a fresh wrapped "
              f"client run SMC-D at both ends ({r})")
        check_round("while another user zeroes its announcements", "resident wrapped client",
                    *resident.round())
        end_peer(env, peer)
        resident.stop()
        stop_server(env, server)
    finally:
        if created:
            subprocess.run(["userdel", HOSTILE_USER], capture_output=True, timeout=30)


def case_cursors(env):
    """Impossible cursors and flags in both control lines: the hostile
    connection breaks, nothing else."""
    server, port = start_server(env)
    resident = Resident(env, port)
    check_served(env, port, "before the attack", resident)
    peer = hostile(env, "garbage-cursors", port)
    held(env, peer)
    check_served(env, port, "garbage cursors in place", resident)
    end_peer(env, peer)
    check_served(env, port, "after the hostile connection closed", resident)
    resident.stop()
    stop_server(env, server)


def server_sigs(pid):
    """How many wake-up sockets (one per SMC-D connection) `pid` holds."""
    sys.path.insert(0, os.path.dirname(PEER))
    from hostile_peer import sig_names
    return len(sig_names(pid))


def case_stray(env):
    """Not a peer: any local process can send a datagram to a connection's
    wake-up socket by name (/proc/net/unix lists them). An idle connection
    of a level-triggered server must not make it spin: a read that finds
    nothing, or a poll() woken for nothing, drains what woke it. (At
    43bde49 an epoll server, told readable again at once, spun at 100 % CPU
    until the connection's peer wrote; a poll() server spun inside usmc's
    poll.) Since issue 44 an epoll server's connections make no wake-up
    socket at all (its set is kept in user memory): nothing to reach, and
    the stranger's attack on its bell is case_bells."""
    for selector in ("epoll", "poll"):
        print(f"  {selector}")
        stray_on(env, selector)


def stray_on(env, selector):
    # (A detection wait long enough that a loaded machine does not turn the
    # connection into TCP: this case needs it SMC-D.)
    server, port = start_server(env, config="clc_detect_timeout_ms = 2000\n",
                                extra=("--selector", selector))
    # One wrapped connection, idle for a while after its connect.
    before = env.stats()
    client = env.start(env.wrap(client_cmd(port, 1, "--pause-ms", "8000")),
                       stderr=log_file(env, "client"))
    deadline = time.monotonic() + 15
    while stat_delta(before, env.stats(), "conn_smcd") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)  # polling a condition, bounded by the deadline
    if not check(stat_delta(before, env.stats(), "conn_smcd") == 2,
                 "the idle connection is SMC-D at both ends"):
        env.stop(client)
        raise Abort()
    if selector == "poll":  # (its first poll makes the `sig`)
        while server_sigs(server.pid) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)  # polling a condition, bounded by the deadline
    sigs = server_sigs(server.pid)
    cpu0, sw0 = cpu_and_switches(server.pid)
    out = run_peer(env, "stray-wakeups", port, "--pid", str(server.pid))
    if selector == "epoll":
        check(sigs == 0 and out.startswith("SENT 0"),
              f"the epoll server holds no wake-up socket: the stranger reaches none ({sigs}, {out.strip()})")
    else:
        check(sigs >= 1 and out.startswith("SENT") and int(out.split()[1]) >= 1,
              f"the stranger reached a wake-up socket ({sigs}, {out.strip()})")
    time.sleep(1)  # measuring an idle interval: there is no event to wait for
    cpu1, sw1 = cpu_and_switches(server.pid)
    check(cpu1 - cpu0 < 0.3, f"the server does not spin on a stray wake-up "
                             f"({cpu1 - cpu0:.2f} s CPU, {sw1 - sw0} context switches in 1 s)")
    line = expect(client, "ROUND", 30)
    r = parse_round(line)
    check(r is not None and r["ok"] == 1 and r["bad"] == 0,
          f"the idle connection is echoed once its client writes ({line}, {tail(env, 'client', 300)!r})")
    env.stop(client)
    check_served(env, port, "after the stray wake-ups")
    stop_server(env, server)


def socket_fds(pid):
    """{descriptor: socket inode} of process `pid`."""
    fds = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            fds[int(fd)] = int(link[8:-1])
    return fds


def epoll_targets(pid):
    """{epoll descriptor: the descriptors registered in its kernel part} of
    process `pid` (/proc/PID/fdinfo: a 'tfd:' line per registration)."""
    sets = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                sets[int(fd)] = {int(l.split()[1]) for l in f if l.startswith("tfd:")}
        except OSError:
            continue
    return sets


def listener_inode(port):
    """The socket inode of the TCP listener on 127.0.0.1:`port`, or None."""
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            parts = line.split()
            if parts[1].endswith(f":{port:04X}") and parts[3] == "0A":
                return int(parts[9])
    return None


def unix_names_by_inode():
    """{inode: abstract name (without the NUL)} of /proc/net/unix."""
    names = {}
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 8 and parts[7].startswith("@"):
                names[int(parts[6])] = parts[7][1:]
    return names


def flood(env, port, what, bells, tokens, kinds, who, server, run):
    """One flood of the server's `bells` (flooder: hostile_peer.py
    bell-flood, as `who`) for a run of the held connections."""
    cpu0, sw0 = cpu_and_switches(server.pid)
    t0 = time.monotonic()
    flooder = hostile(env, "bell-flood", port, "--hold", "60",
                      *[a for b in bells for a in ("--bell", b[len("usmc-b-"):])],
                      *[a for t in tokens for a in ("--token", t[len("usmc-s-"):])], **who)
    line = expect(flooder, ("FLOODING", "ERROR"), 15)
    if not check(line == f"FLOODING {len(bells)}",
                 f"{what}: the stranger filled the queue of each of the server's {len(bells)} bells "
                 f"({line or tail(env, 'hostile', 500)!r})"):
        env.stop(flooder, timeout=5)
        raise Abort()
    run(2, f"bells flooded with {what}")
    flooder.stdin.close()
    flooded = expect(flooder, "FLOODED", 15)
    cpu1, sw1 = cpu_and_switches(server.pid)
    end_peer(env, flooder)
    print(f"  info the server's CPU while flooded: {cpu1 - cpu0:.2f} s in {time.monotonic() - t0:.1f} s, "
          f"{sw1 - sw0} context switches")
    sent = dict(kv.split("=") for kv in (flooded or "").split()[1:])
    check(all(int(sent.get(k, 0)) > 0 for k in kinds) and int(sent.get("full", 0)) >= 10
          and sent.get("errors") == "0",
          f"{what}: the stranger sent each kind ({', '.join(kinds)}), and found the bells full "
          f"again and again ({flooded})")


def case_bells(env):
    """An epoll server's set is kept in user memory (issue 44) with a bell,
    `usmc-b-<id>`: a datagram socket any local process can send to by name
    (/proc/net/unix lists it), which the peers of its connections ring with
    the token of the server's side, the token that also names that side's
    `sig` (public too). A stranger (another user when the test runs as
    root) floods the server's bells, each bell's queue kept full, so a
    peer's ring finds it full (EAGAIN) and only the drain's look at every
    armed connection finds that data: for a run with random tokens, 8 zero
    bytes, datagrams of 0, 1, 7, 9 and 512 bytes; then for a run with, every
    other datagram, the tokens of the server's own `sig`s (tokens its set
    holds: each costs a look, never a report), some with bytes after them.
    During each run a wrapped client does echo round trips on 6 SMC-D
    connections: one at a time rests (idle for far more than 16 looks:
    armed) while the others are busy, then is used again; one rests the
    whole run. Every round trip comes back byte for byte within SERVED_MS;
    after the flood the server idles without spinning, its held connections
    echo again, and it serves new clients."""
    sys.path.insert(0, os.path.dirname(PEER))
    from hostile_peer import unix_names
    n = 6
    # (Every connection SMC-D: a detection wait long enough for a loaded
    # machine, no learning.)
    env.config("learn_smc = false\nclc_detect_timeout_ms = 2000\n")
    server, port = start_server(env)
    before = env.stats()
    client = env.start(env.wrap([PYTHON, APP, "conns", "--port", str(port), "-n", str(n),
                                 "--size", "3000", "--rest-ms", "300"]),
                       stdin=subprocess.PIPE, stderr=log_file(env, "client"))

    def run(seconds, when):
        client.stdin.write(f"run {seconds}\n")
        client.stdin.flush()
        line = expect(client, "RUN", seconds + 20)  # (each socket operation: 5 s at most)
        m = re.match(r"RUN \d+ ok=(\d+) bad=(\d+) max_ms=(\d+) rested=(\d+) rested_max_ms=(\d+)", line or "")
        check(m and int(m[1]) > 0 and m[2] == "0" and int(m[3]) <= SERVED_MS and int(m[4]) >= 2,
              f"{when}: every echo round trip on the {n} held connections, rested ones too, comes "
              f"back byte for byte within {SERVED_MS} ms ({line or tail(env, 'client', 300)!r})")

    line = expect(client, ("CONNECTED", "ERROR"), 30)
    if not check(line == f"CONNECTED {n}", f"the wrapped client holds {n} connections, each echoed once "
                                           f"({line or tail(env, 'client', 300)!r})"):
        raise Abort()
    smcd = stat_delta(before, env.stats(), "conn_smcd")
    check(smcd == 2 * n, f"its {n} connections run SMC-D at both ends ({smcd} SMC-D ends)")

    # The server's set: the epoll descriptor whose kernel part holds the
    # listener and a bell (usmc's own loop holds the listener too). Its
    # connections are not there: held in user memory, no `sig` registration.
    fds, names = socket_fds(server.pid), unix_names_by_inode()
    listener = listener_inode(port)
    kernel_parts = {epfd: sorted(names.get(fds.get(fd), "-" if fd not in fds else "")
                                 for fd in t if fds.get(fd) != listener)
                    for epfd, t in epoll_targets(server.pid).items()
                    if any(fds.get(fd) == listener for fd in t)}
    sets = [t for t in kernel_parts.values() if any(x.startswith("usmc-b-") for x in t)]
    in_set = sets[0] if len(sets) == 1 else []
    set_bells = [x for x in in_set if x.startswith("usmc-b-")]
    # No `sig` at all: an epoll server's connections make none (issue 44).
    held_sigs = [name[1:].decode() for name in unix_names(server.pid, "usmc-s-")]
    # The tokens of the server's sides, which the peers ring its bells with:
    # no longer public (no `sig` names them); the test reads them as their
    # owner can (`usmc ss -D`), as a stranger that guessed them would hold.
    tokens = [r["smcd"]["token"] for r in env.ss_json("-D")
              if r.get("pid") == server.pid and r.get("smcd")]
    sigs = [f"usmc-s-{int(t, 16):016x}" for t in tokens]
    check(set_bells and not any(x.startswith("usmc-s-") for x in in_set) and not held_sigs
          and len(sigs) >= n,
          f"the server's epoll set keeps its {len(sigs)} SMC-D connections in user memory, with a "
          f"bell, and no `sig` ({held_sigs}; the epoll descriptors that hold the listener, and "
          f"what else: {kernel_parts})")
    bells = [name[1:].decode() for name in unix_names(server.pid, "usmc-b-")]
    print(f"  info the server's bells: {bells} (its set's: {set_bells}); its sigs: {sigs}")
    if not set_bells:
        raise Abort()

    user, created = hostile_user() if os.geteuid() == 0 else (None, False)
    try:
        who = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[]) if user else {}
        print(f"  info the stranger runs as {HOSTILE_USER if user else 'our own user'}")
        # First strangers' datagrams only; then the tokens the set holds as
        # well (alone they would hide a lost wake-up: each is a look at the
        # connection it names, so they go second).
        for what, tokens, kinds in (
                ("random tokens and wrong sizes", [],
                 ("random", "zero_token", "size0", "size1", "size7", "size9", "size512")),
                ("the tokens the set holds, too", sigs, ("known", "random", "known_size9", "known_size512"))):
            flood(env, port, what, bells, tokens, kinds, who, server, run)
    finally:
        if created:
            subprocess.run(["userdel", HOSTILE_USER], capture_output=True, timeout=30)

    cpu0, sw0 = cpu_and_switches(server.pid)
    time.sleep(1)  # measuring an idle interval: there is no event to wait for
    cpu1, sw1 = cpu_and_switches(server.pid)
    check(cpu1 - cpu0 < 0.3, f"after the flood the server does not spin ({cpu1 - cpu0:.2f} s CPU, "
                             f"{sw1 - sw0} context switches in 1 s)")
    run(1, "after the flood")
    check_served(env, port, "after the flood")
    client.stdin.close()
    try:
        client.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    rc = env.stop(client, timeout=5)
    check(rc == 0, f"the wrapped client exits cleanly (exit {rc}; {tail(env, 'client', 300)!r})")
    stop_server(env, server)


MOVE_LIES = ("cons", "cons-behind", "prod", "good", "flip")
MOVE_FATE = re.compile(r"MOVE (\S+) fate=(\w+) tcp_bytes=(\d+)")


def case_squat(env):
    """The peer binds the name of the server side's `sig` (it learns the
    token in the Accept) before the Confirm. A server side makes its `sig`
    only when a wait first needs one (issue 44): an epoll server never does,
    and the connection stays SMC-D and echoes through the rings; a poll
    server needs it at its first poll, finds the name taken, and moves that
    connection alone to TCP with its peer, where it echoes. Byte for byte
    either way; the server serves everyone else, and idles without
    spinning."""
    for selector, expect_ in (("epoll", "stay"), ("poll", "move")):
        print(f"  {selector}")
        server, port = start_server(env, config="clc_detect_timeout_ms = 2000\n",
                                    extra=("--selector", selector))
        before = env.stats()
        peer = hostile(env, "squat-sig", port, "--expect", expect_)
        line = expect(peer, ("SQUAT", "ERROR"), 40)
        want = f"SQUAT moved={int(expect_ == 'move')} echo=exact"
        check(line == want, f"{selector}: the squatted connection echoes byte for byte, "
                            f"{'moved to TCP' if expect_ == 'move' else 'still SMC-D'} ({line or tail(env, 'hostile', 500)!r})")
        held(env, peer)
        moved = stat_delta(before, env.stats(), "moved_to_tcp")
        check(moved == (1 if expect_ == "move" else 0), f"{selector}: moves to TCP counted ({moved})")
        check_served(env, port, f"{selector}, while the squatter holds its name")
        cpu0, sw0 = cpu_and_switches(server.pid)
        time.sleep(1)  # measuring an idle interval: there is no event to wait for
        cpu1, sw1 = cpu_and_switches(server.pid)
        check(cpu1 - cpu0 < 0.3, f"{selector}: the server does not spin ({cpu1 - cpu0:.2f} s CPU, "
                                 f"{sw1 - sw0} context switches in 1 s)")
        end_peer(env, peer)
        stop_server(env, server)


def case_move_lies(env):
    """A peer's move to TCP (kMovedOut in the consumer word of the
    server's line, engine/sock/af_smc_move.cpp) with the cursors it carries:
    impossible consumer cursors (ahead of all the server produced, more
    than a ring behind it) or an impossible producer cursor (beyond a ring
    ahead of the server's consumer cursor) end or reset that connection
    only; a well-formed move hands over exactly what each side had not read
    and then runs as TCP; the flag set and cleared over and over while the
    peer sends breaks nothing else. For each, while the hostile connection
    is held: the server is alive, idle without spinning, and serves
    everyone else (with epoll and with poll: the server's poll() follows a
    move itself, its recv() is where an epoll server does)."""
    for selector in ("epoll", "poll"):
        print(f"  {selector}")
        move_lies_on(env, selector)


def move_lines(env):
    """The server's log lines about moves and impossible cursors."""
    return [l for l in tail(env, "server", 1 << 20).splitlines() if "move" in l or "impossible" in l]


def move_lies_on(env, selector):
    # (Info lines: the server's account of each move, how many bytes it
    # sent again and how many it stashed.)
    server, port = start_server(env, config='log_level = "info"\n', extra=("--selector", selector))
    resident = Resident(env, port)
    check_served(env, port, "before the attack", resident)
    logged = 0
    for variant in MOVE_LIES:
        before = env.stats()
        peer = hostile(env, "move-lies", port, "--variant", variant)
        line = expect(peer, ("MOVE", "ERROR"), 30)
        if not check(line and line.startswith(f"MOVE {variant} "),
                     f"{variant}: the peer made its move ({line or tail(env, 'hostile', 500)!r})"):
            env.stop(peer, timeout=5)
            raise Abort()
        print(f"    {line}")
        held(env, peer)
        moved = stat_delta(before, env.stats(), "moved_to_tcp")
        if variant == "good":
            check("resend=exact bytes=4000 took=1 tcp_echo=exact" in line,
                  f"good: TCP carries exactly the 3000 bytes the server wrote that the peer never "
                  f"read, then the echo of the 1000 it never read, then echoes as TCP ({line})")
            check(moved == 1, f"good: the server counts one move to TCP ({moved})")
        elif variant == "flip":
            print(f"    info moves the server followed: {moved}")
        else:
            m = MOVE_FATE.match(line)
            fate = m[2] if m else None
            # (ECHO: it runs the connection as TCP; then only the peer's
            # bytes come back, nothing of the rings.)
            check(fate in ("EOF", "RESET") or (fate == "ECHO" and m[3] == "200"),
                  f"{variant}: the server ends, resets or runs as TCP that one connection ({line})")
            check(moved == 0, f"{variant}: an impossible move is not counted as one ({moved})")
        check(server.poll() is None, f"{variant}: the server is alive (exit {server.poll()})")
        lines = move_lines(env)
        for l in lines[logged:]:
            print(f"    info server: {l}")
        logged = len(lines)
        cpu0, sw0 = cpu_and_switches(server.pid)
        time.sleep(1)  # measuring an idle interval: there is no event to wait for
        cpu1, sw1 = cpu_and_switches(server.pid)
        check(cpu1 - cpu0 < 0.3, f"{variant}: the server does not spin with the connection held "
                                 f"({cpu1 - cpu0:.2f} s CPU, {sw1 - sw0} context switches in 1 s)")
        check_served(env, port, f"{variant}: hostile connection held", resident)
        end_peer(env, peer)
        check(server.poll() is None, f"{variant}: the server is alive after the peer closed "
                                     f"(exit {server.poll()})")
        check_served(env, port, f"{variant}: after the hostile connection closed", resident)
    resident.stop()
    stop_server(env, server)


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(CASES)}}}")
    with Env() as env:
        try:
            CASES[sys.argv[1]](env)
        except Abort:
            pass
    finish()
