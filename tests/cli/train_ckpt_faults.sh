#!/usr/bin/env bash
# Sharded checkpoints that are wrong, and what `strata train --resume` / `strata sample` do with them
# (issue 11). A 2-rank ZeRO-3 run writes steps 20, 40, 60; each case starts from a copy of it, breaks
# it the way an operator saw it broken, and checks that the bad step is refused with a message naming
# the file and why, and that resume lands on the newest step it can trust:
#   - rank 0's shards of steps 40 and 60 swapped          -> both refused, resume at 20
#   - rank 0's step-60 shard replaced by its step-20 file -> refused (a shard of another step), 40
#   - rank 1's step-60 shard from another run (seed 2)    -> refused (another run), 40
#   - rank 0's step-60 header edited ("step":"61")        -> refused (header checksum), 40
#   - rank 0's step-60 shard missing                      -> refused (missing, named), 40
#   - one process resuming the sharded run                -> continues at 60 (not from 0), and its own
#                                                            step 70 is what the next 2-rank resume uses
#   - --keep 1 with a leftover shard of an interrupted step: the newest committed step survives
#   - rank 0's first checkpoint write failing for real (a file size limit): the job fails naming the
#     file on rank 0 and rank 0 on rank 1, and --resume then refuses (files but no committed step);
#     an empty directory is a fresh start that is announced
#   - strata sample with a bad newest rank-0 shard and a newer step of another model that is
#     incomplete: both skipped with a warning, the newest good step sampled
# Usage: train_ckpt_faults.sh path/to/strata
set -euo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
A=(--data data/corpus/strata_tales.txt --layers 2 --heads 2 --dim 32 --seq 32 --batch 8
   --warmup 5 --lr 3e-3 --threads 1 --quiet --zero 3)
fail=0
f() { printf '%s/ckpt_%08d.%s' "$1" "$2" "$3"; } # f DIR STEP rank0.safetensors|manifest.json

train2() { "$S" launch -n 2 --no-prefix -- "$S" train "${A[@]}" "$@"; }

# check NAME ERRFILE PATTERN... : every pattern (grep -F) must be in ERRFILE
check() {
    local name=$1 err=$2 ok=1
    shift 2
    for p in "$@"; do grep -qF -- "$p" "$err" || { ok=0; echo "  missing: $p"; }; done
    if [ $ok = 1 ]; then printf '%-46s ok\n' "$name"; else cat "$err"; printf '%-46s FAIL\n' "$name"; fail=1; fi
}

train2 --steps 60 --ckpt-dir "$W/pristine" --ckpt-every 20 --keep 5
train2 --steps 60 --ckpt-dir "$W/other" --ckpt-every 60 --seed 2
fresh() { rm -rf "$W/d"; cp -r "$W/pristine" "$W/d"; }
resume() { train2 --steps 60 --ckpt-dir "$W/d" --ckpt-every 20 --keep 5 --resume 2>"$W/err"; }

fresh
mv "$(f "$W/d" 40 rank0.safetensors)" "$W/x"
mv "$(f "$W/d" 60 rank0.safetensors)" "$(f "$W/d" 40 rank0.safetensors)"
mv "$W/x" "$(f "$W/d" 60 rank0.safetensors)"
resume
check "rank-0 shards of 40 and 60 swapped" "$W/err" "resumed at step 20 " \
    "$(f "$W/d" 60 rank0.safetensors): not the shard committed for step 60: it holds step 40" \
    "$(f "$W/d" 40 rank0.safetensors): not the shard committed for step 40: it holds step 60"

fresh
cp "$(f "$W/d" 20 rank0.safetensors)" "$(f "$W/d" 60 rank0.safetensors)"
resume
check "stale rank-0 shard (step 20 as 60)" "$W/err" "resumed at step 40 " \
    "$(f "$W/d" 60 rank0.safetensors): not the shard committed for step 60: it holds step 20"

fresh
cp "$(f "$W/other" 60 rank1.safetensors)" "$(f "$W/d" 60 rank1.safetensors)"
resume
check "rank-1 shard of another run" "$W/err" "resumed at step 40 " \
    "$(f "$W/d" 60 rank1.safetensors): not the shard committed for step 60: it belongs to run"

fresh
LC_ALL=C sed -i 's/"step":"60"/"step":"61"/' "$(f "$W/d" 60 rank0.safetensors)"
resume
check "rank-0 metadata step edited" "$W/err" "resumed at step 40 " \
    "$(f "$W/d" 60 rank0.safetensors): header checksum mismatch"

fresh
rm "$(f "$W/d" 60 rank0.safetensors)"
resume
check "rank-0 shard missing" "$W/err" "resumed at step 40 " \
    "$(f "$W/d" 60 rank0.safetensors) (rank 0 of 2) is missing"

# One process on the sharded run: continues at 60; its step 70 (one unsharded file) is then what a
# 2-rank resume takes, nothing shadowed.
fresh
"$S" train "${A[@]}" --steps 70 --ckpt-dir "$W/d" --ckpt-every 10 --keep 5 --resume 2>"$W/err"
check "one process resumes a sharded run" "$W/err" "resumed at step 60 "
[ -f "$(f "$W/d" 70 safetensors)" ] && [ -f "$(f "$W/d" 70 manifest.json)" ] || { echo "  no step 70"; fail=1; }
train2 --steps 80 --ckpt-dir "$W/d" --ckpt-every 10 --keep 5 --resume 2>"$W/err"
check "... and 2 ranks resume its step" "$W/err" "resumed at step 70 "

# --keep 1 with the leftover rank-1 shard of an interrupted step 30.
rm -rf "$W/k"
train2 --steps 20 --ckpt-dir "$W/k" --ckpt-every 10 --keep 1
cp "$(f "$W/k" 20 rank1.safetensors)" "$(f "$W/k" 30 rank1.safetensors)"
train2 --steps 25 --ckpt-dir "$W/k" --ckpt-every 5 --keep 1 --resume 2>"$W/err"
train2 --steps 26 --ckpt-dir "$W/k" --ckpt-every 5 --keep 1 --resume 2>"$W/err"
check "--keep 1 keeps the newest committed step" "$W/err" "resumed at step 25 "

# Rank 0's first checkpoint write fails for real: its file size limit (SIGXFSZ ignored, so write()
# returns EFBIG, as it returns ENOSPC on a full disk); a shard is ~210 KB, the limit 100 KB. Over TCP:
# the limit would also refuse the 4 MB shared-memory segments between the ranks.
rm -rf "$W/full"
limit='if [ "$RANK" = 0 ]; then trap "" XFSZ; ulimit -f 100; fi; exec "$0" "$@"'
rc=0
"$S" launch -n 2 --tcp --no-prefix -- bash -c "$limit" "$S" train "${A[@]}" --steps 10 \
    --ckpt-dir "$W/full" --ckpt-every 5 2>"$W/err" || rc=$?
[ $rc != 0 ] || { echo "  the failed write exited 0"; fail=1; }
check "a failed first write fails the job" "$W/err" \
    "$(f "$W/full" 5 rank0.safetensors)" "File too large" \
    "checkpoint step 5 not committed: rank 0 could not write its file"
rc=0
train2 --steps 10 --ckpt-dir "$W/full" --resume 2>"$W/err" || rc=$?
[ $rc != 0 ] || { echo "  --resume after it exited 0"; fail=1; }
check "... then --resume refuses to start over" "$W/err" "no committed step" \
    "ckpt_00000005.rank1.safetensors" "refusing to start over"
train2 --steps 2 --ckpt-dir "$W/empty" --resume 2>"$W/err"
check "--resume on an empty dir says so" "$W/err" "no checkpoint in $W/empty" "starting from step 0"

# sample: a newer step of another model with a missing shard, and a garbage rank-0 shard of 60.
fresh
"$S" launch -n 2 --no-prefix -- "$S" train "${A[@]}" --dim 16 --steps 80 --ckpt-every 80 \
    --ckpt-dir "$W/small"
cp "$(f "$W/small" 80 manifest.json)" "$(f "$W/small" 80 rank0.safetensors)" "$W/d/"
printf 'garbage!' | dd of="$(f "$W/d" 60 rank0.safetensors)" bs=1 seek=300 conv=notrunc 2>/dev/null
out=$("$S" sample --ckpt "$W/d" --tokens 20 --prompt "Tale" 2>"$W/err") || { cat "$W/err"; fail=1; }
[ "${out:0:4}" = "Tale" ] || { echo "  sample printed: $out"; fail=1; }
check "sample skips bad newer steps" "$W/err" \
    "skipping step 80: checkpoint step 80 in $W/d is incomplete: $(f "$W/d" 80 rank1.safetensors)" \
    "skipping step 60: checkpoint $(f "$W/d" 60 rank0.safetensors)" "using step 40"
exit $fail
