#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# usmc's descriptors per SMC-D connection: nginx + wrk holding N keep-alive
# connections, every descriptor of both read from /proc/PID/fd.
# Usage: scripts/bench/descriptors.sh [--runs N] [--duration S] [--connections 1000,3000,10000]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/descriptors.py "$@"
