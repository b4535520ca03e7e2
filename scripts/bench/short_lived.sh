#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The short-lived-connection workload of the kernel series: nginx (1 worker)
# + wrk -H 'Connection: Close', plain TCP against usmc with limit_hs off/on,
# with and without an injected handshake delay.
# Usage: scripts/bench/short_lived.sh [--runs N] [--duration S] [--connections C,C]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/short_lived.py "$@"
