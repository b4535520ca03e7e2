# SPDX-License-Identifier: MIT
"""Real programs from Debian set up for tests, demo and benchmarks: an nginx
serving a directory on a loopback port, a redis-server without persistence."""
import glob
import os
import pwd
import signal
import subprocess
import time

NGINX_CONF = """
worker_processes {workers};
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
worker_rlimit_nofile {nofile};
events {{ worker_connections {connections}; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 65;
    default_type application/octet-stream;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    {upstream}
    server {{
        listen 127.0.0.1:{port} backlog={backlog};
        root {dir}/www;
        location / {{ {location} }}
    }}
}}
"""

# nginx as a reverse proxy, configured as one usually is: HTTP/1.1 to the
# origin over a pool of kept-alive connections (without it nginx opens a new
# origin connection per request, HTTP/1.0).
NGINX_PROXY_UPSTREAM = "upstream origin {{ server 127.0.0.1:{origin}; keepalive 64; }}"
NGINX_PROXY_LOCATION = 'proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection "";'

HAPROXY_CONF = """
global
    maxconn {maxconn}
    {threads}
defaults
    mode {mode}
    timeout connect 10s
    timeout client 60s
    timeout server 60s
frontend fe
    bind 127.0.0.1:{port}
    default_backend origin
backend origin
    server origin 127.0.0.1:{origin}
"""


def make_nginx(dir, port, workers=2, connections=4096, backlog=511, nofile=8192, proxy_to=None):
    """Writes an nginx config and document root under `dir`; returns the
    command that runs nginx in the foreground. Workers run as nobody, so the
    tree is world-readable (and the stats dir must be world-writable). With
    `proxy_to` (a port), nginx is a reverse proxy to 127.0.0.1:proxy_to."""
    www = os.path.join(dir, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "index.html"), "w") as f:
        f.write("<html><body>usmc test page</body></html>\n")
    conf = os.path.join(dir, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(dir=dir, port=port, workers=workers, connections=connections,
                                  backlog=backlog, nofile=nofile,
                                  upstream=NGINX_PROXY_UPSTREAM.format(origin=proxy_to) if proxy_to else "",
                                  location=NGINX_PROXY_LOCATION if proxy_to else ""))
    for d, _, files in os.walk(dir):
        os.chmod(d, 0o755)
        for name in files:
            os.chmod(os.path.join(d, name), 0o644)
    return ["/usr/sbin/nginx", "-c", conf, "-p", dir, "-e", os.path.join(dir, "error.log")]


def make_haproxy(dir, port, origin, mode, maxconn=4096, threads=None):
    """Writes a haproxy config (`mode` tcp or http) forwarding 127.0.0.1:port
    to 127.0.0.1:origin; returns the command that runs it in the foreground
    (-db: no daemon, one process; `threads` threads, default one per CPU).
    It stops gracefully (exit 0) on SIGUSR1; SIGTERM kills it by the signal."""
    conf = os.path.join(dir, f"haproxy-{mode}.cfg")
    with open(conf, "w") as f:
        f.write(HAPROXY_CONF.format(port=port, origin=origin, mode=mode, maxconn=maxconn,
                                    threads=f"nbthread {threads}" if threads else ""))
    os.chmod(conf, 0o644)
    return ["/usr/sbin/haproxy", "-db", "-f", conf]


def redis_server_cmd(port):
    return ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"]


def parse_wrk(output):
    """Requests/sec, total requests and error counts from wrk's report."""
    r = {"rps": 0.0, "requests": 0, "errors": 0, "non2xx": 0}
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("Requests/sec:"):
            r["rps"] = float(line.split()[1])
        elif "requests in" in line:
            r["requests"] = int(line.split()[0])
        elif line.startswith("Socket errors:"):
            # Socket errors: connect 0, read 0, write 0, timeout 0
            r["errors"] = sum(int(part.split()[-1]) for part in line[len("Socket errors:"):].split(","))
        elif line.startswith("Non-2xx or 3xx responses:"):
            r["non2xx"] = int(line.split(":")[1])
    return r


def _pg_bin():
    # Debian installs each major version in its own directory: the newest.
    dirs = glob.glob("/usr/lib/postgresql/*/bin/postgres")
    return os.path.dirname(max(dirs, key=lambda p: int(p.split("/")[4]))) if dirs else "/usr/lib/postgresql/15/bin"


PG_BIN = _pg_bin()
PG_USER = "postgres"


def as_postgres(cmd):
    """PostgreSQL refuses to run as root: run `cmd` as the postgres user.
    setpriv execs (no child of its own), so the PID is the program's; the
    environment (USMC_STATS_DIR, ...) passes through."""
    return ["setpriv", f"--reuid={PG_USER}", f"--regid={PG_USER}", "--init-groups", "--", *cmd]


def prepare_cluster(dir):
    """A new database cluster in `dir`/pg, owned by postgres, trusting local
    connections; returns that directory (also the Unix socket's)."""
    pgdir = os.path.join(dir, "pg")
    os.mkdir(pgdir)
    pw = pwd.getpwnam(PG_USER)
    os.chown(pgdir, pw.pw_uid, pw.pw_gid)
    subprocess.run(as_postgres([f"{PG_BIN}/initdb", "-D", os.path.join(pgdir, "data"), "-U", PG_USER,
                                "--auth=trust", "--no-sync", "-E", "UTF8"]),
                   check=True, capture_output=True, timeout=120, cwd=pgdir)
    return pgdir


def postgres_cmd(pgdir, port, max_connections=100):
    """The postmaster in the foreground, TCP on 127.0.0.1:`port` only, its
    Unix socket in `pgdir`. Durability off: the tests and benchmarks are
    about the connections, not the disk."""
    return [f"{PG_BIN}/postgres", "-D", os.path.join(pgdir, "data"), "-c", "listen_addresses=127.0.0.1",
            "-c", f"port={port}", "-c", f"unix_socket_directories={pgdir}", "-c", "fsync=off",
            "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", f"max_connections={max_connections}",
            "-c", "logging_collector=off"]


def wait_postgres(pgdir, port, proc, timeout=30.0):
    """Waits until the postmaster accepts connections (asked over its Unix
    socket, so no TCP connection is counted)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        r = subprocess.run([f"{PG_BIN}/pg_isready", "-q", "-h", pgdir, "-p", str(port), "-U", PG_USER],
                           timeout=timeout)
        if r.returncode == 0:
            return True
        time.sleep(0.05)
    return False


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def stop_postgres(proc, timeout=30):
    """Fast shutdown (SIGINT) of the postmaster by its PID, then SIGKILL if it
    lingers. Returns the PIDs of its children before the shutdown (the
    postmaster waits for them, so they must be gone once it is)."""
    children = children_of(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return children
