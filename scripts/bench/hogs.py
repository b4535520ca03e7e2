# SPDX-License-Identifier: MIT
"""CPU-burning processes beside a benchmark (unpinned): the cores
oversubscribed, as on a busy machine. Stopped by PID when the block ends."""
import contextlib
import subprocess
import sys


@contextlib.contextmanager
def cpu_hogs(n, extra=()):
    """`n` busy loops, and each command of `extra` (argument lists), running
    for the duration of the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    procs += [subprocess.Popen(cmd) for cmd in extra]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
