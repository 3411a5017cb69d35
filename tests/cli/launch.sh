#!/usr/bin/env bash
# Behaviour of `strata launch`, checked with small shell programs as ranks (no communicator needed):
# the environment each rank gets, per-rank output prefixes, exit status and naming of a failing rank,
# termination of the other ranks (and of what they started), signal forwarding, usage errors.
#
#   bash tests/cli/launch.sh path/to/strata
#
# Prints one line per check and "N passed, M failed"; exits non-zero when any check failed. Nothing
# here asserts on elapsed time: every launch runs under `timeout` only so that a hang shows up as a
# failure (status 124) instead of blocking ctest.
set -u

STRATA=${1:?usage: bash tests/cli/launch.sh path/to/strata}
case $STRATA in /*) ;; *) STRATA=$PWD/$STRATA ;; esac
[ -x "$STRATA" ] || { echo "not executable: $STRATA" >&2; exit 2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-launch-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
unset STRATA_COMM_TRANSPORT STRATA_COMM_TIMEOUT_MS RANK WORLD_SIZE

pass=0
fail=0
HANG=60 # seconds before a launch counts as hung

ok() {
    pass=$((pass + 1))
    echo "ok   - $1"
}
bad() {
    fail=$((fail + 1))
    echo "FAIL - $1"
    if [ -n "${2:-}" ]; then
        printf '%s\n' "$2" | head -n 20 | sed 's/^/       /'
    fi
}
# check DESC CONDITION...: runs the condition; on failure shows the last launch's outputs.
check() {
    local desc=$1
    shift
    if "$@"; then
        ok "$desc"
    else
        bad "$desc" "rc=$rc
--- stdout:
$(head -c 2000 "$TMP/out")
--- stderr:
$(head -c 2000 "$TMP/err")"
    fi
}
has() { grep -q -e "$1" "$2"; }
hasnt() { ! grep -q -e "$1" "$2"; }

# launch ARGS...: runs strata launch with a hang guard; leaves rc, $TMP/out and $TMP/err.
launch() {
    timeout -k 5 "$HANG" "$STRATA" launch "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
}

# ---- usage ---------------------------------------------------------------------------------------

launch --help
check "--help exits 0 and prints usage" test "$rc" -eq 0 -a -s "$TMP/out"
check "--help describes -n" has "-n, --nproc N" "$TMP/out"

usage_case() {
    local desc=$1 want=$2
    shift 2
    launch "$@"
    check "usage error exits 2: $desc" test "$rc" -eq 2
    check "usage error explains itself: $desc" has "$want" "$TMP/err"
}
usage_case "no arguments" "missing -n"
usage_case "missing -n" "missing -n" -- true
usage_case "-n without a value" "needs a value" -n
usage_case "N = 0" "at least 1" -n 0 true
usage_case "N < 0" "at least 1" -n -3 true
usage_case "N not a number" "wants a number" -n two true
usage_case "no program" "missing the program" -n 2
usage_case "no program after --" "missing the program" -n 2 --
usage_case "unknown option" "unknown option" -n 2 --bogus true
usage_case "bad --timeout-ms" "--timeout-ms wants" -n 2 --timeout-ms soon true

launch -n 2 -- strata-no-such-program-xyz
check "a program not on PATH exits 127" test "$rc" -eq 127
check "a program not on PATH is named" has "strata-no-such-program-xyz" "$TMP/err"

# ---- environment ---------------------------------------------------------------------------------

# shellcheck disable=SC2016 # expanded by the rank's shell
ENVPROG='echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $STRATA_STORE_ADDR $STRATA_SECRET $STRATA_JOB_ID ${STRATA_COMM_TRANSPORT-unset} ${STRATA_COMM_TIMEOUT_MS-unset}"'
launch -n 4 -- sh -c "$ENVPROG"
check "all ranks succeed: launch exits 0" test "$rc" -eq 0
check "one line per rank" test "$(wc -l <"$TMP/out")" -eq 4
env_ok() {
    local ranks="" secrets="" ports="" jobs="" pfx r ws lr lws gr ma mp sa sec job tr to
    while read -r pfx r ws lr lws gr ma mp sa sec job tr to; do
        [ "$pfx" = "[r$r]" ] || { echo "prefix $pfx does not match RANK=$r"; return 1; }
        [ "$ws" = 4 ] && [ "$lws" = 4 ] || { echo "WORLD_SIZE/LOCAL_WORLD_SIZE wrong: $ws $lws"; return 1; }
        [ "$lr" = "$r" ] || { echo "LOCAL_RANK $lr != RANK $r"; return 1; }
        [ "$gr" = 0 ] || { echo "GROUP_RANK $gr"; return 1; }
        [ "$ma" = 127.0.0.1 ] || { echo "MASTER_ADDR $ma"; return 1; }
        case $mp in '' | *[!0-9]*) echo "MASTER_PORT $mp"; return 1 ;; esac
        [ "$sa" = "127.0.0.1:$mp" ] || { echo "STRATA_STORE_ADDR $sa"; return 1; }
        [ "${#sec}" -ge 32 ] || { echo "STRATA_SECRET too short: $sec"; return 1; }
        [ -n "$job" ] || { echo "STRATA_JOB_ID empty"; return 1; }
        [ "$tr" = unset ] && [ "$to" = unset ] || { echo "transport/timeout set without flags"; return 1; }
        ranks="$ranks $r"
        secrets="$secrets $sec"
        ports="$ports $mp"
        jobs="$jobs $job"
    done <"$TMP/out"
    [ "$(printf '%s\n' $ranks | sort -n | tr '\n' ' ')" = "0 1 2 3 " ] || { echo "ranks: $ranks"; return 1; }
    [ "$(printf '%s\n' $secrets | sort -u | wc -l)" = 1 ] || { echo "secrets differ"; return 1; }
    [ "$(printf '%s\n' $ports | sort -u | wc -l)" = 1 ] || { echo "ports differ"; return 1; }
    [ "$(printf '%s\n' $jobs | sort -u | wc -l)" = 1 ] || { echo "job ids differ"; return 1; }
}
check "RANK/LOCAL_RANK distinct per rank; WORLD_SIZE, store, secret and job id shared" env_ok
# The store's port is drawn below the ephemeral range: between launch checking it and rank 0
# binding it, a connect() anywhere on the machine could otherwise take it (seen under ctest -j2:
# "cannot listen on 127.0.0.1:54721: Address already in use").
read -r eph_lo _ </proc/sys/net/ipv4/ip_local_port_range
check "MASTER_PORT lies below the ephemeral port range ($eph_lo)" \
    test "$(awk '{print $8; exit}' "$TMP/out")" -lt "$eph_lo"
first_secret=$(awk '{print $10; exit}' "$TMP/out")

launch -n 2 --tcp --timeout-ms 1234 -- sh -c "$ENVPROG"
check "--tcp sets STRATA_COMM_TRANSPORT=tcp" test "$(awk '{print $12}' "$TMP/out" | sort -u)" = tcp
check "--timeout-ms sets STRATA_COMM_TIMEOUT_MS" test "$(awk '{print $13}' "$TMP/out" | sort -u)" = 1234
check "each launch makes a new secret" test "$(awk '{print $10; exit}' "$TMP/out")" != "$first_secret"

STRATA_STORE_EXTERNAL=1 launch -n 1 -- sh -c 'echo "${STRATA_STORE_EXTERNAL-unset}"'
check "STRATA_STORE_EXTERNAL is cleared (rank 0 hosts the store)" test "$(cat "$TMP/out")" = "[r0] unset"

mkdir -p "$TMP/bin"
printf '#!/bin/sh\necho "found $RANK"\n' >"$TMP/bin/strata-test-prog"
chmod +x "$TMP/bin/strata-test-prog"
PATH="$TMP/bin:$PATH" launch -n 2 strata-test-prog
check "PROGRAM is resolved through PATH" test "$rc" -eq 0 -a "$(sort "$TMP/out" | tr '\n' ' ')" = "[r0] found 0 [r1] found 1 "

printf 'hello\n' | timeout -k 5 "$HANG" "$STRATA" launch -n 2 -- sh -c 'read -r x || x=none; echo "$x"' >"$TMP/out" 2>"$TMP/err"
rc=$?
check "rank 0 reads piped stdin, the others /dev/null" test "$(sort "$TMP/out" | tr '\n' ' ')" = "[r0] hello [r1] none "

# ---- output --------------------------------------------------------------------------------------

launch -n 2 -- sh -c 'echo "out one $RANK"; echo "err one $RANK" >&2; echo "out two $RANK"; printf "tail $RANK"'
check "stdout lines are prefixed per rank" test "$(grep -c '^\[r[01]\] out \(one\|two\) [01]$' "$TMP/out")" -eq 4
check "stderr lines are prefixed per rank and stay on stderr" test "$(grep -c '^\[r[01]\] err one [01]$' "$TMP/err")" -eq 2
check "stdout does not get stderr lines" hasnt "err one" "$TMP/out"
check "a partial last line is flushed with its prefix" test "$(grep -c '^\[r\([01]\)\] tail \1$' "$TMP/out")" -eq 2
prefix_matches() { ! grep -v '^\[r\([0-9]*\)\] .* \1$' "$TMP/out" | grep -q .; }
check "each prefix names the rank that wrote the line" prefix_matches

# Long lines written concurrently by 3 ranks must come out whole: every line is 5000 copies of the
# rank's digit, under that rank's prefix.
launch -n 3 -- awk 'BEGIN { r = ENVIRON["RANK"]; s = sprintf("%5000s", ""); gsub(/ /, r, s);
                             for (i = 0; i < 300; i++) print s }'
whole_lines() {
    [ "$(wc -l <"$TMP/out")" -eq 900 ] || return 1
    awk '{ r = substr($1, 3, 1); if ($1 != "[r" r "]" || length($2) != 5000 || $2 !~ ("^" r "+$")) bad++ }
         END { exit bad > 0 }' "$TMP/out"
}
check "concurrent long lines are kept whole" whole_lines

launch -n 2 --no-prefix -- sh -c 'echo "plain $RANK"'
check "--no-prefix passes output through" test "$(sort "$TMP/out" | tr '\n' ' ')" = "plain 0 plain 1 "

# A line a rank redraws in place ('\r', a progress bar). In a file it is one line, kept whole, and
# the ranks are not told to redraw. On a terminal (script(1) gives the launcher one) each redraw
# passes through as it comes, prefixed again, the ranks get STRATA_PROGRESS=bar, and another rank's
# line first ends the open one. The ranks wait for files the test creates once it has seen the
# output before, so nothing depends on timing: a launcher that held the redrawn line until its
# newline never shows "bar 1", and the check fails at the deadline.
launch -n 1 -- sh -c 'printf "\rbar 1\rbar 2\n" >&2; echo "style=${STRATA_PROGRESS-unset}"'
check "in a file a redrawn line stays one line, whole" test "$(cat -v "$TMP/err")" = "[r0] ^Mbar 1^Mbar 2"
check "ranks writing to a file are not told to redraw" has "^\[r0\] style=unset$" "$TMP/out"
cat >"$TMP/bars.sh" <<'EOF'
wait_file() { while [ ! -e "$DIR/$1" ]; do sleep 0.05; done; }
if [ "$RANK" = 0 ]; then
    echo "style=$STRATA_PROGRESS" >&2
    printf '\rbar 1' >&2; wait_file go1
    printf '\rbar 2' >&2; wait_file go3
    printf '\rbar 3\n' >&2
else
    wait_file go2; echo hello >&2
fi
EOF
# seen PATTERN: waits (at most $HANG s) until the terminal's output shows PATTERN (cat -v form).
seen() {
    for _ in $(seq $((HANG * 20))); do
        cat -v "$TMP/tty" 2>/dev/null | grep -q -e "$1" && return 0
        sleep 0.05
    done
    return 1
}
DIR=$TMP script -qfec "timeout -k 5 $HANG $STRATA launch -n 2 -- sh $TMP/bars.sh" "$TMP/tty" \
    >/dev/null 2>&1 </dev/null &
tty_pid=$!
seen '\^M\[r0\] bar 1'; live1=$?
touch "$TMP/go1"
seen '\^M\[r0\] bar 2'; live2=$?
touch "$TMP/go2"
seen '^\[r1\] hello'; live3=$?
touch "$TMP/go3"
wait "$tty_pid"; rc=$?
cp "$TMP/tty" "$TMP/err"
check "on a terminal the ranks are told to redraw (STRATA_PROGRESS=bar)" has "^\[r0\] style=bar" "$TMP/err"
check "on a terminal a redrawn line shows while the rank runs" test "$live1" -eq 0 -a "$live2" -eq 0
check "another rank's line starts below the open redrawn line" test "$live3" -eq 0
check "the redraw goes on below it and ends with its newline" grep -q '^\^M\[r0\] bar 3\^M$' <(cat -v "$TMP/tty")

# ---- failures ------------------------------------------------------------------------------------

launch -n 3 -- sh -c 'if [ "$RANK" = 1 ]; then exit 7; fi; sleep 300'
check "a failing rank's status becomes launch's status" test "$rc" -eq 7
check "the failing rank is named" has "rank 1 exited with status 7" "$TMP/err"
check "sleeping ranks do not keep launch alive" test "$rc" -ne 124

launch -n 2 -- sh -c 'if [ "$RANK" = 0 ]; then kill -USR1 $$; fi; sleep 300'
check "a rank killed by a signal gives 128+signal" test "$rc" -eq 138
check "the signal is named" has "rank 0 killed by signal SIGUSR1" "$TMP/err"

# Ranks that must be in a given state before another rank fails wait for it through a file:
# `wait_for FILE` (nothing here depends on timing).
WAIT='wait_for() { i=0; while [ ! -e "$1" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done; }'

# Rank 0 leaves a child behind that must die with it; rank 1 fails once the child exists.
rm -f "$TMP/child.pid"
launch -n 2 -- sh -c "$WAIT"'
                      if [ "$RANK" = 1 ]; then wait_for "'"$TMP"'/child.pid"; exit 3; fi
                      sleep 300 & echo $! > "'"$TMP"'/child.pid.tmp"
                      mv "'"$TMP"'/child.pid.tmp" "'"$TMP"'/child.pid"; wait'
child_gone() {
    local pid
    pid=$(cat "$TMP/child.pid" 2>/dev/null) || return 1
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}
check "other ranks and their children are terminated" child_gone
check "launch exits with the failing rank's status" test "$rc" -eq 3

# The first failure wins: rank 2 fails first, rank 0 then exits 9 when told to stop.
rm -f "$TMP/ready0"
launch -n 3 -- sh -c "$WAIT"'
                      case $RANK in
                        2) wait_for "'"$TMP"'/ready0"; exit 3 ;;
                        0) trap "exit 9" TERM; touch "'"$TMP"'/ready0"; while :; do sleep 0.1; done ;;
                        *) sleep 300 ;;
                      esac'
check "the first failure wins" test "$rc" -eq 3
check "later exits caused by the teardown are not reported" hasnt "rank 0 exited" "$TMP/err"

# A rank that ignores SIGTERM is killed after the grace period.
rm -f "$TMP/ready0"
launch -n 2 -- sh -c "$WAIT"'
                      if [ "$RANK" = 1 ]; then wait_for "'"$TMP"'/ready0"; exit 4; fi
                      trap "" TERM; touch "'"$TMP"'/ready0"; sleep 300'
check "a rank ignoring SIGTERM is SIGKILLed" test "$rc" -eq 4
check "the SIGKILL is reported" has "SIGKILL" "$TMP/err"

# ---- signals -------------------------------------------------------------------------------------

# Job control gives the background launcher its own process group (as a terminal's foreground job
# has) and keeps SIGINT deliverable (a non-interactive shell would start it with SIGINT ignored,
# which launch respects). A watchdog stands in for `timeout`, so signals go to launch itself.
set -m
# bg_launch ARGS...: starts launch in the background (pid in lpid) and waits until every rank of
# the 2 printed "ready".
bg_launch() {
    "$STRATA" launch "$@" >"$TMP/out" 2>"$TMP/err" </dev/null &
    lpid=$!
    (sleep "$HANG"; kill -KILL "$lpid") >/dev/null 2>&1 &
    watchdog=$!
    for _ in $(seq 300); do
        [ "$(grep -c ready "$TMP/out")" -ge 2 ] && break
        sleep 0.1
    done
}
bg_wait() {
    wait "$lpid"
    rc=$?
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
}
# signal_case SIG EXPECTED_RC: every rank traps SIG, reports it and exits 0.
signal_case() {
    local sig=$1 want=$2
    bg_launch -n 2 -- sh -c 'trap "echo got-'"$sig"'; exit 0" '"$sig"'; echo ready
                             while :; do sleep 0.1; done'
    kill -s "$sig" "$lpid"
    bg_wait
    check "SIG$sig is forwarded to every rank" test "$(grep -c "^\[r[01]\] got-$sig$" "$TMP/out")" -eq 2
    check "after SIG$sig launch exits 128+signal" test "$rc" -eq "$want"
}
signal_case INT 130
signal_case TERM 143
signal_case HUP 129

# Ctrl-C in a terminal signals the whole foreground process group. Each rank leads a process group
# of its own, so it gets SIGINT once (forwarded by launch), not also from the terminal.
launch -n 2 -- sh -c 'read -r _ _ _ _ pgid _ </proc/$$/stat; echo "$$ $pgid"'
own_groups() {
    local pfx pid pgid mine
    read -r _ _ _ _ mine _ </proc/$$/stat
    [ "$(wc -l <"$TMP/out")" -eq 2 ] || return 1
    while read -r pfx pid pgid; do
        [ "$pid" = "$pgid" ] && [ "$pgid" != "$mine" ] || return 1
    done <"$TMP/out"
}
check "each rank leads its own process group (a terminal's SIGINT is not delivered twice)" own_groups

# A second signal kills ranks that ignore the first.
bg_launch -n 2 -- sh -c 'trap "" TERM; echo ready; sleep 300'
kill -TERM "$lpid"
# Two signals pending at once would merge into one: wait until launch has seen the first.
for _ in $(seq 300); do
    has "forwarding it" "$TMP/err" && break
    sleep 0.1
done
kill -TERM "$lpid"
bg_wait
# The ranks die of the launcher's SIGKILL, which is no failure of theirs: launch reports the signal
# it was stopped with.
check "a second SIGTERM kills all ranks, launch exits 128+SIGTERM" test "$rc" -eq 143
check "the escalation is reported" has "killing all ranks" "$TMP/err"
set +m

# ---- memory that outlives the ranks ----------------------------------------------------------------

# Every rank gets the same STRATA_MEM_CKPT_DIR, a directory in /dev/shm that exists while the job
# runs (its files survive a rank) and is gone, with what the ranks wrote there, when launch ends.
launch -n 2 --no-prefix -- sh -c 'test -d "$STRATA_MEM_CKPT_DIR" && touch "$STRATA_MEM_CKPT_DIR/r$RANK" &&
    echo "$STRATA_MEM_CKPT_DIR"'
memdir=$(sort -u "$TMP/out")
mem_ok() {
    [ "$rc" -eq 0 ] && [ "$(wc -l <"$TMP/out")" -eq 2 ] && [ "$(printf '%s\n' "$memdir" | wc -l)" -eq 1 ] &&
        case $memdir in /dev/shm/strata-mem-*) true ;; *) false ;; esac && [ ! -e "$memdir" ]
}
check "ranks share a memory-checkpoint directory in /dev/shm, removed with its files at the end" mem_ok
STRATA_MEM_CKPT_DIR=$TMP/mine launch -n 1 --no-prefix -- sh -c 'echo "$STRATA_MEM_CKPT_DIR"'
check "a STRATA_MEM_CKPT_DIR of the user's is passed on untouched" has "^$TMP/mine\$" "$TMP/out"

# ---- scale ---------------------------------------------------------------------------------------

launch -n 1024 -- sh -c 'echo "$RANK"'
scale_ok() {
    [ "$rc" -eq 0 ] && [ "$(wc -l <"$TMP/out")" -eq 1024 ] &&
        [ "$(sed 's/^\[r\([0-9]*\)\] \1$/ok/' "$TMP/out" | sort -u)" = ok ] &&
        [ "$(sort -u "$TMP/out" | wc -l)" -eq 1024 ]
}
check "1024 ranks start, each prints once under its own prefix" scale_ok

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
