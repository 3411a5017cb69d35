#!/usr/bin/env bash
# Fuzzes every parser for a bounded time: builds the fuzz preset (clang, libFuzzer, ASan + UBSan)
# and runs each target of tests/fuzz/ for SECONDS (default 20), nproc targets at a time, starting
# from its committed corpus and regression inputs. Inputs that reach new code are kept in
# build/fuzz/corpus/<target>/ (reused by the next run, not committed). A crash, sanitizer report,
# broken invariant, timeout (10 s) or memory blow-up (2 GiB) is saved in build/fuzz/crashes/<target>/
# and fails the script; commit such an input to tests/fuzz/regressions/<target>/ with the fix.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET ...]   (docs/fuzzing.md)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
(($# == 0)) || shift
targets=("$@")
if ((${#targets[@]} == 0)); then
    for f in tests/fuzz/fuzz_*.c; do
        t=$(basename "$f" .c)
        targets+=("${t#fuzz_}")
    done
fi
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"
out=build/fuzz
mkdir -p "$out/logs"
export UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}"

fuzz_one() {
    local t=$1 secs=$2 out=$3
    mkdir -p "$out/corpus/$t" "$out/crashes/$t"
    # Tokens worth inserting: edge values for every target, and the target's keywords.
    cat tests/fuzz/dict/common.dict $(ls tests/fuzz/dict/"$t".dict 2>/dev/null) >"$out/$t.dict"
    # The first directory receives new inputs; the committed ones are only read.
    if "$out/tests/fuzz/fuzz_$t" "$out/corpus/$t" "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t" \
        -dict="$out/$t.dict" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 \
        -artifact_prefix="$out/crashes/$t/" >"$out/logs/$t.log" 2>&1; then
        echo "fuzz $t: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/logs/$t.log" |
            grep -o '[0-9]*$') runs in ${secs} s, no crash"
    else
        echo "fuzz $t: FAILED (log $out/logs/$t.log)"
        tail -n 40 "$out/logs/$t.log"
        return 1
    fi
}
export -f fuzz_one
echo "=== fuzzing ${#targets[@]} targets for $secs s each, $(nproc) at a time ==="
if ! printf '%s\n' "${targets[@]}" | xargs -P "$(nproc)" -I{} bash -c 'fuzz_one "$@"' _ {} "$secs" "$out"; then
    echo "fuzz: crashes saved in:" >&2
    find "$out/crashes" -type f >&2
    exit 1
fi
