#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# PostgreSQL + pgbench over SMC-D against plain TCP: TPC-B persistent and
# with a connection per transaction (-C), select-only (-S); --busy with a
# second pgbench on another database meanwhile.
# Usage: scripts/bench/pgbench.sh [--runs N] [--duration S] [--scale N] [--busy]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/pgbench.py "$@"
