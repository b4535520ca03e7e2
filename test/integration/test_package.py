#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Debian package and `cmake --install`, used as a user would.

`test_package.py build` (ctest's package_build, beside other tests) builds
the package from a Release build of its own (scripts/package.sh into
<build>/pkg-release, with -Werror: this is CI's Release build), then:
- runs lintian on it: its full output, no error, no warning not overridden;
- `cmake --install` of that build into a temporary prefix, and of the test
  build into another: the launcher there finds the shim in the prefix's own
  private library directory, and an SMC-D connection works from those files
  alone.
`test_package.py install` (it_package, alone) then
- installs the package, checks the maintainer, the conffile, the
  dependencies, the files (the shim in its private directory, none in the
  public library directory), the copyright file (DEP-5, LICENSE's text) and
  the changelog, the man pages (rendered by man without warnings), the bash
  completions (every option --help lists, values completed), that the
  installed configuration is inert (its settings are the built-in defaults),
  and an SMC-D connection between two wrapped python3 processes using only
  the installed /usr/bin/usmc-run and /usr/bin/usmc;
- purges the package, also when a check fails, so /etc/usmc/usmc.toml does
  not stay behind for other tests.
The install stage needs root or sudo; it exits 77 (skipped) without either."""
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from completion_check import completion_checks, live_process_completion
from harness import BUILD, PYTHON, check, finish
from lintian_check import lintian_check

SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PKG_BUILD = os.path.join(BUILD, "pkg-release")
SYSTEM_CONFIG = "/etc/usmc/usmc.toml"
APT = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=120"]
COMPLETIONS = "share/bash-completion/completions"
# The package's maintainer unless the build says otherwise (cmake/package.cmake).
MAINTAINER = "usmc maintainers <maintainers@users.noreply.a-seed-1eedad2c.example>"

if os.geteuid() == 0:
    SUDO = []
elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
    SUDO = ["sudo", "-n"]
else:
    SUDO = None  # install_stage skips


def run(cmd, timeout=120, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def clean_env(stats_dir):
    """The environment of a user who installed usmc and nothing else: none of
    the variables that point usmc elsewhere or preset its modes."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("USMC_", "SMC_")) and k != "LD_PRELOAD"}
    env["USMC_STATS_DIR"] = stats_dir
    return env


SERVER = """
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
print(l.getsockname()[1], flush=True)
c, _ = l.accept()
while (d := c.recv(65536)):
    c.sendall(d)
print("SERVER DONE", flush=True)
"""

CLIENT = """
import socket, sys
s = socket.socket(); s.connect(("127.0.0.1", int(sys.argv[1])))
msg = bytes(range(256)) * 400
s.sendall(msg)
got = b""
while len(got) < len(msg) and (d := s.recv(65536)):
    got += d
print("ECHO", got == msg, flush=True)
sys.stdin.readline()  # the test has looked at the connection
s.close()
"""


def stop(p):
    if p.poll() is None:
        p.kill()
        p.wait(timeout=10)


def smcd_check(label, usmc_run, usmc, want_lib=None, while_connected=None):
    """Two python3 processes under `usmc_run`, one connection between them:
    `usmc ss` shows it as SMC-D on both ends, and `usmc stats` counts it.
    while_connected(server_pid, env) looks at them meanwhile."""
    stats_dir = tempfile.mkdtemp(prefix="usmc-pkg-stats-")
    env = clean_env(stats_dir)
    procs = []
    try:
        server = subprocess.Popen([usmc_run, "--verbose", "--", PYTHON, "-c", SERVER], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(server)
        port_line = server.stdout.readline()
        if not check(port_line.strip().isdigit(), f"{label}: wrapped server listens ({port_line.strip()})"):
            stop(server)
            print("    server stderr:", server.stderr.read()[-2000:])
            return
        client = subprocess.Popen([usmc_run, "--", PYTHON, "-c", CLIENT, port_line.strip()], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        procs.append(client)
        echo = client.stdout.readline().strip()
        check(echo == "ECHO True", f"{label}: 100 KB echoed through the connection ({echo})")
        ss = run([usmc, "ss"], env=env).stdout
        smcd_lines = [line for line in ss.splitlines() if " SMCD " in line]
        check(len(smcd_lines) == 2, f"{label}: usmc ss shows both ends as SMC-D")
        if len(smcd_lines) != 2:
            print(ss)
        if while_connected:
            while_connected(server.pid, env)
        client.stdin.write("done\n")
        client.stdin.flush()
        client.wait(timeout=30)
        out, err = server.communicate(timeout=30)
        check(client.returncode == 0 and server.returncode == 0 and "SERVER DONE" in out,
              f"{label}: both programs exited cleanly")
        if want_lib:
            check(f"with {want_lib} " in err, f"{label}: usmc-run preloaded {want_lib}")
            if f"with {want_lib} " not in err:
                print("    server stderr:", err[-2000:])
        r = run([usmc, "stats", "--json"], env=env)
        stats = json.loads(r.stdout) if r.returncode == 0 else {}
        check(stats.get("conn_smcd") == 2 and stats.get("conn_tcp") == 0,
              f"{label}: usmc stats counts 2 SMC-D ends, no TCP "
              f"({ {k: stats.get(k) for k in ('conn_smcd', 'conn_tcp')} })")
    finally:
        for p in procs:
            stop(p)
            for f in (p.stdin, p.stdout, p.stderr):
                if f:
                    f.close()
        shutil.rmtree(stats_dir, ignore_errors=True)


def multiarch():
    return run(["gcc", "-print-multiarch"]).stdout.strip() or "x86_64-linux-gnu"


def cache_value(build_dir, name):
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    return None


def install_prefix_checks(build_dir, label):
    libdir = cache_value(build_dir, "CMAKE_INSTALL_LIBDIR")
    prefix = tempfile.mkdtemp(prefix="usmc-prefix-")
    try:
        had_system_config = os.path.exists(SYSTEM_CONFIG)
        r = run(["cmake", "--install", build_dir, "--prefix", prefix], timeout=300)
        check(r.returncode == 0, f"{label}: cmake --install --prefix {prefix}")
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-3000:])
            return
        lib = os.path.join(prefix, libdir, "usmc", "libusmc-preload.so")
        for path in ("bin/usmc-run", "bin/usmc", f"{libdir}/usmc/libusmc-preload.so", "etc/usmc/usmc.toml",
                     "share/man/man8/usmc-run.8.gz", "share/man/man8/usmc.8.gz",
                     "share/man/man5/usmc.toml.5.gz", "share/doc/usmc/README.md",
                     "share/doc/usmc/copyright", "share/doc/usmc/changelog.gz",
                     f"{COMPLETIONS}/usmc-run", f"{COMPLETIONS}/usmc"):
            check(os.path.exists(os.path.join(prefix, path)), f"{label}: installed {path}")
        check(not os.path.exists(os.path.join(prefix, libdir, "libusmc-preload.so")),
              f"{label}: nothing in the public library directory {libdir}")
        check(os.path.exists(SYSTEM_CONFIG) == had_system_config,
              f"{label}: the prefix install left {SYSTEM_CONFIG} alone")
        smcd_check(label, os.path.join(prefix, "bin", "usmc-run"), os.path.join(prefix, "bin", "usmc"),
                   want_lib=lib)
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def package_installed():
    r = run(["dpkg-query", "-W", "-f=${Status}", "usmc"])
    return r.returncode == 0 and "installed" in r.stdout and "not-installed" not in r.stdout


def purge():
    r = run(SUDO + APT + ["purge", "usmc"], timeout=300)
    if r.returncode != 0:
        print("    purge:", r.stdout[-2000:], r.stderr[-2000:])
    return r.returncode == 0


def license_checks(deb):
    """The copyright file: machine-readable, the project's licence in it
    word for word (LICENSE, from its permission notice on), no other copy."""
    path = "/usr/share/doc/usmc/copyright"
    if not check(os.path.exists(path), f"installed {path}"):
        return
    with open(path) as f:
        text = f.read()
    check(text.startswith("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"),
          f"{path} is machine-readable (DEP-5)")
    check("\nFiles: *\nCopyright: 2026 the usmc authors\nLicense: Expat\n" in text,
          f"{path}: the usmc authors' copyright, Expat")
    with open(os.path.join(SRC, "LICENSE")) as f:
        license_text = f.read()
    notice = license_text[license_text.index("Permission is hereby granted"):].strip()
    # The format's indented form: each line after one space, an empty one " .".
    indented = "\n".join(" " + line if line else " ." for line in notice.split("\n"))
    check("\nLicense: Expat\n" + indented + "\n" in text, f"{path} holds LICENSE's text")
    check("Copyright (c) 2026 the usmc authors" in license_text and "MIT License" in license_text,
          "LICENSE: MIT, the usmc authors")
    check(not glob.glob("/usr/share/doc/usmc/LICENSE*"), "no second copy of the licence in the doc directory")

    path = "/usr/share/doc/usmc/changelog.gz"
    if check(os.path.exists(path), f"installed {path}"):
        with gzip.open(path, "rt") as f:
            first = f.readline()
        version = run(["dpkg-deb", "-f", deb, "Version"]).stdout.strip()
        check(first.startswith(f"usmc ({version}) "), f"{path} names this version ({first.strip()})")


def package_checks(deb):
    arch = multiarch()
    r = run(SUDO + APT + ["install", "--no-install-recommends",
                          # a minimal image may exclude /usr/share/man from dpkg
                          "-o", "DPkg::Options::=--path-include=/usr/share/man/man[58]/usmc*", deb],
            timeout=300)
    if not check(r.returncode == 0, f"apt-get install {os.path.basename(deb)}"):
        print(r.stdout[-3000:], r.stderr[-3000:])
        return
    conffiles = run(["dpkg-query", "-W", "-f=${Conffiles}", "usmc"]).stdout
    check(SYSTEM_CONFIG in conffiles, f"dpkg lists {SYSTEM_CONFIG} as a conffile ({conffiles.strip()})")
    depends = run(["dpkg-query", "-W", "-f=${Depends}", "usmc"]).stdout
    for lib in ("libc6", "libstdc++6", "libnl-genl-3", "libnl-3"):
        check(lib in depends, f"the package depends on {lib}")
    for lib in ("libfmt", "libtomlplusplus"):  # header-only, compiled in
        check(lib not in depends, f"the package does not depend on {lib}")
    print(f"  info Depends: {depends}")
    maintainer = run(["dpkg-query", "-W", "-f=${Maintainer}", "usmc"]).stdout
    check(maintainer == MAINTAINER, f"the package's maintainer ({maintainer})")
    lib = f"/usr/lib/{arch}/usmc/libusmc-preload.so"
    for path in ("/usr/bin/usmc-run", "/usr/bin/usmc", lib, SYSTEM_CONFIG,
                 "/usr/share/doc/usmc/README.md", "/usr/share/doc/usmc/examples/usmc.toml",
                 f"/usr/{COMPLETIONS}/usmc-run", f"/usr/{COMPLETIONS}/usmc"):
        check(os.path.exists(path), f"installed {path}")
    # No library to link against: nothing of usmc where the linker looks.
    public = glob.glob(f"/usr/lib/{arch}/libusmc*") + glob.glob("/usr/lib/libusmc*")
    check(not public, f"nothing in the public library directory ({public})")
    license_checks(deb)

    # Debian's flags fortify the engine inside the shim (-D_FORTIFY_SOURCE=2;
    # the shim's own files undefine it). A fortified call to a function the
    # shim interposes (__read_chk, __recv_chk, ...) would enter the shim from
    # inside itself: the shim must import none of the names it exports.
    nm = lambda *flags: set(line.split()[-1].split("@")[0]
                            for line in run(["nm", "-D", *flags, lib]).stdout.splitlines() if line.strip())
    both = nm("--undefined-only") & nm("--defined-only")
    check(not both, f"the shim imports none of the names it interposes ({sorted(both)})")

    # The man pages: present, and man renders them without a warning.
    # Not a terminal, and MAN_KEEP_FORMATTING unset: plain text, no overstrikes.
    man_env = {k: v for k, v in os.environ.items() if k != "MAN_KEEP_FORMATTING"}
    man_env.update(MANWIDTH="80", LC_ALL="C.UTF-8")
    for section, page, words in (("8", "usmc-run", ("--smcd", "SMC_RCVBUF", "USMC_PRELOAD_LIB")),
                                 ("8", "usmc", ("limit-hs", "config check", "NOLISTENER")),
                                 ("5", "usmc.toml", ("busy_poll_us", "trusted_uids", "[[policy]]"))):
        path = f"/usr/share/man/man{section}/{page}.{section}.gz"
        if not check(os.path.exists(path), f"installed {path}"):
            continue
        r = run(["man", "--warnings", "-E", "UTF-8", "-l", path], env=man_env)
        check(r.returncode == 0 and not r.stderr.strip() and all(w in r.stdout for w in words),
              f"man -l {path} renders without warnings, with {', '.join(words)}")
        if r.stderr.strip():
            print("    man:", r.stderr[-2000:])
        r = run(["man", "-w", section, page], env=man_env)
        check(r.returncode == 0 and r.stdout.strip() == path, f"man finds {page}({section}) ({r.stdout.strip()})")

    # The installed configuration is read by every wrapped program: it must
    # say exactly what the built-in defaults say.
    env = clean_env("/tmp")
    installed = run(["/usr/bin/usmc", "config", "check", SYSTEM_CONFIG], env=env)
    defaults = run(["/usr/bin/usmc", "config", "check", "/dev/null"], env=env)
    same = installed.returncode == 0 and defaults.returncode == 0 and \
        installed.stdout.splitlines()[1:] == defaults.stdout.splitlines()[1:]
    check(same, f"{SYSTEM_CONFIG} is inert: its effective settings are the built-in defaults")
    if not same:
        print(installed.stdout, installed.stderr, defaults.stdout, defaults.stderr)

    completion_checks(f"/usr/{COMPLETIONS}", "/usr/bin/usmc-run", "/usr/bin/usmc",
                      "/usr/share/doc/usmc/examples/usmc.toml", env)
    smcd_check("installed package", "/usr/bin/usmc-run", "/usr/bin/usmc", want_lib=lib,
               while_connected=lambda pid, env: live_process_completion(
                   f"/usr/{COMPLETIONS}", pid, "python3", env))


def build_stage():
    """Builds the package, runs lintian on it, installs it into prefixes:
    nothing system-wide, so this runs beside the other tests."""
    t0 = time.monotonic()
    # Niced: the test beside it keeps its core; this one takes what is left.
    r = run(["nice", "-n", "10", os.path.join(SRC, "scripts", "package.sh"), PKG_BUILD], timeout=1500,
            env=dict(os.environ, USMC_WERROR="ON"))
    debs = glob.glob(os.path.join(PKG_BUILD, "usmc_*.deb"))
    if not check(r.returncode == 0 and len(debs) == 1,
                 f"Release build with -Werror and the package ({time.monotonic() - t0:.0f}s)"):
        print(r.stdout[-5000:], r.stderr[-5000:])
        finish()
    deb = debs[0]
    print(f"  info {deb}")
    contents = run(["dpkg-deb", "--contents", deb]).stdout
    print("  info contents:\n" + contents)
    lintian_check(deb)

    # The installs into prefixes must work on their own: nothing of theirs
    # may come from /usr (it_package installs there, and only after this).
    if package_installed():
        print("  info usmc was installed before the test (a stopped it_package?): purging it first")
        if SUDO is None or not purge():
            check(False, "usmc is installed on this machine: `apt-get purge usmc` first")
            finish()
    check(cache_value(PKG_BUILD, "CMAKE_INSTALL_LIBDIR") == f"lib/{multiarch()}",
          f"the package build's library directory is lib/{multiarch()} (the shim in its usmc/)")
    install_prefix_checks(PKG_BUILD, "prefix install (package build)")
    install_prefix_checks(BUILD, "prefix install (test build)")
    finish()


def install_stage():
    """Installs the package package_build made, checks it, purges it: alone,
    since other tests would find /usr/bin/usmc-run meanwhile."""
    if SUDO is None:
        print("skipped: installing a package needs root or password-less sudo")
        sys.exit(77)
    debs = glob.glob(os.path.join(PKG_BUILD, "usmc_*.deb"))
    if not check(len(debs) == 1, f"package_build made one package in {PKG_BUILD}"):
        finish()
    deb = debs[0]
    if package_installed():
        print("  info usmc was installed before the test: purging it first")
        purge()
    if os.path.exists(SYSTEM_CONFIG):
        check(False, f"{SYSTEM_CONFIG} exists and is no package's: the test does not touch it")
        finish()
    try:
        package_checks(deb)
    finally:
        purged = purge()
        check(purged and not package_installed(), "apt-get purge usmc: the package is gone")
        check(not os.path.exists(SYSTEM_CONFIG) and not os.path.exists(os.path.dirname(SYSTEM_CONFIG)),
              f"the purge removed {SYSTEM_CONFIG} and its directory")
    finish()


if len(sys.argv) != 2 or sys.argv[1] not in ("build", "install"):
    sys.exit("usage: test_package.py build|install")
build_stage() if sys.argv[1] == "build" else install_stage()
