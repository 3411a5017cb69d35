#!/usr/bin/env bash
# strata train's progress (issue 17): in a file a complete line per interval (no '\r'; the first,
# the validation and the last steps always) and a summary; on a terminal (script(1)) one line
# redrawn with '\r'; under strata launch rank 0's progress shows in the launcher's output while the
# job runs (read while it runs: the job is 10^6 steps, stopped by SIGTERM once the line is there),
# and on a terminal it is redrawn there too. Nothing depends on how fast this machine is: intervals
# are 0 (every step) or an hour (never within these runs), and the polling loop's deadline only
# keeps a broken build from hanging the test.
# Usage: train_progress.sh path/to/strata
set -uo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
unset STRATA_PROGRESS
A=(--data data/corpus/strata_tales.txt --layers 1 --heads 2 --dim 32 --seq 32 --batch 4 --threads 1)
fail=0
check() { # NAME CONDITION...
    local name=$1
    shift
    if "$@"; then echo "$name: ok"; else echo "$name: FAIL"; fail=1; fi
}
steps() { grep -c "^step [0-9]*/" "$1"; } # progress lines of FILE
step_list() { sed -n "s|^step \\([0-9]*\\)/.*|\\1|p" "$1" | tr '\n' ' '; }
no_cr() { ! grep -q $'\r' "$1"; }

# 1. A file, a line every step: 12 lines, no '\r', the validation loss from step 5 on, a summary.
"$S" train "${A[@]}" --steps 12 --eval-every 5 --progress-every 0 2>"$W/every.err"
check "file: no carriage return" no_cr "$W/every.err"
check "file: one line per step at --progress-every 0" test "$(steps "$W/every.err")" -eq 12
check "file: the validation loss shown from its step on" \
    test "$(grep -c '| val [0-9.]* (step \(5\|10\|12\)) |' "$W/every.err")" -eq 8
summary() {
    tail -n 1 "$1" | grep -q "^$2strata train: ran steps 1-$3 in .* | final loss [0-9.]* | val loss [0-9.]* (step $3) | mean [0-9]* tok/s, MFU [0-9.]*% of [0-9]* GFLOP/s fp32 (over the steps' time)$"
}
check "file: a summary ends the run" summary "$W/every.err" "" 12

# 2. A file, an hour between lines: the first step, the validation steps and the last.
"$S" train "${A[@]}" --steps 30 --eval-every 10 --progress-every 3600 2>"$W/hour.err"
check "file: first, validation and last steps only" test "$(step_list "$W/hour.err")" = "1 10 20 30 "
check "file: no carriage return (hour)" no_cr "$W/hour.err"

# 3. A terminal: redrawn in place; STRATA_PROGRESS=lines asks for lines there.
script -qfec "$S train ${A[*]} --steps 30 --eval-every 10" "$W/tty" >/dev/null 2>&1 </dev/null
check "terminal: redrawn with carriage returns" grep -q '\^Mstep 30/30 ' <(cat -v "$W/tty")
check "terminal: a summary on a line of its own" grep -q '^strata train: ran steps 1-30 ' <(cat -v "$W/tty")
STRATA_PROGRESS=lines script -qfec "$S train ${A[*]} --steps 30 --eval-every 10" "$W/tty2" \
    >/dev/null 2>&1 </dev/null
check "terminal: STRATA_PROGRESS=lines prints lines" \
    test "$(cat -v "$W/tty2" | grep -c '^step [0-9]*/30 ')" -ge 4 -a "$(grep -c $'\rstep' "$W/tty2")" -eq 0

# 4. Under strata launch, its output to a file: rank 0's first progress line shows while the job
# runs, as a plain line.
"$S" launch -n 2 -- "$S" train "${A[@]}" --steps 1000000 --progress-every 3600 2>"$W/launch.err" &
pid=$!
live=1
for _ in $(seq 1200); do # 120 s at most
    if grep -q '^\[r0\] step 1/1000000 ' "$W/launch.err"; then
        kill -0 "$pid" 2>/dev/null && live=0
        break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
kill -TERM "$pid" 2>/dev/null
wait "$pid"
pid=
check "launch: rank 0's progress shows while the job runs" test "$live" -eq 0
check "launch: plain lines in the launcher's log" no_cr "$W/launch.err"

# 5. Under strata launch on a terminal: the ranks redraw, the launcher passes it on under [r0].
script -qfec "$S launch -n 2 -- $S train ${A[*]} --steps 30" "$W/ltty" >/dev/null 2>&1 </dev/null
check "launch on a terminal: redrawn under the prefix" grep -q '\^M\[r0\] step 30/30 ' <(cat -v "$W/ltty")
check "launch on a terminal: the summary" grep -q '^\[r0\] strata train: ran steps 1-30 ' <(cat -v "$W/ltty")
[ "$fail" -eq 0 ] || { echo "--- launch.err"; head -c 3000 "$W/launch.err"; cat -v "$W/ltty" | head -c 3000; }
exit "$fail"
