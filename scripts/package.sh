#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the Debian package: a Release build for prefix /usr with Debian's
# compiler flags (dpkg-buildflags: fortify, stack protector,
# -Werror=format-security, relro, and with hardening=+all bindnow, as lintian
# asks), then CPack's DEB generator.
#   scripts/package.sh [BUILD_DIR]     (default build-pkg/)
# Prints the path of the .deb on its last line. USMC_WERROR=ON makes warnings
# errors (CI does; a packager's build keeps it OFF so that a newer compiler's
# new warnings never fail it).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-pkg}
# The date in the package's changelog (cmake/package.cmake): the last
# commit's, as dpkg-buildpackage takes it from debian/changelog, so that the
# same sources give the same package.
if [[ -z "${SOURCE_DATE_EPOCH:-}" ]] && git rev-parse --git-dir >/dev/null 2>&1; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
  export SOURCE_DATE_EPOCH
fi
if [[ ! -f "$dir/CMakeCache.txt" ]]; then
  export DEB_BUILD_MAINT_OPTIONS=${DEB_BUILD_MAINT_OPTIONS:-hardening=+all}
  # CMake reads CFLAGS/CXXFLAGS/LDFLAGS at the first configure only; it has
  # no CPPFLAGS, so those join the compile flags, as debhelper does.
  cppflags=$(dpkg-buildflags --get CPPFLAGS)
  CFLAGS="$(dpkg-buildflags --get CFLAGS) $cppflags" \
  CXXFLAGS="$(dpkg-buildflags --get CXXFLAGS) $cppflags" \
  LDFLAGS="$(dpkg-buildflags --get LDFLAGS)" \
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
      -DUSMC_BUILD_TESTS=OFF -DUSMC_TESTONLY_KNOBS=OFF -DUSMC_WERROR="${USMC_WERROR:-OFF}" >/dev/null
else
  cmake "$dir" -DUSMC_TESTONLY_KNOBS=OFF -DUSMC_WERROR="${USMC_WERROR:-OFF}" >/dev/null
fi
cmake --build "$dir" -j "$(nproc)"
(cd "$dir" && cpack -G DEB >/dev/null)
(cd "$dir" && ls "$PWD"/usmc_*.deb | tail -n 1)
