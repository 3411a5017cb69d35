#!/usr/bin/env bash
# Where tensor parallelism runs decides the step: the same TP=2 x DP=4 training job on an emulated
# cluster (bench/emu_cluster.sh: 2 racks x 2 hosts x 2 ranks, ranks packed host by host, 800 Mbit/s
# host NICs, 8:1 rack uplinks = 200 Mbit/s) with the device mesh's order chosen by the cost model
# and with the other placement forced (--order), for two model shapes:
#   activations  batch 32 x 128 tokens, C 128, 4 layers: TP's activations outweigh DP's gradients
#   parameters   batch  8 x  64 tokens, C 256, 4 layers: DP's gradients outweigh TP's activations
# "tp inside" is --order tp,cp,pp,dp (TP pairs on one host, DP across the racks), "tp across" is
# --order dp,cp,pp,tp (TP pairs one rack apart). For each run: the mesh's prediction (the pricing
# module's seconds per step of each dimension's communication, printed by strata train), the
# measured mean step time (steps 3..N), the TP collectives' time in flight and waited for per step
# (metrics tp_comm_s, tp_wait_s), and for the cost model's choice the share of TP communication
# hidden behind computation in one traced step (bench/trace_overlap.py --only tp.).
# The check: for each shape, the cost model's order is the faster one measured.
# usage: bench/tp_mesh.sh [--steps N] [--keep DIR]
# Needs root (network namespaces); exits 77 where they cannot be made, 1 when the check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=8 keep=""
while (($#)); do
    case "$1" in
    --steps) steps=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "tp_mesh: unknown argument $1" >&2; exit 2 ;;
    esac
done
S=$PWD/build/release/strata
[ -x "$S" ] || { echo "tp_mesh: build first (cmake --preset release && cmake --build --preset release)" >&2; exit 2; }
out=${keep:-$(mktemp -d)}
mkdir -p "$out"
[ -n "$keep" ] || trap 'rm -rf "$out"' EXIT
py=/usr/bin/python3
declare -A shape=(
    [activations]="--batch 32 --seq 128 --max-seq 128 --layers 4 --dim 128 --heads 4"
    [parameters]="--batch 8 --seq 64 --max-seq 64 --layers 4 --dim 256 --heads 8")
declare -A order=([inside]=tp,cp,pp,dp [across]=dp,cp,pp,tp)

# run NAME EXTRA-ARGS...: one training job on the emulated cluster; its log and metrics in $out.
run() {
    local name=$1; shift
    set +e
    bench/emu_cluster.sh --racks 2 --hosts 2 --ranks-per-host 2 --numbering packed --host-mbit 800 \
        --oversub 8 --launch "$S launch -n 8 -- \"\$EMU_ENTER\" $S train --tp 2 --steps $steps \
        --data $PWD/data/corpus/strata_tales.txt --metrics $out/$name.jsonl $*" >"$out/$name.log" 2>&1
    local rc=$?
    set -e
    [ $rc -eq 77 ] && { echo "tp_mesh: network namespaces unavailable here" >&2; exit 77; }
    [ $rc -eq 0 ] || { echo "tp_mesh: run $name failed:" >&2; tail -5 "$out/$name.log" >&2; exit 1; }
}

# stats FILE: mean step seconds, TP comm and wait per step, over steps 3..N.
stats() {
    $py - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
mean = lambda k: sum(r[k] for r in rows) / len(rows)
print("%.3f %.3f %.3f" % (mean("step_s"), mean("tp_comm_s"), mean("tp_wait_s")))
PY
}

fail=0
printf '%-12s %-14s %-10s %-48s %8s %9s %9s\n' shape placement order "mesh prediction (communication per step)" "step s" "TP comm s" "TP wait s"
for sh in activations parameters; do
    run "$sh.auto" ${shape[$sh]} --trace "$out/$sh.trace.json" --trace-step 3
    chosen=$(sed -n 's/.*order \([a-z,]*\) (chosen by the cost model).*/\1/p' "$out/$sh.auto.log" | head -1)
    [ -n "$chosen" ] || { echo "tp_mesh: no mesh line in $out/$sh.auto.log" >&2; exit 1; }
    for where in inside across; do
        if [ "${order[$where]}" = "$chosen" ]; then
            name=$sh.auto
        else
            name=$sh.$where
            run "$name" ${shape[$sh]} --order "${order[$where]}"
        fi
        pred=$(sed -n 's/^\[r0\] mesh: \(.*\); order.*/\1/p' "$out/$name.log" | head -1)
        read -r step comm wait < <(stats "$out/$name.jsonl")
        eval "step_$where=$step"
        tag=$([ "$name" = "$sh.auto" ] && echo "cost model" || echo forced)
        printf '%-12s %-14s %-10s %-48s %8s %9s %9s\n' "$sh" "tp $where" "$tag" "$pred" "$step" "$comm" "$wait"
    done
    hidden=$($py bench/trace_overlap.py --only tp. "$out/$sh".trace.r*.json | tail -1)
    best=$($py -c "print('inside' if $step_inside <= $step_across else 'across')")
    ratio=$($py -c "a, b = sorted(($step_inside, $step_across)); print('%.2f' % (b / a))")
    want=$([ "$chosen" = "${order[inside]}" ] && echo inside || echo across)
    echo "  $sh: cost model chose tp $want; measured fastest: tp $best (${ratio}x the other); TP $hidden"
    [ "$want" = "$best" ] || fail=1
done
((fail == 0)) && echo "check passed: the cost model's order was the faster one for both shapes" ||
    { echo "check FAILED: the cost model's order was not the faster one" >&2; exit 1; }
