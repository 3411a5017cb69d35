#!/usr/bin/env bash
# Single-process training throughput: strata vs PyTorch (Debian python3-torch) on the CPU, same
# model, batch, optimizer (AdamW fp32, clipping) and thread count, in the same run. Prints both
# tokens/s and the ratio strata / torch.
# Usage: bench/train_vs_torch.sh [--threads N] [--layers N] [--heads N] [--dim N] [--seq N]
#                                [--batch N] [--steps N]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=1 layers=4 heads=8 dim=256 seq=128 batch=8 steps=20 warm=3
while (($#)); do
    case "$1" in
    --threads) threads=$2 ;; --layers) layers=$2 ;; --heads) heads=$2 ;; --dim) dim=$2 ;;
    --seq) seq=$2 ;; --batch) batch=$2 ;; --steps) steps=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
bash scripts/deps.sh python3-torch >/dev/null
if [ ! -x build/release/strata ]; then
    cmake --preset release >/dev/null && cmake --build build/release -j2 >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "model: L=$layers C=$dim heads=$heads T=$seq batch=$batch, $steps steps ($warm warm-up), $threads thread(s)"
OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads build/release/strata train --quiet \
    --layers "$layers" --heads "$heads" --dim "$dim" --seq "$seq" --batch "$batch" \
    --steps "$steps" --threads "$threads" --lr 1e-3 --warmup 0 --metrics "$tmp/m.jsonl" 2>/dev/null
s=$(/usr/bin/python3 -c "
import json,sys
r=[json.loads(l) for l in open('$tmp/m.jsonl')][$warm:]
print('%.1f' % (len(r)*$batch*$seq/sum(x['step_s'] for x in r)))")
echo "strata tokens/s: $s"
# Debian's torch runs its own OpenMP pool next to the (pthreads) OpenBLAS it calls for matmuls;
# with the default active wait, idle OpenMP threads spin on the cores OpenBLAS's threads need, which
# at 2 threads halved torch's throughput here (1959 vs 4373 tokens/s). PASSIVE makes torch's best
# case the baseline; at 1 thread it changes nothing.
t=$(OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/train_vs_torch.py --threads "$threads" \
    --layers "$layers" --heads "$heads" --dim "$dim" --seq "$seq" --batch "$batch" \
    --steps "$steps" --warmup-steps "$warm")
echo "$t"
tt=$(echo "$t" | sed -E 's/torch tokens\/s: ([0-9.]+).*/\1/')
/usr/bin/python3 -c "print('ratio strata/torch: %.2fx' % ($s / $tt))"
