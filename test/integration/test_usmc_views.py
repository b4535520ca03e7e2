#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The views of `usmc` a user of smcd, smcss and vma_stats reaches for, over
one SMC-D connection between two wrapped python3 processes
(apps/lockstep_app.py: every send and recv is known) and two wrapped
listeners whose program names are not ASCII: usmc --version and its exit
codes, stats per process (-p, -n) and per interval (--interval, --count,
ended by SIGINT), stats reset zeroing live processes' counters, linkgroup,
device and ss -W; every view's JSON parsed and checked for the processes
started here. Steps wait for the apps' announcements; no check depends on
how long anything takes; every process is stopped by PID."""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from harness import APPS, PYTHON, USMC, Env, check, finish, read_ready, read_until, ss_sockets, tell

APP = os.path.join(APPS, "lockstep_app.py")
SIZES = [100, 10000, 40000]
BIG = 300000
HOLDER = ("import socket, sys\n"
          "s = socket.socket(socket.AF_INET6 if sys.argv[1] == '6' else socket.AF_INET)\n"
          "s.bind(('::1' if sys.argv[1] == '6' else '127.0.0.1', 0))\n"
          "s.listen(1)\n"
          "print('READY', s.getsockname()[1], flush=True)\n"
          "sys.stdin.readline()\n")
LONG_NAME = "café-holder-with-a-long-name"  # UTF-8, longer than the Program column


def usmc(env, *args, rc=0):
    r = env.run([USMC, "--stats-dir", env.stats_dir, *args], timeout=30, errors="strict")
    if r.returncode != rc:
        print("    usmc", *args, f"exit {r.returncode}:", r.stderr)
    return r


def usmc_json(env, *args):
    return json.loads(usmc(env, *args, "--json").stdout)


def stats_of(env, *args):
    return usmc_json(env, "stats", *args)


def pids_of(doc):
    return sorted(p["pid"] for p in doc["gauges_by_process"])


class LineReader:
    """A process's stdout lines through a thread, so every wait is bounded."""

    def __init__(self, p):
        self.q = queue.Queue()
        threading.Thread(target=self._read, args=(p.stdout,), daemon=True).start()

    def _read(self, f):
        for line in f:
            self.q.put(line)
        self.q.put(None)

    def next(self, timeout=30.0):
        return self.q.get(timeout=timeout)

    def drain(self):
        out = []
        while True:
            try:
                out.append(self.q.get_nowait())
            except queue.Empty:
                return out


with Env() as env:
    # --version, -v, and usmc's own exit codes (not CLI11's 106 or 109).
    for flag in ("--version", "-v"):
        r = usmc(env, flag)
        check(r.returncode == 0 and r.stdout.startswith("usmc ") and r.stdout.split()[1][0].isdigit(),
              f"usmc {flag}: prints the version, exit 0 ({r.stdout.strip()!r}, {r.returncode})")
    check(usmc(env, rc=2).returncode == 2, "usmc without a subcommand: usage error, exit 2")
    check(usmc(env, "stats", "--bogus", rc=2).returncode == 2, "an unknown option: exit 2")
    check(usmc(env, "stats", "--count", "2", rc=2).returncode == 2, "--count without --interval: exit 2")
    check(usmc(env, "stats", "--help").returncode == 0, "--help: exit 0")

    server = env.start(env.wrap([PYTHON, APP, "server", "--sizes", ",".join(map(str, SIZES)),
                                 "--big", str(BIG)]), stdin=subprocess.PIPE)
    port = read_ready(server)
    client = env.start(env.wrap([PYTHON, APP, "client", "--port", str(port), "--sizes",
                                 ",".join(map(str, SIZES)), "--big", str(BIG)]), stdin=subprocess.PIPE)
    total = sum(SIZES)
    check(int(read_until(client, "SENT")[1]) == total, "client sent its messages")
    check(int(read_until(server, "RECEIVED")[1]) == total, "server received them")

    # Two listeners named through symlinks to python3: one in UTF-8 (IPv6),
    # one whose name is not UTF-8 at all.
    long_link = os.path.join(env.dir, LONG_NAME)
    os.symlink(sys.executable, long_link)
    bad_link = os.path.join(os.fsencode(env.dir), b"bad\xff")
    os.symlink(os.fsencode(sys.executable), bad_link)
    v6 = env.start(env.wrap([long_link, "-c", HOLDER, "6"]), stdin=subprocess.PIPE)
    v6_port = read_ready(v6)
    bad = env.start([os.fsencode(a) for a in env.wrap(["-c", HOLDER, "4"])][:-3] +
                    [bad_link, b"-c", HOLDER.encode(), b"4"], stdin=subprocess.PIPE)
    read_ready(bad)

    # stats -p / -n: only the processes named.
    st = stats_of(env, "-p", str(client.pid))
    check(st["schema"] == 1 and st["processes"] == 1 and pids_of(st) == [client.pid],
          f"stats -p {client.pid}: that process alone ({pids_of(st)})")
    check(st["conn_smcd"] == 1 and st["smcd_bytes_tx"] == total and st["smcd_bytes_rx"] == len(SIZES),
          f"stats -p: the client's own counts ({st['conn_smcd']}, {st['smcd_bytes_tx']}, {st['smcd_bytes_rx']})")
    st = stats_of(env, "-p", str(client.pid), "-p", str(server.pid))
    check(st["processes"] == 2 and st["conn_smcd"] == 2 and pids_of(st) == sorted([client.pid, server.pid]),
          "stats -p twice: both ends, summed")
    st = stats_of(env, "-n", LONG_NAME)
    check(pids_of(st) == [v6.pid] and st["gauges_by_process"][0]["program"] == LONG_NAME,
          f"stats -n {LONG_NAME}: the listener, its name in UTF-8 ({st['gauges_by_process']})")
    st = stats_of(env, "-n", "python3")
    check(client.pid in pids_of(st) and server.pid in pids_of(st) and v6.pid not in pids_of(st),
          f"stats -n python3: the lockstep ends, not the listener named otherwise ({pids_of(st)})")
    text = usmc(env, "stats", "-p", str(client.pid)).stdout
    check(f"1 live process of pid {client.pid}" in text.splitlines()[0], f"stats -p text: {text.splitlines()[0]}")
    st = stats_of(env)
    names = {p["pid"]: p["program"] for p in st["gauges_by_process"]}
    check(names.get(bad.pid) == "bad\ufffd",
          f"a name that is not UTF-8 comes out valid, with U+FFFD ({names.get(bad.pid)!r})")

    # --interval: the totals first, then differences; SIGINT ends it.
    watch = env.start([USMC, "--stats-dir", env.stats_dir, "stats", "-p", str(client.pid),
                       "--interval", "1", "--json"])
    lines = LineReader(watch)
    first = json.loads(lines.next())
    check(first["interval"] == 0 and first["schema"] == 1 and first["smcd_bytes_tx"] == total,
          "interval 0: the totals as they are")
    tell(client, "GO")
    read_until(client, "SENDING_BIG")
    tell(server, "GO")
    check(int(read_until(server, "RECEIVED_BIG")[1]) == BIG, f"server read the {BIG} bytes")
    check(int(read_until(client, "SENT_BIG")[1]) == BIG, "client's sendall returned")
    docs = [json.loads(l) for l in lines.drain()]
    docs.append(json.loads(lines.next()))  # taken after the big message: all of it is in
    watch.send_signal(signal.SIGINT)
    check(watch.wait(timeout=30) == 0, f"SIGINT ends --interval cleanly (exit {watch.returncode})")
    rest = [l for l in iter(lines.next, None)]
    check(all(json.loads(l)["schema"] == 1 for l in rest), "and leaves no half-written document")
    docs += [json.loads(l) for l in rest]
    check([d["interval"] for d in docs] == list(range(1, len(docs) + 1)), "intervals numbered 1, 2, ...")
    now = stats_of(env, "-p", str(client.pid))
    summed = first["smcd_bytes_tx"] + sum(d["smcd_bytes_tx"] for d in docs)
    check(sum(d["smcd_bytes_tx"] for d in docs) == BIG and summed == now["smcd_bytes_tx"],
          f"the differences add up: {BIG} bytes more in the intervals, the totals now "
          f"({[d['smcd_bytes_tx'] for d in docs]}, {now['smcd_bytes_tx']})")
    reqs = [sum(d["tx"]["reqs_by_size"].values()) for d in docs]
    check(sum(reqs) == now["tx"]["requests_with_data"] - first["tx"]["requests_with_data"],
          f"request counts too ({reqs})")
    r = usmc(env, "stats", "-p", str(client.pid), "--interval", "0.2", "--count", "2", "--json")
    docs = [json.loads(l) for l in r.stdout.splitlines()]
    check(r.returncode == 0 and [d["interval"] for d in docs] == [0, 1, 2]
          and all(d["smcd_bytes_tx"] == 0 for d in docs[1:]),
          "--count 2: the totals and two intervals of nothing, then exit 0")

    # linkgroup: each end has a group with the other's process.
    lg = usmc_json(env, "linkgroup")
    by_pid = {g["pid"]: g for g in lg["link_groups"]}
    c, s = by_pid.get(client.pid), by_pid.get(server.pid)
    check(lg["schema"] == 1 and c is not None and c["peer_pid"] == server.pid and c["peer_program"] == "python3",
          f"linkgroup: the client's group is with the server's process ({c})")
    check(s is not None and s["peer_pid"] == client.pid and s["connections"] == 1 and c["connections"] == 1,
          f"and the server's with the client's, one connection each ({s})")
    check(c is not None and s is not None and c["peer_gid"] == s["gid"] and s["peer_gid"] == c["gid"],
          "their GIDs mirror each other")
    check(usmc_json(env, "lgr") == lg, "lgr is linkgroup")
    text = usmc(env, "linkgroup").stdout
    check("LG-ID" in text.splitlines()[0] and any(str(server.pid) in l and str(client.pid) in l
                                                  for l in text.splitlines()[1:]),
          "linkgroup text: a row with both pids")

    # device: each process's GID (as ss -D shows it), its DMB memory and cap.
    dev = usmc_json(env, "device")
    d = {x["pid"]: x for x in dev["devices"]}.get(client.pid)
    smcd = {x["pid"]: x["smcd"] for x in ss_sockets(usmc(env, "ss", "-D", "--json").stdout)}
    check(dev["schema"] == 1 and d is not None and d["gid"] == smcd.get(client.pid, {}).get("gid"),
          f"device: the client's device, its GID as ss -D shows ({d})")
    check(d is not None and 0 < d["dmb_bytes"] and d["dmb_bytes"] + d["dmb_spare_bytes"] <= d["max_dmb_memory"]
          and d["connections"] == 1 and d["link_groups"] == 1 and d["segments"] >= 1,
          "its DMB bytes under its cap, one connection, one link group, a segment")
    h = {x["pid"]: x for x in dev["devices"]}.get(v6.pid)
    check(h is not None and h["connections"] == 0 and h["link_groups"] == 0 and h["gid"] != d["gid"],
          f"a listener has a device (its endpoint's GID) of its own, with nothing on it ({h})")
    text = usmc(env, "ss", "-l").stdout
    check("bad\ufffd" in text, "text views print a name that is not UTF-8 with U+FFFD")
    text = usmc(env, "device").stdout
    check("Cap" in text.splitlines()[0] and any(l.startswith(str(client.pid)) for l in text.splitlines()),
          "device text: the client's row")

    # ss -W: names and addresses not cut, columns as wide as their content.
    row_of = lambda text, pid: next((l for l in text.splitlines() if l.startswith(str(pid) + " ")), "")
    narrow, wide = usmc(env, "ss", "-l").stdout, usmc(env, "ss", "-l", "-W").stdout
    addr = f"[::1]:{v6_port}"
    check(LONG_NAME not in row_of(narrow, v6.pid) and LONG_NAME[:16] in row_of(narrow, v6.pid),
          "ss: the long name cut at 16 characters (inside no character)")
    head, row = wide.splitlines()[0], row_of(wide, v6.pid)
    check(LONG_NAME in row and addr in row, f"ss -W: the whole name and the IPv6 address ({row!r})")
    check(row[:row.index(addr)].count(" ") >= 1 and len(row[:row.index(addr)]) == len(head[:head.index("Local Address")]),
          "ss -W: the address under its header (characters, not bytes)")
    socks = ss_sockets(usmc(env, "ss", "-l", "--json").stdout)
    mine = [x for x in socks if x["pid"] == v6.pid]
    check(len(mine) == 1 and mine[0]["local"] == addr and mine[0]["state"] == "LISTEN",
          f"ss --json: the IPv6 listener from sock_diag ({mine})")
    conns = {x["pid"]: x for x in ss_sockets(usmc(env, "ss", "--json").stdout)}
    check(conns.get(client.pid, {}).get("peer") == f"127.0.0.1:{port}"
          and conns.get(client.pid, {}).get("state") == "ESTABLISHED",
          f"ss --json: the client's connection to the server's port ({conns.get(client.pid)})")

    # reset: live processes' counters zeroed, gauges kept.
    before = stats_of(env, "-p", str(server.pid))
    r = usmc(env, "stats", "reset")
    check(r.returncode == 0 and "zeroed the counters of" in r.stdout, f"stats reset ({r.stdout.strip()})")
    after = stats_of(env, "-p", str(server.pid))
    check(before["smcd_bytes_rx"] > 0 and after["smcd_bytes_rx"] == 0 and after["conn_smcd"] == 0
          and after["rx"]["reqs_by_size"] == {k: 0 for k in after["rx"]["reqs_by_size"]},
          f"a live process's counters are zero after reset ({before['smcd_bytes_rx']} -> {after['smcd_bytes_rx']})")
    g0, g1 = before["gauges_by_process"][0], after["gauges_by_process"][0]
    check(g1["dmb_bytes"] == g0["dmb_bytes"] > 0, f"its gauges are not ({g0['dmb_bytes']}, {g1['dmb_bytes']})")
    check(after["processes"] == 1, "and the process is still there")

    tell(client, "QUIT")
    tell(server, "QUIT")
    read_until(client, "DONE")
    read_until(server, "DONE")
    check(client.wait(timeout=15) == 0 and server.wait(timeout=15) == 0, "both apps exited cleanly")
    for p in (v6, bad):
        tell(p, "")
        check(p.wait(timeout=15) == 0, f"listener {p.pid} exited cleanly")
    st = stats_of(env)
    check(st["conn_smcd"] == 0, f"what they counted before the reset stays forgotten ({st['conn_smcd']})")

finish()
