#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two builds of usmc in one invocation, for a change that must not move a
ratio: each benchmark script runs once per build per round, the builds
alternating (A B, then B A, ...) so that a machine that drifts during the
session drifts for both. Every script already measures usmc against plain
TCP in its own run; this prints each run's summary (the lines after the
last blank-line-separated heading) under its build, and keeps the whole
output in --out.

  scripts/bench/ab.py --a build-before --b build-after --rounds 2 \\
      -- smcd.py --runs 3 --seconds 3 -- short_lived.py --connections 1000

Each script is run with USMC_BUILD_DIR set to the build's directory (the
harness takes usmc-run, usmc and the preload from there)."""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def split_commands(rest):
    cmds, cur = [], []
    for a in rest:
        if a == "--":
            if cur:
                cmds.append(cur)
            cur = []
        else:
            cur.append(a)
    if cur:
        cmds.append(cur)
    return cmds


def summary(text):
    """The lines from the script's final table: after the last line that
    starts a summary (no 'run N' progress lines), trailing blanks cut."""
    lines = [l for l in text.splitlines() if l.strip() and " run " not in l and not l.lstrip().startswith("run ")]
    return lines[-12:]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="build directory A (before)")
    p.add_argument("--b", required=True, help="build directory B (after)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="/tmp/usmc-ab", help="where each run's whole output goes")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="-- script args [-- script args ...]")
    args = p.parse_args()
    cmds = split_commands(args.rest)
    if not cmds:
        p.error("no benchmark script given (after --)")
    for d in (args.a, args.b):
        if not os.path.exists(os.path.join(d, "bin", "usmc-run")):
            p.error(f"{d}: no bin/usmc-run (not a build directory)")
    os.makedirs(args.out, exist_ok=True)
    builds = [("A", os.path.abspath(args.a)), ("B", os.path.abspath(args.b))]
    print(f"A = {builds[0][1]}\nB = {builds[1][1]}\n", flush=True)
    for cmd in cmds:
        script = cmd[0] if os.path.isabs(cmd[0]) else os.path.join(HERE, cmd[0])
        for rnd in range(args.rounds):
            order = builds if rnd % 2 == 0 else builds[::-1]
            for name, d in order:
                env = dict(os.environ, USMC_BUILD_DIR=d)
                t0 = time.monotonic()
                r = subprocess.run([sys.executable, script, *cmd[1:]], env=env, capture_output=True,
                                   text=True, timeout=3600)
                log = os.path.join(args.out, f"{os.path.basename(script)}.{name}.{rnd + 1}.log")
                with open(log, "w") as f:
                    f.write(r.stdout + r.stderr)
                print(f"== {' '.join(cmd)}  build {name}  round {rnd + 1}  "
                      f"({time.monotonic() - t0:.0f} s, exit {r.returncode}, {log})", flush=True)
                for l in summary(r.stdout):
                    print("   " + l, flush=True)
                if r.returncode != 0:
                    print(r.stderr[-2000:], file=sys.stderr)
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
