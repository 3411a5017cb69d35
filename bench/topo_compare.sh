#!/usr/bin/env bash
# Topology-aware allreduce on an emulated cluster (bench/emu_cluster.sh), strata beside Gloo.
#
# For each shape: `strata probe` measures the fabric and writes a calibrated cluster file; then
# allreduce of each size runs with
#   ring       a flat ring in the launcher's rank order (hosts numbered round-robin across racks,
#              as a rack-blind launcher does)
#   ring_tree  a flat ring in topology-aware order
#   hier       the hierarchical, pipelined algorithm
#   auto       whatever the cost model picks
#   gloo       torch.distributed's Gloo allreduce, same ranks, same order (the peer)
# and every strata time is printed beside the cost model's prediction (from the probed file).
#
# usage: bench/topo_compare.sh [--sizes 16M,64M] [--iters N] [--shape 2rack|3level|all]
# Needs root (network namespaces); python3-torch for the Gloo peer (skipped with a note if absent).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=16M,64M iters=2 shapes=all
while (($#)); do
    case "$1" in
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --shape) shapes=$2; shift 2 ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "topo_compare: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
bash scripts/deps.sh iproute2
cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)" >/dev/null
S=$PWD/build/release/strata
out=$(mktemp -d /tmp/strata-topo.XXXXXX)
trap 'rm -rf "$out"' EXIT
have_gloo=1
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || have_gloo=0

run_shape() { # run_shape NAME emu-args...
    local name=$1
    shift
    local res="$out/$name.jsonl" cal="$out/$name.cluster.json"
    local b="$S bench allreduce --sizes $sizes -n $iters -w 1 --json"
    local runs=(--run "$S probe --out $cal --bytes 8M >&2")
    for algo in ring ring_tree hier; do
        runs+=(--run "STRATA_TOPO_FILE=$cal STRATA_COMM_ALGO=allreduce:$algo $b | sed 's/^/$algo /' >>$res")
    done
    runs+=(--run "STRATA_TOPO_FILE=$cal $b | sed 's/^/auto /' >>$res")
    if ((have_gloo)); then
        runs+=(--run "GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 bench/peer_gloo.py -C allreduce --sizes $sizes -n $iters -w 1 -c 0 --json | sed 's/^/gloo /' >>$res")
    fi
    echo "=== $name: $*" >&2
    bash bench/emu_cluster.sh "$@" "${runs[@]}"
    /usr/bin/python3 - "$res" "$name" <<'EOF'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    tag, _, js = line.partition(" ")
    try:
        r = json.loads(js)
    except ValueError:
        continue
    if r.get("unsupported"):
        continue
    rows.setdefault(r["size_bytes"], {})[tag] = r
print(f"# {sys.argv[2]}: time in ms (model = cost model on the probed fabric, err = measured/model - 1)")
print(f"{'size':>8} {'variant':>10} {'algo':>10} {'time_ms':>10} {'model_ms':>10} {'err':>7}")
for size in sorted(rows):
    by = rows[size]
    for tag in ("ring", "ring_tree", "hier", "auto", "gloo"):
        if tag not in by:
            continue
        r = by[tag]
        t = r["time_us"] / 1e3
        m = r.get("model_us", -1) / 1e3
        err = f"{t / m - 1:+.0%}" if m > 0 else "-"
        mod = f"{m:10.1f}" if m > 0 else f"{'-':>10}"
        print(f"{size >> 20:>6}Mi {tag:>10} {r.get('algo', tag):>10} {t:10.1f} {mod} {err:>7}")
    if "hier" in by:
        h = by["hier"]["time_us"]
        for tag in ("ring", "ring_tree", "gloo"):
            if tag in by:
                print(f"{'':>8} hier is {by[tag]['time_us'] / h:.2f}x faster than {tag}")
EOF
}

case $shapes in
2rack | all) run_shape 2rack --racks 2 --hosts 4 --host-mbit 800 --oversub 8 ;;&
3level | all) run_shape 3level --zones 2 --racks 2 --hosts 2 --host-mbit 800 --oversub 2 --zone-oversub 4 ;;
2rack) ;;
*) echo "topo_compare: --shape 2rack|3level|all" >&2; exit 2 ;;
esac
