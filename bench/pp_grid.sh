#!/usr/bin/env bash
# Pipeline layouts measured against their predictions: a grid of TP / PP / DP layouts of one
# training job, each trained by strata and predicted twice, side by side:
#   planner   `strata plan predict` for the same model, batch and layout, with this machine's CPU
#             measured by `strata plan calibrate-cpu --threads 1` as the accelerator and the
#             cpu-local cluster (or the emulated cluster's file): the step time and bubble it
#             predicts, the schedule simulated by the same generator the trainer runs
#   schedule  the trainer's own prediction of each stage's bubble: its schedule simulated with the
#             F/B/W durations it measured (metrics pp_bubble_predicted)
# The CPU's efficiency is calibrated first, on one process training the same model (not a layout of
# the grid). Part 1, this machine, 2 ranks (1 BLAS thread each): tp2, dp2, and pp2 with gpipe, 1f1b,
# interleaved (vp 2), zb-h1, zb-v (vp 2). Part 2 (--emu, needs root): 8 ranks on the emulated
# cluster (2 racks x 2 hosts x 2 ranks, 800 Mbit/s NICs, 8:1 rack uplinks): tp2 x pp2 x dp2 1f1b,
# pp2 x dp4 zb-h1, tp2 x dp4, pp4 x dp2 1f1b, tp2 x pp4 1f1b. Those 8 ranks share this machine's 2
# cores while the planner gives every rank its own accelerator (and a pipeline stage's bubble lends
# its core to the busy stages): the step times there are not a fair test of the planner, the
# bubbles and the ranking are. Those 8 ranks share this machine's 2
# cores while the planner gives every rank its own accelerator (and a pipeline stage's bubble lends
# its core to the busy stages): the step times there are not a fair test of the planner, the
# bubbles and the ranking are.
# Prints, per layout: predicted and measured step time (steps 3..N), the error, the measured bubble
# (mean over stages) beside the schedule's and the planner's; then the mean absolute error of the
# step time, 1F1B's measured bubble against its prediction, ZB-H1's bubble against 1F1B's (the same
# activation memory: both hold at most P micro-batches), and whether the planner's best layout
# (`strata plan search` over this job) was among the two fastest measured.
# usage: bench/pp_grid.sh [--steps N] [--emu] [--keep DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=10 emu=0 keep=""
while (($#)); do
    case "$1" in
    --steps) steps=$2; shift 2 ;;
    --emu) emu=1; shift ;;
    --keep) keep=$2; shift 2 ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "pp_grid: unknown argument $1" >&2; exit 2 ;;
    esac
done
S=$PWD/build/release/strata
[ -x "$S" ] || { echo "pp_grid: build first (cmake --preset release && cmake --build --preset release)" >&2; exit 2; }
out=${keep:-$(mktemp -d)}
mkdir -p "$out"
[ -n "$keep" ] || trap 'rm -rf "$out"' EXIT
py=/usr/bin/python3
L=8 C=256 H=8 T=128 B=16 MB=2
cat >"$out/model.json" <<JSON
{"name": "pp-grid", "layers": $L, "hidden": $C, "heads": $H, "kv_heads": $H, "ffn": $((4 * C)),
 "vocab": 256, "seq": $T, "mlp": "gelu", "norm": "layernorm", "position": "learned", "bias": true,
 "tied_embeddings": true, "dropout": false}
JSON
TRAIN=(--data "$PWD/data/corpus/strata_tales.txt" --layers $L --dim $C --heads $H --seq $T
       --max-seq $T --batch $B --micro-batch $MB --steps "$steps" --threads 1 --quiet --zero 0)
PLAN=(--model "$out/model.json" --accel "$out/cpu.json" --global-batch $B --micro-batch $MB
      --seq $T --precision fp32 --recompute none --flash off --optimizer adamw --zero 0)
# The accelerator: this CPU's sgemm peak (calibrate-cpu), then its efficiency on strata's own step
# of this model in one process (not a layout of the grid): predicted / measured.
"$S" plan calibrate-cpu --threads 1 --write "$out/cpu.json" >/dev/null
"$S" train "${TRAIN[@]}" --metrics "$out/one.jsonl" 2>/dev/null
"$S" plan "${PLAN[@]}" --cluster cpu-local --gpus 1 --json >"$out/one.plan.json"
$py - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(out + "/one.jsonl")][2:]
measured = sum(r["step_s"] for r in rows) / len(rows)
planned = json.load(open(out + "/one.plan.json"))["step_s"]
acc = json.load(open(out + "/cpu.json"))
acc["gemm_efficiency"] = acc.get("gemm_efficiency", 1) * planned / measured
json.dump(acc, open(out + "/cpu.json", "w"), indent=2)
print("calibration: one process %.3f s/step, planned %.3f s: CPU efficiency %.3f"
      % (measured, planned, acc["gemm_efficiency"]))
PY

# name tp pp vp dp schedule: one layout, trained ($launch) and planned ($cluster); a line in $out/rows.
measure() {
    local name=$1 tp=$2 pp=$3 vp=$4 dp=$5 sched=$6 n=$(($2 * $3 * $5))
    local args=(--tp "$tp" --pp "$pp" --vp "$vp" --schedule "$sched")
    $launch "$S launch -n $n -- $enter $S train ${TRAIN[*]} ${args[*]} --metrics $out/$name.jsonl" \
        >"$out/$name.log" 2>&1 || { echo "pp_grid: $name failed:" >&2; tail -5 "$out/$name.log" >&2; exit 1; }
    # The planner prices the mesh order the trainer's cost model chose (its "mesh:" line).
    local order
    order=$(sed -n 's/.*; order \([a-z,]*\) (.*/\1/p' "$out/$name.log" | head -1)
    "$S" plan "${PLAN[@]}" --cluster "$cluster" --gpus "$n" --tp "$tp" --pp "$pp" --vp "$vp" \
        --dp "$dp" --schedule "$sched" --sp off ${order:+--order "$order"} --json >"$out/$name.plan.json"
    $py - "$name" "$out" "$tp" "$pp" "$vp" "$dp" "$sched" "${order:-tp,cp,pp,dp}" >>"$out/rows" <<'PY'
import json, sys
name, out, tp, pp, vp, dp, sched, order = sys.argv[1:]
rows = [json.loads(l) for l in open("%s/%s.jsonl" % (out, name))][2:]
step = sum(r["step_s"] for r in rows) / len(rows)
bub = sum(sum(r.get("pp_bubble", [0])) / len(r.get("pp_bubble", [0])) for r in rows) / len(rows)
pred = sum(sum(r.get("pp_bubble_predicted", [0])) / len(r.get("pp_bubble_predicted", [0]))
           for r in rows) / len(rows)
plan = json.load(open("%s/%s.plan.json" % (out, name)))
print(json.dumps({"name": name, "tp": int(tp), "pp": int(pp), "vp": int(vp), "dp": int(dp),
                  "schedule": sched, "order": order, "step": step, "plan_step": plan["step_s"], "bubble": bub,
                  "bubble_sched": pred, "bubble_plan": plan["bubble_s"] / plan["step_s"]}))
PY
}

summary() { # the rows of one part; the planner's search over the same job
    local n=$1
    "$S" plan search "${PLAN[@]}" --cluster "$cluster" --gpus "$n" --max-cp 1 --zero-stages 0 \
        --top 20 --json >"$out/search$n.json"
    $py - "$out/rows" "$out/search$n.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("%-22s %-12s %9s %9s %7s %8s %9s %8s" % ("layout", "mesh order", "planned s", "measured",
                                              "error", "bubble", "schedule", "planner"))
for r in rows:
    r["err"] = r["plan_step"] / r["step"] - 1
    bub = lambda v: "%.1f%%" % (100 * v) if r["pp"] > 1 else "-"
    print("%-22s %-12s %9.3f %9.3f %+6.1f%% %8s %9s %8s" % (r["name"], r["order"], r["plan_step"], r["step"],
          100 * r["err"], bub(r["bubble"]), bub(r["bubble_sched"]), bub(r["bubble_plan"])))
mae = sum(abs(r["err"]) for r in rows) / len(rows)
print("mean absolute error of the planned step time: %.1f%% over %d layouts" % (100 * mae, len(rows)))
one = [r for r in rows if r["schedule"] == "1f1b" and r["pp"] > 1]
for r in one:
    print("1f1b %s: bubble measured %.1f%%, the schedule's prediction %.1f%% (%+.1f points)" %
          (r["name"], 100 * r["bubble"], 100 * r["bubble_sched"], 100 * (r["bubble"] - r["bubble_sched"])))
zb = [r for r in rows if r["schedule"] == "zb-h1" and r["pp"] > 1]
for z in zb:
    for o in one:
        if (o["tp"], o["pp"], o["dp"]) == (z["tp"], z["pp"], z["dp"]):
            print("zb-h1 %s: bubble %.1f%% vs 1f1b's %.1f%%" % (z["name"], 100 * z["bubble"], 100 * o["bubble"]))
found = None
for t in json.load(open(sys.argv[2]))["top"]:
    c = t["config"]
    for r in rows:
        if (r["tp"], r["pp"], r["dp"], r["schedule"], r["vp"]) == (c["tp"], c["pp"], c["dp"], c["schedule"], c["vp"]):
            found = r
            break
    if found:
        break
fastest = sorted(rows, key=lambda r: r["step"])[:2]
if found:
    print("planner's best layout measured: %s (%s the two fastest measured: %s)" % (found["name"],
          "among" if found in fastest else "NOT among", ", ".join(r["name"] for r in fastest)))
else:
    print("planner's best layouts are none of the grid's")
PY
}

echo "=== this machine: 2 ranks ==="
cluster=cpu-local launch="bash -c" enter=""
: >"$out/rows"
measure tp2 2 1 1 1 1f1b
measure dp2 1 1 1 2 1f1b
measure pp2-gpipe 1 2 1 1 gpipe
measure pp2-1f1b 1 2 1 1 1f1b
measure pp2-interleaved 1 2 2 1 interleaved
measure pp2-zb-h1 1 2 1 1 zb-h1
measure pp2-zb-v 1 2 2 1 zb-v
summary 2
((emu)) || exit 0
echo "=== the emulated cluster: 8 ranks ==="
bench/emu_cluster.sh --racks 2 --hosts 2 --ranks-per-host 2 --numbering packed --keep-file "$out/emu.json" \
    --launch true >/dev/null 2>&1 || { echo "pp_grid: network namespaces unavailable" >&2; exit 77; }
cluster=$out/emu.json enter='"$EMU_ENTER"'
launch="bench/emu_cluster.sh --racks 2 --hosts 2 --ranks-per-host 2 --numbering packed --launch"
: >"$out/rows"
measure tp2-pp2-dp2-1f1b 2 2 1 2 1f1b
measure pp2-dp4-zb-h1 1 2 1 4 zb-h1
measure pp2-dp4-1f1b 1 2 1 4 1f1b
measure tp2-dp4 2 1 1 4 1f1b
measure pp4-dp2-1f1b 1 4 1 2 1f1b
measure tp2-pp4-1f1b 2 4 1 1 1f1b
summary 8
