#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Real programs over SMC-D against plain TCP: nginx + wrk keep-alive (c=100)
# and redis-server + redis-benchmark GET/SET (c=50), both ends wrapped.
# Usage: scripts/bench/apps_smcd.sh [--runs N] [--duration S]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/apps_smcd.py "$@"
