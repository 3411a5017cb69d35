#!/usr/bin/env bash
# strata on an emulated cluster (bench/emu_cluster.sh: network namespaces, bridges, tbf-shaped
# links): hierarchical and tree-order collectives give correct results over real TCP between
# "hosts" in 2 racks and in a 3-level tree, the cost model picks the hierarchical allreduce for
# large messages on the rack-oblivious numbering, `strata probe` writes a cluster file that
# loads, and with no cluster file at all (only each rank's path) on racks of unequal size the
# links are calibrated at creation and the model still picks hier (with strata's default links it
# picked halving-doubling, 3x slower there). With --launch, a `strata launch` job's ranks enter
# their hosts (emu_enter.sh): each rank runs in its own host with its address, path and the store
# at rank 0's host, a collective over the emulated links is right, a rank that kills itself is
# named by the launcher's verdict (the pid it watches is the rank's), and SIGTERM to the script
# reaches the launcher, which stops the trainer with a final checkpoint, and leaves no namespace
# behind. With --switch-nodes the job's store runs on the node beside rack 0's switch, and
# --queue-bytes sets every link's queue. The pool allreduce is exact through 1% loss, and a rank
# waits for a peer's hello that the fabric holds back for 5 s instead of closing its connection.
# Every run is bounded; a failed check prints the end of its run's output. Skips (exit 77) where
# network namespaces cannot be made (not root, no netns or tbf).
#
#   bash tests/cli/emu_cluster.sh path/to/strata
set -u
STRATA=${1:?usage: bash tests/cli/emu_cluster.sh path/to/strata}
case $STRATA in /*) ;; *) STRATA=$PWD/$STRATA ;; esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EMU=$ROOT/bench/emu_cluster.sh
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-emu-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

pass=0
fail=0
check() { # check DESC STATUS: a failure shows the end of what the run wrote ($out)
    if [ "$2" -eq 0 ]; then
        pass=$((pass + 1)); echo "ok   - $1"
    else
        fail=$((fail + 1)); echo "FAIL - $1"
        [ -s "${out:-}" ] && tail -n 40 "$out" | sed 's/^/    | /'
    fi
}

# One emulated run, bounded: a run that hangs fails its checks, with its output, at the limit
# instead of leaving the whole test to ctest's timeout with nothing to show.
emu() {
    timeout -k 10 "${EMU_RUN_LIMIT_S:-100}" bash "$EMU" "$@"
}

# Probe once whether namespaces work here at all.
bash "$EMU" --racks 1 --hosts 1 --run true >/dev/null 2>"$TMP/probe.err"
rc=$?
if [ $rc -eq 77 ]; then
    echo "SKIP: cannot build an emulated cluster here: $(tail -1 "$TMP/probe.err")"
    exit 77
fi

B="$STRATA bench"
out=$TMP/2rack.txt
emu --racks 2 --hosts 2 --host-mbit 1000 --oversub 4 \
    --run "STRATA_COMM_ALGO=allreduce:hier $B allreduce --sizes 1,4097,1M -n 2 -w 1 -d f32 -o sum" \
    --run "STRATA_COMM_ALGO=allreduce:hier $B allreduce --sizes 100003 -n 2 -w 1 -d i32 -o max" \
    --run "STRATA_COMM_ALGO=allreduce:ring_tree $B allreduce --sizes 1M -n 2 -w 1" \
    --run "STRATA_COMM_ALGO=reduce_scatter:hier $B reduce_scatter --sizes 1M -n 2 -w 1 -o avg" \
    --run "STRATA_COMM_ALGO=allgather:hier $B allgather --sizes 1M -n 2 -w 1" \
    --run "$B allreduce --sizes 8,4M -n 2 -w 1" \
    --run "$STRATA probe --bytes 512K --lat-iters 20 --out $TMP/probed.json >/dev/null" \
    >"$out" 2>&1
check "2 racks x 2 hosts: every collective ran" $?
grep -q "CHECK FAILED\|FAIL" "$out"
check "2 racks x 2 hosts: every result correct" $((!$?))
[ "$(grep -c 'all results correct' "$out")" -eq 6 ]
check "2 racks x 2 hosts: six checked benchmarks" $?
grep -E '^ +4194304 .* hier ' "$out" >/dev/null
check "the cost model picks hier for a 4 MiB allreduce" $?
grep -E '^ +8 .* (recursive_doubling|halving_doubling) ' "$out" >/dev/null
check "and a latency algorithm for 8 bytes" $?
"$STRATA" topo show "$TMP/probed.json" 2>&1 | grep -qE '^ +spine +2 +4 '
check "probe wrote a cluster file that loads, with the spine level" $?

out=$TMP/uneven.txt
emu --rack-hosts 3,5 --host-mbit 800 --oversub 8 --path-only \
    --run "$B allreduce --sizes 8,4M -n 1 -w 1" >"$out" 2>&1
check "racks of 3 and 5 hosts, paths only: the benchmark ran" $?
grep -q "^# links calibrated at creation" "$out"
check "racks of 3 and 5 hosts, paths only: the links were calibrated at creation" $?
grep -E '^ +4194304 .* hier ' "$out" >/dev/null
check "racks of 3 and 5 hosts, paths only: the cost model picks hier for 4 MiB" $?
grep -q "all results correct" "$out"
check "racks of 3 and 5 hosts, paths only: results correct" $?

out=$TMP/3level.txt
emu --zones 2 --racks 2 --hosts 1 --ranks-per-host 2 --host-mbit 1000 --oversub 2 \
    --run "STRATA_COMM_ALGO=allreduce:hier $B allreduce --sizes 7,1M -n 2 -w 1 -o avg" \
    --run "STRATA_COMM_ALGO=reduce_scatter:hier,allgather:hier $B allgather --sizes 1M -n 2 -w 1" \
    >"$out" 2>&1
check "3 levels (2 zones x 2 racks x 1 host x 2 ranks): collectives ran" $?
[ "$(grep -c 'all results correct' "$out")" -eq 2 ]
check "3 levels: every result correct" $?

# --switch-nodes: a host beside each rack's switch, here serving the job's store; --queue-bytes
# shrinks every link's queue, and the links then send frame by frame: 1 MiB through 30000-byte
# queues takes about 0.14 s a call at these rates. With TCP's 64 KiB super-packets queued whole,
# every large burst was dropped outright and each call stalled 10-14 s in retransmission timeouts;
# 3 s a call tells the two apart on a loaded machine.
out=$TMP/switch.txt
emu --racks 2 --hosts 1 --switch-nodes --queue-bytes 30000 \
    --switch-run "$STRATA store --addr 0.0.0.0:29611 --secret sw" \
    --run "[ \"\$EMU_SWITCHES\" = 10.99.200.1,10.99.200.2 ] || exit 9; MASTER_ADDR=\${EMU_SWITCHES%%,*} \
           MASTER_PORT=29611 STRATA_STORE_EXTERNAL=1 STRATA_SECRET=sw $B allreduce --sizes 1M -n 2 -w 1 \
           && tc qdisc show dev eth0 && ip -d link show dev eth0" >"$out" 2>&1
check "--switch-nodes: ranks of both racks reach the store on rack 0's switch node" $?
grep -q "all results correct" "$out"
check "--switch-nodes: the allreduce is correct" $?
[ "$(grep -c 'tbf .* limit 30000b' "$out")" -eq 2 ] && [ "$(grep -c 'gso_max_size 1500 gso_max_segs 1' "$out")" -eq 2 ]
check "--queue-bytes: the hosts' links queue 30000 bytes, frame by frame" $?
awk '$1 == 1048576 && $6 + 0 > 0 { n++; if ($6 > 3e6 || $10 > 3e6) slow++ } END { exit !(n && !slow) }' "$out"
check "--queue-bytes: a 1 MiB allreduce through those queues loses frames, not seconds (< 3 s)" $?

# The pool allreduce through pool nodes beside the rack switches, its results by multicast across
# the bridges, on jumbo frames (--mtu) with 1% of the frames lost in every bridge (--loss): still
# exact; the last node of the chain (rack 1's) counts the results it sent, and the bridges their drops.
out=$TMP/pool.txt
emu --racks 2 --hosts 2 --mtu 9000 --loss 1 --switch-nodes \
    --switch-run "STRATA_SECRET=ps $STRATA pool serve --listen \$SWITCH_ADDR:7700 --bytes 64M" \
    --run "cat /sys/class/net/eth0/mtu; STRATA_POOL_SECRET=ps STRATA_COMM_ALGO=allreduce:pool \
           STRATA_POOL_MULTICAST=239.192.60.0:7810 \
           STRATA_POOL_NODES=\$(echo \$EMU_SWITCHES | sed 's/,/:7700,/g; s/\$/:7700/') \
           $B allreduce --sizes 1M,4M -n 2 -w 1 && \
           { [ \$RANK != 0 ] || { STRATA_SECRET=ps $STRATA pool stats \${EMU_SWITCHES##*,}:7700 &&
             ip netns exec \$(awk 'NR == 1 { print \$5 }' \$EMU_DIR/ranks) nft list ruleset; }; }" \
    >"$out" 2>&1
check "pool allreduce on the emulated cluster (multicast, jumbo frames, 1% loss): ran" $?
grep -q 'all results correct' "$out"
check "pool allreduce: the results are correct" $?
[ "$(grep -c '^9000$' "$out")" -eq 4 ]
check "--mtu 9000: every host's link has it" $?
grep -Eq '^results +[1-9]' "$out" && grep -Eq 'pool +[0-9]' "$out"
check "pool allreduce: the node served reductions, and bench named the pool algorithm" $?
grep -Eq 'counter packets [1-9][0-9]* .* drop' "$out"
check "--loss 1: the bridges dropped frames" $?

# A peer's hello held back 5 s by the fabric (the bridges drop every segment that carries the
# transport's hello magic, TCP's retransmissions included): the rank waits for it. With a 2 s
# deadline it closed the connection, the peer's first message in it was lost, and both ranks waited
# for the communicator's timeout (30 s here; 300 s by default, which is how this test once hung).
out=$TMP/late_hello.txt
emu --racks 1 --hosts 2 \
    --run "if [ \$RANK = 0 ]; then
               F=\$(awk 'NR == 1 { print \$5 }' \$EMU_DIR/ranks)
               ip netns exec \$F nft add table bridge hello &&
               ip netns exec \$F nft add chain bridge hello c '{ type filter hook forward priority 0; }' &&
               ip netns exec \$F nft add rule bridge hello c meta l4proto tcp @th,256,32 0x43545453 counter drop
               (sleep 5; ip netns exec \$F nft list table bridge hello; ip netns exec \$F nft delete table bridge hello) &
           fi
           STRATA_COMM_TIMEOUT_MS=30000 $B allreduce --sizes 1K -n 2 -w 1; rc=\$?; wait; exit \$rc" \
    >"$out" 2>&1
check "a hello held back 5 s by the fabric: the job ran" $?
grep -q 'all results correct' "$out" && grep -Eq 'counter packets [1-9][0-9]* .* drop' "$out" &&
    ! grep -q 'sent no hello' "$out"
check "a hello held back 5 s: the rank waited for it, the results are correct" $?

# --launch: the ranks of one `strata launch` enter their hosts.
cat >"$TMP/whoami.sh" <<'EOF2'
#!/bin/sh
echo "rank $RANK at $(ip -o -4 addr show dev eth0 | awk '{print $4}') store $STRATA_STORE_ADDR path $STRATA_TOPO_PATH"
EOF2
chmod +x "$TMP/whoami.sh"
out=$TMP/launch.txt
emu --racks 1 --hosts 3 --launch "$STRATA launch -n 3 --no-prefix -- \"\$EMU_ENTER\" $TMP/whoami.sh" >"$out" 2>&1
check "--launch: the job ran" $?
ok=0
for r in 0 1 2; do
    grep -qE "^rank $r at 10\.99\.0\.$((r + 1))/16 store 10\.99\.0\.1:[0-9]+ path rack0/host$r\$" "$out" || ok=1
done
check "--launch: each rank in its own host, its path set, the store at rank 0's host" $ok

out=$TMP/launch_bench.txt
emu --racks 1 --hosts 3 \
    --launch "$STRATA launch -n 3 --no-prefix -- \"\$EMU_ENTER\" $B allreduce --sizes 1M -n 2 -w 1" \
    >"$out" 2>&1
check "--launch: an allreduce over the emulated links ran" $?
grep -q "all results correct" "$out"
check "--launch: and is correct" $?

cat >"$TMP/die2.sh" <<EOF2
#!/bin/sh
[ "\$RANK" = 2 ] && kill -9 \$\$
exec $B allreduce --sizes 1M -n 1000000 -w 1
EOF2
chmod +x "$TMP/die2.sh"
out=$TMP/launch_kill.txt
emu --racks 1 --hosts 3 --launch "$STRATA launch -n 3 --no-prefix -- \"\$EMU_ENTER\" $TMP/die2.sh" \
    >"$out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -qE "^strata launch: rank 2 \(pid [0-9]+\) was killed by signal SIGKILL \(not sent by the launcher\)" "$out"
check "--launch: a rank killing itself in its host is named by the verdict (rc=$rc)" $?

# SIGTERM to the script: the launcher forwards it, the trainer checkpoints and exits 0, launch 143.
out=$TMP/launch_term.txt
bash "$EMU" --racks 1 --hosts 3 --launch "$STRATA launch -n 3 --no-prefix -- \"\$EMU_ENTER\" \
    $STRATA train --data $ROOT/data/corpus/strata_tales.txt --layers 1 --heads 1 --dim 16 --seq 16 \
    --batch 6 --threads 1 --steps 1000000 --quiet --ckpt-dir $TMP/ck --metrics $TMP/m.jsonl" \
    >"$out" 2>&1 &
emu=$!
for _ in $(seq 1 1200); do [ -s "$TMP/m.jsonl" ] && break; sleep 0.1; done
kill -TERM $emu
wait $emu
rc=$?
[ $rc -eq 143 ] && grep -q "got SIGTERM, forwarding it to 3 ranks" "$out" &&
    grep -q "stopped by SIGTERM after step .* checkpoint step .* written" "$out"
check "--launch: SIGTERM reaches the launcher and the trainer checkpoints (rc=$rc)" $?
! ip netns list | grep -q "^se$emu"
check "--launch: no namespace left behind" $?

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
