#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ftplib client for the usmc integration tests (test_ftp.py).

For each round, each address family (--port4 on 127.0.0.1, --port6 on ::1)
and each mode (passive: PASV/EPSV, the client connects; active: PORT/EPRT,
the client listens and the server connects back, accepted only after the
server's reply on the control connection), one control connection that:
uploads (STOR) fresh random data of every --sizes size and compares the
file the server wrote into --root with it; downloads (RETR) every
"dl-<size>.bin" of --root and compares what arrived with the file on disk;
lists the directory (NLST, a data connection too).

Every comparison is byte for byte, and a difference is described: lengths
and SHA-256 of both, the first differing offset with the bytes there in hex, and where a CLC
eyecatcher (0xE2D4C3C4 "SMCD" / 0xE2D4C3D9 "SMCR" in EBCDIC) turns up in the
data. Every operation is bounded: socket timeouts (--timeout) and an alarm
(twice that) around it. A failed operation closes its control connection;
the next operation opens a new one. A mode whose operations failed
--give-up times is not tried any more: its remaining operations fail as
SKIPPED (a mode that hangs or crawls does not make the run last hours).

Prints one "OP round=R family=F mode=M op=O size=S ok|FAIL ..." line per
operation, then "SUMMARY mode=M family=F ok=N fail=K" per mode and family
and "TOTAL ok=N fail=K". Exit status 0 only when everything matched."""
import argparse
import ftplib
import hashlib
import io
import os
import signal
import sys
import time

EYECATCHERS = {b"\xe2\xd4\xc3\xc4": "SMCD", b"\xe2\xd4\xc3\xd9": "SMCR"}


def log(*args):
    print(*args, flush=True)


class OpTimeout(Exception):
    pass


def _alarm(*_):
    raise OpTimeout("operation took longer than its alarm")


def sha(data):
    return hashlib.sha256(data).hexdigest()


def describe_diff(expected, got):
    """Where `got` differs from `expected`, in words and hex."""
    parts = [f"expected {len(expected)} bytes sha256 {sha(expected)[:16]}, "
             f"got {len(got)} bytes sha256 {sha(got)[:16]}"]
    n = min(len(expected), len(got))
    first = None
    step = 4096
    for base in range(0, n, step):  # blocks first: 4 MiB byte by byte is slow
        end = min(base + step, n)
        if expected[base:end] != got[base:end]:
            first = next(i for i in range(base, end) if expected[i] != got[i])
            break
    if first is None and len(expected) != len(got):
        first = n
    if first is not None:
        lo = max(0, first - 8)
        parts.append(f"first difference at offset {first}: "
                     f"expected[{lo}:] {expected[lo:first + 24].hex(' ') or '(end)'} | "
                     f"got[{lo}:] {got[lo:first + 24].hex(' ') or '(end)'}")
    for eye, name in EYECATCHERS.items():
        at = got.find(eye)
        if at >= 0 and expected.find(eye) != at:
            parts.append(f"CLC eyecatcher {name} in the data at offset {at}: "
                         f"{got[at:at + 48].hex(' ')}")
    if got[:n] == expected[:n] and len(got) > len(expected):
        parts.append(f"{len(got) - len(expected)} extra bytes at the end: {got[n:n + 48].hex(' ')}")
    return "; ".join(parts)


class Session:
    """A control connection, opened when first needed and again after a
    failed operation."""

    def __init__(self, args, host, port, passive):
        self.args, self.host, self.port, self.passive = args, host, port, passive
        self.ftp = None

    def get(self):
        if self.ftp is None:
            ftp = ftplib.FTP(timeout=self.args.timeout)
            try:
                ftp.connect(self.host, self.port)
                ftp.login(self.args.user, self.args.password)
            except BaseException:
                ftp.close()
                raise
            ftp.set_pasv(self.passive)
            self.ftp = ftp
        return self.ftp

    def drop(self):
        if self.ftp is not None:
            try:
                self.ftp.close()
            except OSError:
                pass
            self.ftp = None

    def quit(self):
        if self.ftp is not None:
            try:
                self.ftp.quit()
            except Exception:
                pass
            self.drop()


def bounded(args, fn):
    """fn() under an alarm of twice the socket timeout."""
    signal.setitimer(signal.ITIMER_REAL, 2 * args.timeout)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def run_op(args, session, fn):
    """Runs one operation; returns (ok, detail)."""
    t0 = time.monotonic()
    try:
        ok, detail = bounded(args, lambda: fn(session.get()))
    except Exception as e:  # (a listing with CLC bytes in it fails to decode: ValueError)
        ok, detail = False, f"{type(e).__name__}: {e}"
    took = time.monotonic() - t0
    if not ok:
        session.drop()
    return ok, f"{detail} ({took:.3f} s)"


def upload(args, name, data):
    def fn(ftp):
        resp = ftp.storbinary(f"STOR {name}", io.BytesIO(data), blocksize=64 * 1024)
        with open(os.path.join(args.root, name), "rb") as f:
            got = f.read()
        if got != data:
            return False, f"{resp!r}; file on the server differs: {describe_diff(data, got)}"
        try:
            ftp.delete(name)
        except ftplib.Error:
            pass
        return True, resp
    return fn


def download(args, name):
    with open(os.path.join(args.root, name), "rb") as f:
        expected = f.read()

    def fn(ftp):
        chunks = []
        resp = ftp.retrbinary(f"RETR {name}", chunks.append, blocksize=64 * 1024)
        got = b"".join(chunks)
        if got != expected:
            return False, f"{resp!r}; received data differs: {describe_diff(expected, got)}"
        return True, resp
    return fn


def listing(names):
    def fn(ftp):
        got = ftp.nlst()
        missing = [n for n in names if n not in got and os.path.basename(n) not in
                   [os.path.basename(g) for g in got]]
        if missing:
            return False, f"NLST misses {missing}: {got!r}"
        return True, f"{len(got)} names"
    return fn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port4", type=int, default=0)
    ap.add_argument("--port6", type=int, default=0)
    ap.add_argument("--root", required=True)
    ap.add_argument("--user", default="usmc")
    ap.add_argument("--password", default="usmc")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="passive,active")
    ap.add_argument("--sizes", default="0,1,100000,4194304")
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--give-up", type=int, default=4,
                    help="a mode whose operations failed this often is not tried any more (bounds a failing run)")
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, _alarm)

    families = [(f, h, p) for f, h, p in (("ipv4", "127.0.0.1", args.port4), ("ipv6", "::1", args.port6)) if p]
    modes = args.modes.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    downloads = [f"dl-{s}.bin" for s in sizes]
    tally = {(m, f): [0, 0] for m in modes for f, _, _ in families}
    failures = {m: 0 for m in modes}
    for rnd in range(1, args.rounds + 1):
        for fam, host, port in families:
            for mode in modes:
                session = Session(args, host, port, passive=(mode == "passive"))
                ops = []
                for size in sizes:
                    name = f"up-r{rnd}-{fam}-{mode}-{size}.bin"
                    ops.append(("STOR", size, upload(args, name, os.urandom(size))))
                for size, name in zip(sizes, downloads):
                    ops.append(("RETR", size, download(args, name)))
                ops.append(("NLST", len(downloads), listing(downloads)))
                for op, size, fn in ops:
                    if failures[mode] >= args.give_up:
                        ok, detail = False, f"SKIPPED: {mode} mode gave up after {failures[mode]} failures"
                    else:
                        ok, detail = run_op(args, session, fn)
                        failures[mode] += not ok
                    tally[(mode, fam)][0 if ok else 1] += 1
                    log(f"OP round={rnd} family={fam} mode={mode} op={op} size={size} "
                        f"{'ok' if ok else 'FAIL'} {detail}")
                try:
                    bounded(args, session.quit)
                except OpTimeout:
                    pass
                session.drop()
    total = [0, 0]
    for (mode, fam), (ok, bad) in tally.items():
        log(f"SUMMARY mode={mode} family={fam} ok={ok} fail={bad}")
        total[0] += ok
        total[1] += bad
    log(f"TOTAL ok={total[0]} fail={total[1]}")
    sys.exit(0 if total[1] == 0 and total[0] > 0 else 1)


if __name__ == "__main__":
    main()
