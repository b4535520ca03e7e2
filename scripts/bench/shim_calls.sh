#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Per-call cost of the shim in pass-through (Google Benchmark, plain vs usmc-run --tcp).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/shim_calls.py "$@"
