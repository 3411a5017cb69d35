#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every test in the release
# build (warnings as errors) and in the AddressSanitizer+UBSan build, the unit and multi-rank tests
# under ThreadSanitizer, and fuzzes every parser for a bounded time (scripts/fuzz.sh,
# STRATA_FUZZ_SECONDS per target, default 25: under 4 minutes on 2 cores).
# Usage: scripts/test.sh [release|asan|tsan|fuzz ...] (default: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
presets=("$@")
((${#presets[@]})) || presets=(release asan tsan fuzz)
jobs=$(nproc)

# A CI log is shown by its head and tail, and a failing test's own checks sit in the middle. So
# after a failed run, what each failing test said of itself is printed again, last: the multi-rank
# harness's recap of its failed jobs (tests/harness/ranks.c) and cmocka's failed checks.
failure_recap() {
    local log="$1/Testing/Temporary/LastTest.log"
    [ -f "$log" ] || return 0
    echo "=== what the failed tests said (again, from $log) ==="
    grep -E -A9 '^st_test_ranks: [0-9]+ multi-rank job\(s\) failed' "$log" || true
    grep -E '^\[ +(ERROR|FAILED|LINE) +\]' "$log" | grep -v '^\[  FAILED  \] [0-9]* test' || true
}
for p in "${presets[@]}"; do
    if [ "$p" = fuzz ]; then
        echo "=== fuzz ==="
        bash scripts/fuzz.sh "${STRATA_FUZZ_SECONDS:-25}"
        continue
    fi
    echo "=== $p build ==="
    cmake --preset "$p" >/dev/null
    cmake --build --preset "$p" -j "$jobs"
    labels=()
    # TSan runs the unit and multi-rank tests, less the >= 16 MiB cases (minutes there, and the
    # release and ASan runs cover them).
    [ "$p" = tsan ] && labels=(-L "unit|mr" -LE "large|heavy")
    # ASan leaves out the "heavy" tests (the planner's leave-one-out refits: many minutes there).
    [ "$p" = asan ] && labels=(-LE heavy)
    # TSan sleeps 1 s in every process's exit by default (atexit_sleep_ms), so that threads still
    # running can report; the multi-rank tests fork many short-lived ranks (mr_p2p_split alone
    # starts 165 jobs) whose threads are joined before exit, and that sleep was most of the phase
    # (mr_p2p_split: 252 s, 50 s without it).
    # 50 ms still gives a stray thread time to report.
    [ "$p" = tsan ] &&
        export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp atexit_sleep_ms=50 ${TSAN_OPTIONS:-}"
    echo "=== $p tests ==="
    if ! (cd "build/$p" && ctest --output-on-failure -j "$jobs" "${labels[@]}"); then
        failure_recap "build/$p"
        exit 1
    fi
done
