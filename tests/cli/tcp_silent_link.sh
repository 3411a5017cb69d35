#!/usr/bin/env bash
# A host whose link goes silent (its cable pulled on the emulated cluster: no FIN, no RST, nothing)
# is found by the TCP transport's keepalive and user timeout (STRATA_TCP_KEEPALIVE,
# STRATA_TCP_USER_TIMEOUT_MS, derived from the communicator timeout): the surviving ranks fail with
# PEER_FAILED naming the silent rank and the socket's "Connection timed out", reported through the
# store, instead of waiting for the timeout's census (which says "stopped responding" / "timed
# out" after the full communicator timeout) or for the kernel's ~15 minutes of retransmits. Then
# the same with keepalive and the user timeout turned off: the sockets notice nothing, and only the
# census names the rank, which shows the first check is the transport's doing. Skips (exit 77)
# where network namespaces cannot be made.
#
#   bash tests/cli/tcp_silent_link.sh path/to/strata
set -u
NAME=tcp_silent_link
. "$(dirname "$0")/lib/check.sh"
EMU=$ROOT/bench/emu_cluster.sh

bash "$EMU" --racks 1 --hosts 1 --run true >/dev/null 2>"$TMP/probe.err"
if [ $? -eq 77 ]; then
    echo "SKIP: cannot build an emulated cluster here: $(tail -1 "$TMP/probe.err")"
    exit 77
fi

# Three hosts allreduce in a loop; once rank 2 talks to rank 0 (a data connection beside its store
# connection), rank 0 pulls rank 2's cable. Rank 2 (cut off from the store too) is bounded by
# `timeout`; its own fate is not the point.
job() { # job TAG EXTRA_ENV
    local tag=$1 envs=$2
    bash "$EMU" --racks 1 --hosts 3 --run "
        if [ \$RANK = 0 ]; then
            read -r _ _ addr _ fabns fablink < <(awk '\$1 == 2' \"\$EMU_DIR/ranks\")
            ( until [ \$(ss -Htn state established dst \$addr | wc -l) -ge 2 ]; do sleep 0.2; done
              sleep 1
              ip netns exec \$fabns ip link set \$fablink down ) &
        fi
        env STRATA_COMM_TIMEOUT_MS=12000 STRATA_TOPO_CALIBRATE=off STRATA_TOPO_FILE= $envs \
            timeout 40 '$STRATA' bench allreduce --sizes 4096 -n 100000000 -w 1 -c 1 \
            >'$TMP/$tag.out.'\$RANK 2>'$TMP/$tag.err.'\$RANK
        exit 0" >"$TMP/$tag.emu" 2>&1
}

job ka ""
echo "# with keepalive: $(grep -h 'error:' "$TMP/ka.err.0")"
for r in 0 1; do
    grep -q "rank 2 .*Connection timed out" "$TMP/ka.err.$r"
    check "rank $r fails naming rank 2 through its socket's timeout (keepalive / user timeout)" test $? -eq 0
    grep -q "PEER_FAILED\|failed" "$TMP/ka.err.$r" && ! grep -q "stopped responding" "$TMP/ka.err.$r"
    check "rank $r: a failed peer, not the timeout's census" test $? -eq 0
done
[ $fail -eq 0 ] || for r in 0 1; do echo "--- rank $r:"; tail -5 "$TMP/ka.err.$r"; done

job off "STRATA_TCP_KEEPALIVE=off STRATA_TCP_USER_TIMEOUT_MS=0"
echo "# without: $(grep -h 'error:' "$TMP/off.err.0")"
for r in 0 1; do
    ! grep -q "Connection timed out" "$TMP/off.err.$r" && grep -q "rank 2" "$TMP/off.err.$r"
    check "without keepalive and user timeout rank $r learns of rank 2 only from the census" test $? -eq 0
done
[ $fail -eq 0 ] || for r in 0 1; do echo "--- rank $r:"; tail -5 "$TMP/off.err.$r"; done

finish
