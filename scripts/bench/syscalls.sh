#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# System calls per request, each side, TCP beside usmc: nginx + wrk and
# redis-server + redis-benchmark (perf stat).
# Usage: scripts/bench/syscalls.sh [--runs N] [--duration S] [--by-call]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/syscalls.py "$@"
