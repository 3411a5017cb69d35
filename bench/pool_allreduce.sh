#!/usr/bin/env bash
# The pool allreduce on an emulated cluster (bench/emu_cluster.sh), beside strata's best allreduce
# on the same ranks.
#
# The cluster: 2 racks of 4 hosts (800 Mbit/s NICs, 8:1 oversubscribed rack uplinks), jumbo frames,
# and a pool node where each rack's switch would be (--switch-nodes; its link the rack's 4 NICs
# together), running `strata pool serve`. For each loss level (nftables drops that many percent of
# the frames in every bridge, TCP and UDP alike) every size runs as
#   pool       STRATA_COMM_ALGO=allreduce:pool, the result by IP multicast (STRATA_POOL_MULTICAST)
#   pool_uni   the same, the result by one unicast copy per rank
#   ring       the flat ring in the launcher's (rack-blind, round-robin) rank order
#   hier       the hierarchical, pipelined algorithm
#   auto       what strata's price picks (the pool is offered too)
# and "best" is the fastest of ring, hier and auto: strata's best allreduce. At 0% loss the pool and
# hier also run on gradients of which half the 8 KiB blocks are zero (strata bench --zero-blocks
# 50), which the pool's zero filter sends as short records. Last, the pool node's own ADD rate per
# core against this machine's memory bandwidth (build/release/bench/strata_pool_add).
#
# usage: bench/pool_allreduce.sh [--sizes 1M,4M,16M,64M] [--iters N] [--loss 0,0.1,1]
# Needs root (network namespaces) and nftables for --loss (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=1M,4M,16M,64M iters=3 losses=0,0.1,1
while (($#)); do
    case "$1" in
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --loss) losses=$2; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "pool_allreduce: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
bash scripts/deps.sh iproute2 nftables
cmake --preset release >/dev/null && cmake --build --preset release -j "$(getconf _NPROCESSORS_ONLN)" >/dev/null
S=$PWD/build/release/strata
out=$(mktemp -d /tmp/strata-pool-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
res=$out/results.jsonl
STRATA_POOL_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export STRATA_POOL_SECRET

# The ranks find the pool nodes in EMU_SWITCHES (one address per rack, rack order).
nodes='STRATA_POOL_NODES=$(echo "$EMU_SWITCHES" | sed "s/,/:7700,/g; s/\$/:7700/")'
for loss in ${losses//,/ }; do
    b="$S bench allreduce --sizes $sizes -n $iters -w 1 --json"
    tag() { echo "sed 's/^/$1 $loss /' >>$res"; }
    runs=(--run "$nodes STRATA_POOL_MULTICAST=239.192.50.0:7800 STRATA_COMM_ALGO=allreduce:pool $b | $(tag pool)"
          --run "$nodes STRATA_COMM_ALGO=allreduce:pool $b | $(tag pool_uni)"
          --run "$nodes STRATA_COMM_ALGO=allreduce:ring $b | $(tag ring)"
          --run "$nodes STRATA_COMM_ALGO=allreduce:hier $b | $(tag hier)"
          --run "$nodes STRATA_POOL_MULTICAST=239.192.50.0:7800 $b | $(tag auto)")
    if [ "$loss" = 0 ]; then
        runs+=(--run "$nodes STRATA_POOL_MULTICAST=239.192.50.0:7800 STRATA_COMM_ALGO=allreduce:pool $b --zero-blocks 50 | $(tag pool_zero50)"
               --run "$nodes STRATA_COMM_ALGO=allreduce:hier $b --zero-blocks 50 | $(tag hier_zero50)")
    fi
    lossarg=()
    [ "$loss" = 0 ] || lossarg=(--loss "$loss")
    echo "=== loss $loss%" >&2
    bash bench/emu_cluster.sh --racks 2 --hosts 4 --mtu 9000 "${lossarg[@]}" --switch-nodes \
        --switch-run "$S pool serve --listen \$SWITCH_ADDR:7700 --bytes 1G --secret-env STRATA_POOL_SECRET" \
        "${runs[@]}"
done

/usr/bin/python3 - "$res" <<'EOF'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    tag, loss, js = line.split(" ", 2)
    try:
        r = json.loads(js)
    except ValueError:
        continue
    rows.setdefault((float(loss), r["size_bytes"]), {})[tag] = r
tags = ("pool", "pool_uni", "ring", "hier", "auto", "pool_zero50", "hier_zero50")
print("# allreduce, 8 ranks in 2 racks (8:1 uplinks), pool nodes at the rack switches: time in ms")
print(f"{'loss%':>6} {'size':>6} " + " ".join(f"{t:>11}" for t in tags) + f" {'best':>11} {'pool/best':>9}")
for (loss, size) in sorted(rows):
    by = rows[(loss, size)]
    ms = {t: by[t]["time_us"] / 1e3 for t in tags if t in by}
    best = min((ms[t], t) for t in ("ring", "hier", "auto") if t in ms) if any(
        t in ms for t in ("ring", "hier", "auto")) else None
    cells = " ".join(f"{ms[t]:11.1f}" if t in ms else f"{'-':>11}" for t in tags)
    ratio = f"{best[0] / ms['pool']:8.2f}x" if best and "pool" in ms else f"{'-':>9}"
    bname = f"{best[0]:7.1f}:{best[1][:3]}" if best else f"{'-':>11}"
    print(f"{loss:6.1f} {size >> 20:>4}Mi {cells} {bname:>11} {ratio}")
print("# pool/best above 1: the pool is that many times faster than strata's best other allreduce")
print("# auto's algorithm at each size:", {f"{s >> 20}Mi": by["auto"].get("algo") for (l, s), by in sorted(rows.items()) if l == 0 and "auto" in by})
EOF
echo "# the pool node's ADD rate per core against memory bandwidth:"
build/release/bench/strata_pool_add 64M 5
