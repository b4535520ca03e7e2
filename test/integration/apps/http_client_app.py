#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An HTTP/1.1 client for the proxy tests: THREADS threads make N requests
in all, round robin over the files of a manifest (JSON: path -> [size,
sha256]), with 'Connection: close' (a connection per request) or keep-alive
(one connection per thread). Checks every response's status, length and
body (sha256); prints 'DONE ok=.. bad=..' and the first few mismatches.
With --pause, once every thread has its first response it prints PAUSED
and waits for a line on stdin, its connections open (to be looked at)."""
import argparse
import hashlib
import http.client
import json
import sys
import threading


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--manifest", required=True)
    p.add_argument("-n", type=int, default=300)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--keepalive", action="store_true")
    p.add_argument("--timeout", type=float, default=20)
    p.add_argument("--pause", action="store_true")
    args = p.parse_args()
    with open(args.manifest) as f:
        files = sorted(json.load(f).items())
    lock = threading.Lock()
    ok, bad = [0], []
    first = threading.Barrier(args.threads + 1, timeout=60)
    resume = threading.Event()

    def worker(t):
        conn = None
        for i in range(t, args.n, args.threads):
            path, (size, digest) = files[i % len(files)]
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=args.timeout)
                headers = {} if args.keepalive else {"Connection": "close"}
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                good = resp.status == 200 and len(body) == size and hashlib.sha256(body).hexdigest() == digest
                why = f"{path}: status {resp.status}, {len(body)} bytes (want {size})"
                if not args.keepalive or resp.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                good, why = False, f"{path}: {type(e).__name__} {e}"
                if conn is not None:
                    conn.close()
                    conn = None
            with lock:
                if good:
                    ok[0] += 1
                else:
                    bad.append(why)
            if args.pause and i == t:
                first.wait()
                resume.wait(60)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(args.threads)]
    for t in threads:
        t.start()
    if args.pause:
        first.wait()
        print("PAUSED", flush=True)
        sys.stdin.readline()
        resume.set()
    for t in threads:
        t.join()
    print(f"DONE ok={ok[0]} bad={len(bad)}", *bad[:5], sep="\n", flush=True)
    sys.exit(0 if not bad and ok[0] == args.n else 1)


if __name__ == "__main__":
    main()
