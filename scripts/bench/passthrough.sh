#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Pass-through cost of the shim: nginx + wrk, plain TCP vs usmc-run --tcp.
# Usage: scripts/bench/passthrough.sh [--runs N] [--duration S] [--connections C]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/passthrough.py "$@"
