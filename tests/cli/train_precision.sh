#!/usr/bin/env bash
# --precision bf16 against fp32 (issue 19): the same run, 300 steps, in both precisions.
#   - bf16 tracks fp32: the mean loss of the last 50 steps within 1% of fp32's, and every step
#     within 5% (the two runs round differently, so their batches' losses wander apart step by
#     step; measured here, seeds 1-5: 0.01% and 0.4% at worst). At learning rate 1e-3: at 3e-3
#     this small model's run is unstable right after warm-up, and whether a loss spike hits one
#     precision and not the other is chance (seed 4: 64% apart at step 24, in float32 vs bf16
#     alike), which a test must not measure;
#   - bf16 really computes in bf16 where the CPU has bf16 units (the banner names them): its curve
#     is not fp32's bit for bit; where the CPU has none (forced with oneDNN's ONEDNN_MAX_CPU_ISA,
#     50 steps, and on such machines anyway), the banner says so and the run is fp32's exactly;
#   - bf16 under tensor parallelism with sequence parallelism (its held operands cut in row blocks)
#     tracks the one-process bf16 run within 1e-4 every step;
#   - bad precisions are refused by name, on the command line and in a config file (file:line);
#   - strata train runs with OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT=300 (oneDNN's libgomp
#     threads wait a few microseconds spinning, then sleep: they must not hold the cores others
#     need), unless the user set a policy, which is kept (and no count added), or a count, which is
#     kept under the passive policy.
# Usage: train_precision.sh path/to/strata
set -euo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
. tests/cli/lib/train.sh
A=(--data data/corpus/strata_tales.txt --steps 300 --warmup 20 --lr 1e-3 --threads 1 --quiet)
"$S" train "${A[@]}" --precision fp32 --metrics "$W/ref.jsonl" 2>"$W/fp32.log"
"$S" train "${A[@]}" --precision bf16 --metrics "$W/bf16.jsonl" 2>"$W/bf16.log"
# The fp32 reference of the capped run runs capped too: oneDNN may take the fp32 products as well
# (STRATA_GEMM, docs/train.md), and the cap must not change their kernels between the two.
ONEDNN_MAX_CPU_ISA=AVX512_CORE "$S" train "${A[@]}" --steps 50 --precision fp32 \
    --metrics "$W/fp32_50.jsonl" 2>/dev/null
ONEDNN_MAX_CPU_ISA=AVX512_CORE "$S" train "${A[@]}" --steps 50 --precision bf16 \
    --metrics "$W/none.jsonl" 2>"$W/none.log"

# track NAME FILE: the tolerance above against $W/ref.jsonl.
track() {
    awk -v name="$1" '
        NR == FNR { ref[$1] = $2; next }
        { n++; d = $2 - ref[$1]; if (d < 0) d = -d; if (d > 0) differ = 1
          if (d > 0.05 * ref[$1]) { bad = 1; printf "  step %d: %s vs %s\n", $1, $2, ref[$1] }
          if ($1 > 250) { s += $2; r += ref[$1] } }
        END { m = s - r; if (m < 0) m = -m
              if (n != 300) { printf "  %d steps, want 300\n", n; bad = 1 }
              if (m > 0.01 * r) { printf "  last 50 steps: mean %.4f vs %.4f\n", s / 50, r / 50; bad = 1 }
              if (!differ) { print "  identical to fp32: bf16 not in use"; bad = 1 }
              printf "%-52s %s (last 50 steps: %.4f vs fp32 %.4f)\n", name, bad ? "FAIL" : "ok", s / 50, r / 50
              exit bad }' <(losses "$W/ref.jsonl") <(losses "$2") || fail=1
}
if grep -qE 'bf16 \((amx|avx512_bf16)\)' "$W/bf16.log"; then
    track "bf16 tracks fp32 ($(grep -oE 'amx|avx512_bf16' "$W/bf16.log" | head -1))" "$W/bf16.jsonl"
else
    grep -q 'no bf16 units' "$W/bf16.log" || { cat "$W/bf16.log"; echo "banner: FAIL"; fail=1; }
    same_losses "bf16 on a CPU without bf16 units = fp32" "$W/bf16.jsonl" 1 300
fi
if grep -q 'bf16 asked for: this CPU has no bf16 units' "$W/none.log"; then
    if cmp -s <(losses "$W/fp32_50.jsonl") <(losses "$W/none.jsonl"); then
        echo "bf16 with the units capped away = fp32, bit for bit: ok"
    else
        echo "bf16 with the units capped away differs from fp32: FAIL"; fail=1
    fi
else
    cat "$W/none.log"; echo "capped banner: FAIL"; fail=1
fi

expect_error "--precision fp16 refused" "expects fp32 or bf16, got 'fp16'" \
    "$S" train "${A[@]}" --steps 1 --precision fp16
printf '{\n  "steps": 2,\n  "precision": "fp8"\n}\n' >"$W/bad.json"
expect_error "config precision fp8 refused (file:line)" "bad.json:3: \"precision\": expected fp32 or bf16" \
    "$S" train "${A[@]}" --config "$W/bad.json"

# omp_env ENV...: "POLICY COUNT", the OMP_WAIT_POLICY and GOMP_SPINCOUNT in the environment of a
# running `strata train` started by `env ENV...` (read once it trains, after its re-exec), each
# "none" where unset.
omp_env() {
    env "$@" "$S" train "${A[@]}" --steps 100000 --metrics "$W/long.jsonl" 2>/dev/null &
    local pid=$! v="none none"
    for _ in $(seq 100); do
        if [ -s "$W/long.jsonl" ]; then
            local e p c
            e=$(tr '\0' '\n' <"/proc/$pid/environ")
            p=$(sed -n 's/^OMP_WAIT_POLICY=//p' <<<"$e")
            c=$(sed -n 's/^GOMP_SPINCOUNT=//p' <<<"$e")
            v="${p:-none} ${c:-none}"
            break
        fi
        sleep 0.05
    done
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
    rm -f "$W/long.jsonl"
    echo "$v"
}
B=(--data data/corpus/strata_tales.txt --steps 20 --warmup 5 --lr 3e-3 --threads 1 --quiet
   --precision bf16)
"$S" train "${B[@]}" --metrics "$W/ref.jsonl" 2>/dev/null
"$S" launch -n 2 -- "$S" train "${B[@]}" --tp 2 --sp --metrics "$W/tp.jsonl" 2>/dev/null
same_losses "bf16 at TP 2 with SP = one process" "$W/tp.jsonl" 1 20

expect_env() { # what, expected "POLICY COUNT", ENV...
    local what=$1 want=$2 v
    shift 2
    v=$(omp_env "$@")
    [ "$v" = "$want" ] && echo "$what ($v): ok" || { echo "$what: got '$v', expected '$want': FAIL"; fail=1; }
}
expect_env "passive, 300 spins by default" "PASSIVE 300" -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT
expect_env "a user's OMP_WAIT_POLICY kept, no count added" "ACTIVE none" -u GOMP_SPINCOUNT OMP_WAIT_POLICY=ACTIVE
expect_env "a user's GOMP_SPINCOUNT kept, passive" "PASSIVE 10000" -u OMP_WAIT_POLICY GOMP_SPINCOUNT=10000
exit $fail
