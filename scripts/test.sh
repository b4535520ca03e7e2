#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs every test: unit tests (under ASan/UBSan) and the integration tests
# that wrap real programs in usmc-run. Installs dependencies and builds first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
# One test per core at a time: each passes beside two CPU hogs (the timing-
# sensitive ones are run 20 times so). The package is built beside the
# other tests (package_build) and installed alone (it_package, RUN_SERIAL):
# it is on the system for a moment.
ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@"
