#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PostgreSQL and pgbench, both under usmc-run, over TCP on loopback: pgbench
-i, TPC-B with persistent connections and with a connection per transaction
(-C). Every transaction committed, the TPC-B balance invariants hold, the
persistent connections ran SMC-D on both ends (pgbench and the backends the
postmaster forked after accept), and every -C connection is accounted."""
import os
import re
import shutil
import subprocess
import time

from apps import PG_BIN, as_postgres, postgres_cmd, prepare_cluster, stop_postgres, wait_postgres
from harness import BUILD, Env, check, explain_hang, finish, free_port, slow_machine_config


def readable_launcher(top):
    """usmc-run and its library copied under `top` (bin/, lib/: the layout
    the launcher finds its library by), so the postgres user can run them
    wherever the checkout lives (one under a directory only root may read
    failed with "cannot find libusmc-preload.so")."""
    for sub, name, mode in (("bin", "usmc-run", 0o755), ("lib", "libusmc-preload.so", 0o644)):
        os.makedirs(os.path.join(top, sub), mode=0o755, exist_ok=True)
        dst = os.path.join(top, sub, name)
        shutil.copy(os.path.join(BUILD, sub, name), dst)
        os.chmod(dst, mode)
    return os.path.join(top, "bin", "usmc-run")


with Env() as env:
    os.chmod(env.dir, 0o755)  # postgres (not root) runs in it
    os.chmod(env.stats_dir, 0o1777)
    USMC_RUN = readable_launcher(os.path.join(env.dir, "usmc"))
    slow_machine_config(env)
    port = free_port()
    pgdir = prepare_cluster(env.dir)
    log = open(os.path.join(pgdir, "postgres.log"), "w")
    server = env.start(as_postgres([USMC_RUN, "--", *postgres_cmd(pgdir, port)]), stdout=log, stderr=log)
    check(wait_postgres(pgdir, port, server), "postgres under usmc-run accepts connections")

    def pgbench(*args, timeout=60):
        cmd = as_postgres([USMC_RUN, "--", f"{PG_BIN}/pgbench", "-h", "127.0.0.1", "-p", str(port), *args,
                           "postgres"])
        log.flush()
        return env.run_explained(cmd, timeout, watch=[server.pid], logs=[os.path.join(pgdir, "postgres.log")])

    def sql(query):
        # Over the Unix socket, unwrapped: usmc's counters stay pgbench's.
        r = env.run([f"{PG_BIN}/psql", "-h", pgdir, "-p", str(port), "-U", "postgres", "-AtX", "-c", query,
                     "postgres"])
        return r.stdout.strip()

    def processed(out):
        m = re.search(r"number of transactions actually processed: (\d+)/(\d+)", out)
        f = re.search(r"number of failed transactions: (\d+)", out)
        return (int(m.group(1)), int(m.group(2))) if m else (0, -1), int(f.group(1)) if f else -1

    def invariants(expected_tx, what):
        sums = sql("SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(bbalance) FROM "
                   "pgbench_branches), (SELECT sum(tbalance) FROM pgbench_tellers), (SELECT coalesce(sum(delta), "
                   "0) FROM pgbench_history), (SELECT count(*) FROM pgbench_history)").split("|")
        check(len(sums) == 5 and len(set(sums[:4])) == 1,
              f"{what}: sum(abalance) = sum(bbalance) = sum(tbalance) = sum(delta) ({sums[:4]})")
        check(len(sums) == 5 and sums[4] == str(expected_tx),
              f"{what}: pgbench_history holds the {expected_tx} transactions run ({sums[4:]})")

    r = pgbench("-i", "-s", "1", "-q")
    check(r.returncode == 0 and "done in" in r.stderr, f"pgbench -i (scale 1) {r.stderr.strip()[-300:]}")
    check(sql("SELECT count(*) FROM pgbench_accounts") == "100000", "pgbench_accounts holds 100000 rows")

    # TPC-B, persistent connections. -n: no vacuum, which would truncate
    # pgbench_history and so break sum(delta) = sum(abalance) across runs.
    # While it runs, usmc ss must show each of pgbench's connections as
    # SMC-D with a backend (not the postmaster, which closed its copy) as
    # the SMC-D peer. A session of ours holds pgbench_branches locked, so
    # every client's first transaction waits there, connected, until usmc
    # ss has seen them all (or the deadline): no race with a fast run.
    clients, per_client = 4, 500
    gate = env.start([f"{PG_BIN}/psql", "-h", pgdir, "-p", str(port), "-U", "postgres", "-AtX", "-q", "postgres"],
                     stdin=subprocess.PIPE)
    gate.stdin.write("BEGIN; LOCK TABLE pgbench_branches IN EXCLUSIVE MODE; SELECT 'locked';\n")
    gate.stdin.flush()
    check(gate.stdout.readline().strip() == "locked", "a session of ours holds pgbench_branches locked")
    before = env.stats()
    bench = env.start(as_postgres([USMC_RUN, "--", f"{PG_BIN}/pgbench", "-h", "127.0.0.1", "-p", str(port), "-n",
                                   "-c", str(clients), "-j", "2", "-t", str(per_client), "postgres"]))
    seen, best = [], 0
    deadline = time.monotonic() + 45
    while bench.poll() is None and time.monotonic() < deadline and best < clients:
        socks = env.ss_json()
        mine = [s for s in socks if s["program"] == "pgbench" and s["state"] == "ESTABLISHED"]
        backends = {(s["local"], s["peer"]): s for s in socks if s["program"] == "postgres"
                    and s["role"] == "server" and s["state"] == "ESTABLISHED"}
        ends = [(c, backends.get((c["peer"], c["local"]))) for c in mine]
        pairs = sum(1 for c, b in ends if b and c["mode"] == b["mode"] == "SMCD" and b["pid"] != server.pid)
        if pairs >= best:
            best, seen = pairs, [(c["local"], c["mode"], b and (b["pid"], b["mode"])) for c, b in ends]
        time.sleep(0.05)
    pglog = os.path.join(pgdir, "postgres.log")
    if best < clients:
        log.flush()
        explain_hang([bench.pid, server.pid], env, [pglog])
    gate.stdin.write("COMMIT;\n")
    gate.stdin.close()
    gate.wait(timeout=30)
    check(best == clients, f"usmc ss: {clients} pgbench connections, SMC-D at both ends, a backend at the "
                           f"server end ({seen})")
    try:
        out, err = bench.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        log.flush()
        explain_hang([bench.pid, server.pid], env, [pglog])
        env.stop(bench, timeout=5)
        out, err = bench.communicate(timeout=30)
    check(best == clients, f"usmc ss: {clients} pgbench connections, SMC-D at both ends, a backend at the "
                            f"server end ({seen})")
    (done, total), failed = processed(out)
    check(bench.returncode == 0 and done == total == clients * per_client and failed == 0,
          f"pgbench -c {clients} -t {per_client}: {done}/{total} processed, {failed} failed {err.strip()[-300:]}")
    invariants(clients * per_client, "after the persistent run")
    st = env.stats()
    d = {k: st[k] - before[k] for k in ("client_connects", "server_accepts", "conn_smcd", "conn_tcp")}
    # pgbench opens one more connection than -c, to read the scale.
    check(d["client_connects"] == d["server_accepts"] == clients + 1,
          f"persistent run: {clients + 1} connects and accepts counted ({d})")
    check(d["conn_smcd"] == 2 * (clients + 1) and d["conn_tcp"] == 0,
          f"persistent run: every end SMC-D ({d}, {st['fallback_reasons']})")

    # TPC-B, a connection per transaction. Short connections may
    # legitimately run as TCP: each end must be SMC-D or TCP with a reason.
    per_client_c = 50
    before = env.stats()
    r = pgbench("-n", "-C", "-c", str(clients), "-j", "2", "-t", str(per_client_c))
    (done, total), failed = processed(r.stdout)
    check(r.returncode == 0 and done == total == clients * per_client_c and failed == 0,
          f"pgbench -C -t {per_client_c}: {done}/{total} processed, {failed} failed {r.stderr.strip()[-300:]}")
    invariants(clients * (per_client + per_client_c), "after the -C run")
    st = env.stats()
    d = {k: st[k] - before[k] for k in ("client_connects", "server_accepts", "conn_smcd", "conn_tcp",
                                        "handshake_errors")}
    reasons = {k: v - before["fallback_reasons"].get(k, 0) for k, v in st["fallback_reasons"].items()}
    conns = clients * per_client_c + 1
    check(d["client_connects"] == d["server_accepts"] == conns,
          f"-C: {conns} connects and accepts counted ({d})")
    check(d["conn_smcd"] + d["conn_tcp"] == 2 * conns and d["handshake_errors"] == 0,
          f"-C: every end SMC-D or TCP ({d})")
    named = sum(v for k, v in reasons.items() if k != "UNKNOWN")
    check(named == d["conn_tcp"], f"-C: every TCP end has a named reason ({d['conn_tcp']} TCP, {reasons})")

    children = stop_postgres(server)
    check(server.returncode == 0, f"postgres stopped by a fast shutdown (rc {server.returncode})")
    check(not [c for c in children if os.path.exists(f"/proc/{c}")],
          f"the postmaster's children are gone ({len(children)} were running)")
    log.close()
    with open(os.path.join(pgdir, "postgres.log")) as f:
        # (pg_isready, asking before the server was up, leaves "starting up")
        bad = [l for l in f if re.search(r"\b(PANIC|FATAL|terminated by signal)\b", l)
               and "the database system is starting up" not in l]
    check(not bad, "postgres logged no FATAL/PANIC/crash " + "".join(bad[:3]))
finish()
