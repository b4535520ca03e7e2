#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: wraps real servers and clients (nginx, wrk, curl, redis) in
# usmc-run, measures each beside plain TCP in the same run, and shows what
# usmc did. Installs dependencies and builds first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/demo.py
