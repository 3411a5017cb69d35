#!/usr/bin/env bash
# Behaviour of `strata place` and `strata sched` on the small sample cluster in data/sched: the
# Slurm hostfile and Open MPI rankfile syntax, the per-host environment, --json, the SVG, a job
# layout taken from `strata plan --json`, a reproducible seeded simulation, and refusal of invalid
# inputs (oversized job, unknown host, bad topology) with clear messages and exit status 1.
#
#   bash tests/cli/place.sh path/to/strata
#
# Prints one line per check and "N passed, M failed"; exits non-zero when any check failed.
set -u

NAME=place
. "$(dirname "$0")/lib/check.sh"
D=$ROOT/data/sched
SMALL=(--slurm "$D/topology.conf" --cluster "$D/small-levels.json" --gpus-per-host 4)

run place "${SMALL[@]}" --state "$D/small.state" --tp 4 --pp 2 --dp 2 \
    --hostfile "$TMP/hosts" --rankfile "$TMP/ranks" --env "$TMP/env" --svg "$TMP/p.svg"
check "place succeeds" test "$rc" -eq 0
check "reports the gain over hostname order" grep -q "gain vs hostname order" "$TMP/out"
check "hostfile: one host per rank" test "$(wc -l <"$TMP/hosts")" -eq 16
check "hostfile: only plain host names" bash -c "! grep -qvE '^[A-Za-z0-9._-]+$' '$TMP/hosts'"
check "hostfile: no busy or failed host" bash -c "! grep -qE '^n(01|11|12)$' '$TMP/hosts'"
check "rankfile: Open MPI syntax" bash -c "! grep -qvE '^rank [0-9]+=[A-Za-z0-9._-]+ slot=[0-9]+$' '$TMP/ranks'"
check "rankfile: ranks 0..15 in order" bash -c "[ \"\$(cut -d' ' -f2 '$TMP/ranks' | cut -d= -f1 | tr '\n' ' ')\" = '0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 ' ]"
check "rankfile agrees with hostfile" bash -c "diff <(sed -E 's/^rank [0-9]+=([^ ]+) .*/\1/' '$TMP/ranks') '$TMP/hosts' >/dev/null"
check "env: STRATA_TOPO_PATH per host" test "$(grep -c '^STRATA_TOPO_PATH=/core/' "$TMP/env")" -eq 4
check "env: NODE_RANK 0..3" test "$(grep -c '^NODE_RANK=' "$TMP/env")" -eq 4
check "svg written" grep -q "^<svg" "$TMP/p.svg"

run place "${SMALL[@]}" --tp 4 --pp 2 --dp 2 --json
check "place --json" bash -c "grep -q '\"gain_vs_hostname_order\"' '$TMP/out' && grep -q '\"baselines\"' '$TMP/out'"
if command -v python3 >/dev/null; then
    check "place --json parses" python3 -c "import json,sys; d=json.load(open('$TMP/out')); assert d['job']['world']==16"
fi

run plan --model llama3-8b --cluster h100-roce-24k --gpus 64 --tp 8 --pp 2 --json
cp "$TMP/out" "$TMP/plan.json"
run place --cluster h100-roce-24k --plan "$TMP/plan.json" --hostfile "$TMP/h2"
check "place takes a strata plan --json layout" test "$rc" -eq 0 -a "$(wc -l <"$TMP/h2")" -eq 64

run place "${SMALL[@]}" --tp 4 --pp 2 --dp 9
check "oversized job refused" test "$rc" -eq 1
check "oversized job: says how many hosts" grep -q "needs 18 hosts" "$TMP/err"

printf 'n[01-02] busy\nn42 failed\n' >"$TMP/bad.state"
run place "${SMALL[@]}" --state "$TMP/bad.state" --tp 4
check "unknown host refused" test "$rc" -eq 1
check "unknown host: file, line, name" grep -q "bad.state:2: expected a host of the cluster, got unknown host \"n42\"" "$TMP/err"

printf 'SwitchName=s0 Nodes=n[1-4]\nSwitchName=s1 Nodes=n[5-\n' >"$TMP/bad.conf"
run place --slurm "$TMP/bad.conf" --tp 4
check "bad topology refused" test "$rc" -eq 1
check "bad topology: file and line" grep -q "bad.conf:2:" "$TMP/err"

run place --cluster h100-roce-24k --tp 8 --pp 16 --world 1000000
check "job larger than the cluster refused" test "$rc" -eq 1

run sched "${SMALL[@]}" --jobs 40 --failures 4 --seed 9 --json --svg "$TMP/s.svg"
cp "$TMP/out" "$TMP/s1"
run sched "${SMALL[@]}" --jobs 40 --failures 4 --seed 9 --json
check "sched runs" test "$rc" -eq 0
check "sched: same seed, same report" bash -c "diff <(grep -v wall_s '$TMP/s1' | grep -v resched) <(grep -v wall_s '$TMP/out' | grep -v resched) >/dev/null"
check "sched: three policies" test "$(grep -c '"policy"' "$TMP/out")" -eq 3
check "sched svg written" grep -q "^<svg" "$TMP/s.svg"
run sched "${SMALL[@]}" --trace "$D/sample.trace" --spares 1
check "sched replays a trace file" test "$rc" -eq 0

finish
