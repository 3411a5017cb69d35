#!/usr/bin/env bash
# Start-up cost as the job grows: communicator creation + first barrier, slowest rank, for strata at
# 8..512 local ranks and for torch.distributed/Gloo at the sizes this 2-core machine can hold
# (each Gloo rank is a Python process with torch loaded). Prints a table with the ratio where both
# ran, and the per-rank cost, which must stay flat for strata.
# Usage: bench/init_scale.sh [build-dir]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
bash scripts/deps.sh python3-torch
cmake --preset release >/dev/null && cmake --build --preset release --target strata strata_init_probe >/dev/null
ulimit -n "$(ulimit -Hn)"
strata_at() { "$build/strata" launch -n "$1" --no-prefix -- "$build/bench/strata_init_probe" | grep impl; }
gloo_at() { /usr/bin/python3 bench/peer_gloo_init.py "$1" "$((29700 + $1))" 2>/dev/null | grep impl || echo '{}'; }
field() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d.get("init_s", "-"))' "$1"; }
printf "%8s %12s %12s %10s %14s\n" ranks strata_s gloo_s gloo/strata strata_ms/rank
for n in 8 16 32 64 128 256 512; do
    s=$(field "$(strata_at "$n")")
    g="-"
    [ "$n" -le 32 ] && g=$(field "$(gloo_at "$n")")
    ratio=$(python3 -c "import sys; s,g=sys.argv[1:]; print('-' if g=='-' or s=='-' else '%.1fx' % (float(g)/float(s)))" "$s" "$g")
    per=$(python3 -c "import sys; print('%.2f' % (1000*float(sys.argv[1])/int(sys.argv[2])))" "$s" "$n")
    printf "%8s %12s %12s %10s %14s\n" "$n" "$s" "$g" "$ratio" "$per"
done
