#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Server whose fork() fails: accepts one connection, echoes a byte, then
makes fork() fail for itself (a seccomp filter: clone without
CLONE_THREAD gets EAGAIN, clone3 ENOSYS so that threads still start
through clone) and calls os.fork(). Prints FORKFAIL <errno> (or FORKED if
the fork happened after all), then closes the connection on a line
'close' from stdin (prints CLOSED) and exits at the end of stdin.
x86_64 only (the filter names its system call numbers): prints SKIP
elsewhere."""
import ctypes
import os
import platform
import socket
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
AUDIT_ARCH_X86_64 = 0xC000003E
NR_FORK, NR_VFORK, NR_CLONE, NR_CLONE3 = 57, 58, 56, 435
CLONE_THREAD = 0x10000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EAGAIN, ENOSYS = 11, 38
# classic BPF opcodes
LD_W_ABS, JEQ_K, JSET_K, RET_K = 0x20, 0x15, 0x45, 0x06


def stmt(code, k):
    return struct.pack("HBBI", code, 0, 0, k)


def jump(code, k, jt, jf):
    return struct.pack("HBBI", code, jt, jf, k)


def fail_forks():
    return b"".join([
        stmt(LD_W_ABS, 4),                     # 0 arch
        jump(JEQ_K, AUDIT_ARCH_X86_64, 0, 8),  # 1 another: allow (10)
        stmt(LD_W_ABS, 0),                     # 2 nr
        jump(JEQ_K, NR_CLONE3, 7, 0),          # 3 clone3: ENOSYS (11)
        jump(JEQ_K, NR_FORK, 4, 0),            # 4 fork: EAGAIN (9)
        jump(JEQ_K, NR_VFORK, 3, 0),           # 5 vfork: EAGAIN (9)
        jump(JEQ_K, NR_CLONE, 0, 3),           # 6 anything else: allow (10)
        stmt(LD_W_ABS, 16),                    # 7 clone's flags (args[0], low word)
        jump(JSET_K, CLONE_THREAD, 1, 0),      # 8 a thread: allow (10)
        stmt(RET_K, RET_ERRNO | EAGAIN),       # 9 a process: EAGAIN
        stmt(RET_K, RET_ALLOW),                # 10
        stmt(RET_K, RET_ERRNO | ENOSYS),       # 11 (glibc then makes threads with clone)
    ])


def install(prog):
    n = len(prog) // 8
    buf = ctypes.create_string_buffer(prog, len(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(n, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def main():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    print(f"READY {srv.getsockname()[1]}", flush=True)
    conn, _ = srv.accept()
    conn.sendall(conn.recv(1))
    if platform.machine() != "x86_64":
        print("SKIP not x86_64", flush=True)
    else:
        install(fail_forks())
        try:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            print("FORKED", flush=True)
        except OSError as e:
            print(f"FORKFAIL {e.errno}", flush=True)
    for line in sys.stdin:
        if line.strip() == "close":
            conn.close()
            print("CLOSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
