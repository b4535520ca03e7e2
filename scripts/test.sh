#!/usr/bin/env bash
# Runs every test: unit tests (under ASan/UBSan) and the integration tests
# that wrap real programs in usmc-run. Installs dependencies and builds first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 "$@"
