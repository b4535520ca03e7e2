# SPDX-License-Identifier: MIT
"""Shared helpers of the integration tests: paths, free ports, processes that
are always stopped by PID, bounded waits, and usmc's own counters."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import queue
import random
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("USMC_BUILD_DIR") or os.path.join(HERE, "..", "..", "build")
BIN = os.path.join(BUILD, "bin")
USMC_RUN = os.path.join(BIN, "usmc-run")
USMC = os.path.join(BIN, "usmc")


def ss_sockets(text):
    """The sockets of `usmc ss --json` output: {"schema": 1, "sockets": [...]};
    [] for no output."""
    doc = json.loads(text or '{"sockets": []}')
    return doc["sockets"]
PYTHON = "/usr/bin/python3"  # not a version-manager shim: tests wrap the real interpreter
APPS = os.path.join(HERE, "apps")

failures = []


def check(cond, what):
    if cond:
        print(f"  ok   {what}", flush=True)
    else:
        print(f"  FAIL {what}", flush=True)
        failures.append(what)
    return cond


def finish():
    if failures:
        print(f"{len(failures)} check(s) failed:", *failures, sep="\n  ")
        sys.exit(1)
    print("all checks passed")


def stop_process(p, timeout=15):
    """Stops one process we started, by its PID: SIGTERM, then SIGKILL."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return p.returncode


def _descendants(roots):
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid in found or pid not in parent:
            continue
        found.append(pid)
        todo.extend(c for c, pp in parent.items() if pp == pid)
    return found


def _read(path, limit=4000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-limit:].strip()
    except OSError as e:
        return f"({e.strerror})"


def explain_hang(roots, env=None, logs=()):
    """Prints what the process trees of `roots` wait in (each thread: name,
    state, wchan, system call and its arguments, kernel stack when readable),
    their descriptors, usmc's view of the connections and counters, and the
    tails of `logs`: a test that timed out says where."""
    print("---- still running at the deadline:", flush=True)
    for pid in _descendants(roots):
        print(f"pid {pid}: {_read(f'/proc/{pid}/cmdline').replace(chr(0), ' ')}")
        try:
            tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
        except OSError:
            continue
        for tid in tids:
            t = f"/proc/{pid}/task/{tid}"
            state = next((l.split(None, 1)[1] for l in _read(f"{t}/status").splitlines()
                          if l.startswith("State:")), "?")
            print(f"  tid {tid} {_read(f'{t}/comm')} {state} wchan={_read(f'{t}/wchan')} "
                  f"syscall={_read(f'{t}/syscall')}")
            stack = _read(f"{t}/stack", 1500)
            if stack and not stack.startswith("("):
                print("    " + stack.replace("\n", "\n    "))
        try:
            fds = sorted(os.listdir(f"/proc/{pid}/fd"), key=int)
            print("  fds: " + " ".join(f"{fd}->{os.readlink(f'/proc/{pid}/fd/{fd}')}" for fd in fds[:64]))
        except OSError:
            pass
    if env is not None:
        for what, args in (("usmc ss", ["ss"]), ("usmc stats", ["stats", "--json"])):
            r = subprocess.run([USMC, "--stats-dir", env.stats_dir, *args], env=env.env, capture_output=True,
                               text=True, timeout=30)
            print(f"---- {what}:\n{r.stdout[-6000:]}{r.stderr[-500:]}")
    for log in logs:
        print(f"---- {log}:\n{_read(log)}")
    print("----", flush=True)


def tree_cpu(pid):
    """CPU seconds (user + system, /proc/PID/stat) of process `pid`, the
    children it has reaped, and its live descendants with theirs: a
    server's whole cost (postmaster and backends, nginx master and
    workers). Read before the process is stopped."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stats[int(entry)] = f.read().rsplit(")", 1)[1].split()
            except OSError:
                pass
    tree, grew = {pid}, True
    while grew:  # bounded: each pass adds a process or ends
        more = {p for p, fields in stats.items() if int(fields[1]) in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(sum(int(x) for x in stats[p][11:15]) for p in tree if p in stats) / tick


def bench_dir():
    """A new directory for a benchmark's files, in /dev/shm (tmpfs): usmc's
    stats segments then live where they do by default. In /tmp, on the disk's
    file system, every wrapped process (a PostgreSQL backend per connection)
    would pay an inode allocation that users do not. The caller removes it."""
    import tempfile
    d = tempfile.mkdtemp(prefix="usmc-bench-", dir="/dev/shm")
    os.chmod(d, 0o755)
    return d


def run_dir(parent, name):
    """A directory for one benchmark run (nginx workers run as nobody: 0755)
    with its own world-writable stats directory, and the environment that
    points usmc there. Returns (dir, stats_dir, env)."""
    d = os.path.join(parent, name)
    os.mkdir(d)
    os.chmod(d, 0o755)
    stats_dir = os.path.join(d, "stats")
    os.mkdir(stats_dir)
    os.chmod(stats_dir, 0o1777)
    env = dict(os.environ, USMC_STATS_DIR=stats_dir)
    env.pop("LD_PRELOAD", None)
    return d, stats_dir, env


def slow_machine_config(env):
    """A config for tests that assert SMC-D on every connection: on a loaded
    machine a client may send its Proposal after the server's 50 ms
    clc_detect_timeout_ms, and the connection then runs as TCP (PEERNOSMC /
    PEERDECL), correctly, but not what such a test checks. World-readable:
    programs run as other users too. Returns its path."""
    path = os.path.join(env.dir, "usmc.toml")
    with open(path, "w") as f:
        f.write(env.config_lines + "clc_detect_timeout_ms = 2000\n")
    os.chmod(path, 0o644)
    env.env["USMC_CONFIG"] = path
    return path


def stop_and_wait(pid, timeout=10.0):
    """SIGSTOP to `pid`, then waits until every thread of it is stopped
    (state T in /proc): kill() returns before a thread running on another
    CPU has stopped, and such a thread could still answer a peer. True once
    all are stopped; False after `timeout`, or if the process is gone."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            states = []
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            return False
        if states and all(st in ("T", "t") for st in states):
            return True
        time.sleep(0.001)
    return False


def cpu_children():
    """CPU seconds of this process's children that have ended (benchmarks)."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def smcd_share(stats_dir):
    """How many connection ends usmc counted SMC-D in `stats_dir`, and the
    reasons of the others (benchmarks print it beside each usmc run)."""
    st = json.loads(subprocess.run([USMC, "--stats-dir", stats_dir, "stats", "--json"],
                                   capture_output=True, text=True).stdout)
    total = st["conn_smcd"] + st["conn_tcp"]
    return f"{st['conn_smcd']}/{total} ends SMC-D {st['fallback_reasons'] or ''}"


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A port nobody holds now, below the kernel's ephemeral range: a port
    the kernel chose for us (bind to 0) is one it also hands to other
    tests' outgoing connections, which may take it before our server
    binds it (tests run two at a time)."""
    low, top = 10000, _ephemeral_low() - 1
    for _ in range(200):
        port = random.randint(low, top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # (a range that full: the kernel's choice)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0, host="127.0.0.1"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class Env:
    """A private stats directory (so counters are this test's alone) and the
    environment to run programs with. `smcd_mechanics`: the test is about
    how SMC-D connections behave and needs every connection SMC-D, however
    short: a configuration with learn_smc = false (short connections would
    otherwise learn TCP). Its `config_lines` go into every configuration
    file the test writes with config()."""

    def __init__(self, smcd_mechanics=False):
        self.dir = tempfile.mkdtemp(prefix="usmc-it-")
        self.stats_dir = os.path.join(self.dir, "stats")
        os.mkdir(self.stats_dir)
        self.env = dict(os.environ)
        self.env["USMC_STATS_DIR"] = self.stats_dir
        self.env.pop("LD_PRELOAD", None)
        self.env.pop("USMC_CONFIG", None)
        self.procs = []
        self.config_lines = "learn_smc = false\n" if smcd_mechanics else ""
        if smcd_mechanics:
            self.config("")

    def config(self, text, name="usmc.toml", use=True):
        """Writes a configuration file (with config_lines first); `use`:
        the default for programs run here (USMC_CONFIG). Returns its path."""
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(self.config_lines + text)
        if use:
            self.env["USMC_CONFIG"] = path
        return path

    def wrap(self, cmd, *opts):
        return [USMC_RUN, *opts, "--", *cmd]

    def start(self, cmd, **kw):
        p = subprocess.Popen(cmd, env=kw.pop("env", self.env), stdout=kw.pop("stdout", subprocess.PIPE),
                             stderr=kw.pop("stderr", subprocess.PIPE), text=True, **kw)
        self.procs.append(p)
        return p

    def run(self, cmd, timeout=120, env=None, text=True, **kw):
        return subprocess.run(cmd, env=env or self.env, capture_output=True, text=text, timeout=timeout, **kw)

    def run_explained(self, cmd, timeout, watch=(), logs=()):
        """run(), but a command still running at `timeout` is explained
        (explain_hang: it and the process trees of `watch`) before it is
        killed; returns its result with returncode None then."""
        p = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(timeout=timeout)
            return subprocess.CompletedProcess(cmd, p.returncode, out, err)
        except subprocess.TimeoutExpired:
            explain_hang([p.pid, *watch], self, logs)
            p.kill()
            try:
                out, err = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # its pipes held by a process it left behind
                out, err = "", ""
            return subprocess.CompletedProcess(cmd, None, out, err + f"\n(still running after {timeout} s)")

    def stop(self, p, sig=signal.SIGTERM, timeout=10):
        if p.poll() is None:
            try:
                p.send_signal(sig)
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=timeout)
        return p.returncode

    def stats(self):
        r = self.run([USMC, "--stats-dir", self.stats_dir, "stats", "--json"], timeout=30)
        return json.loads(r.stdout)

    def ss(self, *flags):
        return self.run([USMC, "--stats-dir", self.stats_dir, "ss", *flags], timeout=30).stdout

    def ss_json(self, *flags):
        """The sockets of `usmc ss --json` (a list)."""
        r = self.run([USMC, "--stats-dir", self.stats_dir, "ss", "--json", *flags], timeout=30)
        return ss_sockets(r.stdout)

    def close(self):
        for p in self.procs:
            self.stop(p, timeout=5)
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_ready(p, timeout=15.0):
    """Waits for an echo_app server's 'READY <port>' line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if line.startswith("READY"):
            return int(line.split()[1])
        if not line and p.poll() is not None:
            break
    raise RuntimeError(f"server did not become ready: {p.stderr.read() if p.poll() is not None else ''}")


def read_until(p, word, timeout=30.0):
    """Reads p's stdout lines until one starts with `word`: its fields."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if line.split()[:1] == [word]:
            return line.split()
        if not line and p.poll() is not None:
            break
    raise RuntimeError(f"no {word} from pid {p.pid}: {p.stderr.read() if p.poll() is not None else ''}")


def tell(p, line):
    """Writes one line to p's stdin: False if p is gone."""
    try:
        p.stdin.write(line + "\n")
        p.stdin.flush()
        return True
    except (BrokenPipeError, ValueError, OSError):
        return False


class Lines:
    """A process's stdout lines, read by a thread of their own, so a wait
    for one is bounded and none is lost; all() keeps every line seen."""

    def __init__(self, p):
        self.q = queue.Queue()
        self.seen = []
        self.t = threading.Thread(target=self._read, args=(p.stdout,), daemon=True)
        self.t.start()

    def _read(self, f):
        try:
            for line in f:
                self.seen.append(line.strip())
                self.q.put(line.strip())
        except (OSError, ValueError):
            pass
        self.q.put(None)

    def first(self, prefix, timeout=15.0):
        """The next line starting with `prefix` (a string or tuple), or ''."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return ""
            if line is None:
                self.q.put(None)  # (later waits see the end too)
                return ""
            if line.startswith(prefix):
                return line

    def all(self, timeout=5):
        self.t.join(timeout)
        return list(self.seen)
