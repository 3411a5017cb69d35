#!/usr/bin/env bash
# `strata pool` end to end on loopback: a node started with port 0 prints its address; `strata pool
# stats` authenticates with STRATA_SECRET and reads its counters (text and --json); a wrong secret
# and a SIGKILLed node each fail with an error naming the node (never a hang); usage errors exit 2;
# SIGTERM stops the node with a summary line. Nothing waits on elapsed time except the watchdogs.
set -u
NAME=pool
source "$(dirname "$0")/lib/check.sh"
export STRATA_SECRET=cli-pool-secret
export STRATA_POOL_TIMEOUT_MS=3000

start_node() { # start_node ARGS...: sets $node_pid and $node_addr
    "$STRATA" pool serve --listen 127.0.0.1:0 "$@" >"$TMP/node.out" 2>"$TMP/node.err" &
    node_pid=$!
    for _ in $(seq 1 300); do
        node_addr=$(sed -n 's/^strata pool listening on //p' "$TMP/node.out")
        [ -n "$node_addr" ] && return 0
        sleep 0.05
    done
    return 1
}

check "serve prints its address" start_node --bytes 4M --drop 0.05 --seed 3
run pool stats "$node_addr"
check "stats answers" test "$rc" -eq 0
check "stats counts the session" grep -q '^sessions  *1$' "$TMP/out"
run pool stats "$node_addr" --json
check "stats --json" grep -q '"sessions":2' "$TMP/out"

STRATA_SECRET=wrong STRATA_POOL_TIMEOUT_MS=400 "$STRATA" pool stats "$node_addr" >"$TMP/out" 2>"$TMP/err"
rc=$?
check "a wrong secret fails" test "$rc" -eq 1
check "... naming the node" grep -q "pool node $node_addr did not complete the handshake" "$TMP/err"
run pool stats "$node_addr"
check "the node counted the unauthorised datagrams" \
    bash -c "awk '\$1 == \"unauthorized\" && \$2 > 0' '$TMP/out' | grep -q ."

kill -TERM "$node_pid"
wait "$node_pid"
check "SIGTERM stops the node cleanly" test $? -eq 0
check "... with a summary" grep -q "strata pool: stopping:" "$TMP/node.err"

check "a second node starts" start_node --bytes 1M
kill -KILL "$node_pid"
wait "$node_pid" 2>/dev/null
run pool stats "$node_addr"
check "a killed node: stats fails" test "$rc" -eq 1
check "... naming the node" grep -q "$node_addr" "$TMP/err"

run pool serve --listen 127.0.0.1:0
check "serve without --bytes is a usage error" test "$rc" -eq 2
run pool serve --listen 127.0.0.1:0 --bytes 1M --drop 1.5
check "a probability above 1 is a usage error" test "$rc" -eq 2
run pool serve --listen nowhere --bytes 1M
check "a malformed address is an error" test "$rc" -eq 1
check "... saying what was expected" grep -q "expected ADDR:PORT" "$TMP/err"
run pool frobnicate
check "an unknown subcommand is a usage error" test "$rc" -eq 2
finish
