#!/usr/bin/env python3
"""A listener that stops listening while its socket (and so its registry
entry) stays: `server` prints its port, then on a line from stdin shuts
its listener down (SHUT_RDWR: new connects are refused) and prints SHUT;
EOF ends it. `client PORT` connects 3 times nonblocking (SO_ERROR after
the socket turns writable) and 3 times blocking, printing each outcome."""
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


def client(port):
    out = []
    for blocking in (False, True):
        for _ in range(3):
            c = socket.socket()
            c.setblocking(blocking)
            rc = c.connect_ex(("127.0.0.1", port))
            if rc == errno.EINPROGRESS:
                select.select([], [c], [], 10)
                rc = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            out.append(errno.errorcode.get(rc, str(rc)))
            c.close()
    print(" ".join(out), flush=True)


if __name__ == "__main__":
    server() if sys.argv[1] == "server" else client(int(sys.argv[2]))
