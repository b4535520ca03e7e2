#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# iperf3 over SMC-D against plain TCP: Gbit/s and CPU of both sides, iperf3's
# defaults (one stream, 128 KB writes) or other -P / -l.
# Usage: scripts/bench/iperf3.sh [--runs N] [--duration S] [--streams 1,2] [--lengths 64K,128K,1M]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/iperf3.py "$@"
