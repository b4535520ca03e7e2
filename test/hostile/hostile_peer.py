#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A hostile SMC-D peer for usmc's tests (Python 3 standard library only).

It speaks usmc's side of SMC-D by hand, as a usmc client does (the formats
are engine/clc/clc.hpp, engine/smcd/cdc_line.hpp, engine/discovery/registry.hpp and the attach
messages of engine/smcd/ism_endpoint.cpp): it finds the listener's registry
entry, announces its connect in the listener's Pending memory (a sealed
memfd it asks the listener's endpoint for, with the entry's token),
sends a valid SMC-D Proposal, reads the Accept (the server's GID and DMB
token), attaches on the server's abstract Unix endpoint with its own sealed
memfd DMB, binds its wake-up socket to the name its Confirm token makes
(engine/readiness/wakeup.hpp), and sends the Confirm. Then it
misbehaves, in one of these modes:

  flip-flags      (no descriptor of the server's is shared any more, so
                  there are no file flags to flip) fill the queue of the
                  server's wake-up socket by name, ask it to wake us for
                  data and space, and keep its queue full while held
  forged-reuse    after one connection (a link group with the server), make
                  more whose Confirm names a DMB without attaching, as on a
                  link group, with names that must not check out: a wrong
                  owner token, a slot past the file, a GID with no group;
                  prints 'REFUSED <what>' for each the server reset
  garbage-cursors write impossible cursors and flags into both control lines
                  and wake the server
  owner-refs      write a large value into offset 40 of the server's DMB
                  control line (usmc's fork count until 2ccbe20, the urgent
                  mark since), then close (--count times)
  silent-after-proposal  --count connections that send a Proposal and never
                  answer anything (--unported of them announce no client port)
  late-half-clc   --count announced connections, silent until a line on
                  stdin (the server has handed them out as TCP by then),
                  then the 8-byte header of a Decline each, and nothing more
  flood-links     learn the GID from one Accept, then open --count links to
                  the endpoint and keep them idle
  plain-lookalike as a plain TCP client: --count connections whose first 8
                  bytes parse as a CLC Proposal header, then ordinary bytes;
                  checks the echo comes back byte for byte
  zero-pending      fetch the listener's Pending memory and zero all of it
                  over and over while holding
  truncate-pending  fetch the listener's Pending memory and try to truncate
                  it to 0 bytes (and any `*.pending` file in the stats dir)
  stray-wakeups   not a peer at all: one datagram to the wake-up socket of
                  each of --pid's connections (their names are in
                  /proc/net/unix); prints 'SENT <n>'
  bell-flood      not a peer at all: floods the epoll-set bells named by
                  --bell (hex ids, `usmc-b-<id>` in /proc/net/unix) with
                  datagrams of every kind a stranger can send: random 8-byte
                  tokens, the `sig` tokens given by --token (public too:
                  tokens the set holds), 8 zero bytes, 0, 1, 7, 9 and 512
                  bytes (the longer ones random, or starting with a known
                  token). Each bell's queue is kept full: a socket connected
                  to it sleeps in poll() until the owner drains some, then
                  refills it. Prints 'FLOODING <bells>' once every bell was
                  found full, floods until a line (or EOF) on stdin or --hold,
                  then prints 'FLOODED sent=<n> full=<n> ...' and 'CLOSED'
  move-lies       a move to TCP (kMovedOut in the consumer word of the
                  server's line, engine/sock/af_smc_move.cpp), by --variant:
                    cons  with a consumer cursor ahead of all the server produced
                    cons-behind  ... more than a ring behind it
                    prod  with a producer cursor a ring and more ahead of the
                          server's consumer cursor
                    good  a well-formed move: bytes of ours unread in the server's
                          ring, bytes of the server's we never consumed; then
                          checks that TCP carries exactly those, then an echo
                    flip  kMovedOut set and cleared over and over while sending
                          (rings and TCP)
                  prints one 'MOVE <variant> ...' line of what it saw, then holds

Modes that hold something print 'HELD <n>' and keep it until a line (or EOF)
arrives on stdin, or --hold seconds pass; they then close everything and
print 'CLOSED'. Every wait is bounded. Exit status 0 unless the peer itself
could not do what its mode needs (it prints 'ERROR <what>').
"""
import argparse
import fcntl
import mmap
import os
import resource
import select
import socket
import struct
import sys
import threading
import time

STATS_DIR = os.environ.get("USMC_STATS_DIR") or "/dev/shm"
TIMEOUT = 5.0  # every single exchange with the server

# --- CLC (engine/clc/clc.hpp) ------------------------------------------------------
EYE_R = bytes([0xE2, 0xD4, 0xC3, 0xD9])  # "SMCR" in EBCDIC
EYE_D = bytes([0xE2, 0xD4, 0xC3, 0xC4])  # "SMCD" in EBCDIC
PROPOSAL, ACCEPT, CONFIRM, DECLINE = 1, 2, 3, 4
TYPE_D, TYPE_N = 1, 2
CHID_EMULATED = 0xFFFF
PEERDECL_DIAG = 0x03030000  # a Decline's diagnosis: any reason code


def clc_header(eye, msg_type, length, version, typev2, typev1):
    return eye + struct.pack(">BHB", msg_type, length, version << 4 | (typev2 & 3) << 2 | (typev1 & 3))


def proposal(gid, named=None):
    """An SMC-Dv2 Proposal exactly as engine/handshake/connect.cpp sends it: no v1
    offer, one ISMv2 device (our GID, the emulated CHID), no UEIDs; `named`
    (serial, slot, size code, owner token): our DMB named in the SMC-Dv2
    extension's reserved bytes, as a client on a link group names it
    (engine/clc/clc.hpp, NamedDmb)."""
    body = bytearray(182)
    if named:
        struct.pack_into(">IBBxxQ", body, 152, *named)
    body[8:16] = struct.pack(">Q", gid)                    # peer id
    struct.pack_into(">HQHH", body, 38, 40, gid, CHID_EMULATED, 28)  # iparea off, ISM GID, CHID, v2 off
    body[81] = 1                                           # v2 ext: 0 UEIDs, 1 ISMv2 device
    body[83] = 1 << 4                                      # release 1, no SEID
    struct.pack_into(">H", body, 86, 32)                   # SMC-Dv2 extension offset
    struct.pack_into(">H", body, 106, 1)                   # feature mask: Emulated-ISM
    struct.pack_into(">QH", body, 168, gid, CHID_EMULATED)  # the ISMv2 GID list
    body[0:8] = clc_header(EYE_R, PROPOSAL, len(body), 2, TYPE_D, TYPE_N)
    body[-4:] = EYE_R
    return bytes(body)


def size_code(size):
    return (size // 16384).bit_length() - 1


def confirm(gid, token, dmb_size):
    """A Confirm after an attach: its first-contact bit says so (without it
    the server looks for our DMB in a link group, engine/smcd/link_group.hpp)."""
    body = bytearray(78)
    struct.pack_into(">QQ", body, 8, gid, token)
    body[25] = size_code(dmb_size) << 4
    struct.pack_into(">H", body, 32, CHID_EMULATED)
    body[0:8] = clc_header(EYE_D, CONFIRM, len(body), 2, 0b10, TYPE_D)
    body[-4:] = EYE_D
    return bytes(body)


def decline(gid):
    body = bytearray(44)
    struct.pack_into(">QI", body, 8, gid, PEERDECL_DIAG)
    body[20] = 2 << 4  # Linux
    body[0:8] = clc_header(EYE_R, DECLINE, len(body), 2, 0, 0)
    body[-4:] = EYE_R
    return bytes(body)


def random64():
    """A random nonzero 64-bit value (GIDs, tokens)."""
    return int.from_bytes(os.urandom(8), "little") | 1


def recv_exact(sock, n, timeout=TIMEOUT):
    sock.settimeout(timeout)
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            raise ConnectionError(f"EOF after {len(got)} of {n} bytes")
        got += chunk
    return bytes(got)


def read_clc(sock):
    head = recv_exact(sock, 8)
    if head[:4] not in (EYE_R, EYE_D):
        raise ConnectionError(f"not a CLC message: {head.hex()}")
    (length,) = struct.unpack_from(">H", head, 5)
    return head + recv_exact(sock, length - 8)


class Declined(ConnectionError):
    def __init__(self, diagnosis):
        super().__init__(f"declined, diagnosis {diagnosis:#010x}")


def parse_accept(msg):
    """(GID, DMB token, DMB size) of an SMC-D Accept."""
    if msg[4] == DECLINE:
        raise Declined(struct.unpack_from(">I", msg, 16)[0])
    if msg[4] != ACCEPT:
        raise ConnectionError(f"expected an Accept, got CLC type {msg[4]} ({msg.hex()})")
    gid, token = struct.unpack_from(">QQ", msg, 8)
    return gid, token, 16384 << (msg[25] >> 4)


# --- the registry (engine/discovery/registry.hpp) -----------------------------------------
# magic version pid withdrawn start_time gid flags reserved congested_until_ns pending_token
ENTRY = struct.Struct("=IIiIQQIIQQ")
ENTRY_MAGIC = 0x55534D4C
PENDING_SIZE = 24 + 8 * 2048  # connects, deadline_ns, unported, ports[2048]
PENDING_TTL_MS = 6000


def netns_id():
    return os.stat("/proc/self/ns/net").st_ino


def find_entry(host, port):
    """The listener's registry entry (exact address first, then the
    wildcard), as a usmc client looks it up: (path, gid, pending token)."""
    for ip in (host, "0.0.0.0"):
        path = os.path.join(STATS_DIR, f"usmc-listen.{netns_id()}.{ip}.{port}")
        try:
            with open(path, "rb") as f:
                magic, _, _, withdrawn, _, gid, _, _, _, token = ENTRY.unpack(f.read(ENTRY.size))
        except (OSError, struct.error):
            continue
        if magic == ENTRY_MAGIC and not withdrawn:
            return path, gid, token
    raise ConnectionError(f"no registry entry for {host}:{port} in {STATS_DIR}")


def fetch_pending(host, port):
    """The listener's Pending memfd, asked of its endpoint as a client does."""
    _, gid, token = find_entry(host, port)
    with link(gid) as s:
        s.sendall(REQUEST.pack(SHARE_MAGIC, 0, token, 0, 0, 0, 0))
        msg, fds, _, _ = socket.recv_fds(s, REPLY.size, 1)
    magic, status, size, _, _, _ = REPLY.unpack(msg)
    if magic != SHARE_MAGIC or status != 0 or len(fds) != 1 or size != PENDING_SIZE:
        for fd in fds:
            os.close(fd)
        raise ConnectionError(f"no Pending memory from the endpoint (status {status})")
    return fds[0]


class Pending:
    """The listener's Pending memory, announced in as a client does: a count
    before connect(), the client port right after it, both taken back at the
    end. (Plain read-modify-write: this peer does not care about races.)"""

    def __init__(self, host, port):
        self.fd = fetch_pending(host, port)
        self.map = mmap.mmap(self.fd, PENDING_SIZE)

    def _add(self, off, delta):
        (v,) = struct.unpack_from("=Q", self.map, off)
        struct.pack_into("=Q", self.map, off, max(0, v + delta))

    def begin(self):
        self._add(0, 1)
        self._add(16, 1)
        struct.pack_into("=Q", self.map, 8, time.monotonic_ns() + PENDING_TTL_MS * 1_000_000)

    def slot(self, port, want):
        for i in range(8):
            off = 24 + 8 * ((port + i) % 2048)
            (v,) = struct.unpack_from("=Q", self.map, off)
            if want(v):
                return off
        return None

    def port(self, port):
        now_ms = time.monotonic_ns() // 1_000_000
        off = self.slot(port, lambda v: v == 0 or v >> 48 == port or v & (1 << 48) - 1 <= now_ms)
        if off is not None:
            struct.pack_into("=Q", self.map, off, port << 48 | now_ms + PENDING_TTL_MS)
            self._add(16, -1)

    def end(self, port):
        off = self.slot(port, lambda v: v >> 48 == port)
        if off is not None:
            struct.pack_into("=Q", self.map, off, 0)
        else:  # never placed: still counted as unported
            self._add(16, -1)
        self._add(0, -1)

    def close(self):
        self.map.close()
        os.close(self.fd)


# --- DMBs and the control line (engine/smcd/cdc_line.hpp, engine/smcd/ism.cpp) ----------------
CDC_TYPE = 0xFE
CTRL = 64
PROD, CONS, WAITING, OWNER_REFS = 8, 16, 32, 40  # OWNER_REFS: where usmc kept its fork count (2ccbe20)
CONN_CLOSED = 0x40
MOVED_OUT, MOVED_TOOK = 0x08, 0x04  # usmc's move to TCP (engine/core/close_state.hpp)
WAIT_DATA = 1  # (offset 32: wake me when data arrives)
# (offset 32 too: an epoll set kept in user memory waits for data; its
# bell's id is in the word's top 48 bits, and the wake-up is a datagram to
# the bell carrying the waiter's token, engine/smcd/wait_flags.hpp)
WAIT_DATA_BELL, BELL_SHIFT = 8, 16
CURSOR_MASK = (1 << 48) - 1


class Dmb:
    """A DMB mapping: ours (a new sealed memfd) or the server's (its fd; a
    slot at `offset` of a segment)."""

    def __init__(self, size, fd=None, offset=0):
        if fd is None:
            fd = os.memfd_create("hostile-dmb", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.fd, self.size = fd, size
        self.map = mmap.mmap(fd, size, offset=offset)
        if self.map[0] == 0:
            self.map[0] = CDC_TYPE

    def get(self, off):
        return struct.unpack_from("=Q", self.map, off)[0]

    def put(self, off, value):
        struct.pack_into("=Q", self.map, off, value & (1 << 64) - 1)

    def close(self):
        self.map.close()
        os.close(self.fd)


def cursor(wrap, count):
    return wrap | count << 16


def sig_name(token):
    """The abstract name of the wake-up socket of the side that announced
    `token` in CLC (engine/readiness/wakeup.cpp)."""
    return f"\0usmc-s-{token:016x}".encode()


def bell_name(bell):
    """The abstract name of an epoll set's bell (engine/readiness/wakeup.cpp)."""
    return f"\0usmc-b-{bell:016x}".encode()


def ring_bell(waker, ours, server_token):
    """As a usmc writer does: the server's epoll set, if it named its bell
    in our line (the request taken here), gets the server side's token there."""
    waiting = ours.get(WAITING)
    if waiting & WAIT_DATA_BELL:
        ours.put(WAITING, waiting & ((1 << BELL_SHIFT) - 1) & ~WAIT_DATA_BELL)
        try:
            waker.sendto(struct.pack("=Q", server_token), socket.MSG_DONTWAIT,
                         bell_name(waiting >> BELL_SHIFT))
        except OSError:
            pass


def wakeup_socket(token):
    """A wake-up socket as usmc makes it: a datagram socket bound to the
    name its token makes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setblocking(False)
    s.bind(sig_name(token))
    return s


# --- the attach (engine/smcd/ism_endpoint.cpp, engine/smcd/lgr.cpp) -----------------------
ATTACH_MAGIC = 0x55534D41  # "USMA"
SHARE_MAGIC = 0x55534D53  # "USMS": the memory a process shares under a token
REQUEST = struct.Struct("=IIQIIII")  # magic, dmb_size, token, dmb_offset, file_size, serial, 0
REPLY = struct.Struct("=IiIIII")  # magic, status, dmb_size, dmb_offset, file_size, serial


def endpoint_address(gid):
    return f"\0usmc-ism.{netns_id()}.{gid:016x}".encode()


def link(gid):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(TIMEOUT)
    s.connect(endpoint_address(gid))
    return s


def announced_connect(host, port, pending, with_port=True):
    """A TCP connection to the listener, announced as a usmc client
    announces it (without that, a Proposal that is not there yet when the
    server accepts is never waited for). Without its port it looks like a
    client between connect() and the port's announcement."""
    pending.begin()
    s = socket.create_connection((host, port), timeout=TIMEOUT)
    if with_port:
        pending.port(s.getsockname()[1])
    return s


class Session:
    """One SMC-D connection to the server, made the way a usmc client makes
    it; afterwards every descriptor and mapping is the caller's to abuse."""

    def __init__(self, host, port, gid=None, serial=0, slots=1, key_from_token=False,
                 before_confirm=None):
        self.gid = gid or random64()
        self.pending = Pending(host, port)
        self.tcp = announced_connect(host, port, self.pending)
        self.tcp.sendall(proposal(self.gid))
        msg = read_clc(self.tcp)
        server_gid, token, size = parse_accept(msg)
        # The endpoint's offer is keyed by the Accept's secret (the EID's
        # first 8 bytes, engine/clc/clc.hpp dmb_secret), not by its token.
        (key,) = struct.unpack_from(">Q", msg, 34)
        if key_from_token:  # what anyone can read: the server's `sig` name
            key = token
        self.ours = Dmb(size * slots)  # our DMB is its first slot
        self.size = size
        our_token = random64()
        self.sig_token = our_token  # public: its name is in /proc/net/unix
        self.sig = wakeup_socket(our_token)
        self.server_sig_name = sig_name(token)
        self.server_token = token
        self.waker = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.waker.setblocking(False)
        self.link = link(server_gid)
        socket.send_fds(self.link, [REQUEST.pack(ATTACH_MAGIC, size, key, 0, size * slots, serial, 0)],
                        [self.ours.fd])
        msg, fds, _, _ = socket.recv_fds(self.link, REPLY.size, 8)
        magic, status, their_size, their_offset, _, _ = REPLY.unpack(msg)
        if magic != ATTACH_MAGIC or status != 0 or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise ConnectionError(f"attach refused: status {status}, {len(fds)} descriptors")
        self.theirs = Dmb(their_size, fds[0], their_offset)  # a slot of a segment
        self.server_gid = server_gid
        if before_confirm:
            before_confirm(token)
        self.tcp.sendall(confirm(self.gid, our_token, size))
        self.pending.end(self.tcp.getsockname()[1])  # the handshake is over, as for a client

    def wait_accepted(self, timeout=TIMEOUT):
        """Until the server's application has the connection: 4 bytes put
        into its ring come back from its echo into ours."""
        ping = b"ping"
        self.theirs.map[CTRL:CTRL + len(ping)] = ping
        self.theirs.put(PROD, len(ping) << 16)  # wrap 0, count 4
        self.wake_server()
        deadline = time.monotonic() + timeout
        while (self.ours.get(PROD) >> 16) & 0xFFFFFFFF < len(ping):
            if time.monotonic() > deadline:
                raise ConnectionError("the server did not echo on the connection")
            time.sleep(0.005)
        if bytes(self.ours.map[CTRL:CTRL + len(ping)]) != ping:
            raise ConnectionError("the server's echo is not what was sent")
        self.theirs.put(CONS, len(ping) << 16)  # consumed it

    def wake_server(self, what=b"\1"):
        ring_bell(self.waker, self.ours, self.server_token)
        try:
            self.waker.sendto(what, socket.MSG_DONTWAIT, self.server_sig_name)
            return True
        except BlockingIOError:
            return False  # a full queue: the server is woken already
        except (ConnectionRefusedError, FileNotFoundError):
            return False  # the server closed its side already (it saw our flag)

    def close(self, flag_closed=True):
        if flag_closed:  # as a usmc client's close: the flag, then a wake-up
            self.theirs.put(CONS, self.theirs.get(CONS) | CONN_CLOSED << 56)
            self.wake_server()
        self.pending.close()
        for sock in (self.sig, self.waker):
            sock.close()
        self.ours.close()
        self.theirs.close()
        self.link.close()
        self.tcp.close()


def hold(args, what, n):
    """Keeps what was made until stdin has a line (or EOF) or --hold passes."""
    print(f"HELD {n} {what}", flush=True)
    select.select([sys.stdin], [], [], args.hold)
    print("CLOSED", flush=True)


# --- the modes ------------------------------------------------------------------

def flip_flags(args):
    s = Session(args.host, args.port)
    s.wait_accepted()
    # Ask the server to wake us for data and for space: every write and
    # read of its sends us something.
    s.theirs.put(WAITING, 3)
    # The queue of the server's wake-up socket full: every wake-up it sends
    # itself, and ours, finds it full.
    for _ in range(10000):
        if not s.wake_server(b"\0" * 512):
            break
    hold(args, "connection with the server's wake-up socket full", 1)
    s.close()


def confirm_named(gid, token, dmb_size, serial, slot, secret):
    """A Confirm with no attach behind it (first-contact bit clear): it
    names our DMB as slot `slot` of our segment `serial`, as a connection
    on a link group does (engine/smcd/link_group.hpp), with the slot's owner
    token `secret` in the EID's first bytes (engine/clc/clc.hpp, dmb_secret)."""
    body = bytearray(confirm(gid, token, dmb_size))
    body[7] &= ~(0b10 << 2) & 0xFF
    body[24] = slot
    struct.pack_into(">I", body, 28, serial)
    struct.pack_into(">Q", body, 34, secret)
    return bytes(body)


def reset_by_server(sock, timeout=TIMEOUT):
    """Whether the server ends the connection (EOF or a reset) within
    `timeout`; anything it sends first is skipped."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def took_named(msg):
    """Whether an Accept took the DMB our Proposal named (byte 26)."""
    return msg[4] == ACCEPT and bool(msg[26] & 1)


def echo_on_named(tcp, first, accept, serial, slot, token=None):
    """A connection on the link group the way a usmc client makes it, to
    show that the names the forged ones imitate are believed when they
    check out: our DMB is slot `slot` of our segment, the server's the slot
    its Accept names in the segment the first contact gave us; 4 bytes go
    through shared memory and come back."""
    server_token, size, link_id, idx = accept
    theirs = Dmb(size, os.dup(first.theirs.fd), idx * size)
    ours = Dmb(size, os.dup(first.ours.fd), slot * size)
    named_in_proposal = token is not None  # and taken with the Accept: no Confirm
    if not named_in_proposal:
        token, secret = random64(), random64()
        ours.put(24, token)  # our `sig`, and the owner token, before the name goes out
        ours.put(56, secret)
    sig = wakeup_socket(token)
    if not named_in_proposal:
        tcp.sendall(confirm_named(first.gid, token, size, serial, slot, secret))
    ping = b"ping"
    theirs.map[CTRL:CTRL + len(ping)] = ping
    theirs.put(PROD, len(ping) << 16)
    try:
        first.waker.sendto(b"\1", socket.MSG_DONTWAIT, sig_name(server_token))
    except OSError:
        pass
    deadline = time.monotonic() + TIMEOUT
    while (ours.get(PROD) >> 16) & 0xFFFFFFFF < len(ping) and time.monotonic() < deadline:
        ring_bell(first.waker, ours, server_token)  # (the server may arm after our write)
        time.sleep(0.005)
    echoed = bytes(ours.map[CTRL:CTRL + len(ping)]) == ping
    theirs.put(CONS, theirs.get(CONS) | CONN_CLOSED << 56)
    for x in (theirs, ours, sig):
        x.close()
    return echoed


def forged_reuse(args):
    serial = 0x5EED
    # An attach by the server's `sig` token (its abstract name is public in
    # /proc/net/unix), not by the Accept's secret: refused.
    try:
        Session(args.host, args.port, key_from_token=True).close()
        print("ATTACHED attach-by-sig-token", flush=True)
    except (ConnectionError, OSError) as e:
        print(f"REFUSED attach-by-sig-token ({e})", flush=True)
    # The first connection: a first contact, whose attach says our DMB is
    # slot 0 of our segment `serial` (a file of three slots: ours alone).
    first = Session(args.host, args.port, serial=serial, slots=3)
    first.wait_accepted()
    right = random64()
    first.ours.put(24, first.sig_token)
    first.ours.put(56, right)  # the owner token the server reads in our slot
    # (The `sig`'s token is no secret: any local process reads its name in
    # /proc/net/unix. A name that gives it for the owner token is refused.)
    cases = (("wrong-token", first.gid, right ^ 1, 0),
             ("sig-token", first.gid, first.sig_token, 0),
             ("slot-past-the-file", first.gid, right, 9),
             ("no-group", random64(), right, 0))
    for what, gid, secret, slot in cases:
        pending = Pending(args.host, args.port)
        tcp = announced_connect(args.host, args.port, pending)
        tcp.sendall(proposal(gid))
        try:
            _, _, size = parse_accept(read_clc(tcp))
        except Declined as e:
            print(f"DECLINED {what} {e}", flush=True)
            tcp.close()
            pending.close()
            continue
        tcp.sendall(confirm_named(gid, random64(), size, serial, slot, secret))
        pending.end(tcp.getsockname()[1])
        print(f"{'REFUSED' if reset_by_server(tcp) else 'BELIEVED'} {what}", flush=True)
        tcp.close()
        pending.close()
    # The same names in the Proposal: a server takes only a DMB whose name
    # checks out (and says so in its Accept); these it leaves, and the
    # handshake goes on to a Confirm (here: our Decline).
    for what, secret, slot in (("named-wrong-token", right ^ 1, 0),
                               ("named-sig-token", first.sig_token, 0),
                               ("named-slot-past-the-file", right, 9)):
        pending = Pending(args.host, args.port)
        tcp = announced_connect(args.host, args.port, pending)
        tcp.sendall(proposal(first.gid, (serial, slot, size_code(first.size), secret)))
        msg = read_clc(tcp)
        untouched = first.ours.get(56) == right
        print(f"{'TAKEN' if took_named(msg) or not untouched else 'LEFT'} {what}", flush=True)
        if msg[4] == ACCEPT:
            tcp.sendall(decline(first.gid))
        pending.end(tcp.getsockname()[1])
        tcp.close()
        pending.close()
    # And names that check out: slot 2 of our segment named in the Proposal
    # (taken with the Accept: no Confirm), then slot 1 in a Confirm.
    pending = Pending(args.host, args.port)
    tcp = announced_connect(args.host, args.port, pending)
    token, secret = random64(), random64()
    slot2 = Dmb(first.size, os.dup(first.ours.fd), 2 * first.size)
    slot2.put(24, token)  # our `sig`: whom the server wakes
    slot2.put(56, secret)
    tcp.sendall(proposal(first.gid, (serial, 2, size_code(first.size), secret)))
    msg = read_clc(tcp)
    if took_named(msg):
        swapped = slot2.get(56) == secret ^ (1 << 63)  # the server's take (cdc_line.hpp)
        (link_id,) = struct.unpack_from(">I", msg, 28)
        _, server_token, size = parse_accept(msg)
        ok = swapped and echo_on_named(tcp, first, (server_token, size, link_id, msg[24]), serial, 2,
                                       token)
        print(f"{'ECHOED' if ok else 'SILENT'} named-right", flush=True)
    else:
        print(f"LEFT named-right ({msg.hex()})", flush=True)
    slot2.close()
    pending.end(tcp.getsockname()[1])
    tcp.close()
    pending.close()
    # Slot 1 again, now named in a Confirm.
    pending = Pending(args.host, args.port)
    tcp = announced_connect(args.host, args.port, pending)
    tcp.sendall(proposal(first.gid))
    msg = read_clc(tcp)
    _, server_token, size = parse_accept(msg)
    named = not (msg[7] >> 2) & 0b10  # first-contact bit clear: the Accept names the slot
    (link_id,) = struct.unpack_from(">I", msg, 28)
    if named and link_id:
        ok = echo_on_named(tcp, first, (server_token, size, link_id, msg[24]), serial, 1)
        print(f"{'ECHOED' if ok else 'SILENT'} right-names", flush=True)
    else:
        print("ATTACH-ASKED right-names", flush=True)
    pending.end(tcp.getsockname()[1])
    tcp.close()
    pending.close()
    first.close()
    print("DONE", flush=True)


def garbage_cursors(args):
    s = Session(args.host, args.port)
    s.wait_accepted()
    ring = s.theirs.size - CTRL
    impossible = cursor(0xBEEF, ring + 12345)
    s.theirs.put(PROD, impossible)
    s.theirs.put(CONS, impossible | 0xFF << 48 | 0xFF << 56)
    s.theirs.put(WAITING, ~0)
    s.ours.put(WAITING, ~0)
    s.ours.put(PROD, impossible)
    s.wake_server()
    hold(args, "connection with impossible cursors", 1)
    s.close(flag_closed=False)


def owner_refs(args):
    for i in range(args.count):
        try:
            s = Session(args.host, args.port)
        except Declined as e:
            print(f"CONN {i} {e}", flush=True)
            continue
        s.wait_accepted()
        s.theirs.put(OWNER_REFS, 1 << 40)
        s.close()
        print(f"CONN {i} owner_refs written, closed", flush=True)
    print(f"DONE {args.count}", flush=True)


def silent_after_proposal(args):
    pending = Pending(args.host, args.port)
    socks = []
    for i in range(args.count):
        s = announced_connect(args.host, args.port, pending, with_port=i >= args.unported)
        s.sendall(proposal(random64()))
        socks.append(s)
    hold(args, "connections silent after their Proposal", len(socks))
    for s in socks:
        pending.end(s.getsockname()[1])
        s.close()
    pending.close()


def late_half_clc(args):
    """--count announced connections that send nothing until the server has
    handed them to its application as plain TCP (it still skips a Proposal
    that comes late on them): a line on stdin says when. Then each sends
    the first 8 bytes of a Decline (a CLC header claiming more) and nothing
    more, and holds."""
    pending = Pending(args.host, args.port)
    socks = [announced_connect(args.host, args.port, pending) for _ in range(args.count)]
    print(f"CONNECTED {len(socks)}", flush=True)
    sys.stdin.readline()
    for s in socks:
        s.sendall(decline(random64())[:8])  # (a Proposal's would be declined at once)
    hold(args, "connections with half a CLC frame, handed out as TCP", len(socks))
    for s in socks:
        pending.end(s.getsockname()[1])
        s.close()
    pending.close()


def flood_links(args):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    pending = Pending(args.host, args.port)
    gid = random64()
    with announced_connect(args.host, args.port, pending) as s:
        s.sendall(proposal(gid))
        server_gid, _, _ = parse_accept(read_clc(s))
        s.sendall(decline(gid))
        pending.end(s.getsockname()[1])
    pending.close()
    links = []
    stuck_since = time.monotonic()
    while len(links) < args.count and time.monotonic() - stuck_since < 2:
        try:
            links.append(link(server_gid))
            stuck_since = time.monotonic()
        except (BlockingIOError, TimeoutError):
            time.sleep(0.01)  # the endpoint's backlog is full: it does not accept
        except OSError as e:
            print(f"link {len(links)}: {e!r}", file=sys.stderr, flush=True)
            break
    hold(args, "idle links to the server's endpoint", len(links))
    for s in links:
        s.close()


def lookalike_header(i):
    """8 bytes a CLC header parser takes for a Proposal: eyecatcher, type 1,
    a plausible length, version 2 with an SMC-D offer."""
    eye = (EYE_R, EYE_D)[i % 2]
    length = (44, 64, 182, 512, 1000)[i % 5]
    return clc_header(eye, PROPOSAL, length, 2, TYPE_D, TYPE_N)


def plain_lookalike(args):
    """All connections first, each sending at once ('SENT <n>'), then the
    echoes. Whether the server sees the bytes when it accepts is a race
    (a test can stop the server until SENT to decide it)."""
    conns = []
    for i in range(args.count):
        data = lookalike_header(i) + f" ordinary payload {i} ".encode() * 80
        s = socket.create_connection((args.host, args.port), timeout=TIMEOUT)
        s.sendall(data)
        conns.append((s, data))
    print(f"SENT {len(conns)}", flush=True)
    bad = 0
    for i, (s, data) in enumerate(conns):
        got = bytearray()
        try:
            while len(got) < len(data):
                chunk = s.recv(len(data) - len(got))
                if not chunk:
                    break
                got += chunk
        except OSError as e:
            print(f"  conn {i}: {e!r}", flush=True)
        s.close()
        ok = got == data
        bad += not ok
        print(f"LOOKALIKE {i} {'ok' if ok else 'bad'} got {len(got)} of {len(data)} bytes, "
              f"starts {bytes(got[:12]).hex()} (sent {data[:12].hex()})", flush=True)
    print(f"DONE ok={args.count - bad} bad={bad}", flush=True)


def truncate_pending(args):
    """Everything another user can try: the shared memory itself, and any
    `.pending` file in the stats directory (the world-writable one of 2ccbe20)."""
    done = []
    try:
        fd = fetch_pending(args.host, args.port)
    except (OSError, ConnectionError) as e:
        done.append(f"NOMEMFD ({e})")
        fd = None
    if fd is not None:
        try:
            os.ftruncate(fd, 0)
            done.append("TRUNCATED memfd")
        except OSError as e:
            done.append(f"REFUSED memfd ({e.strerror})")
        finally:
            os.close(fd)
    for name in sorted(os.listdir(STATS_DIR)):
        if name.endswith(".pending"):
            try:
                os.truncate(os.path.join(STATS_DIR, name), 0)
                done.append(f"TRUNCATED {name}")
            except OSError as e:
                done.append(f"REFUSED {name} ({e.strerror})")
    print(" ".join(done), flush=True)


def zero_pending(args):
    """Another user's attack on the listener's announcements: its Pending
    memory zeroed again and again while it holds (a victim's count, port
    and deadline gone between its connect() and the server's accept(),
    which then took the connection for plain TCP, its Proposal for data)."""
    fd = fetch_pending(args.host, args.port)
    m = mmap.mmap(fd, PENDING_SIZE)
    zeros = bytes(PENDING_SIZE)
    stop = threading.Event()
    rounds = [0]

    def zero():
        while not stop.is_set():
            m[:] = zeros
            rounds[0] += 1

    t = threading.Thread(target=zero, daemon=True)
    t.start()
    hold(args, "Pending memory, zeroed over and over", 1)
    stop.set()
    t.join(timeout=5)
    print(f"ZEROED {rounds[0]}", flush=True)


def sig_names(pid):
    """The abstract names of the wake-up sockets (`sig`, one per SMC-D
    connection) that process `pid` holds, from its socket inodes and
    /proc/net/unix."""
    return unix_names(pid, "usmc-s-")


def unix_names(pid, prefix):
    """The abstract names starting with `prefix` (without the NUL) of the
    Unix sockets process `pid` holds, from its socket inodes and
    /proc/net/unix: `usmc-s-` its `sig`s, `usmc-b-` its bells."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    names = []
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 8 and int(parts[6]) in inodes and parts[7].startswith("@" + prefix):
                names.append(b"\0" + parts[7][1:].encode())
    return names


def stray_wakeups(args):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sent = 0
    for name in sig_names(args.pid):
        try:
            s.sendto(b"x", name)
            sent += 1
        except OSError:
            pass
    s.close()
    print(f"SENT {sent}", flush=True)


def flood_datagrams(known):
    """An endless cycle of (kind, datagram) a stranger sends a bell: every
    other one a token the set holds (when --token gave some), the rest of
    every other kind in turn. A `known_*` kind is a known token with bytes
    after it (a bell reads the first 8 bytes of each datagram)."""
    kinds = [("random", 8), ("zero_token", 0), ("size0", 0), ("size1", 1), ("size7", 7),
             ("size9", 9), ("size512", 512)]
    if known:
        kinds += [("known_size9", 1), ("known_size512", 504)]
    i = 0
    while True:
        token = struct.pack("=Q", known[i % len(known)]) if known else b""
        if known:
            yield "known", token
        kind, n = kinds[i % len(kinds)]
        if kind == "zero_token":
            yield kind, bytes(8)
        elif kind.startswith("known_"):
            yield kind, token + os.urandom(n)
        else:
            yield kind, os.urandom(n)
        i += 1


def bell_flood(args):
    known = [int(t, 16) for t in args.token]
    socks = {}
    for b in args.bell:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.connect(bell_name(int(b, 16)))  # (any sender may: a bell is unconnected)
        socks[s.fileno()] = s
    stop = threading.Event()

    def watch_stdin():
        select.select([sys.stdin], [], [], args.hold)
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    poller = select.poll()
    for fd in socks:
        poller.register(fd, select.POLLOUT)
    counts = {}
    sent = full = errors = wakes = 0
    found_full = set()
    announced = False
    datagrams = flood_datagrams(known)
    deadline = time.monotonic() + args.hold
    while not stop.is_set() and time.monotonic() < deadline and socks:
        # Writable: the bell's queue has room again (the owner drained it).
        for fd, ev in poller.poll(50):
            wakes += 1
            s = socks[fd]
            for _ in range(256):  # (a queue holds net.unix.max_dgram_qlen + 1)
                kind, data = next(datagrams)
                try:
                    s.send(data)
                except BlockingIOError:
                    full += 1
                    found_full.add(fd)
                    break
                except OSError:  # the bell is gone
                    errors += 1
                    poller.unregister(fd)
                    del socks[fd]
                    s.close()
                    break
                sent += 1
                counts[kind] = counts.get(kind, 0) + 1
        if not announced and socks and found_full >= set(socks):
            print(f"FLOODING {len(socks)}", flush=True)
            announced = True
    for s in socks.values():
        s.close()
    kinds = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    print(f"FLOODED sent={sent} full={full} wakes={wakes} errors={errors} {kinds}", flush=True)
    print("CLOSED", flush=True)


def unpack_cursor(word):
    """(wrap, count) of a cursor in the low 48 bits of a word."""
    return word & 0xFFFF, (word >> 16) & 0xFFFFFFFF


def distance(older, newer, size):
    """core::distance (engine/core/cursor.cpp): bytes from `older` to
    `newer`, or None when `newer` is behind or more than a ring ahead."""
    (ow, oc), (nw, nc) = older, newer
    if oc >= size or nc >= size:
        return None
    if nw == ow:
        return nc - oc if nc >= oc else None
    if nw == (ow + 1) & 0xFFFF:
        return size - oc + nc if nc <= oc else None
    return None


def advance(cur, n, size):
    wrap, count = cur
    count += n
    return ((wrap + 1) & 0xFFFF, count - size) if count >= size else (wrap, count)


def pattern(tag, n):
    """n bytes that say where they come from."""
    unit = f"<{tag}>".encode()
    return (unit * (n // len(unit) + 1))[:n]


class Rings:
    """A Session's data path, as a usmc client runs it (engine/conn/rx.cpp,
    engine/conn/tx.cpp): we produce into the server's ring (our producer cursor
    in its line), it produces into ours (its producer cursor in our line)
    and reads our consumer cursor in its line, with our flags in its top
    byte."""

    def __init__(self, s):
        self.s = s
        self.in_ring = s.theirs.size - CTRL  # the server's ring: we write there
        self.out_ring = s.size - CTRL        # ours: the server writes here

    def flags(self):
        """Our connection flags, as the server reads them."""
        return self.s.theirs.get(CONS) >> 56

    def set_flags(self, flags):
        word = self.s.theirs.get(CONS)
        self.s.theirs.put(CONS, word & ~(0xFF << 56) | (flags & 0xFF) << 56)

    def server_flags(self):
        """The server's connection flags, in our line."""
        return self.s.ours.get(CONS) >> 56

    def consumed(self):
        return unpack_cursor(self.s.theirs.get(CONS))

    def produced_by_server(self):
        return unpack_cursor(self.s.ours.get(PROD))

    def unread(self):
        """Bytes the server produced that we have not consumed (None: its
        cursor is impossible)."""
        return distance(self.consumed(), self.produced_by_server(), self.out_ring)

    def write(self, data):
        """Into the server's ring if it has room (its consumer cursor is in
        our line): the bytes, then our producer cursor. No wake-up."""
        prod = unpack_cursor(self.s.theirs.get(PROD))
        used = distance(unpack_cursor(self.s.ours.get(CONS)), prod, self.in_ring)
        if used is None or self.in_ring - used < len(data):
            return False
        at = prod[1]
        first = min(len(data), self.in_ring - at)
        self.s.theirs.map[CTRL + at:CTRL + at + first] = data[:first]
        self.s.theirs.map[CTRL:CTRL + len(data) - first] = data[first:]
        self.s.theirs.put(PROD, cursor(*advance(prod, len(data), self.in_ring)))
        return True

    def peek(self, n):
        """The next n bytes the server produced for us, unconsumed."""
        at = self.consumed()[1]
        first = min(n, self.out_ring - at)
        return bytes(self.s.ours.map[CTRL + at:CTRL + at + first]) + \
            bytes(self.s.ours.map[CTRL:CTRL + n - first])

    def consume(self):
        """Everything the server produced: read, and our consumer cursor
        moved past it (our flags kept). Returns the bytes."""
        n = self.unread() or 0
        data = self.peek(n)
        cons = advance(self.consumed(), n, self.out_ring)
        self.s.theirs.put(CONS, cursor(*cons) | self.flags() << 56)
        return data

    def wait_unread(self, n, timeout=TIMEOUT):
        """Until the server has produced n bytes we have not consumed: our
        request for data in its line, then its wake-up on our `sig` (as a
        usmc reader sleeps). False if it did not within `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            if (self.unread() or 0) >= n:
                return True
            self.s.theirs.put(WAITING, WAIT_DATA)
            if (self.unread() or 0) >= n:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # (Capped: a wake-up the server sent before our request landed.)
            if select.select([self.s.sig], [], [], min(left, 0.2))[0]:
                try:
                    while self.s.sig.recv(64):
                        pass
                except BlockingIOError:
                    pass


def tcp_fate(tcp, sent, timeout=TIMEOUT):
    """After a lie: what the server does with the TCP connection we send
    `sent` on. ECHO (it runs it as TCP: `sent` came back, with the bytes
    before it), EOF or RESET (it ended it), SILENT (neither, in `timeout`)."""
    got = bytearray()
    tcp.settimeout(timeout)
    try:
        tcp.sendall(sent)
    except (BrokenPipeError, ConnectionResetError):
        return "RESET", got
    deadline = time.monotonic() + timeout
    while sent not in got:
        left = deadline - time.monotonic()
        if left <= 0:
            return "SILENT", got
        tcp.settimeout(left)
        try:
            chunk = tcp.recv(65536)
        except ConnectionResetError:
            return "RESET", got
        except socket.timeout:
            return "SILENT", got
        if not chunk:
            return "EOF", got
        got += chunk
    return "ECHO", got


def move_lie(s, rings, what):
    """After a lie in our line with kMovedOut: wake the server, send on
    TCP, and say what it did."""
    s.wake_server()
    fate, got = tcp_fate(s.tcp, pattern(f"after the {what} lie", 200))
    print(f"MOVE {what} fate={fate} tcp_bytes={len(got)} server_flags={rings.server_flags():#04x}",
          flush=True)


def move_cons(s, rings):
    """Our consumer cursor 5000 bytes ahead of what the server produced
    (same wrap, inside the ring), with kMovedOut."""
    wrap, count = rings.produced_by_server()
    lie = (wrap, count + 5000)
    s.theirs.put(CONS, cursor(*lie) | MOVED_OUT << 56)
    move_lie(s, rings, "cons")


def move_cons_behind(s, rings):
    """Our consumer cursor a ring and 100 bytes behind what the server
    produced (two wraps back), with kMovedOut."""
    wrap, count = rings.produced_by_server()
    lie = ((wrap - 2) & 0xFFFF, count + 100)
    s.theirs.put(CONS, cursor(*lie) | MOVED_OUT << 56)
    move_lie(s, rings, "cons-behind")


def move_prod(s, rings):
    """Our producer cursor a ring and 100 bytes ahead of the server's
    consumer cursor, with kMovedOut and a consumer cursor that is right."""
    theirs_cons = unpack_cursor(s.ours.get(CONS))
    wrap, count = theirs_cons
    s.theirs.put(PROD, cursor((wrap + 1) & 0xFFFF, count + 100))
    s.theirs.put(CONS, cursor(*rings.consumed()) | MOVED_OUT << 56)
    move_lie(s, rings, "prod")


def move_good(s, rings):
    """A move as a usmc client makes it (move_out): bytes the server
    echoed that we never consumed (A: its resend), our last bytes B in its
    ring unread, then our exact consumer cursor with kMovedOut and a
    wake-up. TCP must carry A then B (B's echo, read from its ring or its
    stash), then echo C, all exactly."""
    a, b, c = pattern("A unread by the peer", 3000), pattern("B unread by the server", 1000), \
        pattern("C over TCP", 500)
    ok_a = rings.write(a)
    s.wake_server()
    if not ok_a or not rings.wait_unread(len(a)):
        raise ConnectionError(f"the server did not echo A in its ring (unread {rings.unread()})")
    if rings.peek(len(a)) != a:
        raise ConnectionError("the server's echo of A is not A")
    ok_b = rings.write(b)  # our last bytes; no wake-up of their own
    rings.set_flags(rings.flags() | MOVED_OUT)  # the consumer cursor: as it stands, before A
    s.wake_server()
    resend = bytearray()
    s.tcp.settimeout(TIMEOUT)
    try:
        resend += recv_exact(s.tcp, len(a) + len(b))
    except (ConnectionError, OSError) as e:
        print(f"MOVE good resend=failed ({e!r}) ring_b={ok_b} server_flags={rings.server_flags():#04x}",
              flush=True)
        return
    resent = "exact" if resend == a + b else f"WRONG(starts {bytes(resend[:24])!r})"
    took = bool(rings.server_flags() & MOVED_TOOK)
    try:
        s.tcp.sendall(c)
        echo = "exact" if recv_exact(s.tcp, len(c)) == c else "WRONG"
    except (ConnectionError, OSError) as e:
        echo = f"failed({e!r})"
    print(f"MOVE good resend={resent} bytes={len(resend)} took={int(took)} tcp_echo={echo} "
          f"server_flags={rings.server_flags():#04x}", flush=True)


def move_flip(s, rings, rounds=400, seconds=3.0):
    """kMovedOut set, a wake-up, 16 bytes on TCP, kMovedOut cleared, a
    wake-up, `rounds` times (at most `seconds`), with 64 bytes into the
    server's ring each round while it has room and its echoes consumed."""
    s.tcp.setblocking(False)
    ring_sent = ring_back = tcp_sent = tcp_back = n = 0
    tcp_end = "-"
    took_at = None
    deadline = time.monotonic() + seconds
    while n < rounds and time.monotonic() < deadline:
        if rings.write(pattern(f"ring {n}", 64)):
            ring_sent += 64
        rings.set_flags(rings.flags() | MOVED_OUT)
        s.wake_server()
        if tcp_end == "-":
            try:
                tcp_sent += s.tcp.send(pattern(f"tcp {n}", 16))
            except BlockingIOError:
                pass
            except OSError as e:
                tcp_end = type(e).__name__
        rings.set_flags(rings.flags() & ~MOVED_OUT)
        s.wake_server()
        if rings.unread() is not None:
            ring_back += len(rings.consume())
        while tcp_end == "-":
            try:
                chunk = s.tcp.recv(65536)
            except BlockingIOError:
                break
            except OSError as e:
                tcp_end = type(e).__name__
                break
            if not chunk:
                tcp_end = "EOF"
                break
            tcp_back += len(chunk)
        if took_at is None and rings.server_flags() & MOVED_TOOK:
            took_at = n
        n += 1
    s.tcp.settimeout(TIMEOUT)
    print(f"MOVE flip rounds={n} took_at={took_at} ring_sent={ring_sent} ring_back={ring_back} "
          f"tcp_sent={tcp_sent} tcp_back={tcp_back} tcp_end={tcp_end} "
          f"server_flags={rings.server_flags():#04x} our_flags={rings.flags():#04x}", flush=True)


MOVE_VARIANTS = {"cons": move_cons, "cons-behind": move_cons_behind, "prod": move_prod,
                 "good": move_good, "flip": move_flip}


def move_lies(args):
    s = Session(args.host, args.port)
    s.wait_accepted()
    rings = Rings(s)
    MOVE_VARIANTS[args.variant](s, rings)
    hold(args, f"connection after a move to TCP ({args.variant})", 1)
    # A peer that moved says nothing more in the rings: its TCP close ends
    # it (one that is still SMC-D after the flips says so in its line too).
    s.close(flag_closed=not rings.server_flags() & MOVED_TOOK)


def squat_sig(args):
    """Binds the server side's `sig` name (its token came in the Accept)
    before the Confirm: the server makes its `sig` only when a wait first
    needs one, and then finds the name taken. `--expect stay`: the server
    never needs one (an epoll set kept in user memory), and the rings echo.
    `--expect move`: its first wait needs one (poll), so it moves the
    connection to TCP with us (kMovedOut, before it read anything), and TCP
    echoes. Either way byte for byte."""
    squatters = []

    def squat(token):
        q = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        q.bind(sig_name(token))
        squatters.append(q)

    s = Session(args.host, args.port, before_confirm=squat)
    rings = Rings(s)
    data = pattern("squatted", 2000)
    if args.expect == "move":
        deadline = time.monotonic() + 30
        while not rings.server_flags() & MOVED_OUT and time.monotonic() < deadline:
            time.sleep(0.005)  # polling the server's flag, bounded by the deadline
        moved = bool(rings.server_flags() & MOVED_OUT)
        if moved:
            s.tcp.settimeout(TIMEOUT)
            s.tcp.sendall(data)
            echo = "exact" if recv_exact(s.tcp, len(data)) == data else "WRONG"
        else:
            echo = "none"
    else:
        ok = rings.write(data)
        s.wake_server()
        echo = "exact" if ok and rings.wait_unread(len(data)) and rings.consume() == data else "WRONG"
        moved = bool(rings.server_flags() & MOVED_OUT)
    print(f"SQUAT moved={int(moved)} echo={echo}", flush=True)
    hold(args, "squatted connection", 1)
    s.close(flag_closed=not moved)
    for q in squatters:
        q.close()


MODES = {
    "squat-sig": squat_sig,
    "flip-flags": flip_flags,
    "garbage-cursors": garbage_cursors,
    "owner-refs": owner_refs,
    "forged-reuse": forged_reuse,
    "silent-after-proposal": silent_after_proposal,
    "flood-links": flood_links,
    "plain-lookalike": plain_lookalike,
    "truncate-pending": truncate_pending,
    "late-half-clc": late_half_clc,
    "zero-pending": zero_pending,
    "stray-wakeups": stray_wakeups,
    "bell-flood": bell_flood,
    "move-lies": move_lies,
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=MODES)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--unported", type=int, default=0,
                   help="silent-after-proposal: how many connections announce no port")
    p.add_argument("--hold", type=float, default=60, help="longest time to hold (s)")
    p.add_argument("--pid", type=int, default=0, help="stray-wakeups: whose connections")
    p.add_argument("--bell", action="append", default=[],
                   help="bell-flood: a bell's id (hex), once per bell")
    p.add_argument("--token", action="append", default=[],
                   help="bell-flood: a `sig` token (hex) the bells' sets hold")
    p.add_argument("--expect", choices=("stay", "move"), default="stay",
                   help="squat-sig: whether the server's first wait needs a `sig`")
    p.add_argument("--variant", choices=MOVE_VARIANTS, default="good",
                   help="move-lies: which lie (see above)")
    args = p.parse_args()
    try:
        return MODES[args.mode](args) or 0
    except (OSError, ConnectionError) as e:
        print(f"ERROR {args.mode}: {e!r}", flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
