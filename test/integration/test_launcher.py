#!/usr/bin/env python3
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

    bad = os.path.join(env.dir, "bad.toml")
    with open(bad, "w") as f:
        f.write("rmem = 10\n")
    r = env.run([USMC_RUN, "--config", bad, "/bin/echo", "still runs"])
    check(r.returncode == 0 and r.stdout == "still runs\n", "bad config: the program still runs")
    check(f"{bad}:1:" in r.stderr and "key 'rmem'" in r.stderr, "bad config: file, line and key named")
    r = env.run([USMC_RUN, "--config", "/nonexistent.toml", "/bin/true"])
    check(r.returncode == 1 and "/nonexistent.toml" in r.stderr, "missing --config file is an error")

    good = os.path.join(env.dir, "good.toml")
    with open(good, "w") as f:
        f.write('rmem = "128K"\n[[policy]]\nport = 22\nmode = "tcp"\n')
    r = env.run([USMC, "config", "check", good])
    check(r.returncode == 0 and 'rmem = "128KiB"' in r.stdout and 'port = 22' in r.stdout,
          "usmc config check prints the effective settings")
    r = env.run([USMC, "config", "check", bad])
    check(r.returncode == 1 and "key 'rmem'" in r.stderr, "usmc config check rejects a bad file")
finish()
