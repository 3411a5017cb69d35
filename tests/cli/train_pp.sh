#!/usr/bin/env bash
# strata train with pipeline parallelism on the user's path: `strata launch` runs a 4-layer GPT with
# --pp 2 --tp 2 (1F1B, micro-batches of 2 rows) on 4 ranks for 20 steps with checkpoints, the
# metrics carrying every stage's measured and predicted bubble, and --pp-svg drawing the planned
# and measured timeline of one step; every step's loss matches the one-process run's (1e-4);
# --resume continues from step 10 on 4 ranks as --pp 4 with ZB-H1 and matches steps 11-20;
# `strata sample` reads the pipelined checkpoint. --harvest eval,sample,data,gemm on PP 2: the same
# losses, rank 0 prints the side eval and sample lines, the metrics carry each side task's work.
# The model options (--llama --kv-heads 2 --parallel-block --window: an untied head, grouped-query
# attention) under PP 2 x TP 2 likewise, their checkpoint sampled, and refused where they cannot go (a resume without them, export --format hf).
# Refused with a clear message: --pp 2 in one process, --pp 3 on 4 ranks, zb-v with one chunk per
# stage, --pp-layers that do not add up, an unknown side task, --harvest without a pipeline, --harvest
# eval with --tp 2.
# (tests/mr/mr_train_parallel.c covers every schedule and layout; this is the command.)
# Usage: train_pp.sh path/to/strata
set -euo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
A=(--data data/corpus/strata_tales.txt --layers 4 --heads 4 --dim 32 --seq 32 --batch 8
   --steps 20 --warmup 5 --lr 3e-3 --threads 1)
fail=0
. tests/cli/lib/train.sh

"$S" train "${A[@]}" --quiet --metrics "$W/ref.jsonl"
"$S" launch -n 4 -- "$S" train "${A[@]}" --pp 2 --tp 2 --micro-batch 2 --ckpt-dir "$W/ck" \
    --ckpt-every 10 --metrics "$W/pp.jsonl" --trace-step 5 --pp-svg "$W/pp.svg" \
    2>"$W/pp.log" || { cat "$W/pp.log"; exit 1; }
same_losses "pp 2 x tp 2, 1f1b, 4 ranks" "$W/pp.jsonl" 1 20
grep -q "PP=2 1f1b" "$W/pp.log" && echo "layout line: ok" || { echo "layout line: FAIL"; fail=1; }
if grep -q '"pp_bubble":\[[0-9.]*,[0-9.]*\],"pp_bubble_predicted":\[[0-9.]*,[0-9.]*\]' "$W/pp.jsonl"
then echo "bubbles in metrics: ok"; else echo "bubbles in metrics: FAIL"; head -2 "$W/pp.jsonl"; fail=1; fi
grep -q "<svg" "$W/pp.svg" 2>/dev/null && echo "timeline svg: ok" || { echo "timeline svg: FAIL"; fail=1; }
rm -f "$W"/ck/ckpt_00000020.*
"$S" launch -n 4 -- "$S" train "${A[@]}" --quiet --pp 4 --schedule zb-h1 --ckpt-dir "$W/ck" \
    --resume --metrics "$W/resumed.jsonl" 2>"$W/resume.log" || { cat "$W/resume.log"; exit 1; }
grep -q "resumed at step 10" "$W/resume.log" || { echo "resume: FAIL"; cat "$W/resume.log"; fail=1; }
same_losses "resumed as pp 4, zb-h1" "$W/resumed.jsonl" 11 20
"$S" sample --ckpt "$W/ck" --prompt "Tale 7." --tokens 20 --temperature 0 >/dev/null &&
    echo "sample: ok" || { echo "sample: FAIL"; fail=1; }

"$S" launch -n 2 -- "$S" train "${A[@]}" --quiet --pp 2 --micro-batch 2 --eval-every 5 \
    --harvest eval,sample,data,gemm --metrics "$W/harvest.jsonl" 2>"$W/harvest.log" ||
    { cat "$W/harvest.log"; exit 1; }
same_losses "pp 2 with every side task" "$W/harvest.jsonl" 1 20
grep -q "\[r0\] strata train: step [0-9]*: side eval of step [0-9]*: val_loss [0-9.]*" "$W/harvest.log" &&
    grep -q "\[r0\] strata train: step [0-9]*: side sample of step [0-9]*: " "$W/harvest.log" &&
    echo "side results printed: ok" || { echo "side results printed: FAIL"; cat "$W/harvest.log"; fail=1; }
grep -q '"side":{"eval":{"steps":[0-9]*,"s":[0-9.]*},"sample":{.*},"data":{.*},"gemm":{"steps":[1-9]' \
    "$W/harvest.jsonl" && grep -q '"side_val_loss":[0-9.]*,"side_val_step":[0-9]*' "$W/harvest.jsonl" &&
    echo "side work in metrics: ok" || { echo "side work in metrics: FAIL"; tail -1 "$W/harvest.jsonl"; fail=1; }

expect_error "--harvest unknown" "unknown side task 'nap'" "$S" launch -n 2 -- "$S" train "${A[@]}" --pp 2 --harvest gemm,nap
expect_error "--harvest unknown after all four" "unknown side task 'nap'" "$S" launch -n 2 -- "$S" train "${A[@]}" --pp 2 --harvest eval,sample,data,gemm,nap
expect_error "--harvest twice" "names gemm twice" "$S" launch -n 2 -- "$S" train "${A[@]}" --pp 2 --harvest gemm,gemm
expect_error "--harvest without --pp" "needs --pp 2 or more" "$S" train "${A[@]}" --harvest gemm
expect_error "--harvest eval with --tp 2" "tensor-parallel part" "$S" launch -n 4 -- "$S" train "${A[@]}" --pp 2 --tp 2 --harvest eval
expect_error "one process --pp 2" "needs 2 ranks" "$S" train "${A[@]}" --pp 2
expect_error "--pp 3 on 4 ranks" "does not divide 4 ranks" "$S" launch -n 4 -- "$S" train "${A[@]}" --pp 3
expect_error "zb-v with --vp 1" "chunks per stage" "$S" launch -n 2 -- "$S" train "${A[@]}" --pp 2 --schedule zb-v
expect_error "--pp-layers 1,1" "pp-layers" "$S" launch -n 2 -- "$S" train "${A[@]}" --pp 2 --pp-layers 1,1

# The model options on the user's path: the flags reach every rank, PP 2 x TP 2 (SP) matches the
# one-process run, the checkpoint records them (a resume without them is refused as another model,
# `strata sample` rebuilds the model from it), and export --format hf refuses them by name.
O=(--llama --kv-heads 2 --parallel-block --window 12 --steps 10)
"$S" train "${A[@]}" "${O[@]}" --quiet --metrics "$W/ref.jsonl"
"$S" launch -n 4 -- "$S" train "${A[@]}" "${O[@]}" --quiet --pp 2 --tp 2 --sp --micro-batch 2 \
    --ckpt-dir "$W/ck_opts" --ckpt-every 10 --metrics "$W/opts.jsonl" 2>"$W/opts.log" ||
    { cat "$W/opts.log"; exit 1; }
same_losses "llama, 2 k/v heads, parallel, window 12: pp 2 x tp 2" "$W/opts.jsonl" 1 10
"$S" sample --ckpt "$W/ck_opts" --prompt "Tale 7." --tokens 10 --temperature 0 >/dev/null &&
    echo "sample of the options: ok" || { echo "sample of the options: FAIL"; fail=1; }
expect_error "resume without the options" "not this one" "$S" train "${A[@]}" --steps 12 \
    --ckpt-dir "$W/ck_opts" --resume
expect_error "export --format hf of the options" "the parallel block, which HuggingFace" "$S" export \
    --ckpt "$W/ck_opts" --format hf --out "$W/hf_opts"
expect_error "--norm batchnorm" "norm must be layernorm or rmsnorm" "$S" train "${A[@]}" --norm batchnorm
exit $fail
