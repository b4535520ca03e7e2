#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A proxy chain, every program under usmc-run: client -> proxy -> nginx
(origin). The proxy is haproxy in mode tcp, haproxy in mode http, and nginx
as a reverse proxy. A python client checks every response byte for byte
(sha256), with 'Connection: close' and keep-alive; a short wrk run reports
no socket errors and only 2xx. usmc counted both hops: with keep-alive all
SMC-D (seen in usmc ss, end to end), with 'Connection: close' each end
SMC-D or TCP with a named reason."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

from apps import make_haproxy, make_nginx, parse_wrk
from harness import APPS, PYTHON, Env, check, finish, free_port, slow_machine_config

CLIENT = os.path.join(APPS, "http_client_app.py")
SIZES = {"/small.bin": 100, "/16k.bin": 16 << 10, "/1m.bin": 1 << 20}
COUNTED = ("client_connects", "server_accepts", "total_connections", "conn_smcd", "conn_tcp", "handshake_errors")


def origin_files(dir):
    """The origin's documents (random bytes of known sizes) and a manifest
    of their sizes and sha256."""
    www = os.path.join(dir, "www")
    os.makedirs(www)
    manifest = {}
    for path, size in SIZES.items():
        data = os.urandom(size)
        with open(www + path, "wb") as f:
            f.write(data)
        manifest[path] = [size, hashlib.sha256(data).hexdigest()]
    path = os.path.join(dir, "manifest.json")
    with open(path, "w") as f:
        json.dump(manifest, f)
    return path


def delta(env, before):
    st = env.stats()
    d = {k: st[k] - before[k] for k in COUNTED}
    d["reasons"] = {k: v - before["fallback_reasons"].get(k, 0) for k, v in st["fallback_reasons"].items()
                    if v - before["fallback_reasons"].get(k, 0)}
    return d


def accounted(d, what, cut_off=0):
    """Every connection end is SMC-D, or TCP with a named reason (a
    handshake error is TCP with INTERR). Only connections cut off
    mid-handshake (wrk closes its connections when its time is up) may end
    as a handshake error, or uncounted."""
    ends = d["client_connects"] + d["server_accepts"]
    check(ends - cut_off <= d["conn_smcd"] + d["conn_tcp"] <= ends and d["handshake_errors"] <= cut_off,
          f"{what}: every end counted as SMC-D or TCP, at most {cut_off} handshakes cut off ({d})")
    named = sum(v for k, v in d["reasons"].items() if k != "UNKNOWN")
    check(named == d["conn_tcp"], f"{what}: every TCP end has a named reason ({d['conn_tcp']} TCP, {d['reasons']})")


def smcd_pairs(socks, port):
    """Connections to 127.0.0.1:port that are SMC-D at both ends, as usmc ss
    lists them (the client's row and the server's row of one connection)."""
    servers = {(s["local"], s["peer"]): s for s in socks if s["role"] == "server" and s["state"] == "ESTABLISHED"}
    pairs = 0
    for c in socks:
        if c["role"] == "client" and c["state"] == "ESTABLISHED" and c["peer"] == f"127.0.0.1:{port}":
            s = servers.get((c["peer"], c["local"]))
            pairs += bool(s and c["mode"] == s["mode"] == "SMCD")
    return pairs


def client(env, port, manifest, n, keepalive, watch=None, need=(4, 1)):
    """The python client; with `watch` (two ports), it pauses with its
    keep-alive connections open while usmc ss is asked for the SMC-D pairs
    on each hop until `need` are seen (the most seen are returned)."""
    cmd = [PYTHON, CLIENT, "--port", str(port), "--manifest", manifest, "-n", str(n), "--threads", "4"]
    p = env.start(env.wrap(cmd + (["--keepalive"] if keepalive else []) + (["--pause"] if watch else [])),
                  stdin=subprocess.PIPE)
    seen, out = [0, 0], ""
    if watch:
        line = p.stdout.readline()  # PAUSED, or EOF if it failed
        out = "" if line.startswith("PAUSED") else line
        deadline = time.monotonic() + 10
        while line.startswith("PAUSED") and time.monotonic() < deadline and (seen[0] < need[0]
                                                                           or seen[1] < need[1]):
            socks = env.ss_json()
            seen = [max(seen[i], smcd_pairs(socks, watch[i])) for i in range(2)]
            time.sleep(0.05)
    try:
        rest, err = p.communicate("go\n", timeout=15)  # a few seconds when all is well
    except subprocess.TimeoutExpired:
        # A stalled transfer (seen: a 1 MiB response through haproxy, about
        # one run in five): its connections and cursors while it hangs.
        print("client still running after 15 s:\n" + env.ss("-a", "-d"), flush=True)
        rest, err = p.communicate(timeout=60)
    return p.returncode, (out + rest).strip().replace("\n", "; ") + err[-300:], seen


def upstream_early(d):
    """nginx puts its upstream sockets into its epoll set before connect():
    those connections stay TCP, EPOLLEARLY at the proxy and PEERNOSMC (no
    Proposal came) at the origin. Returns how many ends that explains."""
    early = d["reasons"].get("EPOLLEARLY", 0)
    return early + min(early, d["reasons"].get("PEERNOSMC", 0))


def chain(kind):
    # SMC-D through proxies is what this checks: the Connection: close runs
    # must not teach the listeners TCP for the keep-alive runs (learn_smc).
    with Env(smcd_mechanics=True) as env:
        os.chmod(env.dir, 0o755)  # nginx workers run as nobody
        os.chmod(env.stats_dir, 0o1777)
        slow_machine_config(env)
        odir, pdir = os.path.join(env.dir, "origin"), os.path.join(env.dir, "proxy")
        os.mkdir(odir)
        os.mkdir(pdir)
        manifest = origin_files(odir)
        oport, pport = free_port(), free_port()
        origin = env.start(env.wrap(make_nginx(odir, oport)))
        if kind == "nginx":
            proxy = env.start(env.wrap(make_nginx(pdir, pport, proxy_to=oport)))
        else:
            proxy = env.start(env.wrap(make_haproxy(pdir, pport, oport, kind)))
        name = "nginx proxy_pass" if kind == "nginx" else f"haproxy mode {kind}"
        # Readiness through usmc ss, not a connection of ours: counters stay the clients'.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            ls = env.ss("-l")
            if f"127.0.0.1:{oport}" in ls and f"127.0.0.1:{pport}" in ls:
                break
            time.sleep(0.05)
        check(f"127.0.0.1:{oport}" in ls and f"127.0.0.1:{pport}" in ls, f"{name}: origin and proxy listen")

        n = 300
        before = env.stats()
        rc, out, _ = client(env, pport, manifest, n, keepalive=False)
        if not check(rc == 0 and f"DONE ok={n} bad=0" in out,
                     f"{name}, Connection: close: {n} responses byte for byte ({out})"):
            print(env.ss("-a", "-d"), flush=True)  # the connections left behind, with their cursors
        d = delta(env, before)
        # The client connected n times; more connects are the proxy's to the
        # origin, each accepted there (nginx's upstream pool reuses its own).
        check(d["client_connects"] > n and d["server_accepts"] == d["client_connects"],
              f"{name}, Connection: close: both hops counted ({d['client_connects']} connects, "
              f"{d['server_accepts']} accepts for {n} requests)")
        accounted(d, f"{name}, Connection: close")
        if kind == "nginx":
            check(d["reasons"].get("EPOLLEARLY", 0) >= 1,
                  f"{name}: its upstream connects, registered with epoll before connect(), ran TCP "
                  f"(EPOLLEARLY) ({d['reasons']})")

        before = env.stats()
        rc, out, seen = client(env, pport, manifest, 2 * n, keepalive=True, watch=(pport, oport),
                                need=(4, 0 if kind == "nginx" else 1))
        if not check(rc == 0 and f"DONE ok={2 * n} bad=0" in out,
                     f"{name}, keep-alive: {2 * n} responses byte for byte ({out})"):
            print(env.ss("-a", "-d"), flush=True)
        check(seen[0] >= 1, f"{name}, keep-alive: usmc ss saw client->proxy SMC-D at both ends ({seen[0]})")
        d = delta(env, before)
        if kind == "nginx":
            # (Upstream connections come from nginx's pool, made before.)
            check(d["conn_tcp"] == upstream_early(d)
                  and d["handshake_errors"] == 0 and d["conn_smcd"] >= 4,
                  f"{name}, keep-alive: every end SMC-D but nginx's upstreams (EPOLLEARLY) ({d})")
        else:
            check(seen[1] >= 1, f"{name}, keep-alive: usmc ss saw proxy->origin SMC-D at both ends ({seen[1]})")
            check(d["conn_tcp"] == 0 and d["handshake_errors"] == 0 and d["conn_smcd"] >= 4,
                  f"{name}, keep-alive: every end SMC-D ({d})")
        accounted(d, f"{name}, keep-alive")

        for label, extra in [("keep-alive", []), ("Connection: close", ["-H", "Connection: close"])]:
            before = env.stats()
            r = env.run(env.wrap(["wrk", "-t", "2", "-c", "20", "-d", "2s", *extra,
                                  f"http://127.0.0.1:{pport}/16k.bin"]), timeout=60)
            w = parse_wrk(r.stdout)
            kinds = [l.strip() for l in r.stdout.splitlines() if "Socket errors" in l]  # which ones
            check(r.returncode == 0 and w["requests"] > 50 and w["errors"] == 0 and w["non2xx"] == 0,
                  f"{name}, wrk {label}: {w['requests']} requests, no socket errors, every reply 2xx ({w} {kinds})")
            d = delta(env, before)
            check(d["client_connects"] >= 20 and d["server_accepts"] >= 20, f"{name}, wrk {label}: connections "
                                                                           f"counted ({d})")
            # wrk stops with handshakes in flight: at most one per connection
            # and hop.
            accounted(d, f"{name}, wrk {label}", cut_off=2 * 20)
            if not extra:
                # A connection wrk abandons mid-handshake ends INTERR at wrk,
                # PEERNOSMC at the proxy (no Proposal came): cut off, not
                # declined. Failures the application sees are wrk's errors.
                early = upstream_early(d) if kind == "nginx" else 0
                cut = d["reasons"].get("INTERR", 0)
                cut_peer = min(d["reasons"].get("PEERNOSMC", 0) - early // 2, cut)
                check(d["conn_tcp"] - early == cut + cut_peer <= 4,
                      f"{name}, wrk keep-alive: every end SMC-D but handshakes cut off by wrk"
                      + (" and nginx's upstreams (EPOLLEARLY)" if early else "") + f" ({d})")

        # haproxy ends by SIGTERM (its hard stop kills it by the signal);
        # SIGUSR1 is its graceful stop, exit 0.
        for p, what in ((proxy, name), (origin, "origin nginx")):
            env.stop(p, sig=signal.SIGUSR1 if kind != "nginx" and p is proxy else signal.SIGTERM, timeout=15)
            check(p.returncode == 0, f"{what} stopped cleanly (rc {p.returncode})")
        for d in (odir, pdir) if kind == "nginx" else (odir,):
            with open(os.path.join(d, "error.log")) as f:
                errors = [l for l in f if "[emerg]" in l or "[alert]" in l or "[crit]" in l]
            check(not errors, f"{name}: nginx logged no emerg/alert/crit " + "".join(errors[:3]))


for kind in sys.argv[1:] or ("tcp", "http", "nginx"):  # a kind or two, to look at one
    chain(kind)
finish()
