#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# SMC-D against TCP with sockperf: latency and throughput ratios, CPU use.
# Usage: scripts/bench/smcd.sh [--runs N] [--seconds S]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/smcd.py "$@"
