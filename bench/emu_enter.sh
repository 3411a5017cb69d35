#!/usr/bin/env bash
# The program `strata launch` starts for each rank of a job on the emulated cluster
# (bench/emu_cluster.sh --launch, which exports EMU_ENTER as this script's path):
#
#   strata launch -n 4 -- "$EMU_ENTER" strata train ...
#
# Moves rank $RANK into its host's network namespace and becomes PROGRAM there (`ip netns exec`
# executes it in place: the pid stays the one the launcher started, so its signals, its liveness
# checks and its verdict still apply). Inside, the rank gets its place on the fabric
# (STRATA_TOPO_PATH, STRATA_TOPO_FILE) and finds the store at rank 0's host address on the
# launcher's MASTER_PORT; rank 0 binds the store there, and every rank's TCP transport listens on
# the address that reaches the store, so all traffic crosses the emulated links.
set -euo pipefail
: "${EMU_DIR:?emu_enter: EMU_DIR is not set (run under bench/emu_cluster.sh --launch)}"
: "${RANK:?emu_enter: RANK is not set (run as the program of strata launch)}"
: "${MASTER_PORT:?emu_enter: MASTER_PORT is not set (run as the program of strata launch)}"
(($#)) || { echo "emu_enter: usage: emu_enter.sh PROGRAM [ARGS...]" >&2; exit 2; }
read -r _ ns _ path _ < <(awk -v r="$RANK" '$1 == r' "$EMU_DIR/ranks") ||
    { echo "emu_enter: rank $RANK is not in $EMU_DIR/ranks (more ranks than the cluster has?)" >&2; exit 2; }
master=$(awk '$1 == 0 { print $3 }' "$EMU_DIR/ranks")
export MASTER_ADDR=$master STRATA_STORE_ADDR=$master:$MASTER_PORT
export STRATA_TOPO_PATH=$path STRATA_TOPO_FILE=$EMU_DIR/cluster.json
exec ip netns exec "$ns" "$@"
