#!/usr/bin/env bash
# The main job: builds strata, then trains a small GPT (4 layers, d_model 128, ~0.8M parameters) on
# the shipped corpus with N local ranks under ZeRO-3 (`strata launch -n N strata train`), about a
# minute on a 2-core machine, shows the loss falling, and prints text sampled from the sharded
# checkpoint (`strata sample`). Usage: scripts/run.sh [ranks (2)] [steps (1000)] [extra train flags...]
# The collectives benchmark that used to live here: scripts/bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target strata >/dev/null
S=build/release/strata
n=${1:-2}
steps=${2:-1000}
shift 2 || shift $# || true
out=${STRATA_RUN_DIR:-run}
rm -rf "$out" && mkdir -p "$out"
start=$(date +%s.%N)
"$S" launch -n "$n" --no-prefix -- "$S" train --data data/corpus/strata_tales.txt \
    --layers 4 --heads 4 --dim 128 --seq 64 --batch 16 --threads 1 --steps "$steps" \
    --lr 3e-3 --min-lr 3e-4 --warmup 30 --zero 3 --eval-every 100 \
    --ckpt-dir "$out/ckpt" --ckpt-every 100 --metrics "$out/metrics.jsonl" \
    --trace "$out/step.json" --trace-step 5 "$@"
end=$(date +%s.%N)
echo
echo "loss by step (global batch 16 x 64 tokens, $n ranks, ZeRO-3):"
awk -v every=$((steps / 10 > 0 ? steps / 10 : 1)) -F'[:,}]' '
    { step = $2; loss = $4; val = ""
      for (i = 1; i < NF; i++) if ($i ~ /"val_loss"/) val = sprintf("   val %.3f", $(i + 1))
      if (step == 1 || step % every == 0 || val != "") printf "  step %5d  loss %.3f%s\n", step, loss, val }' \
    "$out/metrics.jsonl"
printf "trained in %.1f s; checkpoint shards: %s\n" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" \
    "$(ls "$out/ckpt" | tr '\n' ' ')"
echo
echo "--- strata sample --ckpt $out/ckpt --prompt 'Tale 7.' ---"
"$S" sample --ckpt "$out/ckpt" --prompt "Tale 7." --tokens 400 --temperature 0.7
