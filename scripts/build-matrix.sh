#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds usmc in every build type with GCC and with clang, with -Werror, and
# once more with Debian's default flags (dpkg-buildflags), each in a build
# directory of its own under build-matrix/. Not part of CI (too slow: about
# 40 minutes on 2 cores); run it after a change to the build, the flags or a
# compiler. The Release cells build the unit tests too (an ASan/UBSan build
# of the engine), the others only what is installed.
#   scripts/build-matrix.sh [CELL...]    CELL: gcc-Debug ... clang-MinSizeRel, dpkg
# Prints one line per cell (ok or FAILED, seconds) and exits nonzero if any
# failed; a failed cell's log is build-matrix/<cell>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=build-matrix
mkdir -p "$out"
cells=("$@")
if [[ ${#cells[@]} -eq 0 ]]; then
  for cc in gcc clang; do
    for type in Debug Release RelWithDebInfo MinSizeRel; do cells+=("$cc-$type"); done
  done
  cells+=(dpkg)
fi

failed=0
for cell in "${cells[@]}"; do
  dir="$out/$cell"
  log="$out/$cell.log"
  rm -rf "$dir"
  start=$SECONDS
  if [[ $cell == dpkg ]]; then
    # The package build: GCC, Release, dpkg-buildflags, here with -Werror.
    USMC_WERROR=ON scripts/package.sh "$dir" >"$log" 2>&1
    rc=$?
  else
    cc=${cell%%-*} type=${cell#*-}
    case $cc in
      gcc) export CC=gcc CXX=g++ ;;
      clang) export CC=clang CXX=clang++ ;;
      *) echo "unknown cell $cell" >&2; exit 2 ;;
    esac
    tests=OFF
    [[ $type == Release ]] && tests=ON
    { cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DUSMC_WERROR=ON -DUSMC_BUILD_TESTS=$tests &&
      cmake --build "$dir" -j "$(nproc)"; } >"$log" 2>&1
    rc=$?
    unset CC CXX
  fi
  if [[ $rc -eq 0 ]]; then
    printf '%-22s ok      %4ds\n' "$cell" $((SECONDS - start))
    rm -rf "$dir"
  else
    printf '%-22s FAILED  %4ds  (%s)\n' "$cell" $((SECONDS - start)) "$log"
    failed=1
  fi
done
exit $failed
