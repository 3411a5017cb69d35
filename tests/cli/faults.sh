#!/usr/bin/env bash
# Faults end to end under the real `strata launch`, with `strata train` (a tiny GPT) and `strata
# bench` as the ranks (issue 11):
#   - one rank SIGSTOPped mid-training: the verdict names the stopped rank, not the first survivor
#     to exit (shm and tcp, 3 runs each: it must be right every time);
#   - rank 0, which hosts the store, SIGKILLed: rank 0 is named (shm and tcp, 3 runs each);
#   - after each of those abnormal ends no /dev/shm/strata-<job>-* file remains;
#   - the dump directory: a temporary one is kept (and named) after a failure, removed after a
#     clean run; `strata diagnose` on it names the culprit, lists the rank without a dump, marks
#     the operation that never ended, and on a malformed dump names the file and still judges;
#   - --max-restarts 2: a rank killed once mid-training restarts the job, which resumes from its
#     checkpoint and finishes with status 0 and the uninterrupted run's final loss; a rank that
#     always fails stops the job after 2 restarts with its exit status; SIGINT to the launcher
#     ends the job without a restart.
#
#   bash tests/cli/faults.sh path/to/strata
#
# Nothing waits on elapsed time: a rank is stopped or killed once the job is demonstrably training
# (its metrics file has lines), and every launch runs under a watchdog only so a hang is a failure.
set -u

STRATA=${1:?usage: bash tests/cli/faults.sh path/to/strata}
case $STRATA in /*) ;; *) STRATA=$PWD/$STRATA ;; esac
[ -x "$STRATA" ] || { echo "not executable: $STRATA" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 2
DATA=$PWD/data/corpus/strata_tales.txt

TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-faults-test.XXXXXX")
mkdir -p "$TMP/tmp"
export TMPDIR=$TMP/tmp # where launch makes its temporary dump directories
trap 'rm -rf "$TMP"' EXIT
unset STRATA_COMM_TRANSPORT STRATA_COMM_TIMEOUT_MS STRATA_DIAG_DIR RANK WORLD_SIZE

pass=0
fail=0
HANG=120 # seconds before a launch counts as hung

ok() {
    pass=$((pass + 1))
    echo "ok   - $1"
}
# check DESC CONDITION...: on failure shows the job's stderr.
check() {
    local desc=$1
    shift
    if "$@"; then
        ok "$desc"
    else
        fail=$((fail + 1))
        echo "FAIL - $desc (rc=$rc)"
        tail -n 25 "$J/err" 2>/dev/null | sed 's/^/       /'
    fi
}
has() { grep -q -e "$1" "$2"; }

# The ranks: a tiny model that trains for much longer than any test waits.
TRAIN=(train --data "$DATA" --layers 1 --heads 1 --dim 16 --seq 16 --batch 4 --threads 1 --quiet)
# Each rank records "pid job_id restart_count" before it becomes the program (exec keeps the pid).
WRAP='echo "$$ $STRATA_JOB_ID $STRATA_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT" >"$J/pid.$RANK.tmp"
      mv "$J/pid.$RANK.tmp" "$J/pid.$RANK"; exec "$@"'

# start NAME LAUNCH_ARGS... -- PROGRAM...: starts launch in the background (lpid) in job dir $J.
start() {
    J=$TMP/$1
    shift
    mkdir -p "$J"
    J=$J "$STRATA" launch "$@" >"$J/out" 2>"$J/err" </dev/null &
    lpid=$!
    (sleep "$HANG"; kill -KILL "$lpid") >/dev/null 2>&1 &
    watchdog=$!
}
finish() {
    wait "$lpid"
    rc=$?
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
}
# wait_training N: until every rank wrote its pid and rank 0's metrics have lines (training runs).
wait_training() {
    local n=$1 r
    for _ in $(seq 1200); do
        local all=1
        for ((r = 0; r < n; r++)); do [ -e "$J/pid.$r" ] || all=0; done
        if [ $all = 1 ] && [ -e "$J/m.jsonl" ] && [ "$(wc -l <"$J/m.jsonl")" -ge 5 ]; then
            return 0
        fi
        kill -0 "$lpid" 2>/dev/null || break # launch ended before training started
        sleep 0.1
    done
    echo "job $J never started training" >&2
    return 1
}
pid_of() { read -r p _ <"$J/pid.$1" && echo "$p"; }
job_of() { read -r _ j _ <"$J/pid.0" && echo "$j"; }
no_shm_left() { ! ls /dev/shm 2>/dev/null | grep -q "^strata-$(job_of)-"; }
dumps_dir() { sed -n 's/.*Dumps: \(.*\)$/\1/p' "$J/err" | tail -n 1; }

# ---- a stopped rank is named ---------------------------------------------------------------------

# stop_case RUN VICTIM [--tcp]
stop_case() {
    local run=$1 victim=$2 vpid
    shift 2
    start "stop$*$run" -n 4 "$@" -- sh -c "$WRAP" sh "$STRATA" "${TRAIN[@]}" --steps 1000000 \
        --metrics "$TMP/stop$*$run/m.jsonl"
    wait_training 4
    vpid=$(pid_of "$victim")
    kill -STOP "$vpid"
    finish
    kill -KILL "$vpid" 2>/dev/null # only if launch failed to
    local t=${*:-shm}
    check "stopped rank $victim ($t, run $run): the verdict names it" \
        has "^strata launch: rank $victim (pid $vpid) was found stopped (SIGSTOP/SIGTSTP): stopped responding during" "$J/err"
    check "stopped rank $victim ($t, run $run): launch exits with the survivors' status 1" test "$rc" -eq 1
    check "stopped rank $victim ($t, run $run): no /dev/shm file of the job remains" no_shm_left
}
# A stopped rank is found when a wait times out. 5 s, as in the operator's report: with 2 s a loaded
# machine (ctest -j2 on 2 cores) delays a healthy rank that long now and then.
export STRATA_COMM_TIMEOUT_MS=5000
for run in 1 2 3; do stop_case $run 2; done
STOP_J=$J
for run in 1 2 3; do stop_case $run 1 --tcp; done

# The last shm run's dumps: kept in a temporary directory that the verdict names.
J=$STOP_J
D=$(dumps_dir)
check "a failed job's temporary dump directory is kept and named" test -n "$D" -a -d "$D"
# The ranks the launcher had to terminate may have written none; the others each wrote one.
ndumps() { ls "$D" | grep -c '^rank[0-9]*\.json$'; }
check "the survivors' dumps are in it" test "$(ndumps)" -ge 1
check "the launcher's observations are saved beside the dumps" test -e "$D/launch.json"

# ---- rank 0, the store's host, killed ------------------------------------------------------------

kill0_case() {
    local run=$1 vpid
    shift
    STRATA_DIAG_DIR=$TMP/kill0$*$run/diag start "kill0$*$run" -n 4 "$@" -- sh -c "$WRAP" sh \
        "$STRATA" "${TRAIN[@]}" --steps 1000000 --metrics "$TMP/kill0$*$run/m.jsonl"
    wait_training 4
    vpid=$(pid_of 0)
    kill -KILL "$vpid"
    finish
    local t=${*:-shm}
    check "killed rank 0 ($t, run $run): the verdict names rank 0" \
        has "^strata launch: rank 0 (pid $vpid) was killed by signal SIGKILL (not sent by the launcher)" "$J/err"
    check "killed rank 0 ($t, run $run): launch exits 128+SIGKILL" test "$rc" -eq 137
    check "killed rank 0 ($t, run $run): no /dev/shm file of the job remains" no_shm_left
}
# A death is seen at once (the store connection, pidfd, TCP): no timeout needs to expire.
export STRATA_COMM_TIMEOUT_MS=60000
for run in 1 2 3; do kill0_case $run; done
for run in 1 2 3; do kill0_case $run --tcp; done
unset STRATA_COMM_TIMEOUT_MS

# A clean run leaves no temporary dump directory behind.
before=$(ls "$TMPDIR" | grep -c strata-diag)
start clean -n 2 -- "$STRATA" bench allreduce --sizes 8 -n 5 -w 0
finish
check "a clean job exits 0" test "$rc" -eq 0
check "a clean job's temporary dump directory is removed" test "$(ls "$TMPDIR" | grep -c strata-diag)" -eq "$before"

# ---- strata diagnose -----------------------------------------------------------------------------

J=$STOP_J
vpid=$(pid_of 2)
"$STRATA" diagnose "$D" >"$TMP/diag.out" 2>"$TMP/diag.err"
rc=$?
check "diagnose exits 0 when it names a culprit" test "$rc" -eq 0
check "diagnose names the stopped rank" has "^verdict: rank 2 (pid $vpid) was found stopped" "$TMP/diag.out"
check "diagnose lists the rank without a dump" has "^rank 2: no dump: dead or stopped" "$TMP/diag.out"
check "diagnose shows each survivor's status and whom it blamed" \
    test "$(grep -c '^rank [013] (host .*): STRATA_ERR_[A-Z_]*, blames rank 2' "$TMP/diag.out")" -eq "$(ndumps)"
check "diagnose marks the operation that never ended" has "^    => allreduce #[0-9]* .* started, never ended" "$TMP/diag.out"
"$STRATA" diagnose --json "$D" >"$TMP/diag.json"
check "diagnose --json gives the verdict to machines" \
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=d["verdict"]
dumps=[r["dump"] for r in d["ranks"] if r["dump"]]
sys.exit(not (v["rank"] == 2 and v["basis"] == "stopped" and 2 in d["no_dump"] and dumps
              and all(x["culprit"] == 2 for x in dumps)))' "$TMP/diag.json"

cp -r "$D" "$TMP/bad"
bad=$(ls "$TMP/bad" | grep '^rank[0-9]*\.json$' | head -n 1)
sed -i 's/"culprit":2/"culprit":"two"/' "$TMP/bad/$bad"
"$STRATA" diagnose "$TMP/bad" >"$TMP/diag.out" 2>"$TMP/diag.err"
rc=$?
check "a malformed dump is named with what was expected" has "$bad:[0-9]*: expected an integer .* for \"culprit\"" "$TMP/diag.err"
check "the other dumps are still diagnosed" has "^verdict: rank 2 (pid $vpid) was found stopped" "$TMP/diag.out"
"$STRATA" diagnose "$TMP/no-such-dir" >"$TMP/diag.out" 2>"$TMP/diag.err"
rc=$?
check "diagnose on a missing directory fails naming it" test "$rc" -eq 1 -a -n "$(grep no-such-dir "$TMP/diag.err")"

# ---- restarts ------------------------------------------------------------------------------------

# Rank 1 of the first attempt dies by SIGKILL once a checkpoint step is committed (deterministically:
# it waits for a manifest, and the last step always writes one; metrics lines other than steps, such
# as the resume's event, are skipped); the restarted job resumes from the newest valid
# checkpoint and must end where an uninterrupted run ends.
STEPS=2000
CKPT=(--steps $STEPS --ckpt-every 20 --keep 3 --resume)
start ref -n 2 -- "$STRATA" "${TRAIN[@]}" "${CKPT[@]}" --ckpt-dir "$TMP/ref/ck" --metrics "$TMP/ref/m.jsonl"
finish
ref_last=$(grep '^{"step"' "$TMP/ref/m.jsonl" | tail -n 1 | sed -E 's/.*"step":([0-9]+),"loss":([-0-9.e]+).*/\1 \2/')
# shellcheck disable=SC2016 # expanded by the rank's shell
KILL_ONCE='if [ "$RANK" = 1 ] && [ "$STRATA_RESTART_COUNT" = 0 ]; then
      "$@" & while ! ls "$J"/ck/ckpt_*.manifest.json >/dev/null 2>&1; do sleep 0.05; done
      kill -KILL $$
    fi; exec "$@"'
start restart1 -n 2 --max-restarts 2 -- sh -c "$WRAP" sh sh -c "$KILL_ONCE" sh "$STRATA" \
    "${TRAIN[@]}" "${CKPT[@]}" --ckpt-dir "$TMP/restart1/ck" --metrics "$TMP/restart1/m.jsonl"
finish
check "a rank killed once: the restarted job finishes with status 0" test "$rc" -eq 0
check "the restart is reported once, naming the killed rank and the time to restart" \
    test "$(grep -c '^strata launch: restart 1 of 2 after rank 1 (pid [0-9]*) was killed by signal SIGKILL (not sent by the launcher)' "$J/err")" -eq 1 \
    -a "$(grep -c 'ranks started again [0-9.]* s after the failure was detected' "$J/err")" -eq 1
resumed() { cat "$J/out" "$J/err" | grep -q "^\[r0\] strata train: resumed at step [1-9]"; }
check "the restarted ranks resumed from the checkpoint" resumed
check "the restarted ranks see STRATA_RESTART_COUNT=1 and TORCHELASTIC_RESTART_COUNT=1" \
    test "$(cut -d' ' -f3,4 "$J/pid.0")" = "1 1"
last=$(grep '^{"step"' "$J/m.jsonl" | tail -n 1 | sed -E 's/.*"step":([0-9]+),"loss":([-0-9.e]+).*/\1 \2/')
check "the restarted job ends at step $STEPS with the uninterrupted run's loss ($ref_last)" \
    test "$last" = "$ref_last" -a "${last%% *}" = "$STEPS"

# A rank that always fails: the job is started 3 times, then launch gives up with its status.
# shellcheck disable=SC2016
ALWAYS='echo "$RANK $STRATA_RESTART_COUNT" >>"$J/attempts"; if [ "$RANK" = 1 ]; then exit 5; fi; exec "$@"'
start always -n 3 --max-restarts 2 --diag-dir "$TMP/always/diag" -- sh -c "$ALWAYS" sh "$STRATA" \
    bench allreduce --sizes 8 -n 1000000 -w 0
finish
check "a rank that always fails: launch exits with its status after the restarts" test "$rc" -eq 5
check "a rank that always fails: exactly 2 restarts" \
    test "$(grep -c '^strata launch: restart [12] of 2 after rank 1 (pid [0-9]*) exited with status 5' "$J/err")" -eq 2
check "a rank that always fails: every rank ran in attempts 0, 1 and 2" \
    test "$(sort -u "$J/attempts" | tr '\n' ' ')" = "0 0 0 1 0 2 1 0 1 1 1 2 2 0 2 1 2 2 "
check "a rank that always fails: the final verdict names it" \
    has "^strata launch: rank 1 (pid [0-9]*) exited with status 5\. Dumps: $J/diag$" "$J/err"
check "--diag-dir keeps each restarted attempt's record apart" \
    test -e "$J/diag/attempt0/launch.json" -a -e "$J/diag/attempt1/launch.json" -a -e "$J/diag/launch.json"

# SIGINT to the launcher ends the job without a restart. Job control keeps SIGINT deliverable to
# a background launch (a non-interactive shell would start it with SIGINT ignored).
set -m
start sigint -n 2 --max-restarts 2 -- sh -c "$WRAP" sh "$STRATA" "${TRAIN[@]}" --steps 1000000 \
    --metrics "$TMP/sigint/m.jsonl"
wait_training 2
kill -INT "$lpid"
finish
set +m
check "SIGINT with restarts left: launch exits 128+SIGINT" test "$rc" -eq 130
check "SIGINT with restarts left: no restart" test "$(grep -c restart "$J/err")" -eq 0 -a "$(cut -d' ' -f3 "$J/pid.0")" = 0

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
