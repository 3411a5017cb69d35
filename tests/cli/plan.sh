#!/usr/bin/env bash
# Behaviour of `strata plan`: validate reports every row's out-of-sample error with each group of
# terms added and the mean absolute error before and after, search reports its rate, FP8 and the
# FSDP variants are accepted where they make sense and refused with a clear message elsewhere.
#
#   bash tests/cli/plan.sh path/to/strata
#
# Prints one line per check and "N passed, M failed"; exits non-zero when any check failed.
set -u

STRATA=${1:?usage: bash tests/cli/plan.sh path/to/strata}
case $STRATA in /*) ;; *) STRATA=$PWD/$STRATA ;; esac
[ -x "$STRATA" ] || { echo "not executable: $STRATA" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-plan-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

pass=0
fail=0
check() {
    local desc=$1
    shift
    if "$@"; then
        pass=$((pass + 1))
        echo "ok   - $desc"
    else
        fail=$((fail + 1))
        echo "FAIL - $desc"
        head -c 1500 "$TMP/err" 2>/dev/null | sed 's/^/       /'
    fi
}
run() {
    "$STRATA" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}
has() { grep -q -- "$1" "$TMP/out"; }

run plan validate --data "$ROOT/data"
check "validate succeeds" test "$rc" -eq 0
check "validate shows the four stages" grep -q "base  +scale +memory     +hw" "$TMP/out"
rows=$(grep -c '%.*%.*%.*%' "$TMP/out")
check "validate reports a row per table row and the summary lines ($rows)" test "$rows" -ge 34
check "validate: leave-one-out on the calibration rows" has "calibration rows, LOO (22)"
check "validate: held-out rows" has "held-out rows (9)"
check "validate: before and after" has "before (base) -> after (all terms)"

run plan validate --data "$ROOT/data" --json --no-loo
check "validate --json succeeds" test "$rc" -eq 0
check "validate --json has every stage" has '"+hw"'

run plan search --model llama3-405b --cluster h100-roce-24k --gpus 16384 --global-batch 2048 --top 3
check "search 405B on 16,384 GPUs succeeds" test "$rc" -eq 0
check "search prints its rate" grep -q "evaluated in [0-9.]* s: [0-9]* configurations/s" "$TMP/out"
check "search shows the straggler wait" has "strag"

run plan --model llama3-8b --cluster dgx-h100-superpod --gpus 8 --tp 8 --precision fp8 --global-batch 64
check "fp8 on H100 predicts" test "$rc" -eq 0
check "fp8 is named in the prediction" has ", fp8,"

run plan --model llama3-8b --cluster dgx-a100-superpod --gpus 8 --tp 8 --precision fp8 --global-batch 64
check "fp8 on A100 is refused (status 1)" test "$rc" -eq 1
check "the refusal names fp8 and the accelerator" grep -q "fp8.*a100-80gb" "$TMP/err"

run plan --model llama3-8b --cluster dgx-h100-superpod --gpus 8 --dp 8 --zero 3 --zero-keep-params on \
    --zero-reduce-once on --global-batch 64
check "ZeRO-3 keeping parameters and reducing once predicts" test "$rc" -eq 0
check "the variant is shown" has "zero3+keep+once"

run plan --model llama3-8b --cluster dgx-h100-superpod --gpus 8 --dp 8 --zero 1 --zero-keep-params on \
    --global-batch 64
check "keeping parameters without ZeRO-3 is refused" test "$rc" -eq 1
check "the refusal says what is expected" grep -q "keeping parameters with ZeRO-3" "$TMP/err"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
