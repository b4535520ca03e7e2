#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A listener that stops listening while its socket (and so its registry
entry) stays: `server` prints its port, then on a line from stdin shuts
its listener down (SHUT_RDWR: new connects are refused) and prints SHUT;
EOF ends it. `client PORT` connects 3 times nonblocking and 3 times
blocking, printing each outcome (client())."""
import errno
import select
import socket
import sys


def server():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    print(s.getsockname()[1], flush=True)
    sys.stdin.readline()
    s.shutdown(socket.SHUT_RDWR)
    print("SHUT", flush=True)
    sys.stdin.read()


def name(rc):
    return errno.errorcode.get(rc, str(rc))


def client(port):
    """Each outcome as the application sees it: a nonblocking connect's
    poll() events (POLLERR among them?), then a second connect() (which
    reports the error and takes it, as hiredis and Ruby check), then
    SO_ERROR (by then empty: 0); a blocking connect's error."""
    out = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        rc = c.connect_ex(("127.0.0.1", port))
        if rc == errno.EINPROGRESS:
            p = select.poll()
            p.register(c, select.POLLOUT)
            ev = p.poll(10000)
            err = "ERR" if ev and ev[0][1] & select.POLLERR else "noERR"
            again = c.connect_ex(("127.0.0.1", port))
            out.append(f"{err}/{name(again)}/{name(c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))}")
        else:
            out.append(name(rc))
        c.close()
    for _ in range(3):
        c = socket.socket()
        out.append(name(c.connect_ex(("127.0.0.1", port))))
        c.close()
    print(" ".join(out), flush=True)


if __name__ == "__main__":
    server() if sys.argv[1] == "server" else client(int(sys.argv[2]))
