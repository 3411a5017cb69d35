#!/usr/bin/env bash
# Fraction of ZeRO-2 and ZeRO-3 communication hidden behind compute, 2 ranks, from the traces:
# each stage runs once with the model calling strata_zero_progress() between its "GEMMs" and once
# without (the baseline: collectives then advance only inside the engine's hooks).
# Usage: bench/zero_overlap.sh [build-dir]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
if [ "$build" = build/release ]; then
    cmake --preset release >/dev/null && cmake --build --preset release -j2 --target strata strata_zero_overlap >/dev/null
fi
out=$(mktemp -d)
for stage in 2 3; do
    for mode in progress no-progress; do
        flag=""
        [ "$mode" = no-progress ] && flag=--no-progress
        "$build/strata" launch -n 2 --no-prefix -- "$build/bench/strata_zero_overlap" "$stage" \
            "$out/z${stage}_$mode" $flag >/dev/null
        printf "ZeRO-%s, %-12s " "$stage" "$mode:"
        python3 bench/trace_overlap.py "$out/z${stage}_$mode".r*.json | tail -1
    done
done
echo "traces in $out (open in https://ui.perfetto.dev)"
