#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""usmc-run as a drop-in for smc-tools' smc_run: its -d/-h/-r/-t/-v, its
messages and exit codes, usmc's own long options, and the shim honouring
SMC_DEBUG/SMC_RCVBUF/SMC_SNDBUF whoever set them. The same runs are made
through usmc-run's options and through the environment alone (LD_PRELOAD
plus the variables), and must give the same results: the counters and the
DMB sizes the verbose log reports for an SMC-D connection between two
python3 processes."""
import os
import re

from harness import APPS, BIN, PYTHON, USMC_RUN, Env, check, finish, read_ready

APP = os.path.join(APPS, "echo_app.py")
LIB = os.path.realpath(os.path.join(BIN, "..", "lib", "libusmc-preload.so"))
SHOW = ["/bin/sh", "-c", 'echo "$SMC_DEBUG|$SMC_RCVBUF|$SMC_SNDBUF|$USMC_MODES|$USMC_VERBOSE"']
DMB = re.compile(r"SMC-D, DMB (\S+) here, (\S+) at the peer")


def pair(env, launch):
    """One echo connection between two python3 processes, each started by
    launch(cmd) -> (argv, environment). Returns (counter deltas, the DMB
    sizes each side logged as [(here, peer)], both sides' stderr)."""
    before = env.stats()
    s_argv, s_env = launch([PYTHON, APP, "server", "--conns", "1", "--mode", "blocking"])
    server = env.start(s_argv, env=s_env)
    port = read_ready(server)
    c_argv, c_env = launch([PYTHON, APP, "client", "--port", str(port), "--conns", "1",
                            "--blocking-connect"])
    r = env.run(c_argv, env=c_env, timeout=60)
    out, err = server.communicate(timeout=30)
    ok = r.returncode == 0 and server.returncode == 0 and "DONE" in out
    if not ok:
        print("    client:", r.stdout[-1500:], r.stderr[-1500:], "\n    server:", out[-1500:], err[-1500:])
    after = env.stats()
    d = {k: after.get(k, 0) - before.get(k, 0) for k in ("conn_smcd", "conn_tcp")}
    d["ok"] = ok
    sizes = sorted(DMB.findall(r.stderr) + DMB.findall(err))
    return d, sizes, r.stderr + err


def via_run(env, *opts):
    return lambda cmd: ([USMC_RUN, *opts, *cmd], env.env)


def via_env(env, **extra):
    def launch(cmd):
        e = dict(env.env, LD_PRELOAD=LIB, **extra)
        return cmd, e
    return launch


with Env() as env:
    # --- smc_run's command line: help, version, errors, exit codes.
    r = env.run([USMC_RUN, "-h"])
    check(r.returncode == 0 and r.stdout.startswith("Usage: usmc-run [ OPTIONS ] COMMAND")
          and "-r <SIZE>  request receive buffer size in Bytes" in r.stdout and "--smcd" in r.stdout,
          "-h prints smc_run's usage (and usmc's long options), exit 0")
    r2 = env.run([USMC_RUN, "--help"])
    check(r2.returncode == 0 and r2.stdout == r.stdout, "--help is the same")
    r = env.run([USMC_RUN, "-v"])
    check(r.returncode == 0 and re.fullmatch(r"usmc-run utility, usmc-\d+\.\d+\.\d+\n", r.stdout),
          f"-v prints the version ({r.stdout.strip()})")
    check(env.run([USMC_RUN, "--version"]).stdout == r.stdout, "--version is the same")
    r = env.run([USMC_RUN, "-x", "/bin/true"])
    check(r.returncode == 1 and r.stderr == "usmc-run: Error: Invalid option: -x\n",
          f"invalid option: smc_run's message, exit 1 ({r.stderr.strip()})")
    for old in ("-c", "-q"):
        r = env.run([USMC_RUN, old, "x", "/bin/true"])
        check(r.returncode == 1 and f"Invalid option: {old}" in r.stderr, f"{old} is no option")
    r = env.run([USMC_RUN, "--bogus", "/bin/true"])
    check(r.returncode == 1 and "Invalid option: --bogus" in r.stderr, "unknown long option: exit 1")
    for argv in ([], ["-d"], ["-d", "--"]):
        r = env.run([USMC_RUN, *argv])
        check(r.returncode == 1 and r.stderr == "usmc-run: Error: Missing command parameter\n",
              f"no command after {argv}: exit 1")
    for size in ("12x", "1.5M", "-d", "64Ki"):
        r = env.run([USMC_RUN, "-r", size, "/bin/true"])
        check(r.returncode == 1 and r.stderr == f"usmc-run: Error: Invalid buffer size specified: '{size}'\n",
              f"-r {size}: invalid size, exit 1")
    r = env.run([USMC_RUN, "-t"])
    check(r.returncode == 1 and "Option -t requires an argument" in r.stderr, "-t without SIZE: exit 1")
    r = env.run([USMC_RUN, "--tcp", "--smcd", "/bin/true"])
    check(r.returncode == 1 and "cannot be combined" in r.stderr, "--tcp with --smcd is refused")

    # --- what reaches the environment, in every spelling of getopts.
    for argv, want in [
        ([], "0||||"),
        (["-d"], "1||||"),
        (["-d", "-r", "256k", "-t", "64k"], "1|256k|64k||"),
        (["-dr256k", "-t64k"], "1|256k|64k||"),
        (["-dt", "64k", "-r", "1M"], "1|1M|64k||"),
        (["--smcd", "-r", "32K", "--verbose"], "0|32K||smcd|1"),
        (["--tcp", "-d"], "1|||tcp|"),
        (["--smcd", "--smcr"], "0|||auto|"),
        # The file's size grammar: any case, KiB/MiB (passed on as given).
        (["-r", "64KiB", "-t1mib"], "0|64KiB|1mib||"),
    ]:
        r = env.run([USMC_RUN, *argv, *SHOW])
        check(r.returncode == 0 and r.stdout.strip() == want, f"usmc-run {' '.join(argv)} -> {want} "
              f"({r.stdout.strip()})")
    r = env.run([USMC_RUN, "/bin/echo", "-d", "-r", "1k", "--tcp"])
    check(r.stdout == "-d -r 1k --tcp\n", "options end at the command (getopts)")
    r = env.run([USMC_RUN, "-d", "--", "/bin/echo", "-v"])
    check(r.stdout == "-v\n", "-- ends the options")
    e = dict(env.env, SMC_DEBUG="1", SMC_RCVBUF="512k")
    r = env.run([USMC_RUN, *SHOW], env=e)
    check(r.stdout.strip() == "0|512k|||", "as smc_run: SMC_DEBUG always set, a size kept unless -r")

    # --- the same connections through both spellings.
    d, sizes, err = pair(env, via_run(env))
    check(d == {"conn_smcd": 2, "conn_tcp": 0, "ok": True}, f"plain usmc-run: SMC-D ({d})")
    check(sizes == [] and "usmc active" not in err, "no -d: no verbose log")

    ref, ref_sizes, _ = pair(env, via_run(env, "-d", "-r", "256k", "-t", "64k"))
    check(ref == {"conn_smcd": 2, "conn_tcp": 0, "ok": True}, f"usmc-run -d -r 256k -t 64k: SMC-D ({ref})")
    # rmem + wmem = 320 KiB, rounded down to a power of two for CLC.
    check(ref_sizes == [("256KiB", "256KiB")] * 2, f"and both DMBs are 256KiB ({ref_sizes})")
    got, got_sizes, err = pair(env, via_env(env, SMC_DEBUG="1", SMC_RCVBUF="256k", SMC_SNDBUF="64k"))
    check(got == ref and got_sizes == ref_sizes, f"LD_PRELOAD + SMC_DEBUG=1 SMC_RCVBUF=256k SMC_SNDBUF=64k: "
          f"the same ({got}, {got_sizes})")
    check("rmem 256KiB from SMC_RCVBUF, wmem 64KiB from SMC_SNDBUF" in err, "the log says where sizes came from")

    # Defaults: autotuned, 1 MiB DMBs while memory is plentiful, seen with --verbose too.
    _, sizes, _ = pair(env, via_run(env, "--verbose"))
    check(sizes == [("1MiB", "1MiB")] * 2, f"--verbose, default sizes: autotuned 1MiB DMBs ({sizes})")
    _, sizes, _ = pair(env, via_env(env, USMC_VERBOSE="1"))
    check(sizes == [("1MiB", "1MiB")] * 2, "USMC_VERBOSE=1: the same")
    # Without autotuning, rmem + wmem (64 KiB + 64 KiB): 128 KiB.
    fixed = os.path.join(env.dir, "fixed.toml")
    with open(fixed, "w") as f:
        f.write("autotune_dmb = false\n")
    _, sizes, _ = pair(env, via_run(env, "--verbose", "--config", fixed))
    check(sizes == [("128KiB", "128KiB")] * 2, f"autotune_dmb = false: 128KiB DMBs ({sizes})")

    for name, mode in [("--tcp", "tcp"), ("--smcd", "smcd"), ("--smcr", "smcr")]:
        a, _, _ = pair(env, via_run(env, name))
        b, _, _ = pair(env, via_env(env, USMC_MODES=mode))
        want_smcd = 2 if name == "--smcd" else 0
        check(a == b and a["ok"] and a["conn_smcd"] == want_smcd, f"{name} and USMC_MODES: same ({a}, {b})")

    cfg = os.path.join(env.dir, "sizes.toml")
    with open(cfg, "w") as f:
        f.write('rmem = "512K"\nwmem = "16K"\nautotune_dmb = false\n')
    a, a_sizes, _ = pair(env, via_run(env, "--config", cfg, "-d"))
    b, b_sizes, _ = pair(env, via_env(env, USMC_CONFIG=cfg, SMC_DEBUG="1"))
    check(a == b and a["conn_smcd"] == 2 and a_sizes == b_sizes == [("512KiB", "512KiB")] * 2,
          f"--config FILE and USMC_CONFIG=FILE: same, the file's sizes ({a_sizes}, {b_sizes})")
    # The environment over the file: 32 KiB + the file's 16 KiB -> 32 KiB.
    a, a_sizes, _ = pair(env, via_run(env, "--config", cfg, "-d", "-r", "32k"))
    b, b_sizes, _ = pair(env, via_env(env, USMC_CONFIG=cfg, SMC_DEBUG="1", SMC_RCVBUF="32k"))
    check(a_sizes == b_sizes == [("32KiB", "32KiB")] * 2, f"-r over the config file ({a_sizes}, {b_sizes})")

    # The file's grammar in the environment too: 256KiB, any case.
    a, a_sizes, _ = pair(env, via_run(env, "-d", "-r", "256KiB", "-t", "64kib"))
    b, b_sizes, _ = pair(env, via_env(env, SMC_DEBUG="1", SMC_RCVBUF="256kib", SMC_SNDBUF="64KiB"))
    check(a_sizes == b_sizes == ref_sizes, f"-r 256KiB -t 64kib: as -r 256k -t 64k ({a_sizes}, {b_sizes})")

    # Out of range: one message naming variable, value and bounds; the nearest bound.
    d, sizes, err = pair(env, via_run(env, "-d", "-r", "4M"))
    check(err.count("SMC_RCVBUF='4M' is outside 16KiB..1MiB; using 1MiB") == 2,
          "too large: one message per process")
    check(d["conn_smcd"] == 2 and sizes == [("1MiB", "1MiB")] * 2, f"and 1MiB is used ({sizes})")
    d, sizes, err = pair(env, via_env(env, SMC_DEBUG="1", SMC_SNDBUF="1"))
    check("SMC_SNDBUF='1' is outside 16KiB..1MiB; using 16KiB" in err, "too small: the lower bound")
    check(sizes == [("64KiB", "64KiB")] * 2, f"64 KiB + 16 KiB -> 64KiB DMBs ({sizes})")
    # Malformed (only the environment can say it): the configuration's value.
    d, sizes, err = pair(env, via_env(env, SMC_DEBUG="1", SMC_RCVBUF="lots", USMC_CONFIG=fixed))
    check("SMC_RCVBUF='lots' is not a size" in err and "using the configuration's rmem" in err,
          "malformed: named, with the bounds")
    check(d["conn_smcd"] == 2 and sizes == [("128KiB", "128KiB")] * 2, f"and the config's 64 KiB stays ({sizes})")
    # Without SMC_DEBUG the message still comes (a warning), the log does not.
    _, sizes, err = pair(env, via_env(env, SMC_RCVBUF="2M"))
    check("SMC_RCVBUF='2M' is outside" in err and sizes == [], "the warning without -d, no info lines")
    # SMC_DEBUG=0 (usmc-run's default) is off.
    _, sizes, err = pair(env, via_env(env, SMC_DEBUG="0"))
    check(sizes == [] and "usmc active" not in err, "SMC_DEBUG=0: quiet")
finish()
