#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Configuration inside applications: [[policy]] decisions show up in
usmc ss and usmc stats with their reason; a broken config costs one clear
line on stderr and nothing else (every socket plain TCP)."""
import os

from harness import APPS, PYTHON, Env, check, finish, read_ready

APP = os.path.join(APPS, "echo_app.py")

with Env() as env:
    # A policy that sends one port to TCP, everything else auto.
    port_cfg = os.path.join(env.dir, "policy.toml")
    server = env.start(env.wrap([PYTHON, APP, "server", "--conns", "2", "--mode", "selectors"]))
    port = read_ready(server)
    env.stop(server)
    with open(port_cfg, "w") as f:
        f.write(f'[[policy]]\nport = {port}\nmode = "tcp"\n[[policy]]\nprogram = "python3*"\nmode = "smcd"\n')
    server = env.start(env.wrap([PYTHON, APP, "server", "--port", str(port), "--conns", "2",
                                 "--mode", "selectors"], "--config", port_cfg))
    read_ready(server)
    ss = env.ss("-l")
    check("POLICY 0x0a010000" in ss, "usmc ss shows the listener's POLICY reason")
    r = env.run(env.wrap([PYTHON, APP, "client", "--port", str(port), "--conns", "2"], "--config", port_cfg))
    check(r.returncode == 0, "connections under a tcp policy work")
    server.communicate(timeout=30)
    st = env.stats()
    check(st["fallback_reasons"].get("POLICY") == 4, f"4 POLICY fallbacks counted (2 each side): {st['fallback_reasons']}")

    # -t on the launcher narrows to TCP whatever the config says.
    before = env.stats()["fallback_reasons"].get("POLICY", 0)
    server = env.start(env.wrap([PYTHON, APP, "server", "--conns", "1"], "--tcp"))
    port = read_ready(server)
    r = env.run(env.wrap([PYTHON, APP, "client", "--port", str(port), "--conns", "1"], "--tcp"))
    server.communicate(timeout=30)
    check(r.returncode == 0 and env.stats()["fallback_reasons"].get("POLICY", 0) - before == 2,
          "usmc-run --tcp: both ends TCP by policy")

    # A broken config file: usmc-run refuses to start the program; told to
    # start it anyway, one line per process on stderr, everything works as
    # plain TCP (as a program whose file turns bad between two of its
    # processes).
    bad = os.path.join(env.dir, "bad.toml")
    with open(bad, "w") as f:
        f.write("[[policy]]\nmode = \"warp\"\n")
    e = dict(env.env)
    e["USMC_CONFIG"] = bad
    r = env.run(env.wrap([PYTHON, APP, "server", "--conns", "2"]), env=e, timeout=30)
    check(r.returncode == 1 and "READY" not in r.stdout and f"{bad}:2:" in r.stderr,
          f"bad config: usmc-run does not start the server ({r.returncode}, {r.stderr[-300:]!r})")
    ignore = "--ignore-config-errors"
    server = env.start(env.wrap([PYTHON, APP, "server", "--conns", "2"], ignore), env=e)
    port = read_ready(server)
    r = env.run(env.wrap([PYTHON, APP, "client", "--port", str(port), "--conns", "2"], ignore), env=e)
    out, err = server.communicate(timeout=30)
    check(r.returncode == 0 and server.returncode == 0, "bad config: connections still work")
    for who, text in (("client", r.stderr), ("server", err)):
        lines = [l for l in text.splitlines() if "usmc" in l]
        shim_lines = [l for l in lines if l.startswith("usmc[")]
        check(len(shim_lines) == 1 and f"{bad}:2:" in shim_lines[0] and "policy.mode" in shim_lines[0]
              and "plain TCP" in shim_lines[0], f"bad config: one clear line from the {who}: {shim_lines}")
    check(env.stats()["fallback_reasons"].get("CONFIG") == 4, "CONFIG fallbacks counted")
finish()
