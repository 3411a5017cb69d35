#!/usr/bin/env bash
# strata train --trace under strata launch (issue 17): each rank's Chrome trace names its process and
# threads, pairs every begin with its end, carries each collective's size and algorithm; strata trace
# merge puts the ranks on one timeline where a collective's spans on the two ranks overlap (they
# share a clock). Checked by tests/cli/lib/check_trace.py, which parses the JSON. Then the merge's
# refusals: the same rank twice, a file that is not a trace.
# Usage: train_trace.sh path/to/strata
set -uo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
A=(--data data/corpus/strata_tales.txt --layers 2 --heads 2 --dim 32 --seq 32 --batch 4 --threads 1
   --steps 3 --quiet)
fail=0
for zero in 0 3; do
    "$S" launch -n 2 -- "$S" train "${A[@]}" --zero $zero --trace "$W/z$zero.json" --trace-step 2 ||
        fail=1
    "$S" trace merge "$W/z$zero.r0.json" "$W/z$zero.r1.json" -o "$W/z$zero.job.json" || fail=1
    echo "ZeRO-$zero:"
    /usr/bin/python3 tests/cli/lib/check_trace.py "$W/z$zero.job.json" "$W/z$zero.r0.json" \
        "$W/z$zero.r1.json" || fail=1
done
refused() { # NAME PATTERN ARGS...: strata trace ARGS fails naming PATTERN
    local name=$1 pat=$2
    shift 2
    if "$S" trace "$@" >"$W/err" 2>&1 || ! grep -q -- "$pat" "$W/err"; then
        echo "$name: FAIL"; cat "$W/err"; fail=1
    else
        echo "$name: ok"
    fi
}
refused "merge: the same rank twice" "both hold process 0" merge "$W/z0.r0.json" "$W/z0.r0.json" -o "$W/x"
echo '{"traceEvents": []}' >"$W/plain.json"
refused "merge: a trace not on the common clock" "not on the job-wide clock" merge "$W/plain.json" -o "$W/x"
refused "merge: no output named" "-o OUT.json" merge "$W/z0.r0.json"
exit "$fail"
