#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Where the client's CPU goes per short-lived connection, SMC-D against TCP
# (perf record of nginx + wrk 'Connection: Close'; needs linux-perf).
# Usage: scripts/bench/setup_cost.sh [--connections C] [--seconds S]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
command -v perf >/dev/null || { sudo=$([ "$(id -u)" = 0 ] || echo sudo); $sudo apt-get install -y -q linux-perf >/dev/null; }
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/setup_cost.py "$@"
