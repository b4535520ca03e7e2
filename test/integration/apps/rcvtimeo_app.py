#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A blocking server with a receive timeout: prints READY and its port,
accepts one connection (ACCEPTED), sets SO_RCVTIMEO to --timeout-ms on it,
then for each line on stdin makes one blocking recv() and prints what it
gave, as the application sees it: `RECV EAGAIN ms=N`, `RECV n=N HEX ms=N`
or `RECV ERROR name ms=N`. EOF ends it."""
import argparse
import errno
import socket
import struct
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout-ms", type=int, default=300)
    args = ap.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    print(f"READY {s.getsockname()[1]}", flush=True)
    c, _ = s.accept()
    sec, ms = divmod(args.timeout_ms, 1000)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", sec, ms * 1000))
    print("ACCEPTED", flush=True)
    for _ in sys.stdin:
        start = time.monotonic()
        try:
            data = c.recv(64)
            what = f"n={len(data)} {data.hex() or '-'}"
        except BlockingIOError:  # EAGAIN: the receive timeout ran out
            what = "EAGAIN"
        except OSError as e:
            what = f"ERROR {errno.errorcode.get(e.errno, e.errno)}"
        print(f"RECV {what} ms={int((time.monotonic() - start) * 1000)}", flush=True)
    c.close()
    s.close()


if __name__ == "__main__":
    main()
