#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets (test/fuzz) with clang into build-fuzz/ and
# runs each for a bounded time on a copy of its seed corpus (the repository's
# corpus is never written to). Fails on any crash, leak, sanitizer report or
# timeout; the input that caused it lands in build-fuzz/artifacts/TARGET/.
#
#   scripts/fuzz.sh [--seconds N] [--smoke] [TARGET...]
#
#   --seconds N   run each target N seconds (default 60)
#   --smoke       a short fixed number of runs per target, from a fixed seed
#                 (what ctest's fuzz_smoke runs)
#   TARGET        clc, cdc, ism_wire, config, smcr_msg, soft_qp (default: all)
#
# One fuzzer process at a time, one job each: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

all_targets=(clc cdc ism_wire config smcr_msg soft_qp)
seconds=60
smoke=0
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds)
      [[ $# -ge 2 && "$2" =~ ^[0-9]+$ && "$2" -gt 0 ]] || { echo "fuzz: --seconds needs a positive number" >&2; exit 2; }
      seconds=$2
      shift 2 ;;
    --smoke) smoke=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
    *)
      [[ " ${all_targets[*]} " == *" $1 "* ]] || { echo "fuzz: unknown target $1 (known: ${all_targets[*]})" >&2; exit 2; }
      targets+=("$1")
      shift ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")

scripts/install-deps.sh

build=$root/build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$build" -DUSMC_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/usmc-fuzz-}" >/dev/null

scratch=$(mktemp -d "${TMPDIR:-/tmp}/usmc-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

failed=()
summary=()
for t in "${targets[@]}"; do
  corpus=$scratch/$t
  mkdir -p "$corpus" "$build/artifacts/$t"
  cp -r "$root/test/fuzz/corpus/$t/." "$corpus/"
  if [[ $smoke -eq 1 ]]; then
    limit=(-runs=100000 -seed=1)
  else
    limit=(-max_total_time="$seconds")
  fi
  log=$build/artifacts/$t/last-run.log
  echo "fuzz: $t: ${limit[*]}" >&2
  rc=0
  "$build/bin/usmc-fuzz-$t" "${limit[@]}" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t/" "$corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  # libFuzzer exits nonzero on a crash, leak or timeout; a sanitizer report
  # that did not stop it still counts.
  if [[ $rc -ne 0 ]] || grep -qE 'ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:|invariant failed' "$log"; then
    failed+=("$t")
    summary+=("$t: FAILED (exit $rc) after ${execs:-?} executions; log $log")
    echo "fuzz: $t FAILED, the end of its log:" >&2
    tail -40 "$log" >&2
  else
    summary+=("$t: ${execs:-?} executions in ${took:-?} s, no crash, leak or sanitizer report")
  fi
done

printf 'fuzz: %s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: failed: ${failed[*]} (inputs in $build/artifacts/)" >&2
  exit 1
fi
