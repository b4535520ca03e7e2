#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Observing SMC-D from the outside: `usmc ss -d/-D` and `usmc stats` RX/TX
over one connection between two wrapped python3 processes whose every send
and recv call is known (apps/lockstep_app.py). Checks the cursors and
buffer sizes of both ends, that their GIDs and tokens mirror each other, the
JSON of both views, and byte and request counts exactly; then a message
larger than the ring, held until the ring is full, for the buffer-full
counters. Steps wait for the apps' announcements; every process is stopped
by PID."""
import json
import os
import subprocess
import time

from harness import APPS, PYTHON, USMC, Env, check, finish, read_ready, read_until, ss_sockets, tell

APP = os.path.join(APPS, "lockstep_app.py")
SIZES = [100, 10000, 40000, 100000]
BIG = 300000
RING = (128 << 10) - 64  # the DMB of rmem + wmem minus its control line (autotune_dmb off)
OLD_HEADER = ("PID      Program             Fd State        Local Address            "
              "Peer Address             Role    Mode  Fallback")


def usmc(env, *args):
    r = env.run([USMC, "--stats-dir", env.stats_dir, *args], timeout=30)
    if r.returncode != 0:
        print("    usmc", *args, "failed:", r.stderr)
    return r.stdout


def smcd_rows(env, *flags):
    rows = ss_sockets(usmc(env, "ss", "--json", *flags))
    return {r["pid"]: r for r in rows if r["mode"] == "SMCD"}


def cursor_bytes(c, ring):
    return c["wrap"] * ring + c["count"]


def bucket(n):
    names = ["8KB", "16KB", "32KB", "64KB", "128KB", "256KB", "512KB", "1024KB", ">1024KB"]
    return names[min(((n - 1) >> 13).bit_length(), 8)]


with Env() as env:
    # The ring size the cursors below wrap at: rmem + wmem, not autotuned.
    fixed = os.path.join(env.dir, "fixed.toml")
    with open(fixed, "w") as f:
        f.write("autotune_dmb = false\n")
    server = env.start(env.wrap([PYTHON, APP, "server", "--big", str(BIG)], "--config", fixed),
                       stdin=subprocess.PIPE)
    port = read_ready(server)
    client = env.start(env.wrap([PYTHON, APP, "client", "--port", str(port), "--big", str(BIG)], "--config", fixed),
                       stdin=subprocess.PIPE)
    total = sum(SIZES)
    check(int(read_until(client, "SENT")[1]) == total, f"client sent {total} bytes in {len(SIZES)} calls")
    check(int(read_until(server, "RECEIVED")[1]) == total, "server received them, one call each")

    # The default view is what it was.
    plain = usmc(env, "ss")
    check(plain.splitlines()[0] == OLD_HEADER, "usmc ss: default header unchanged")
    check(sum(" SMCD  -" in l for l in plain.splitlines()) == 2, "usmc ss: both ends SMCD, no reason")

    # -d: sizes and cursors of both ends, as JSON.
    d = smcd_rows(env, "-d")
    c, s = d.get(client.pid), d.get(server.pid)
    check(c is not None and s is not None, "usmc ss -d --json lists both ends")
    cd, sd = c["details"], s["details"]
    check(cd is not None and sd is not None, f"both ends have details ({cd}, {sd})")
    check(cd["rcvbuf"] == RING and cd["peerbuf"] == RING and sd["rcvbuf"] == RING,
          f"buffer sizes: our DMB ring and the peer's, {RING} bytes")
    check(cd["sndbuf"] is None, "no send buffer (the peer's DMB is it)")
    check(cursor_bytes(cd["tx_prod"], RING) == total and cursor_bytes(cd["tx_cons"], RING) == total,
          f"client: produced {total} into the server's DMB, all consumed ({cd['tx_prod']}, {cd['tx_cons']})")
    check(cursor_bytes(sd["rx_prod"], RING) == total and cursor_bytes(sd["rx_cons"], RING) == total,
          "server: the same bytes produced into its DMB and consumed")
    check(cd["tx_prod"] == sd["rx_prod"] and cd["tx_cons"] == sd["rx_cons"],
          "client's tx cursors are the server's rx cursors")
    check(cursor_bytes(cd["rx_prod"], RING) == len(SIZES) and cursor_bytes(sd["tx_prod"], RING) == len(SIZES),
          "the acks: one byte per message the other way")
    check(cd["shutdown"] == "<->" and sd["shutdown"] == "<->", "no shutdown yet on either end")
    check(cd["rx_consistent"] and cd["tx_consistent"] and sd["rx_consistent"] and sd["tx_consistent"],
          "cursors consistent")
    text = usmc(env, "ss", "-d")
    tx_text = f"{total // RING:04x}:{total % RING:08x}"
    check("rxprod-Cursor" in text.splitlines()[0] and any(
        str(client.pid) in l and tx_text in l for l in text.splitlines()),
        f"usmc ss -d shows the client's tx producer cursor as {tx_text}")

    # -D: GIDs and tokens mirror each other.
    D = smcd_rows(env, "-D")
    cs, ss = D[client.pid]["smcd"], D[server.pid]["smcd"]
    check(cs["peer_gid"] == ss["gid"] and ss["peer_gid"] == cs["gid"] and cs["gid"] != ss["gid"],
          f"GIDs: each end's peer GID is the other's GID ({cs['gid']}, {ss['gid']})")
    check(cs["peer_token"] == ss["token"] and ss["peer_token"] == cs["token"],
          f"tokens swapped ({cs['token']}, {ss['token']})")
    check(cs["peer_pid"] == server.pid and ss["peer_pid"] == client.pid, "each end found the other's process")
    check("details" not in D[client.pid], "-D alone adds no details")
    text = usmc(env, "ss", "-D")
    check("Peer-Token" in text.splitlines()[0] and cs["token"] in text and ss["token"] in text
          and len(text.splitlines()) == 3, "usmc ss -D: SMC-D rows only, tokens shown")

    # stats: exact bytes and requests, by the size each call asked for.
    st = json.loads(usmc(env, "stats", "--json"))
    rx, tx = st["rx"], st["tx"]
    want = {b: 0 for b in rx["reqs_by_size"]}
    for n in SIZES:
        want[bucket(n)] += 1
    want["8KB"] += len(SIZES)  # the acks, one byte each
    check(tx["bytes"] == total + len(SIZES) and rx["bytes"] == total + len(SIZES),
          f"stats: {total + len(SIZES)} bytes each way in total ({rx['bytes']}, {tx['bytes']})")
    check(st["smcd_bytes_tx"] == tx["bytes"], "existing key smcd_bytes_tx still there, the same")
    check(tx["reqs_by_size"] == want and rx["reqs_by_size"] == want,
          f"requests by size: {tx['reqs_by_size']}")
    check(tx["requests"] == 2 * len(SIZES) and rx["requests"] == 2 * len(SIZES)
          and tx["requests_no_data"] == 0 and rx["requests_no_data"] == 0,
          "total requests: one per call, none without data")
    check(rx["bufs_by_size"]["128KB"] == 2 and tx["bufs_by_size"]["128KB"] == 2,
          "buffers: two DMBs of 128 KiB, each mapped by the other end")
    check(rx["buffer_full"] == 0 and tx["buffer_full_remote"] == 0, "no buffer was full")
    text = usmc(env, "stats")
    check("RX Stats" in text and "TX Stats" in text and "Connections Summary" in text
          and "Buffer full (remote)" in text, "usmc stats shows RX and TX sections")

    # A message larger than the ring, held back until the ring is full.
    tell(client, "GO")
    read_until(client, "SENDING_BIG")
    full = False
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not full:
        row = smcd_rows(env, "-d").get(client.pid)
        det = row and row["details"]
        full = bool(det and det["tx_prod"] and det["tx_cons"] and
                    cursor_bytes(det["tx_prod"], RING) - cursor_bytes(det["tx_cons"], RING) == RING)
        if not full:
            time.sleep(0.02)
    check(full, "usmc ss -d shows the server's ring full (client's tx cursors a ring apart)")
    tell(server, "GO")
    check(int(read_until(server, "RECEIVED_BIG")[1]) == BIG, f"server read the {BIG} bytes")
    check(int(read_until(client, "SENT_BIG")[1]) == BIG, "client's sendall returned")
    st = json.loads(usmc(env, "stats", "--json"))
    rx, tx = st["rx"], st["tx"]
    check(tx["bytes"] == total + len(SIZES) + BIG and rx["bytes"] == tx["bytes"],
          f"stats: bytes exact after the big message ({tx['bytes']})")
    check(rx["buffer_full"] >= 1, f"RX buffer full counted ({rx['buffer_full']})")
    check(tx["buffer_full_remote"] >= 1, f"TX buffer full (remote) counted ({tx['buffer_full_remote']})")
    check(tx["buffer_too_small_remote"] >= 1,
          f"TX buffer too small (remote): a send larger than the ring ({tx['buffer_too_small_remote']})")
    check(tx["reqs_by_size"][bucket(BIG)] >= 1, f"the big send in the {bucket(BIG)} bucket")

    tell(client, "QUIT")
    tell(server, "QUIT")
    read_until(client, "DONE")
    read_until(server, "DONE")
    check(client.wait(timeout=15) == 0 and server.wait(timeout=15) == 0, "both apps exited cleanly")
    after = json.loads(usmc(env, "stats", "--json"))
    check(after["rx"] == rx and after["tx"] == tx and after["processes"] == 0,
          "RX/TX counters outlive the processes (retired totals)")
    check(not smcd_rows(env, "-d"), "no SMC-D rows once they are gone")

    # Accept, then fork: the child's fresh segment records the connection
    # again, and the parent's record is gone with its descriptor.
    server = env.start(env.wrap([PYTHON, APP, "server", "--fork", "--sizes", "500"]), stdin=subprocess.PIPE)
    port = read_ready(server)
    client = env.start(env.wrap([PYTHON, APP, "client", "--port", str(port), "--sizes", "500"]),
                       stdin=subprocess.PIPE)
    child = int(read_until(server, "CHILD")[1])
    read_until(server, "RECEIVED")
    read_until(client, "SENT")
    rows = smcd_rows(env, "-d", "-D")
    cr, kr = rows.get(client.pid), rows.get(child)
    check(kr is not None and server.pid not in rows, f"the forked child ({child}) holds the server end")
    check(kr is not None and kr["details"] is not None and cursor_bytes(kr["details"]["rx_prod"], RING) == 500,
          "the child's record: its rx producer cursor at 500")
    check(cr is not None and cr["smcd"]["peer_pid"] == child and kr["smcd"]["peer_pid"] == client.pid,
          "client and forked child find each other")
    tell(client, "QUIT")
    tell(server, "QUIT")
    check(client.wait(timeout=15) == 0 and server.wait(timeout=15) == 0, "fork case exited cleanly")

finish()
