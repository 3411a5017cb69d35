#!/usr/bin/env bash
# Memory checkpoints (issue 11, "Recover"): `strata launch -n 2 strata train --mem-ckpt-every 1
# --ckpt-every 50` is SIGKILLed on one rank mid-run (no final checkpoint: the rank is gone), then
# rerun with --resume: it resumes from the memory step, at most 1 step behind the last step the
# killed run logged, says so on stderr and in the metrics ("resumed_from"), and its steps are
# identical (loss and grad norm) to those of an uninterrupted run. The runs are long (10^6 steps) and
# stopped by signals once they have logged enough steps, so nothing depends on how fast this machine
# is; the polling loops' deadlines only keep a broken build from hanging the test.
# Usage: train_mem_ckpt.sh path/to/strata
set -euo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
M=$(mktemp -d /dev/shm/strata-test-mem.XXXXXX) # memory that outlives the ranks: tmpfs
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$W" "$M"
}
trap cleanup EXIT
A=(--data data/corpus/strata_tales.txt --layers 2 --heads 2 --dim 64 --seq 32 --batch 8
   --steps 1000000 --warmup 5 --lr 3e-3 --threads 1 --quiet --zero 3)
CK=(--ckpt-dir "$W/ck" --ckpt-every 50 --mem-ckpt-dir "$M" --mem-ckpt-every 1)
fail=0

lines() { if [ -f "$1" ]; then grep -c '^{"step"' "$1" || true; else echo 0; fi; }
laststep() { grep '^{"step"' "$1" | tail -n 1 | sed -E 's/^\{"step":([0-9]+).*/\1/'; }
# grep -m 1, not grep | head -n 1: under pipefail, head leaving early kills grep with SIGPIPE once
# the log outgrows a pipe write, and set -e then ends the test without a word.
firststep() { grep -m 1 '^{"step"' "$1" | sed -E 's/^\{"step":([0-9]+).*/\1/'; }
key() { grep '^{"step"' "$1" | sed -E 's/("grad_norm":[^,]*).*/\1/'; }
newest() { ls "$1" | sed -nE 's/^ckpt_0*([0-9]+)\.manifest\.json$/\1/p' | sort -n | tail -n 1; }

# start NAME [train flags...]: the job in the background; its launcher's pid in $pid.
start() {
    local name=$1
    shift
    "$S" launch -n 2 --no-prefix -- "$S" train "${A[@]}" --metrics "$W/$name.jsonl" "$@" \
        2>"$W/$name.err" &
    pid=$!
    pids+=("$pid")
}

# wait_lines NAME MIN: until the job has logged MIN steps (or has exited).
wait_lines() {
    for _ in $(seq 3000); do # 150 s at most
        [ "$(lines "$W/$1.jsonl")" -ge "$2" ] && return 0
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.05
    done
}

# run_until NAME MIN [train flags...]: the job, stopped by SIGTERM after MIN steps.
run_until() {
    local name=$1 min=$2
    shift 2
    start "$name" "$@"
    wait_lines "$name" "$min"
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" || true
}

# 1. The job, killed on rank 1 (SIGKILL: nothing of it runs after) once past its first disk step.
start a "${CK[@]}"
wait_lines a 55
r1=""
for p in $(pgrep -P "$pid"); do
    tr '\0' '\n' <"/proc/$p/environ" | grep -qx RANK=1 && r1=$p
done
[ -n "$r1" ] || { cat "$W/a.err"; echo "rank 1 of the job not found"; exit 1; }
kill -KILL "$r1"
rc=0
wait "$pid" || rc=$?
k=$(laststep "$W/a.jsonl")
mem=$(newest "$M")
disk=$(newest "$W/ck")
best=$((${mem:-0} > ${disk:-0} ? ${mem:-0} : ${disk:-0}))
if [ "$rc" != 0 ] && [ -n "$mem" ] && [ -n "$disk" ] && [ "$best" -ge $((k - 1)) ]; then
    echo "rank killed -> memory step left   ok (last step logged $k, memory $mem, disk $disk)"
else
    cat "$W/a.err"; ls "$M" "$W/ck" || true
    echo "rank killed -> memory step left   FAIL (status $rc, last step $k, memory $mem, disk $disk)"
    fail=1
fi

# 2. --resume takes the memory step (the disk's is older; had the kill come right after a disk step,
#    the disk's would be as new and taken: checked as such), at most one step lost.
run_until b 3 "${CK[@]}" --resume
if [ "$(lines "$W/b.jsonl")" = 0 ]; then
    cat "$W/b.err"; echo "--resume                          FAIL (no step logged)"; exit 1
fi
s=$(firststep "$W/b.jsonl")
s=$((s - 1))
if [ "$mem" -gt "$disk" ]; then
    want="resumed from memory step $mem (disk has $disk) in "
    src=memory
else
    want="resumed at step $disk from $W/ck "
    src=disk
fi
event=$(grep '^{"event":"resumed_from"' "$W/b.jsonl" || true)
if grep -qF "$want" "$W/b.err" && [ "$s" = "$best" ] && [ "$s" -ge $((k - 1)) ] &&
   [[ "$event" == "{\"event\":\"resumed_from\",\"step\":$s,\"source\":\"$src\","* ]]; then
    echo "--resume from $src              ok (step $s; $((k - s)) step(s) lost; $(sed -E 's/.*"resume_s":([0-9.]+).*/\1/' <<<"$event") s to resume)"
else
    cat "$W/b.err"; echo "$event"
    echo "--resume from $src              FAIL (first step $((s + 1)), expected $want)"; fail=1
fi

# 3. The killed run's steps and the resumed ones are the uninterrupted run's.
m=$(laststep "$W/b.jsonl")
run_until r "$m"
if diff <(key "$W/b.jsonl") <(key "$W/r.jsonl" | sed -n "$((s + 1)),${m}p") >/dev/null &&
   diff <(key "$W/a.jsonl") <(key "$W/r.jsonl" | head -n "$k") >/dev/null; then
    echo "kill + resume = uninterrupted     ok (steps 1-$m identical)"
else
    echo "kill + resume = uninterrupted     FAIL"; fail=1
fi

# 4. Without a directory for them, memory checkpoints are a usage error.
rc=0
env -u STRATA_MEM_CKPT_DIR "$S" train "${A[@]}" --mem-ckpt-every 1 2>"$W/u.err" || rc=$?
if [ "$rc" = 2 ] && grep -q "needs a directory" "$W/u.err"; then
    echo "--mem-ckpt-every without a dir    ok (usage error)"
else
    cat "$W/u.err"; echo "--mem-ckpt-every without a dir    FAIL (status $rc)"; fail=1
fi
exit $fail
