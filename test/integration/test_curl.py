#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""curl under usmc-run fetches a 64 MiB file that nginx (under usmc-run)
sends with sendfile(); the bytes match the file and what plain curl gets."""
import hashlib
import os

from apps import make_nginx
from harness import Env, check, finish, free_port, wait_port

with Env() as env:
    os.chmod(env.stats_dir, 0o1777)
    port = free_port()
    cmd = make_nginx(env.dir, port, workers=1)
    big = os.path.join(env.dir, "www", "big.bin")
    with open(big, "wb") as f:
        f.write(os.urandom(64 << 20))
    os.chmod(big, 0o644)
    with open(big, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    nginx = env.start(env.wrap(cmd))
    check(wait_port(port), "nginx listens")
    url = f"http://127.0.0.1:{port}/big.bin"

    for label, wrap in [("under usmc-run", True), ("plain", False)]:
        out = os.path.join(env.dir, f"out-{label.replace(' ', '-')}.bin")
        c = ["curl", "-sS", "--fail", "--max-time", "60", "-o", out, "-D", out + ".headers", url]
        r = env.run(env.wrap(c) if wrap else c, timeout=90)
        with open(out, "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        check(r.returncode == 0 and got == want, f"curl {label}: 64 MiB, sha256 matches")
        with open(out + ".headers") as f:
            status = f.readline().strip()
        check(status.startswith("HTTP/1.1 200"), f"curl {label}: {status}")

    # Ranges and HEAD: the same answers with and without usmc.
    for extra in (["-r", "1000-1999"], ["-I"]):
        c = ["curl", "-sS", "--max-time", "20", *extra, url]
        wrapped = env.run(env.wrap(c), text=False).stdout
        plain = env.run(c, text=False).stdout
        if "-I" in extra:  # headers differ only in Date
            wrapped, plain = wrapped.split(b"Date:")[0], plain.split(b"Date:")[0]
        check(wrapped == plain and len(wrapped) > 0, f"curl {' '.join(extra)}: identical with and without usmc")
    with open(big, "rb") as f:
        f.seek(1000)
        part = f.read(1000)
    r = env.run(env.wrap(["curl", "-sS", "-r", "1000-1999", url]), text=False)
    check(r.stdout == part, "range request returns the right bytes")
    st = env.stats()
    check(st["client_connects"] == 4 and st["server_accepts"] >= 7,
          f"usmc saw the wrapped curls and every accept ({st['client_connects']}/{st['server_accepts']})")
finish()
