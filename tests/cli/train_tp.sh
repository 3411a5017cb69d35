#!/usr/bin/env bash
# strata train with tensor parallelism on the user's path: `strata launch` runs a tiny GPT with
# --tp 2 --sp --zero 1 on 4 ranks for 10 steps with checkpoints; rank 0 prints the mesh line; every
# step's loss matches the one-process run's (1e-4); --resume continues it on 4 ranks at --tp 4 to
# step 20 and matches steps 11-20; `strata sample` reads the TP checkpoint; `strata export` writes
# the whole model by name and `strata sample` reads the exported file with the same greedy text.
# Refused with a clear message: --tp 2 in one process, --tp 8 on 4 ranks, a tp that does not divide
# the heads, a malformed --order. (tests/mr/mr_train_tp.c covers every layout; this is the command.)
# Usage: train_tp.sh path/to/strata
set -euo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
A=(--data data/corpus/strata_tales.txt --layers 2 --heads 4 --dim 32 --seq 32 --batch 8
   --steps 20 --warmup 5 --lr 3e-3 --threads 1)
fail=0
. tests/cli/lib/train.sh

"$S" train "${A[@]}" --quiet --metrics "$W/ref.jsonl"
"$S" launch -n 4 -- "$S" train "${A[@]}" --steps 20 --tp 2 --sp --zero 1 --ckpt-dir "$W/ck" \
    --ckpt-every 10 --metrics "$W/tp.jsonl" 2>"$W/tp.log" || { cat "$W/tp.log"; exit 1; }
# The run stops after step 10 here: its step-20 checkpoint goes, so the resume starts at 10.
rm -f "$W"/ck/ckpt_00000020.*
grep -q "mesh: tp=2 inside host" "$W/tp.log" && echo "mesh line: ok" || { echo "mesh line: FAIL"; grep mesh "$W/tp.log"; fail=1; }
same_losses "tp 2 + sp, zero 1, 4 ranks" "$W/tp.jsonl" 1 20
"$S" launch -n 4 -- "$S" train "${A[@]}" --quiet --tp 4 --ckpt-dir "$W/ck" --resume \
    --metrics "$W/resumed.jsonl" 2>"$W/resume.log" || { cat "$W/resume.log"; exit 1; }
grep -q "resumed at step 10" "$W/resume.log" || { echo "resume: FAIL"; cat "$W/resume.log"; fail=1; }
same_losses "resumed at tp 4 from tp 2" "$W/resumed.jsonl" 11 20
"$S" sample --ckpt "$W/ck" --prompt "Tale 7." --tokens 30 --temperature 0 >"$W/s1.txt"
"$S" export --ckpt "$W/ck" --out "$W/model.safetensors" 2>/dev/null
"$S" sample --ckpt "$W/model.safetensors" --prompt "Tale 7." --tokens 30 --temperature 0 >"$W/s2.txt"
cmp -s "$W/s1.txt" "$W/s2.txt" && echo "sample = sample of export: ok" || { echo "export: FAIL"; fail=1; }

expect_error "one process --tp 2" "needs 2 ranks" "$S" train "${A[@]}" --tp 2
expect_error "--tp 8 on 4 ranks" "does not divide 4 ranks" "$S" launch -n 4 -- "$S" train "${A[@]}" --tp 8 --heads 8
expect_error "--tp 8 over 4 heads" "divide the attention heads" "$S" launch -n 8 -- "$S" train "${A[@]}" --tp 8
expect_error "--order tp,xx" "order" "$S" train "${A[@]}" --order tp,xx
exit $fail
