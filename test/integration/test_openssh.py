#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""OpenSSH under usmc: Debian's sshd under usmc-run --smcd, on a free port of
127.0.0.1, with keys, authorized_keys and sshd_config of its own in a
temporary directory, and ssh, scp and sftp under usmc-run --smcd as its
clients. Two cases, each with an sshd of its own:

  rexec    sshd as it runs by default: for each connection the listener
           forks and the child re-executes /usr/sbin/sshd (the connection
           crosses exec);
  norexec  sshd -r: no re-exec; the pre-authentication child installs a
           seccomp filter and sets RLIMIT_NOFILE to 1 (the connection
           crosses a sandbox).

In each: 10 commands (echo hi-N, output checked), 32 MiB of random bytes up
(`cat > FILE` from ssh's stdin) and down (`cat FILE`), scp up and down in
its SFTP mode (OpenSSH 9's default) and in its legacy mode (scp -O), and an
sftp -b batch put and get; every file compared by SHA-256 on both sides.
One session is held open (remote `echo ready; cat`) while `usmc ss` lists
its ends (ssh's asserted, sshd's shown). Then usmc's account of sshd's
side: once every client has exited, `usmc stats --live` counts sshd's
processes alone (the clients must share sshd's stats directory: a listener
is announced there), and sshd's listener accepted the connections as SMC-D;
in the rexec case, usmc moved connections to TCP (counter moved_to_tcp),
whichever process counted it.

Every wait is bounded: a command still running at its deadline is
explained (what the processes wait in) and killed, and the rest of its case
(or of one that failed) is not run: a case that hangs fails in about
GATE_S seconds. sshd is stopped by its PID (and the PidFile's, if that
process runs our config), and any of its children left over by theirs.
Needs root (sshd's privilege separation); exits 77 (skipped) otherwise.

USMC_TEST_SSH_POLICY_TCP=1 (validation of the test itself only, not for
CI): a [[policy]] rule puts sshd's sockets on plain TCP, and the account
checks expect that (no SMC-D end at sshd) instead."""
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import types

from harness import USMC, USMC_RUN, Env, _descendants, check, explain_hang, finish, free_port, ss_sockets

SKIP = 77  # ctest SKIP_RETURN_CODE
SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
PRIVSEP_DIR = "/run/sshd"  # sshd refuses to start without it (Debian's service creates it)
BULK = 32 << 20  # the ssh stdin/stdout transfers
FILE_SIZE = 8 << 20  # the scp and sftp transfers
COMMANDS = 10
GATE_S = 15  # the first command of a case: KEX, authentication, a session
OP_S = 30  # any other operation (the bulk ones included: ~1 s on loopback)
POLICY_TCP = os.environ.get("USMC_TEST_SSH_POLICY_TCP") == "1"

SSHD_CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
AddressFamily inet
HostKey {dir}/host_ed25519
AuthorizedKeysFile {dir}/authorized_keys
PidFile {pidfile}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
PrintLastLog no
UseDNS no
Subsystem sftp {sftp_server}
LogLevel VERBOSE
"""

if os.geteuid() != 0:
    print("SKIP it_openssh needs root: sshd's privilege separation (the sshd user, chroot to /run/sshd) and "
          "logging in as root over ssh")
    sys.exit(SKIP)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def random_file(path, size):
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    return sha256_file(path)


def proc_start(pid):
    """The start time of `pid` (/proc/PID/stat field 22): tells a process
    from a later one that got its PID."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def listening(port):
    """Whether a socket listens on 127.0.0.1:port (/proc/net/tcp; no
    connection made: a probe connection would be one more for sshd to
    serve and count)."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return any(l.split()[1] == want and l.split()[3] == "0A" for l in f.readlines()[1:])


def wait_listening(port, proc, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listening(port):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)  # (the next look at /proc/net/tcp: a bounded poll)
    return False


def tail(path, n=25):
    try:
        with open(path, errors="replace") as f:
            return "".join("      " + l for l in f.readlines()[-n:])
    except OSError as e:
        return f"      ({e})\n"


def stats(stats_dir, env, *flags):
    r = subprocess.run([USMC, "--stats-dir", stats_dir, "stats", "--json", *flags], env=env, capture_output=True,
                       text=True, timeout=30)
    try:
        return json.loads(r.stdout)
    except ValueError:
        print(f"    usmc stats failed (rc {r.returncode}): {r.stderr.strip()[-500:]}")
        return {}


def show(name, st):
    keys = ("server_accepts", "client_connects", "conn_smcd", "conn_tcp", "fallbacks", "handshake_errors",
            "hs_unexpected_events", "forks", "smcd_bytes_tx", "smcd_bytes_rx", "moved_to_tcp", "moved_bytes_lost")
    print(f"  info {name}: " + ", ".join(f"{k} {st[k]}" for k in keys if k in st)
          + f", fallback reasons {st.get('fallback_reasons') or '{}'}", flush=True)


class Case:
    """One sshd (extra arguments `sshd_args`) and the clients of one case."""

    def __init__(self, env, keys, name, sshd_args):
        self.env, self.keys, self.name, self.sshd_args = env, keys, name, sshd_args
        self.dir = os.path.join(env.dir, name)
        os.mkdir(self.dir)
        os.chmod(self.dir, 0o755)
        self.remote = os.path.join(self.dir, "remote")  # the "server side" files
        self.local = os.path.join(self.dir, "local")  # the "client side" files
        os.mkdir(self.remote)
        os.mkdir(self.local)
        # One stats directory per case, for sshd and its clients alike: a
        # client finds its listener's announcement there. sshd's account is
        # what live processes counted once every client has exited.
        self.stats_dir = os.path.join(self.dir, "stats")
        os.mkdir(self.stats_dir)
        os.chmod(self.stats_dir, 0o1777)  # (sshd's pre-authentication child runs as the sshd user)
        self.sshd_env = dict(env.env, USMC_STATS_DIR=self.stats_dir)
        self.ssh_env = self.sshd_env
        self.port = free_port()
        self.config = os.path.join(self.dir, "sshd_config")
        with open(self.config, "w") as f:
            f.write(SSHD_CONFIG.format(port=self.port, dir=keys, pidfile=os.path.join(self.dir, "sshd.pid"),
                                       sftp_server=SFTP_SERVER))
        self.log = os.path.join(self.dir, "sshd.log")
        self.sshd = None
        self.explained = False
        self.given_up = None  # why the rest of the case is not run
        self.connections = 0  # ssh connections made (each of scp's and sftp's too)

    # ------------------------------------------------------------ sshd

    def start_sshd(self):
        r = subprocess.run([SSHD, "-t", "-f", self.config], capture_output=True, text=True, timeout=30)
        if not check(r.returncode == 0, f"{self.name}: sshd -t accepts the config ({r.stderr.strip()[-300:]})"):
            return False
        cmd = [USMC_RUN, "--smcd", SSHD, "-D", "-e", "-f", self.config, *self.sshd_args]
        print(f"  info {self.name}: {' '.join(cmd)}", flush=True)
        with open(self.log, "w") as log:
            self.sshd = self.env.start(cmd, env=self.sshd_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        up = wait_listening(self.port, self.sshd)
        if not check(up, f"{self.name}: sshd under usmc-run listens on 127.0.0.1:{self.port} (pid {self.sshd.pid})"):
            print(tail(self.log))
        return up

    def stop_sshd(self):
        """sshd by its PID (usmc-run execs it: the PID we started), the
        PidFile's process if it runs our config, then any process of its
        tree that outlived it (per-connection children), each by PID."""
        master = self.sshd
        tree = {pid: proc_start(pid) for pid in _descendants([master.pid]) if pid != master.pid}
        alive_before = master.poll() is None
        try:
            with open(os.path.join(self.dir, "sshd.pid")) as f:
                pidfile = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pidfile = None
        if pidfile and pidfile != master.pid and self.config in cmdline(pidfile):
            try:
                os.kill(pidfile, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.env.stop(master, timeout=10)
        for pid, start in tree.items():
            if start and proc_start(pid) == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        left = [p for p, s in tree.items() if s and proc_start(p) == s]
        while left and time.monotonic() < deadline:  # (reaped by init: gone within a moment)
            time.sleep(0.05)
            left = [p for p, s in tree.items() if s and proc_start(p) == s]
        check(not left, f"{self.name}: sshd and its children are gone ({len(tree)} children were running"
                        f"{', left: ' + str(left) if left else ''})")
        return alive_before

    # ------------------------------------------------------------ clients

    def ssh_opts(self, port_flag="-p"):
        return ["-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
                "-i", os.path.join(self.keys, "client_ed25519"), port_flag, str(self.port)]

    def give_up(self, p):
        """A client past its time: where things wait is shown (once a case),
        then it and what it started (scp's and sftp's ssh) are killed by PID;
        what it wrote is returned."""
        if p.poll() is None and not self.explained:
            self.explained = True
            explain_hang([p.pid, self.sshd.pid], types.SimpleNamespace(stats_dir=self.stats_dir,
                                                                       env=self.sshd_env), [self.log])
        for pid in reversed(_descendants([p.pid])):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            return p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            return b"", b""

    def client(self, what, cmd, timeout=OP_S, input=None):
        """Runs `cmd` under usmc-run --smcd; bounded: at `timeout` it is
        explained (the first time in a case), it and its descendants are
        killed by PID, and the rest of the case is given up. Returns
        (rc, stdout bytes, stderr text), rc None when it did not run or
        timed out."""
        if self.given_up:
            return None, b"", f"not run: {self.given_up}"
        self.connections += 1  # (each makes one ssh connection: scp's and sftp's ssh too)
        full = [USMC_RUN, "--smcd", *cmd]
        t0 = time.monotonic()
        p = subprocess.Popen(full, env=self.ssh_env, stdin=subprocess.PIPE if input is not None else
                             subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = p.communicate(input=input, timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            out, err = self.give_up(p)
            rc = None
            err += f"\n(still running after {timeout} s: killed)".encode()
            self.given_up = f"{what} timed out after {timeout} s"
        took = time.monotonic() - t0
        err = err.decode(errors="replace")
        if rc is not None and rc != 0:
            self.given_up = f"{what} failed (rc {rc})"
        print(f"  info {self.name}: {what}: rc {rc}, {took:.2f} s", flush=True)
        if rc != 0:
            print(f"    stderr: {err.strip()[-1500:]}")
            print(f"    sshd log (tail):\n{tail(self.log)}", end="")
        return rc, out, err

    def ssh(self, what, remote_cmd, timeout=OP_S, input=None):
        return self.client(what, ["ssh", *self.ssh_opts(), "root@127.0.0.1", remote_cmd], timeout, input)

    def skipped_rest(self):
        if self.given_up:
            check(False, f"{self.name}: the rest of the case was not run ({self.given_up})")
            return True
        return False

    # ------------------------------------------------------------ the case

    def run(self, bulk, bulk_bytes, bulk_sha, small, small_sha):
        print(f"-- {self.name}: sshd {' '.join(self.sshd_args) or '(default: re-exec)'} under usmc-run --smcd, "
              f"ssh/scp/sftp under usmc-run --smcd{' (sshd on TCP by policy)' if POLICY_TCP else ''}", flush=True)
        t0 = time.monotonic()
        if not self.start_sshd():
            if self.sshd:
                self.stop_sshd()
            return
        try:
            self.sessions(bulk, bulk_bytes, bulk_sha, small, small_sha)
            self.account()
        finally:
            alive = self.stop_sshd()
        check(alive, f"{self.name}: the sshd listener ran through the whole case")
        print(f"  info {self.name}: took {time.monotonic() - t0:.1f} s", flush=True)

    def sessions(self, bulk, bulk_bytes, bulk_sha, small, small_sha):
        # Commands; the first one is the gate: a case where it hangs stops there.
        outs = []
        for i in range(1, COMMANDS + 1):
            rc, out, _ = self.ssh(f"ssh echo hi-{i}", f"echo hi-{i}", timeout=GATE_S if i == 1 else OP_S)
            outs.append((rc, out))
            if self.given_up:
                break
        good = sum(1 for i, (rc, out) in enumerate(outs, 1) if rc == 0 and out == f"hi-{i}\n".encode())
        check(good == COMMANDS, f"{self.name}: {COMMANDS} commands over ssh, each printed its hi-N ({good}/{COMMANDS}"
                                f"{'' if good == COMMANDS else ', first outputs ' + repr([o for _, o in outs[:3]])})")
        if self.skipped_rest():
            return

        # 32 MiB up through ssh's stdin, then down through its stdout.
        up = os.path.join(self.remote, "bulk-up.bin")
        rc, out, _ = self.ssh("ssh cat > FILE (32 MiB up)", f"cat > {up}", input=bulk_bytes)
        got = sha256_file(up) if os.path.exists(up) else "(no file)"
        check(rc == 0 and got == bulk_sha, f"{self.name}: 32 MiB up (ssh stdin -> cat > FILE): SHA-256 of the file "
                                           f"written {got[:16]}, of the data sent {bulk_sha[:16]} (rc {rc})")
        rc, out, _ = self.ssh("ssh sha256sum FILE", f"sha256sum {up}")
        remote_sum = out.decode(errors="replace").split()[:1]
        check(rc == 0 and remote_sum == [bulk_sha], f"{self.name}: sha256sum over ssh of the uploaded file: "
                                                    f"{remote_sum} (expected {bulk_sha[:16]}...)")
        rc, out, _ = self.ssh("ssh cat FILE (32 MiB down)", f"cat {bulk}")
        got = hashlib.sha256(out).hexdigest()
        check(rc == 0 and len(out) == BULK and got == bulk_sha,
              f"{self.name}: 32 MiB down (ssh cat FILE -> stdout): {len(out)} bytes, SHA-256 {got[:16]}, "
              f"expected {bulk_sha[:16]} (rc {rc})")
        if self.skipped_rest():
            return

        # scp up and down, SFTP protocol (OpenSSH 9's default) and legacy (-O).
        for proto, flags in (("sftp", []), ("legacy -O", ["-O"])):
            tag = "O" if flags else "s"
            dst = os.path.join(self.remote, f"scp-{tag}-up.bin")
            rc, _, _ = self.client(f"scp ({proto}) up", ["scp", *flags, "-q", *self.ssh_opts("-P"), small,
                                                         f"root@127.0.0.1:{dst}"])
            got = sha256_file(dst) if os.path.exists(dst) else "(no file)"
            check(rc == 0 and got == small_sha, f"{self.name}: scp ({proto}) up, 8 MiB: SHA-256 {got[:16]}, expected "
                                                f"{small_sha[:16]} (rc {rc})")
            back = os.path.join(self.local, f"scp-{tag}-down.bin")
            rc, _, _ = self.client(f"scp ({proto}) down", ["scp", *flags, "-q", *self.ssh_opts("-P"),
                                                           f"root@127.0.0.1:{small}", back])
            got = sha256_file(back) if os.path.exists(back) else "(no file)"
            check(rc == 0 and got == small_sha, f"{self.name}: scp ({proto}) down, 8 MiB: SHA-256 {got[:16]}, "
                                                f"expected {small_sha[:16]} (rc {rc})")
            if self.skipped_rest():
                return

        # sftp -b: a batch put and get over one connection.
        put_dst = os.path.join(self.remote, "sftp-up.bin")
        get_dst = os.path.join(self.local, "sftp-down.bin")
        batch = os.path.join(self.dir, "sftp.batch")
        with open(batch, "w") as f:
            f.write(f"put {small} {put_dst}\nget {small} {get_dst}\nls -l {put_dst}\nbye\n")
        rc, out, _ = self.client("sftp -b (put, get)", ["sftp", "-b", batch, *self.ssh_opts("-P"), "root@127.0.0.1"])
        for what, path in (("put", put_dst), ("get", get_dst)):
            got = sha256_file(path) if os.path.exists(path) else "(no file)"
            check(rc == 0 and got == small_sha, f"{self.name}: sftp -b {what}, 8 MiB: SHA-256 {got[:16]}, expected "
                                                f"{small_sha[:16]} (rc {rc})")
        if self.skipped_rest():
            return
        self.held_session()

    def held_session(self):
        """A session held open (remote `echo ready; cat`) while `usmc ss`
        lists its two ends; then a line through it and back."""
        if self.given_up:
            return
        self.connections += 1
        cmd = [USMC_RUN, "--smcd", "ssh", *self.ssh_opts(), "root@127.0.0.1", "echo ready; cat"]
        p = subprocess.Popen(cmd, env=self.ssh_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        buf, deadline = b"", time.monotonic() + OP_S
        while b"ready\n" not in buf and time.monotonic() < deadline and p.poll() is None:
            if select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                chunk = os.read(p.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
        ready = b"ready\n" in buf
        if ready:
            r = subprocess.run([USMC, "--stats-dir", self.stats_dir, "ss", "--json"], env=self.ssh_env,
                               capture_output=True, text=True, timeout=30)
            try:
                rows = ss_sockets(r.stdout)
            except (ValueError, KeyError):
                rows = []
            port = f":{self.port}"
            cli = [x for x in rows if x.get("program") == "ssh" and str(x.get("peer", "")).endswith(port)]
            srv = [x for x in rows if str(x.get("program", "")).startswith("sshd") and x.get("role") == "server"
                   and str(x.get("local", "")).endswith(port) and x.get("state") != "LISTEN"
                   and any(x.get("peer") == c.get("local") for c in cli)]
            def ends(xs):
                return [(x.get("pid"), x.get("program"), x.get("state"), x.get("mode"), x.get("fallback")) for x in xs]

            print(f"  info {self.name}: usmc ss, held session: ssh end {ends(cli)}; sshd end {ends(srv)}")
            # (sshd's end is shown, not asserted: a re-executed sshd holds it
            # as a descriptor inherited across exec, which usmc may not list)
            check(len(cli) == 1, f"{self.name}: usmc ss lists ssh's end of the held session ({len(cli)})")
            if len(cli) != 1 or not srv:
                print(f"    usmc ss --json: {r.stdout.strip()[-3000:]}")
        try:
            if not ready:
                raise subprocess.TimeoutExpired(cmd, OP_S)
            out, err = p.communicate(input=b"bye\n", timeout=OP_S)
        except subprocess.TimeoutExpired:
            out, err = self.give_up(p)
            self.given_up = "the held session did not echo its line"
        check(ready and p.returncode == 0 and buf + out == b"ready\nbye\n",
              f"{self.name}: a held session (echo ready; cat) echoed a line (rc {p.returncode}, "
              f"{(buf + out)[:60]!r}{', ' + err.decode(errors='replace').strip()[-300:] if p.returncode else ''})")
        self.skipped_rest()

    def account(self):
        """usmc's account. Every client has exited: the live processes of
        the stats directory are sshd's (its listener, any per-connection
        process not gone yet); the exited ones, the clients and sshd's
        per-connection processes."""
        deadline = time.monotonic() + 10
        while True:  # (an scp's or sftp's ssh may still be exiting: bounded wait for it)
            srv = stats(self.stats_dir, self.sshd_env, "--live")
            others = [(g.get("pid"), g.get("program")) for g in srv.get("gauges_by_process", [])
                      if not str(g.get("program", "")).startswith("sshd")]
            if not others or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        check(not others, f"{self.name}: every client has exited: the live processes are sshd's ({others})")
        every = stats(self.stats_dir, self.sshd_env)
        if not check(bool(srv) and bool(every), f"{self.name}: usmc stats --json reads the stats directory"):
            return
        show(f"{self.name} sshd (live)", srv)
        show(f"{self.name} all processes, exited ones too", every)
        reasons = srv.get("fallback_reasons") or {}
        check(srv.get("server_accepts") == self.connections,
              f"{self.name}: sshd's listener counted an accept for each of the {self.connections} ssh connections "
              f"({srv.get('server_accepts')})")
        if POLICY_TCP:
            # (validation of the test only: sshd kept on TCP by a [[policy]] rule)
            check(srv.get("conn_smcd", -1) == 0 and srv.get("conn_tcp", 0) > 0 and reasons.get("POLICY", 0) > 0,
                  f"{self.name}: [policy TCP] sshd's ends ran TCP by policy, none SMC-D (conn_tcp "
                  f"{srv.get('conn_tcp')}, conn_smcd {srv.get('conn_smcd')}, reasons {reasons})")
            return
        check(srv.get("conn_smcd", 0) > 0,
              f"{self.name}: sshd accepted ssh connections as SMC-D (conn_smcd {srv.get('conn_smcd')} of "
              f"{srv.get('server_accepts')} accepts; reasons {reasons or '{}'})")
        if self.name == "rexec":
            # A connection the re-executed sshd holds moves to TCP with its
            # peer. Counted by whichever process moved it (all processes:
            # the clients never cross an exec or a sandbox).
            moved = every.get("moved_to_tcp")
            check(moved is not None and moved > 0,
                  f"{self.name}: connections crossing sshd's re-exec were moved to TCP (moved_to_tcp "
                  f"{moved if moved is not None else 'missing: usmc stats has no such counter (an older build)'})")


with Env() as env:
    if not check(all(os.access(p, os.X_OK) for p in (SSHD, SFTP_SERVER, "/usr/bin/ssh", "/usr/bin/scp",
                                                   "/usr/bin/sftp", "/usr/bin/ssh-keygen")),
                 "OpenSSH is installed (openssh-server, openssh-client, openssh-sftp-server: "
                 "scripts/install-deps.sh)"):
        finish()
    t_all = time.monotonic()
    os.chmod(env.dir, 0o755)
    conf = ("log_level = \"info\"\n"
            "learn_smc = false\n"  # every connection tries SMC-D, however short
            "clc_detect_timeout_ms = 2000\n")  # a loaded machine's client may propose late
    if POLICY_TCP:
        conf += "\n[[policy]]\nprogram = \"sshd\"\nmode = \"tcp\"\n"
        print("  NOTE USMC_TEST_SSH_POLICY_TCP=1: sshd's sockets on plain TCP by a [[policy]] rule "
              "(validation of the test only)")
    os.chmod(env.config(conf), 0o644)

    keys = os.path.join(env.dir, "keys")
    os.mkdir(keys)
    for name in ("host_ed25519", "client_ed25519"):
        r = env.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"usmc-it-{name}", "-f",
                     os.path.join(keys, name)], timeout=30)
        check(r.returncode == 0, f"ssh-keygen {name} ({r.stderr.strip()[-200:]})")
    with open(os.path.join(keys, "client_ed25519.pub")) as src, open(os.path.join(keys, "authorized_keys"), "w") as d:
        d.write(src.read())

    made_privsep = not os.path.isdir(PRIVSEP_DIR)
    if made_privsep:
        os.makedirs(PRIVSEP_DIR, mode=0o755)
        os.chmod(PRIVSEP_DIR, 0o755)

    data = os.path.join(env.dir, "data")
    os.mkdir(data)
    bulk = os.path.join(data, "bulk.bin")
    small = os.path.join(data, "file.bin")
    bulk_sha = random_file(bulk, BULK)
    small_sha = random_file(small, FILE_SIZE)
    with open(bulk, "rb") as f:
        bulk_bytes = f.read()

    try:
        for name, args in (("rexec", []), ("norexec", ["-r"])):
            Case(env, keys, name, args).run(bulk, bulk_bytes, bulk_sha, small, small_sha)
    finally:
        if made_privsep:
            try:
                os.rmdir(PRIVSEP_DIR)
            except OSError:
                pass
    print(f"  info both cases took {time.monotonic() - t_all:.1f} s")
finish()
