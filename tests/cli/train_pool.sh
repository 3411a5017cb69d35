#!/usr/bin/env bash
# strata train --optimizer-in-pool (issue 15): two `strata pool serve` nodes on loopback hold AdamW's
# master weights, m and v; 2 ranks under strata launch push gradients and read parameters back.
#   - every step's loss and gradient norm match the ordinary 2-rank run from the same seed;
#   - the same with the nodes dropping, duplicating and reordering datagrams (their counters show
#     the faults and the retransmissions recognised, so every ADD and ADAMW applied once);
#   - resume: checkpoints at 10 and 20, the step-20 files removed: --resume reproduces steps
#     11..20 of the uninterrupted pool run exactly, and the ordinary trainer resumed from the pool
#     run's step 10 matches too (the checkpoint holds the pool's m and v, not stale copies);
#   - a pool node killed mid-run: training fails with an error naming that node (no hang);
#   - what it does not run (LAMB, ZeRO > 0, one process, no nodes, a pool too small) is refused
#     with a message saying why.
# Tolerance: 1e-5 relative. With 2 ranks the pool's sum is 0 + g0 + g1, the ring's g0 + g1, and
# the 1/2 of the average is exact either way; the nodes run the model's own AdamW loop
# (base/adamw.h), so the runs agree to the printed digits. The tolerance covers summation order
# and the norm's (a double sum of per-block partials instead of per-rank ones), a few float ulps
# of a loss of about 5 that AdamW's per-element normalisation does not amplify in 20 steps.
set -u
NAME=train_pool
source "$(dirname "$0")/lib/check.sh"
cd "$ROOT"
export STRATA_POOL_SECRET=cli-train-pool
export STRATA_POOL_TIMEOUT_MS=3000
A=(--data data/corpus/strata_tales.txt --layers 2 --heads 2 --dim 32 --seq 32 --batch 8
   --steps 20 --warmup 5 --lr 3e-3 --threads 1 --quiet)
pids=()
stop_nodes() {
    for p in "${pids[@]}"; do
        { kill -KILL "$p"; wait "$p"; } 2>/dev/null
    done
}
trap 'stop_nodes; rm -rf "$TMP"' EXIT

start_node() { # start_node NAME ARGS...: the node's address in $node_addr, its pid in $node_pid
    local name=$1
    shift
    STRATA_SECRET=$STRATA_POOL_SECRET "$STRATA" pool serve --listen 127.0.0.1:0 "$@" \
        >"$TMP/$name.out" 2>"$TMP/$name.err" &
    node_pid=$!
    pids+=("$node_pid")
    for _ in $(seq 1 300); do
        node_addr=$(sed -n 's/^strata pool listening on //p' "$TMP/$name.out")
        [ -n "$node_addr" ] && return 0
        sleep 0.05
    done
    return 1
}

# train OUT [ARGS...]: 2 ranks, metrics in $TMP/OUT.jsonl, stderr in $TMP/err
train() {
    local out=$1
    shift
    "$STRATA" launch -n 2 --no-prefix -- "$STRATA" train "${A[@]}" --metrics "$TMP/$out.jsonl" \
        "$@" >"$TMP/out" 2>"$TMP/err"
}

# fields FILE -> "step loss grad_norm" lines
fields() { sed -nE 's/^\{"step":([0-9]+),"loss":([-0-9.e]+),.*"grad_norm":([-0-9.e]+).*/\1 \2 \3/p' "$1"; }

# same REF OUT [FIRST]: loss and grad_norm of every step of OUT from FIRST on within 1e-5 relative
# of REF's (and as many steps as REF has from there)
same() {
    awk -v first="${3:-1}" '
        function rel(a, b) { d = a - b; if (d < 0) d = -d; return d / (b < 0 ? -b : b) }
        $1 < first { next }
        NR == FNR { rl[$1] = $2; rg[$1] = $3; want++; next }
        { n++
          if (!($1 in rl) || rel($2, rl[$1]) > 1e-5 || rel($3, rg[$1]) > 1e-5) {
              printf "step %d: loss %s grad_norm %s, expected %s %s\n", $1, $2, $3, rl[$1], rg[$1]
              bad = 1 } }
        END { if (n != want) { printf "%d steps, expected %d\n", n, want; bad = 1 }; exit bad }' \
        <(fields "$TMP/$1.jsonl") <(fields "$TMP/$2.jsonl") >"$TMP/err" 2>&1
}

check "two pool nodes start" start_node a --bytes 4M
a=$node_addr
check "... and the second" start_node b --bytes 4M
export STRATA_POOL_NODES=$a,$node_addr

train ref
check "the ordinary 2-rank run" test $? -eq 0
train pool --optimizer-in-pool
check "the run with the optimizer in the pool" test $? -eq 0
check "... says so" grep -q "optimizer in the pool" "$TMP/err"
check "... every step's loss and norm match the ordinary run" same ref pool

check "a faulty node starts" start_node fa --bytes 4M --drop 0.05 --dup 0.05 --reorder 0.05 --seed 5
fa=$node_addr
check "... and another" start_node fb --bytes 4M --drop 0.05 --dup 0.05 --reorder 0.05 --seed 6
STRATA_POOL_NODES=$fa,$node_addr train faulty --optimizer-in-pool
check "the run on nodes that drop, duplicate and reorder" test $? -eq 0
check "... matches the ordinary run" same ref faulty
STRATA_SECRET=$STRATA_POOL_SECRET run pool stats "$fa"
check "... the node injected drops" \
    bash -c "awk '\$1 == \"injected_drops\" && \$2 > 0' '$TMP/out' | grep -q ."
check "... and duplicates, recognised and not applied again" \
    bash -c "awk '\$1 == \"injected_dups\" && \$2 > 0' '$TMP/out' | grep -q . &&
             awk '\$1 == \"duplicates\" && \$2 > 0' '$TMP/out' | grep -q ."

# Resume from step 10 of a pool run: the pool run again, and the ordinary trainer.
train full --optimizer-in-pool --ckpt-dir "$TMP/ck" --ckpt-every 10 --keep 5
check "a pool run with checkpoints" test $? -eq 0
rm -f "$TMP"/ck/ckpt_00000020.*
cp -r "$TMP/ck" "$TMP/ck2"
train resumed --optimizer-in-pool --ckpt-dir "$TMP/ck" --ckpt-every 10 --keep 5 --resume
check "--resume with the optimizer in the pool" test $? -eq 0
check "... resumed at step 10" grep -q "resumed at step 10" "$TMP/err"
key() { grep '^{"step"' "$1" | sed -E 's/("grad_norm":[^,]*).*/\1/'; }
check "... steps 11-20 identical to the uninterrupted run" \
    diff <(key "$TMP/full.jsonl" | tail -n 10) <(key "$TMP/resumed.jsonl")
train ordinary_resumed --ckpt-dir "$TMP/ck2" --ckpt-every 10 --keep 5 --resume
check "the ordinary trainer resumes the pool run's checkpoint" test $? -eq 0
check "... and its steps 11-20 match the ordinary run's" same ref ordinary_resumed 11

# A node killed mid-run: the ranks fail naming it, within the pool's timeout (the watchdog only
# turns a hang into a failure).
check "a node to kill starts" start_node k --bytes 4M
k=$node_addr
k_pid=$node_pid
STRATA_POOL_NODES=$a,$k timeout 120 "$STRATA" launch -n 2 --no-prefix -- "$STRATA" train "${A[@]}" \
    --steps 100000 --optimizer-in-pool --metrics "$TMP/killed.jsonl" >"$TMP/out" 2>"$TMP/kill.err" &
job=$!
for _ in $(seq 1 600); do
    [ "$(cat "$TMP/killed.jsonl" 2>/dev/null | grep -c '"step"')" -ge 3 ] && break
    sleep 0.05
done
{ kill -KILL "$k_pid"; wait "$k_pid"; } 2>/dev/null
wait "$job"
rc=$?
cp "$TMP/kill.err" "$TMP/err"
check "a killed node fails the run (no hang)" test "$rc" -ne 0 -a "$rc" -ne 124
check "... with an error naming the node" grep -q "pool node $k does not answer" "$TMP/kill.err"

# Refusals.
train lamb --optimizer-in-pool --optimizer lamb
check "LAMB is refused" test $? -ne 0
check "... saying why" grep -q "optimizer-in-pool runs AdamW on the pool nodes" "$TMP/err"
train zero1 --optimizer-in-pool --zero 1
check "ZeRO-1 is refused" test $? -ne 0
check "... saying why" grep -q "use --zero 0" "$TMP/err"
STRATA_POOL_NODES= train nonodes --optimizer-in-pool
check "no pool nodes is refused" test $? -ne 0
check "... naming the variable" grep -q "set STRATA_POOL_NODES" "$TMP/err"
run train "${A[@]}" --optimizer-in-pool
check "one process is refused" test "$rc" -ne 0
check "... saying it needs ranks" grep -q "strata launch -n 2" "$TMP/err"
check "a small node starts" start_node s --bytes 64K
STRATA_POOL_NODES=$node_addr train small --optimizer-in-pool
check "a pool too small is refused" test $? -ne 0
check "... saying what each node must serve" grep -q "start the nodes with --bytes" "$TMP/err"
finish
