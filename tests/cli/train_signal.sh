#!/usr/bin/env bash
# SIGTERM to `strata launch -n 2 strata train --ckpt-dir DIR` mid-run (issue 11): the launcher
# forwards it, every rank finishes its step, the ranks agree on the step to stop after, a final
# checkpoint of that step is committed, the ranks exit 0 and the launcher 128+15. Then `--resume`
# continues from exactly that step: its steps are identical (loss and grad norm) to those of an
# uninterrupted run. The runs are long (10^6 steps) and stopped by the signal once they have logged a
# few steps, so nothing depends on how fast this machine is; the polling loops' deadlines only keep
# a broken build from hanging the test.
# Usage: train_signal.sh path/to/strata
set -euo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$W"
}
trap cleanup EXIT
A=(--data data/corpus/strata_tales.txt --layers 2 --heads 2 --dim 32 --seq 32 --batch 8
   --steps 1000000 --warmup 5 --lr 3e-3 --threads 1 --quiet --zero 3 --ckpt-every 1000000)
fail=0

lines() { if [ -f "$1" ]; then grep -c '^{"step"' "$1" || true; else echo 0; fi; }

# run_until NAME MIN_LINES [train flags...]: starts the job, waits for MIN_LINES metrics lines,
# sends SIGTERM to the launcher, waits; leaves the launcher's status in $W/NAME.rc.
run_until() {
    local name=$1 min=$2
    shift 2
    "$S" launch -n 2 --no-prefix -- "$S" train "${A[@]}" --metrics "$W/$name.jsonl" "$@" \
        2>"$W/$name.err" &
    local pid=$!
    pids+=("$pid")
    for _ in $(seq 1200); do # 120 s at most
        [ "$(lines "$W/$name.jsonl")" -ge "$min" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -TERM "$pid" 2>/dev/null || true
    local rc=0
    wait "$pid" || rc=$?
    echo "$rc" >"$W/$name.rc"
}

# The step lines of a metrics file (a resumed run's also holds a "resumed_from" event).
laststep() { grep '^{"step"' "$1" | tail -n 1 | sed -E 's/^\{"step":([0-9]+).*/\1/'; }
firststep() { grep -m 1 '^{"step"' "$1" | sed -E 's/^\{"step":([0-9]+).*/\1/'; }
key() { grep '^{"step"' "$1" | sed -E 's/("grad_norm":[^,]*).*/\1/'; }

# 1. Stopped by SIGTERM: a final checkpoint of the last step logged.
run_until a 3 --ckpt-dir "$W/ck"
k=$(laststep "$W/a.jsonl")
if [ "$(cat "$W/a.rc")" = 143 ] && grep -q "stopped by SIGTERM after step $k " "$W/a.err" &&
   [ -f "$W/ck/ckpt_$(printf %08d "$k").manifest.json" ] &&
   [ -f "$W/ck/ckpt_$(printf %08d "$k").rank1.safetensors" ] &&
   ! grep -q "exited with status" "$W/a.err"; then
    echo "SIGTERM -> final checkpoint     ok (step $k, launcher status 143, ranks exit 0)"
else
    cat "$W/a.err"; ls "$W/ck" || true
    echo "SIGTERM -> final checkpoint     FAIL (launcher status $(cat "$W/a.rc"), last step $k)"
    fail=1
fi

# 2. --resume continues from it (and is itself stopped the same way a few steps later).
run_until b 3 --ckpt-dir "$W/ck" --resume
if grep -q "resumed at step $k " "$W/b.err" && [ "$(firststep "$W/b.jsonl")" = $((k + 1)) ]; then
    echo "--resume continues from it      ok (first step $((k + 1)))"
else
    cat "$W/b.err"; echo "--resume continues from it      FAIL"; fail=1
fi

# 3. The resumed steps are the uninterrupted run's: a reference run stopped after them.
m=$(laststep "$W/b.jsonl")
run_until r "$m"
if diff <(key "$W/b.jsonl") <(key "$W/r.jsonl" | sed -n "$((k + 1)),${m}p") >/dev/null &&
   diff <(key "$W/a.jsonl") <(key "$W/r.jsonl" | head -n "$k") >/dev/null; then
    echo "stop + resume = uninterrupted   ok (steps 1-$m identical)"
else
    echo "stop + resume = uninterrupted   FAIL"; fail=1
fi
exit $fail
