"""Real programs from Debian set up for tests, demo and benchmarks: an nginx
serving a directory on a loopback port, a redis-server without persistence."""
import os
import subprocess

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
    server {{
        listen 127.0.0.1:{port} backlog={backlog};
        root {dir}/www;
        location / {{ }}
    }}
}}
"""


def make_nginx(dir, port, workers=2, connections=4096, backlog=511, nofile=8192):
    """Writes an nginx config and document root under `dir`; returns the
    command that runs nginx in the foreground. Workers run as nobody, so the
    tree is world-readable (and the stats dir must be world-writable)."""
    www = os.path.join(dir, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "index.html"), "w") as f:
        f.write("<html><body>usmc test page</body></html>\n")
    conf = os.path.join(dir, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(dir=dir, port=port, workers=workers, connections=connections,
                                  backlog=backlog, nofile=nofile))
    for d, _, files in os.walk(dir):
        os.chmod(d, 0o755)
        for name in files:
            os.chmod(os.path.join(d, name), 0o644)
    return ["/usr/sbin/nginx", "-c", conf, "-p", dir, "-e", os.path.join(dir, "error.log")]


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
