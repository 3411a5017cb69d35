#!/usr/bin/env bash
# The collectives benchmark on this one machine: builds strata, then runs strata bench on local
# ranks (shared memory), nccl-tests style. Usage: scripts/bench.sh [ranks] [strata bench args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target strata
n=${1:-2}
shift || true
args=("$@")
((${#args[@]})) || args=(allreduce -b 8 -e 256M -f 4)
exec build/release/strata launch -n "$n" -- build/release/strata bench "${args[@]}"
