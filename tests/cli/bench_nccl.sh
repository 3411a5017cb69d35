#!/usr/bin/env bash
# `strata bench` read the way scripts written for nccl-tests read all_reduce_perf's output
# (issue 17): nccl-tests' long options accepted, a row per type x op x size with the out-of-place
# and the in-place pass side by side (time algbw busbw #wrong each), strata's columns after them,
# -d all / -o all / -i / -a / -g 1 as nccl-tests means them, -g 2 refused clearly, and the footer
# lines "# Out of bounds values" and "# Avg bus bandwidth" (with NCCL_TESTS_MIN_BW failing a slow
# run). The parser below knows nothing of strata: it is what such scripts do.
#
#   bash tests/cli/bench_nccl.sh path/to/strata
#
# Needs python3 for the parser; exits 77 (skipped, with the reason) without it.
set -u

NAME=bench_nccl
. "$(dirname "$0")/lib/check.sh"
command -v python3 >/dev/null || { echo "skip: python3 is needed for the nccl-tests parser"; exit 77; }
# bench NRANKS ARGS...: the ranks' output in $TMP/out, errors in $TMP/err, exit status in $rc.
bench() {
    local n=$1
    shift
    "$STRATA" launch -n "$n" --no-prefix -- "$STRATA" bench "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# The parser of nccl-tests output, as scripts have it: '#' lines are comments but for the footer,
# each other line is "size count type redop root" then time algbw busbw #wrong twice.
cat >"$TMP/nccl_parse.py" <<'EOF'
import json, re, sys
rows, oob, avg = [], None, None
for line in open(sys.argv[1]):
    m = re.match(r"# Out of bounds values : (\d+) (OK|FAILED)", line)
    if m:
        oob = (int(m.group(1)), m.group(2))
    m = re.match(r"# Avg bus bandwidth\s*: ([-+.\deE]+)\s*(\w*)", line)
    if m:
        avg = (float(m.group(1)), m.group(2))
    if line.startswith("#") or not line.strip():
        continue
    f = line.split()
    rows.append({"size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3],
                 "root": int(f[4]),
                 "oop": {"time": float(f[5]), "algbw": float(f[6]), "busbw": float(f[7]), "wrong": f[8]},
                 "ip": {"time": float(f[9]), "algbw": float(f[10]), "busbw": float(f[11]), "wrong": f[12]}})
json.dump({"rows": rows, "oob": oob, "avg": avg}, sys.stdout)
EOF
parse() { python3 "$TMP/nccl_parse.py" "$TMP/out" >"$TMP/parsed.json" 2>"$TMP/err"; }
# expect 'PYTHON EXPRESSION over r (the parsed output)': true or the check fails.
expect() { python3 -c "import json,sys; r=json.load(open('$TMP/parsed.json')); sys.exit(0 if ($1) else 1)" 2>>"$TMP/err"; }

# 1. all_reduce_perf's long options, every type and op, 3 ranks.
bench 3 all_reduce --minbytes 1K --maxbytes 8K --stepfactor 2 --iters 2 --warmup_iters 1 --check 1 \
    --datatype all --op all --root 0 --average 1 --ngpus 1 --nthreads 1 --blocking 0 --cudagraph 0 \
    --report_cputime 0 --parallel_init 0 --stream_null 0 --timeout 60 --agg_iters 1
check "nccl-tests' long options are accepted (rc=$rc)" test "$rc" -eq 0
check "the output parses as nccl-tests output" parse
check "-d all -o all: 7 types x 5 ops x 4 sizes" expect 'len(r["rows"]) == 140 and
    {x["type"] for x in r["rows"]} == {"uint8","int32","int64","half","float","double","bfloat16"} and
    {x["redop"] for x in r["rows"]} == {"sum","prod","max","min","avg"} and
    sorted({x["size"] for x in r["rows"]}) == [1024, 2048, 4096, 8192]'
check "both passes checked: #wrong 0 out of place and in place" \
    expect 'all(x["oop"]["wrong"] == "0" and x["ip"]["wrong"] == "0" for x in r["rows"])'
check "algbw = size / time and busbw = algbw x 2(n-1)/n, in both passes" \
    expect 'all(abs(p["algbw"] - x["size"] / p["time"] / 1e3) <= 0.01 + 0.02 * p["algbw"] and
                abs(p["busbw"] - p["algbw"] * 4 / 3) <= 0.011 + 0.01 * p["busbw"]
                for x in r["rows"] for p in (x["oop"], x["ip"]))'
check "footer: # Out of bounds values : 0 OK" expect 'r["oob"] == [0, "OK"]'
check "footer: # Avg bus bandwidth is the mean busbw of every pass" \
    expect 'abs(r["avg"][0] - sum(x[p]["busbw"] for x in r["rows"] for p in ("oop","ip")) / 280) <= 0.006 + 0.01 * r["avg"][0]'
check "a '# Using devices' line per rank" test "$(grep -cE '^#  Rank +[0-9]+ Group' "$TMP/out")" -eq 3
check "strata's columns follow: algorithm and model time" \
    bash -c "grep -E '^ +1024 ' '$TMP/out' | head -1 | awk '{ exit !(NF == 15 && \$14 ~ /^[a-z_]+\$/) }'"

# 2. Short options: -i step bytes (sizes added), one type and op, -a 3, on reduce_scatter.
bench 3 reduce_scatter -b 1K -e 4K -i 1K -n 2 -w 1 -c 1 -d float -o max -a 3 -g 1
check "-i: reduce_scatter -b 1K -e 4K -i 1K runs (rc=$rc)" test "$rc" -eq 0
parse
check "-i: four sizes, 1 KiB apart (whole blocks of 3 ranks), busbw = algbw x (n-1)/n" \
    expect 'len(r["rows"]) == 4 and [x["size"] for x in r["rows"]] == [1020, 2040, 3072, 4092] and
            all(abs(x["oop"]["busbw"] - x["oop"]["algbw"] * 2 / 3) <= 0.011 for x in r["rows"]) and
            all(x["type"] == "float" and x["redop"] == "max" and x["oop"]["wrong"] == "0" for x in r["rows"])'
check "-a 3 is the maximum over ranks" grep -q "time per call: the maximum over ranks of each rank's mean (-a 3)" "$TMP/out"

# 3. Rooted and data-movement collectives: the root column, redop none, in place checked.
bench 2 broadcast -b 64 -e 64 -r 1 -n 2 -w 1
parse
check "broadcast -r 1: root 1, redop none, both passes correct" \
    expect 'len(r["rows"]) == 1 and r["rows"][0]["root"] == 1 and r["rows"][0]["redop"] == "none" and
            r["rows"][0]["ip"]["wrong"] == "0" and r["oob"] == [0, "OK"]'
bench 2 all_gather -b 1K -e 1K -n 2 -w 1 -c 0
parse
check "all_gather -c 0: root -1, #wrong N/A (not checked)" \
    expect 'r["rows"][0]["root"] == -1 and r["rows"][0]["oop"]["wrong"] == "N/A"'

# 4. -g as nccl-tests takes it: 1 runs (above), more is refused with the reason.
"$STRATA" bench allreduce -g 2 >"$TMP/out" 2>"$TMP/err"
rc=$?
check "-g 2 is refused with a usage error naming -g (rc=$rc)" \
    bash -c "[ $rc -eq 2 ] && grep -q -- '-g 2: a strata rank is one process' '$TMP/err'"

# 5. NCCL_TESTS_MIN_BW, as nccl-tests: below 0.9 x it the footer says FAILED and the run fails.
NCCL_TESTS_MIN_BW=1000000 bench 2 allreduce -b 8 -e 8 -n 2 -w 0
parse
check "NCCL_TESTS_MIN_BW above the bandwidth: FAILED and a non-zero exit (rc=$rc)" \
    bash -c "[ $rc -ne 0 ] && python3 -c \"import json,sys; r=json.load(open('$TMP/parsed.json')); sys.exit(r['avg'][1] != 'FAILED')\""

# 6. --json carries the in-place pass too.
bench 2 allreduce --sizes 4K -n 2 -w 0 --json
check "--json: in_place and wrong fields" \
    python3 -c "import json,sys; o=json.loads(open('$TMP/out').readline()); sys.exit(not (o['wrong'] == 0 and o['in_place']['wrong'] == 0 and o['correct'] is True and o['average'] == 'avg'))"

# 7. --zero-blocks: half the 8 KiB blocks zero on every rank, still checked element by element (the
# zero blocks must come back zero, the others the usual sums); only for sums.
bench 3 allreduce --sizes 1M -n 2 -w 0 --zero-blocks 50 --json
check "--zero-blocks 50: allreduce correct out of place and in place" \
    python3 -c "import json,sys; o=json.loads(open('$TMP/out').readline()); sys.exit(not (o['wrong'] == 0 and o['in_place']['wrong'] == 0))"
"$STRATA" bench allreduce -o max --zero-blocks 50 >"$TMP/out" 2>"$TMP/err"
rc=$?
check "--zero-blocks with -o max is refused (rc=$rc)" \
    bash -c "[ $rc -eq 2 ] && grep -q -- '--zero-blocks is for reductions with -o sum' '$TMP/err'"

finish
