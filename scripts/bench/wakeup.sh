#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What a readiness object costs (docs/DESIGN-NOTES.md, "Readiness: the
# candidates, measured"): wake-up round trip and CPU through a socket
# pair, a loopback TCP socket and an eventfd; and how promptly a loopback TCP
# socket filled to be unwritable becomes writable again, per receive buffer.
# Usage: scripts/bench/wakeup.sh [turns]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
bin=build/bin/usmc-bench-wakeup
for i in 1 2 3; do "$bin" wake "${1:-200000}"; done
for rcvbuf in 0 4096 32768 65536 131072; do "$bin" fill 12 "$rcvbuf"; done
# Request/response through each doorbell, as an event loop with many
# connections sees it (usmc-bench-doorbell; "hop": per-peer signalling
# through a thread of the woken side; "dgram": a datagram socket rung by
# name; "data": plain TCP).
for c in 1 100; do
    for i in 1 2 3; do
        for kind in pair dgram hop tcp data; do build/bin/usmc-bench-doorbell "$kind" "$c" 3; done
    done
done
