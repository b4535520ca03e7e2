#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nginx (master + 2 workers, as nobody) and wrk, both under usmc-run,
keep-alive and 'Connection: close': every request answered 200, no socket
errors, and usmc saw every connection."""
import os

from apps import make_nginx, parse_wrk
from harness import Env, check, finish, free_port, wait_port

with Env() as env:
    os.chmod(env.stats_dir, 0o1777)  # like /dev/shm: workers run as nobody
    port = free_port()
    nginx = env.start(env.wrap(make_nginx(env.dir, port)))
    check(wait_port(port), "nginx under usmc-run listens")
    url = f"http://127.0.0.1:{port}/index.html"

    ss = env.ss("-l")
    check(f"127.0.0.1:{port}" in ss and "nginx" in ss, "usmc ss -l shows nginx's listener")

    for name, extra in [("keep-alive", []), ("Connection: close", ["-H", "Connection: close"])]:
        r = env.run(env.wrap(["wrk", "-t", "2", "-c", "50", "-d", "2s", *extra, url]), timeout=60)
        w = parse_wrk(r.stdout)
        check(r.returncode == 0 and w["requests"] > 100, f"wrk {name}: {w['requests']} requests, {w['rps']:.0f} req/s")
        check(w["errors"] == 0 and w["non2xx"] == 0, f"wrk {name}: no socket errors, every reply 2xx")

    st = env.stats()
    check(st["server_accepts"] >= 100, f"nginx workers' accepts counted ({st['server_accepts']})")
    check(st["conn_smcd"] >= 100 and st["client_async_handshakes"] >= 50,
          f"wrk's nonblocking connects used SMC-D ({st['conn_smcd']} ends, {st['fallback_reasons']})")
    # (The connect watch reads the Accept, attaches without waiting and
    # confirms: no worker takes the connection when the answer came whole.)
    check(st["client_handshakes_on_watch"] > 0,
          f"client handshakes finished on the connect watch ({st['client_handshakes_on_watch']} "
          f"of {st['client_async_handshakes']})")
    check(st["client_connects"] >= 100, f"wrk's connects counted ({st['client_connects']})")
    check(st["forks"] >= 2, f"nginx workers made stats of their own after fork ({st['forks']})")

    env.stop(nginx, timeout=15)
    check(nginx.returncode == 0, f"nginx stopped cleanly by SIGTERM (rc {nginx.returncode})")
    with open(os.path.join(env.dir, "error.log")) as f:
        errors = [l for l in f if "[emerg]" in l or "[alert]" in l or "[crit]" in l]
    check(not errors, "nginx logged no emerg/alert/crit " + "".join(errors[:3]))
finish()
