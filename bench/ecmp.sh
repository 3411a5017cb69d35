#!/usr/bin/env bash
# bench/ecmp.sh: one TCP connection against several per peer (STRATA_TCP_CONNS) across ECMP paths,
# on the emulated cluster (bench/emu_cluster.sh --ecmp): 2 racks of 2 hosts, each rack's uplink
# split into two spine paths of half its rate, routed with L4 hashing, so one flow is pinned to one
# path and only several flows spread.
#
#   bash bench/ecmp.sh [--strata PATH] [--conns N] [--size 64M] [--iters 2] [--repeat 3]
#                      [--host-mbit 800]
#
# In one cluster (one run), each repeat measures a 2-rank allreduce of SIZE between racks (rank 0
# in rack 0, rank 1 in rack 1):
#   one pair    a single job, the uplinks to itself: with 1 connection per direction it gets one
#               path (half the uplink), with N it spreads over both
#   two pairs   two such jobs at once (hosts 0,2 and 1,3): with 1 connection each, their flows
#               collide on one path whenever the hash says so (half the time), with N they spread
# and prints each job's bus bandwidth (GB/s, nccl-tests' definition, out-of-place), per repeat and
# the best and worst over repeats, then "x" = N connections / 1 connection on the mean. The hash of
# a flow depends on its (random) source port, so single repeats vary: that is the point.
# Needs root and network namespaces (exit 77 without, as bench/emu_cluster.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
STRATA=$here/../build/release/strata conns=4 size=64M iters=2 repeat=3 mbit=800
while (($#)); do
    case "$1" in
    --strata) STRATA=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --host-mbit) mbit=$2; shift 2 ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "ecmp: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for v in conns iters repeat mbit; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "ecmp: --$v must be a positive integer" >&2; exit 2; }
done
case $STRATA in /*) ;; *) STRATA=$PWD/$STRATA ;; esac
[ -x "$STRATA" ] || { echo "ecmp: no strata binary at $STRATA (--strata)" >&2; exit 2; }
OUT=$(mktemp -d /tmp/strata-ecmp.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

# One job per pair of ranks: ranks 0,1 (pair 0) and 2,3 (pair 1) sit in different racks (the
# cluster's round-robin numbering). A pair past PAIRS stays idle.
job='pair=$((RANK / 2)) me=$((RANK % 2)); [ $pair -lt $PAIRS ] || exit 0
master=$(awk -v r=$((pair * 2)) "\$1 == r {print \$3}" "$EMU_DIR/ranks")
RANK=$me WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=$master \
MASTER_PORT=$((MASTER_PORT + 100 * pair)) STRATA_TOPO_FILE= STRATA_TOPO_CALIBRATE=off \
STRATA_COMM_ALGO=allreduce:ring STRATA_TCP_CONNS=$CONNS \
"$STRATA" bench allreduce --sizes $SIZE -n $ITERS -w 1 -c 1 >"$OUT/$TAG.p$pair.r$me" 2>&1'
runs=()
for ((r = 1; r <= repeat; r++)); do
    for c in 1 "$conns"; do
        for pairs in 1 2; do
            runs+=(--run "PAIRS=$pairs CONNS=$c TAG=x$r.c$c.p$pairs OUT=$OUT STRATA=$STRATA SIZE=$size ITERS=$iters; $job")
        done
    done
done
bash "$here/emu_cluster.sh" --ecmp --racks 2 --hosts 2 --oversub 2 --host-mbit "$mbit" "${runs[@]}"
status=$?
((status == 0)) || { echo "ecmp: the emulated cluster run failed (status $status)" >&2; tail -3 "$OUT"/* >&2; exit $status; }

echo "== 2-rank allreduce of $size between 2 racks, each uplink = 2 ECMP paths of $((mbit / 2)) Mbit/s"
echo "   busbw GB/s per job; x = $conns connections / 1 connection (mean over $repeat repeats)"
python3 - "$OUT" "$repeat" "$conns" <<'PY' || exit 1
import glob, os, re, sys
out, repeat, conns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def bw(path):
    for line in open(path):
        f = line.split()
        if len(f) > 7 and f[0].isdigit():  # size ... time(us): busbw = size / time for 2 ranks
            return int(f[0]) / float(f[5]) / 1e3
    sys.exit("ecmp: no result in %s:\n%s" % (path, open(path).read()[-400:]))
rows = []
for pairs, what in ((1, "one pair"), (2, "two pairs at once")):
    cells = {}
    for c in (1, conns):
        vals = [bw(os.path.join(out, "x%d.c%d.p%d.p%d.r0" % (r, c, pairs, p)))
                for r in range(1, repeat + 1) for p in range(pairs)]
        cells[c] = vals
    m1 = sum(cells[1]) / len(cells[1])
    mn = sum(cells[conns]) / len(cells[conns])
    for c in (1, conns):
        v = cells[c]
        print("  %-18s conns=%-2d  jobs: %s   worst %.3f  best %.3f  mean %.3f" % (
            what, c, " ".join("%.3f" % x for x in v), min(v), max(v), sum(v) / len(v)))
    print("  %-18s x = %.2f (mean), %.2f (worst job)" % (what, mn / m1, min(cells[conns]) / min(cells[1])))
PY
