#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Configures and builds usmc into build/ (bin/, lib/). Incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE="${USMC_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build build -j "$(nproc)"
