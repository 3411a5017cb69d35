#!/usr/bin/env bash
# The multi-dimensional ring allreduce against the flat ring on an emulated torus
# (bench/emu_cluster.sh --torus): both forced with STRATA_COMM_ALGO, then the cost model's own
# choice, one after the other on the same namespaces in the same run, each time beside the model's
# prediction from the cluster file, and the ratio flat ring / torus per size.
#
# usage: bench/torus.sh [--torus 3x3] [--host-mbit 200] [--sizes 4M,16M,64M] [--iters N]
# Needs root (network namespaces) and tbf. Keep --host-mbit low on a small machine: every host
# sends on all its torus links at once, and the kernel's forwarding and shaping must not be the
# bottleneck.
set -euo pipefail
cd "$(dirname "$0")/.."
torus=3x3 mbit=200 sizes=4M,16M,64M iters=2
while (($#)); do
    case "$1" in
    --torus) torus=$2; shift 2 ;;
    --host-mbit) mbit=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "torus: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
bash scripts/deps.sh iproute2
cmake --preset release >/dev/null && cmake --build --preset release -j 2 >/dev/null
S=$PWD/build/release/strata
out=$(mktemp -d /tmp/strata-torus.XXXXXX)
trap 'rm -rf "$out"' EXIT
res=$out/res.jsonl
b="$S bench allreduce --sizes $sizes -n $iters -w 1 --json"
runs=()
for algo in ring torus; do
    runs+=(--run "STRATA_COMM_ALGO=allreduce:$algo $b | sed 's/^/$algo /' >>$res")
done
runs+=(--run "$b | sed 's/^/auto /' >>$res")
echo "=== torus $torus, $mbit Mbit/s links: bash bench/emu_cluster.sh --torus $torus --host-mbit $mbit" >&2
bash bench/emu_cluster.sh --torus "$torus" --host-mbit "$mbit" "${runs[@]}"
/usr/bin/python3 - "$res" "$torus" "$mbit" <<'EOF'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    tag, _, js = line.partition(" ")
    try:
        r = json.loads(js)
    except ValueError:
        continue
    rows.setdefault(r["size_bytes"], {})[tag] = r
print(f"# allreduce on a {sys.argv[2]} torus, {sys.argv[3]} Mbit/s links: time in ms "
      "(model = the cost model on the cluster file, err = measured/model - 1)")
print(f"{'size':>8} {'variant':>8} {'algo':>8} {'time_ms':>10} {'model_ms':>10} {'err':>6}")
for size in sorted(rows):
    by = rows[size]
    for tag in ("ring", "torus", "auto"):
        if tag not in by:
            continue
        r = by[tag]
        t, m = r["time_us"] / 1e3, r.get("model_us", -1) / 1e3
        err = f"{t / m - 1:+.0%}" if m > 0 else "-"
        print(f"{size >> 20:>6}Mi {tag:>8} {r.get('algo', tag):>8} {t:10.1f} {m:10.1f} {err:>6}")
    if "ring" in by and "torus" in by:
        print(f"{'':>8} torus is {by['ring']['time_us'] / by['torus']['time_us']:.2f}x "
              "faster than the flat ring")
EOF
