#!/usr/bin/env bash
# One process on the sharded checkpoints of a distributed run (issue 17: "strata train --resume in
# one process on a directory of sharded checkpoints silently starts from step 1 and then writes a
# newer file that shadows the real run"). `strata launch -n 2 -- strata train --zero 2` writes steps
# 10, 20, 30 as shards; then, in one process:
#   - --resume continues from step 30 (says so), its steps 31-40 are those of an uninterrupted
#     one-process run, and its step 40 belongs to the same run (the manifests' run id);
#   - --resume with another model refuses, naming the step and both models, and writes nothing;
#   - a start without --resume refuses too (it would start over at step 1 and, at its step 40,
#     overwrite and prune the run's steps), naming the step and the run, and writes nothing;
#   - sample reads the resumed run's newest step (40) without a warning.
# Usage: train_resume_one.sh path/to/strata
set -euo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
. tests/cli/lib/train.sh
A=(--data data/corpus/strata_tales.txt --layers 2 --heads 2 --dim 32 --seq 32 --batch 8
   --warmup 5 --lr 3e-3 --threads 1 --quiet --ckpt-every 10 --keep 5)
run_id() { grep -o '"run_id":"[0-9a-f]*"' "$(printf '%s/ckpt_%08d.manifest.json' "$W/ck" "$1")" | cut -d'"' -f4; }
result() { printf '%-52s %s\n' "$1" "$2"; [ "$2" = ok ] || fail=1; } # result NAME ok|FAIL
check() { # check NAME PATTERN...: every pattern in $W/err
    local name=$1 ok=1; shift
    for p in "$@"; do grep -qF -- "$p" "$W/err" || { ok=0; echo "  missing: $p"; }; done
    if [ $ok = 1 ]; then printf '%-52s ok\n' "$name"; else cat "$W/err"; printf '%-52s FAIL\n' "$name"; fail=1; fi
}

# The distributed run is "stopped" after step 30 (its step 40 removed), so the learning-rate
# schedule (over 40 steps) is that of the uninterrupted one-process run.
"$S" train "${A[@]}" --steps 40 --metrics "$W/ref.jsonl" 2>/dev/null   # the uninterrupted run
"$S" launch -n 2 --no-prefix -- "$S" train "${A[@]}" --zero 2 --steps 40 --ckpt-dir "$W/ck" \
    2>"$W/err"
[ -f "$W/ck/ckpt_00000030.rank1.safetensors" ] || { cat "$W/err"; echo "no shards"; exit 1; }
rm "$W"/ck/ckpt_00000040.*
run=$(run_id 30)

"$S" train "${A[@]}" --steps 40 --ckpt-dir "$W/ck" --resume --metrics "$W/one.jsonl" 2>"$W/err"
check "one process --resume on ZeRO-2 shards: step 30" "resumed at step 30 from $W/ck (run $run)"
[ "$(grep -c '^{"step"' "$W/one.jsonl")" = 10 ] || { echo "  $(grep -c '^{"step"' "$W/one.jsonl") steps run, want 10"; fail=1; }
same_losses "... steps 31-40 = the uninterrupted run's" "$W/one.jsonl" 31 40
if [ -f "$W/ck/ckpt_00000040.safetensors" ] && [ "$(run_id 40)" = "$run" ]; then
    result "... its step 40 continues run $run" ok
else
    ls "$W/ck"; result "... its step 40 continues run $run" FAIL
fi

before=$(ls -l --time-style=+%s.%N "$W/ck")
rc=0
"$S" train "${A[@]}" --dim 64 --steps 50 --ckpt-dir "$W/ck" --resume 2>"$W/err" || rc=$?
[ $rc != 0 ] || { echo "  exited 0"; fail=1; }
check "--resume with another model refuses" "refusing checkpoint step 40" "not this one" \
    "refusing to start over"
rc=0
"$S" train "${A[@]}" --steps 50 --ckpt-dir "$W/ck" 2>"$W/err" || rc=$?
[ $rc != 0 ] || { echo "  exited 0"; fail=1; }
check "no --resume on a run's directory refuses" \
    "--ckpt-dir $W/ck holds checkpoint step 40 of run $run" "continue it with --resume"
rc=0
"$S" launch -n 2 --no-prefix -- "$S" train "${A[@]}" --zero 2 --steps 50 --ckpt-dir "$W/ck" \
    2>"$W/err" || rc=$?
[ $rc != 0 ] || { echo "  exited 0"; fail=1; }
check "... on 2 ranks too" "--ckpt-dir $W/ck holds checkpoint step 40 of run $run"
if [ "$before" = "$(ls -l --time-style=+%s.%N "$W/ck")" ]; then
    result "... and nothing was written" ok
else
    diff <(echo "$before") <(ls -l --time-style=+%s.%N "$W/ck") || true
    result "... and nothing was written" FAIL
fi

if "$S" sample --ckpt "$W/ck" --tokens 5 --prompt "Tale" >/dev/null 2>"$W/err" &&
   ! grep -q warning "$W/err"; then
    result "sample reads step 40" ok
else
    cat "$W/err"; result "sample reads step 40" FAIL
fi
exit $fail
