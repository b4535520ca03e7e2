#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A proxy in front of nginx over SMC-D against plain TCP: haproxy mode tcp,
# haproxy mode http, nginx proxy_pass; wrk keep-alive and 'Connection: close'.
# Usage: scripts/bench/proxy.sh [--runs N] [--duration S] [--connections 50,1000] [--proxies ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
exec /usr/bin/python3 scripts/bench/proxy.py "$@"
