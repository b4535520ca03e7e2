#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""usmc-run: finding programs, exit codes, warnings for programs it cannot
affect, LD_PRELOAD handling, options reaching the shim, config errors."""
import os
import shutil

from harness import BIN, USMC, USMC_RUN, Env, check, finish

with Env() as env:
    r = env.run([USMC_RUN, "no-such-program-usmc", "x"])
    check(r.returncode == 127, "missing program exits 127")
    check("no-such-program-usmc: command not found" in r.stderr, "and says so")

    r = env.run([USMC_RUN, "/bin/sh", "-c", "exit 7"])
    check(r.returncode == 7, "the program's exit code comes back")

    r = env.run([USMC_RUN, "/bin/echo", "-v", "--tcp", "-d"])
    check(r.stdout == "-v --tcp -d\n", "options after PROGRAM belong to the program")

    r = env.run([USMC_RUN, "--tcp", "--smcd", "/bin/true"])
    check(r.returncode == 1 and "cannot be combined" in r.stderr, "--tcp with --smcd is refused (exit 1)")
    r = env.run([USMC_RUN, "--bogus", "/bin/true"])
    check(r.returncode == 1, "unknown option exits 1, like smc_run")
    r = env.run([USMC_RUN])
    check(r.returncode == 1 and "Missing command parameter" in r.stderr, "no program: usage error")
    r = env.run([USMC_RUN, "--help"])
    check(r.returncode == 0 and "Usage: usmc-run" in r.stdout, "--help")

    show = ["/bin/sh", "-c", 'echo "$LD_PRELOAD|$USMC_MODES|$USMC_LIMIT_HS|$USMC_VERBOSE"']
    r = env.run([USMC_RUN, *show])
    lib = os.path.realpath(os.path.join(BIN, "..", "lib", "libusmc-preload.so"))
    check(r.stdout.strip() == f"{lib}|||", f"plain run sets LD_PRELOAD, no USMC_* ({r.stdout.strip()})")
    r = env.run([USMC_RUN, "--smcd", "--limit-hs", "--verbose", *show])
    check(r.stdout.strip() == f"{lib}|smcd|1|1", "--smcd --limit-hs --verbose reach the shim")
    check("usmc-run:" in r.stderr, "--verbose explains what it does")
    r = env.run([USMC_RUN, "--smcd", "--smcr", "--no-limit-hs", *show])
    check(r.stdout.strip() == f"{lib}|auto|0|", "--smcd --smcr means both, --no-limit-hs is 0")
    r = env.run([USMC_RUN, "--tcp", *show])
    check(r.stdout.strip() == f"{lib}|tcp||", "--tcp means TCP only")

    e = dict(env.env)
    e["LD_PRELOAD"] = "/lib/x86_64-linux-gnu/libm.so.6"
    r = env.run([USMC_RUN, *show], env=e)
    check(r.stdout.startswith(f"/lib/x86_64-linux-gnu/libm.so.6:{lib}|"), "existing LD_PRELOAD is kept")
    e["LD_PRELOAD"] = lib
    r = env.run([USMC_RUN, *show], env=e)
    check(r.stdout.startswith(f"{lib}|"), "the shim is not added twice")

    r = env.run([USMC_RUN, os.path.join(BIN, "usmc-static-probe")])
    check(r.returncode == 0 and "statically linked" in r.stderr, "static program: warning, still runs")

    setuid_copy = os.path.join(env.dir, "setuid-true")
    shutil.copy("/bin/true", setuid_copy)
    os.chmod(setuid_copy, 0o4755)
    r = env.run([USMC_RUN, setuid_copy])
    check(r.returncode == 0 and "set-user/group-ID" in r.stderr, "setuid program: warning, still runs")

    noexec = os.path.join(env.dir, "not-executable")
    open(noexec, "w").close()
    r = env.run([USMC_RUN, noexec])
    check(r.returncode == 126, "a file that cannot be executed exits 126")

    # Programs that never touch TCP leave no stats segment behind.
    env.run([USMC_RUN, "/bin/true"])
    check(os.listdir(env.stats_dir) == [], "no segment for a program without sockets")

    # A bad configuration stops the launch: every error told, the program
    # never started (it would have left a file behind), exit 1.
    bad = os.path.join(env.dir, "bad.toml")
    with open(bad, "w") as f:
        f.write('rmem = 1000\nlimit_smc_hs = 1\nsmcr_buf_type = 1\nbusy_pol_us = 5\n'
                'wmem = "64kib"\n[[policy]]\nmode = "warp"\n')
    mark = os.path.join(env.dir, "started")
    touch = ["/bin/sh", "-c", f"touch {mark}; echo started"]
    r = env.run([USMC_RUN, "--config", bad, *touch])
    errors = [l for l in r.stderr.splitlines() if l.startswith(f"usmc-run: {bad}:")]
    check(r.returncode == 1 and not os.path.exists(mark) and r.stdout == "",
          f"bad config: exit 1, the program not started ({r.returncode}, {r.stderr!r})")
    check(len(errors) == 3 and f"{bad}:1:8: key 'rmem'" in errors[0]
          and f"{bad}:4:15: key 'busy_pol_us': unknown key" in errors[1]
          and f"{bad}:7:8: key 'policy.mode'" in errors[2],
          f"bad config: all three errors, each with file:line:col and key ({errors})")
    check("not starting /bin/sh: the configuration has 3 errors" in r.stderr
          and "--ignore-config-errors" in r.stderr, "and why it does not start, and the way out")
    check("testonly" not in r.stderr, "the list of known keys leaves the test-only keys out")
    e = dict(env.env, USMC_CONFIG=bad)
    r = env.run([USMC_RUN, *touch], env=e)
    check(r.returncode == 1 and not os.path.exists(mark), "the same through USMC_CONFIG")

    r = env.run([USMC_RUN, "--ignore-config-errors", "--config", bad, *touch])
    lines = [l for l in r.stderr.splitlines() if l.startswith("usmc-run:")]
    check(r.returncode == 0 and r.stdout == "started\n" and os.path.exists(mark),
          "--ignore-config-errors: the program starts")
    check(len(lines) == 1 and f"{bad}:1:8: key 'rmem'" in lines[0] and "(and 2 more)" in lines[0]
          and "plain TCP" in lines[0], f"with one line saying every socket runs plain TCP ({lines})")
    os.unlink(mark)

    r = env.run([USMC, "config", "check", bad])
    errors = [l for l in r.stderr.splitlines() if l.startswith(f"usmc: {bad}:")]
    check(r.returncode == 1 and r.stdout == "" and len(errors) == 3,
          f"usmc config check lists every error and exits 1 ({r.stderr!r})")

    # The kernel's spellings, and the test-only keys this (test) build takes.
    kernel = os.path.join(env.dir, "kernel.toml")
    with open(kernel, "w") as f:
        f.write('limit_smc_hs = 1\nsmcr_buf_type = 2\nsmcr_max_conns_per_lgr = 16\n'
                'rmem = "128kib"\ntestonly_clc_timeout_ms = 300\n')
    r = env.run([USMC, "config", "check", kernel])
    check(r.returncode == 0 and "limit_smc_hs = true" in r.stdout and "smcr_buf_type = 2" in r.stdout
          and 'rmem = "128KiB"' in r.stdout, "limit_smc_hs = 1, smcr_* keys and 128kib are taken")
    r = env.run([USMC_RUN, "--config", kernel, *touch])
    check(r.returncode == 0 and os.path.exists(mark), "a file in the kernel's spellings starts the program")
    check("usmc-run: warning: test-only setting in effect: testonly_clc_timeout_ms = 300" in r.stderr,
          f"a test-only key in effect is named ({r.stderr!r})")

    r = env.run([USMC_RUN, "--config", "/nonexistent.toml", "/bin/true"])
    check(r.returncode == 1 and "/nonexistent.toml" in r.stderr, "missing --config file is an error")

    good = os.path.join(env.dir, "good.toml")
    with open(good, "w") as f:
        f.write('rmem = "128K"\n[[policy]]\nport = 22\nmode = "tcp"\n')
    r = env.run([USMC, "config", "check", good])
    check(r.returncode == 0 and 'rmem = "128KiB"' in r.stdout and 'port = 22' in r.stdout,
          "usmc config check prints the effective settings")
finish()
