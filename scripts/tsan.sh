#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the unit tests under ThreadSanitizer: builds usmc-unit-tests alone into
# build-tsan/ (USMC_UNIT_SANITIZERS=thread; TSan cannot share a build with
# ASan) and runs every test case. Exits nonzero on any TSan report or test
# failure. USMC_JOBS sets the build's parallel jobs (default: nproc).
#
# TSan sees one process only: the engine's shared-memory protocol between two
# processes (rings, cursors, registry entries) is not checked here, only the
# threads of each process on their own.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUSMC_UNIT_SANITIZERS=thread -DUSMC_UNIT_OPT="-O1 -g1" >/dev/null
cmake --build build-tsan -j "${USMC_JOBS:-$(nproc)}" --target usmc-unit-tests

# halt_on_error: the first report fails the run (exit code 66), in a forked
# child too (the test then sees its child fail). No suppressions: none has
# been needed.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
tests=build-tsan/bin/usmc-unit-tests
log=build-tsan/tsan.log
: >"$log"

run() {
    echo "tsan: usmc-unit-tests $*" | tee -a "$log"
    "$tests" "$@" 2>&1 | tee -a "$log"
}

# Test cases tagged [fork-threads] fork a child that starts threads. TSan
# supports no new thread in a child forked from a multi-threaded process (it
# dies: "starting new threads after multi-threaded fork is not supported"),
# and the engine threads of earlier test cases live as long as the process:
# each of these runs in a process of its own, where the parent has no other
# thread at the fork.
status=0
run '~[fork-threads]' || status=1
while IFS= read -r name; do
    [[ -n "$name" ]] || continue
    # Catch2 test specs: a comma separates names, brackets start tags.
    spec=$(printf '%s' "$name" | sed -e 's/\\/\\\\/g' -e 's/,/\\,/g' -e 's/\[/\\[/g')
    run "$spec" || status=1
done < <("$tests" --list-test-names-only '[fork-threads]' | sed -e 's/[[:space:]]*$//')

# A report the exit code did not carry (a child that died before its test
# could look) still fails the run.
if grep -q 'ThreadSanitizer' "$log"; then
    echo "tsan: ThreadSanitizer reported (see $log)" >&2
    status=1
fi
[[ $status -eq 0 ]] && echo "tsan: clean" || echo "tsan: FAILED" >&2
exit $status
