#!/usr/bin/env bash
# Behaviour of `strata plan`: validate reports every row's out-of-sample error with each group of
# terms added and the mean absolute error before and after, search reports its rate, FP8 and the
# FSDP variants are accepted where they make sense and refused with a clear message elsewhere,
# `plan schedule` shows a pipeline schedule's lists, bubble and picture, and the planner prices zb-v.
#
#   bash tests/cli/plan.sh path/to/strata
#
# Prints one line per check and "N passed, M failed"; exits non-zero when any check failed.
set -u

NAME=plan
. "$(dirname "$0")/lib/check.sh"
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

# Pipeline schedules as data (docs/pipeline.md).
run plan schedule --schedule 1f1b --pp 4 --micro 8
check "plan schedule checks and simulates 1f1b" test "$rc" -eq 0
check "1f1b's bubble is (P-1)/(M+P-1) = 27.27%" has "mean bubble 27.27%"
check "stage 0 holds P = 4 micro-batches" grep -Eq "^ +0 +[0-9]+ +24 +27.3% +4$" "$TMP/out"

run plan schedule --schedule zb-v --pp 4 --micro 8 --actions --svg "$TMP/zbv.svg"
check "zb-v with its lists and a picture" test "$rc" -eq 0
check "zb-v runs chunks 0 and 7 on stage 0 (a V)" grep -q "^stage 0: F(0,0).* F(0,7) " "$TMP/out"
check "the picture is written" grep -q "zb-v: 4 stages x 2 chunks, 8 micro-batches" "$TMP/zbv.svg"

run plan schedule --schedule zb-h1 --pp 3 --micro 5 --json
check "--json parses" python3 -c "import json,sys; d=json.load(open('$TMP/out')); assert d['schedule']=='zb-h1' and len(d['per_stage'])==3"

run plan schedule --schedule interleaved --pp 4 --micro 6
check "interleaved with M not a multiple of P is refused (status 1)" test "$rc" -eq 1
check "the refusal names the constraint" grep -q "multiple of the stages (P=4)" "$TMP/err"

run plan schedule --schedule zb-v --pp 4 --vp 3 --micro 8
check "zb-v with three chunks per stage is refused" grep -q "V = 2" "$TMP/err"

run plan schedule --pp 4 --micro 8
check "plan schedule without --schedule is a usage error (status 2)" test "$rc" -eq 2

run plan --model llama3-8b --cluster dgx-h100-superpod --gpus 8 --pp 4 --dp 2 --schedule zb-v \
    --global-batch 64 --json
check "the planner prices zb-v (vp 2 implied)" test "$rc" -eq 0
check "its JSON names zb-v and vp 2" python3 -c "import json; d=json.load(open('$TMP/out')); s=json.dumps(d); assert '\"zb-v\"' in s and '\"vp\": 2' in s, s[:400]"

finish
