#!/usr/bin/env bash
# Single-process training throughput: strata vs PyTorch (Debian python3-torch) on the CPU, same
# model, batch, optimizer (AdamW with fp32 master weights, clipping), precision and thread count,
# in the same run. Prints both tokens/s, both MFUs (against the GEMM peak strata measures at that
# precision and thread count on this CPU) and the ratio strata / torch.
# Both run under the same OpenBLAS core: the environment's (--openblas-core env, the default), the one
# OpenBLAS detects on this CPU (auto: OPENBLAS_CORETYPE unset), or a named one. torch's products run
# on it; strata's run on oneDNN wherever its engine runs (STRATA_GEMM, docs/train.md), so the core
# matters to strata only where oneDNN does not run.
# Both run on libgomp (strata's oneDNN and layers, torch's own pool) under the same waiting: passive,
# after GOMP_SPINCOUNT rounds of spinning (--omp-spin, default 10000, about 0.1-0.3 ms here). A
# benchmark has the machine to itself, and there each was fastest with it at 2 threads (3.3M model,
# tokens/s: torch bf16 6700-7800 sleeping at once, 8000-9300 with it, fp32 4200-5200 -> 4600-5700;
# strata bf16 12,600 -> 14,100 with 3000 rounds). Without PASSIVE libgomp spins for milliseconds,
# and torch's fp32 at 2 threads runs at half its speed (2000 tokens/s), its idle OpenMP threads
# holding the cores its OpenBLAS threads need.
# Usage: bench/train_vs_torch.sh [--threads N] [--layers N] [--heads N] [--dim N] [--seq N]
#                                [--batch N] [--steps N] [--precision fp32|bf16]
#                                [--openblas-core env|auto|NAME] [--omp-spin N]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=1 layers=4 heads=8 dim=256 seq=128 batch=8 steps=20 warm=3 precision=fp32 core=env
spin=10000
while (($#)); do
    case "$1" in
    --threads) threads=$2 ;; --layers) layers=$2 ;; --heads) heads=$2 ;; --dim) dim=$2 ;;
    --seq) seq=$2 ;; --batch) batch=$2 ;; --steps) steps=$2 ;; --precision) precision=$2 ;;
    --openblas-core) core=$2 ;; --omp-spin) spin=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
bash scripts/deps.sh python3-torch >/dev/null
if [ ! -x build/release/strata ]; then
    cmake --preset release >/dev/null && cmake --build build/release -j2 >/dev/null
fi
case "$core" in
env) ;;
auto) unset OPENBLAS_CORETYPE ;;
*) export OPENBLAS_CORETYPE=$core ;;
esac
export OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=$spin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "model: L=$layers C=$dim heads=$heads T=$seq batch=$batch, $steps steps ($warm warm-up), $threads thread(s), $precision"
echo "libgomp: OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=$spin (both programs)"
echo "OpenBLAS core: $(/usr/bin/python3 -c "import ctypes; l = ctypes.CDLL('libopenblas.so.0'); \
l.openblas_get_corename.restype = ctypes.c_char_p; print(l.openblas_get_corename().decode())")"
OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads STRATA_PROGRESS=lines build/release/strata train \
    --layers "$layers" --heads "$heads" --dim "$dim" --seq "$seq" --batch "$batch" \
    --steps "$steps" --threads "$threads" --lr 1e-3 --warmup 0 --precision "$precision" \
    --progress-every 1000 --metrics "$tmp/m.jsonl" 2>"$tmp/err"
peak=$(sed -nE 's/.*MFU [0-9.]+% of ([0-9]+ GFLOP\/s [a-z0-9]+).*/\1/p' "$tmp/err")
echo "peak measured by strata: $peak"
echo "strata's products: $(sed -nE 's/.*steps, (fp32|bf16) \(([^)]*)\).*/\2/p' "$tmp/err")"
# MFU per token/s: the model's FLOPs per token over the peak strata measured (the same in every
# step's record), so torch's MFU is its tokens/s times the same factor.
read -r s per < <(/usr/bin/python3 -c "
import json,sys
r=[json.loads(l) for l in open('$tmp/m.jsonl')][$warm:]
print('%.1f %.6g' % (len(r)*$batch*$seq/sum(x['step_s'] for x in r), r[0]['mfu']/r[0]['tokens_per_s']))")
/usr/bin/python3 -c "print('strata tokens/s: $s (MFU %.1f%%)' % (100 * $s * $per))"
t=$(OMP_NUM_THREADS=$threads /usr/bin/python3 bench/train_vs_torch.py --threads "$threads" \
    --layers "$layers" --heads "$heads" --dim "$dim" --seq "$seq" --batch "$batch" \
    --steps "$steps" --warmup-steps "$warm" --precision "$precision")
tt=$(echo "$t" | sed -E 's/torch tokens\/s: ([0-9.]+).*/\1/')
/usr/bin/python3 -c "print('$t'.replace(' (', ' (MFU %.1f%%, ' % (100 * $tt * $per), 1))"
/usr/bin/python3 -c "print('ratio strata/torch: %.2fx' % ($s / $tt))"
