#!/usr/bin/env bash
# Fraction of communication hidden behind compute in `strata train` on the real GPT, 2 ranks, ZeRO-2
# and ZeRO-3, from the per-rank Chrome traces of one step (bench/trace_overlap.py:
# |union(comm) & union(compute)| / |union(comm)|). Gradients are reduced in buckets while the backward
# continues and ZeRO-3 gathers are prefetched one segment ahead; the model calls strata_zero_progress
# between its GEMMs. Usage: bench/train_overlap.sh [build-dir] [extra strata train flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
shift || true
if [ "$build" = build/release ]; then
    cmake --preset release >/dev/null && cmake --build --preset release -j2 --target strata >/dev/null
fi
out=$(mktemp -d)
model=(--layers 4 --heads 4 --dim 128 --seq 64 --batch 8 --threads 1 --steps 4 --trace-step 3
       --bucket 65536 --quiet)
for stage in 2 3; do
    "$build/strata" launch -n 2 --no-prefix -- "$build/strata" train "${model[@]}" --zero "$stage" \
        --trace "$out/z$stage.json" "$@" 2>/dev/null
    printf "ZeRO-%s, 2 ranks: " "$stage"
    echo; python3 bench/trace_overlap.py "$out/z$stage".r*.json | sed "s|^$out/|  |"
done
echo "traces in $out (open in https://ui.perfetto.dev)"
