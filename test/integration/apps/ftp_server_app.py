#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pyftpdlib's FTP server for the usmc integration tests (test_ftp.py):
serves --root to one user with every permission (read, write, delete) on
127.0.0.1 and on ::1, each on a free port, from one process (one I/O loop:
--loop epoll, pyftpdlib's default on Linux, or poll or select), passive and
active mode (PORT/EPRT: the server connects back to the client).
(pyftpdlib registers a socket with its loop before listen() or connect():
with epoll, usmc runs its active-mode connects as TCP, EPOLLEARLY.)
Prints "READY <ipv4 port> <ipv6 port>" (0 for a family it could not listen
on); stops on SIGTERM or after --seconds. Its log (every command and
transfer) goes to --log."""
import argparse
import logging
import signal
import sys

from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.handlers import FTPHandler
from pyftpdlib import ioloop as ioloops
from pyftpdlib.servers import FTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--user", default="usmc")
    ap.add_argument("--password", default="usmc")
    ap.add_argument("--log", default=None)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--no-ipv6", action="store_true")
    ap.add_argument("--loop", choices=("epoll", "poll", "select"), default="epoll",
                    help="pyftpdlib's I/O loop (epoll: its default on Linux)")
    args = ap.parse_args()

    logging.basicConfig(filename=args.log, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")

    authorizer = DummyAuthorizer()
    authorizer.add_user(args.user, args.password, args.root, perm="elradfmwMT")

    class Handler(FTPHandler):
        pass

    Handler.authorizer = authorizer
    Handler.banner = "usmc-test ftp ready"
    Handler.timeout = 60  # idle control connections
    Handler.permit_foreign_addresses = False  # PORT only to the client's own address

    ioloop = {"epoll": ioloops.Epoll, "poll": ioloops.Poll, "select": ioloops.Select}[args.loop]()
    servers = [FTPServer(("127.0.0.1", 0), Handler, ioloop=ioloop)]
    port6 = 0
    if not args.no_ipv6:
        try:
            servers.append(FTPServer(("::1", 0), Handler, ioloop=ioloop))
            port6 = servers[-1].address[1]
        except OSError as e:
            print(f"no IPv6 listener: {e}", file=sys.stderr, flush=True)

    def stop(*_):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    ioloop.call_later(args.seconds, stop)
    print("READY", servers[0].address[1], port6, flush=True)
    try:
        ioloop.loop()
    except (SystemExit, KeyboardInterrupt):
        pass
    finally:
        for s in servers:
            s.close_all()


if __name__ == "__main__":
    main()
