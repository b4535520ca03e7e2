#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every command of the README's results table, one after another on an
# otherwise idle machine, each script's whole output kept in a directory
# (default /tmp/usmc-bench-<commit>). About 40 minutes on 2 cores.
# Usage: scripts/bench/all.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
out=${1:-/tmp/usmc-bench-$(git rev-parse --short HEAD)}
mkdir -p "$out"
run() {
    local name=$1
    shift
    echo "== $name: scripts/bench/$* ($(date -u +%H:%M:%S))" | tee -a "$out/index"
    /usr/bin/python3 "scripts/bench/$@" > "$out/$name.log" 2>&1 || echo "   FAILED (see $out/$name.log)" | tee -a "$out/index"
    tail -n 12 "$out/$name.log" >> "$out/index"
}
run smcd smcd.py --runs 5 --seconds 3
run smcd-hogs2 smcd.py --runs 5 --seconds 3 --hogs 2
run smcd-hogs4 smcd.py --runs 5 --seconds 3 --hogs 4
run smcd-blockers3 smcd.py --runs 5 --seconds 3 --blockers 3
run iperf3 iperf3.py --runs 5 --duration 5
run apps apps_smcd.py --runs 5 --duration 5 --requests 100000 --busy-poll-us 0
run apps-hogs2 apps_smcd.py --runs 5 --duration 5 --requests 100000 --busy-poll-us -1 --hogs 2
run short-lived short_lived.py --runs 5 --duration 5 --connections 1000 --variants tcp,off,on,always
run pgbench pgbench.py --runs 5 --duration 10 --unpinned
run proxy proxy.py --runs 5 --duration 3 --connections 50
run syscalls syscalls.py --runs 3 --by-call
echo "done: $out/index"
