#!/usr/bin/env bash
# strata under the launchers its users already run, with nothing set by hand (no MASTER_ADDR,
# MASTER_PORT or STRATA_* in the environment): a 2-rank allreduce bench (every result checked) and a
# 2-rank data-parallel `strata train` whose losses match `strata launch`'s, under
#   torchrun (default static rendezvous: strata meets in torchrun's own store), one node and two
#   "nodes" (two agents on this machine), Open MPI's mpirun (PMIx), MPICH's mpiexec (PMI-1),
#   Slurm's srun (a slurmctld and slurmd started here: no MPI plugin, --mpi=pmix, --mpi=pmi2),
# and `strata launch` binding its ranks to distinct cores. A launcher that is not installed (or a
# Slurm that cannot start here: not root, no munge) is skipped naming why; scripts/deps.sh
# installs them all, so CI runs every one.
# Usage: launchers.sh path/to/strata
set -uo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
SLURM_PIDS=()
cleanup() {
    for p in "${SLURM_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT
unset MASTER_ADDR MASTER_PORT STRATA_STORE_ADDR STRATA_JOB_ID RANK WORLD_SIZE LOCAL_RANK
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
fail=0 ran=0
A=(--data data/corpus/strata_tales.txt --layers 2 --heads 2 --dim 32 --seq 32 --batch 4 --steps 6
   --threads 1 --quiet)
"$S" launch -n 2 -- "$S" train "${A[@]}" --metrics "$W/ref.jsonl" >/dev/null 2>&1 ||
    { echo "reference run under strata launch failed"; exit 1; }
. tests/cli/lib/train.sh # losses()

# check NAME COMMAND...: COMMAND runs the bench (prefix "bench") or the train (prefix "train") under
# a launcher; ok when it exits 0 and the bench's results are correct or the losses match.
check() {
    local name=$1 what=$2; shift 2
    rm -f "$W/m.jsonl"
    timeout 120 "$@" >"$W/out" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo "$name $what: FAIL (exit $rc)"; tail -15 "$W/out"; fail=1; return
    fi
    ran=$((ran + 1))
    if [ "$what" = bench ]; then
        grep -q "# all results correct" "$W/out" && echo "$name bench: ok" ||
            { echo "$name bench: FAIL"; tail -8 "$W/out"; fail=1; }
    elif cmp -s <(losses "$W/ref.jsonl") <(losses "$W/m.jsonl"); then
        echo "$name train: ok (losses as under strata launch)"
    else
        echo "$name train: FAIL (losses differ)"; paste <(losses "$W/ref.jsonl") <(losses "$W/m.jsonl"); fail=1
    fi
}
BENCH=("$S" bench allreduce -b 8 -e 64K -f 8)
TRAIN=("$S" train "${A[@]}" --metrics "$W/m.jsonl")

# torchrun: Debian's torch 1.13 under Python 3.11 needs --redirects/--tee/--log_dir (its own bug).
if command -v torchrun >/dev/null && /usr/bin/python3 -c "import torch" 2>/dev/null; then
    TR=(torchrun --no_python --redirects 2 --tee 2 --log_dir "$W/trlog")
    check "torchrun" bench "${TR[@]}" --nproc_per_node 2 "${BENCH[@]}"
    check "torchrun" train "${TR[@]}" --nproc_per_node 2 "${TRAIN[@]}"
    port=$((29000 + RANDOM % 1000))
    # Two agents, one node each, meeting at node 0's store.
    cat >"$W/two_nodes.sh" <<EOF
for i in 0 1; do
    ${TR[*]} --nnodes 2 --node_rank \$i --nproc_per_node 1 --master_addr 127.0.0.1 \\
        --master_port $port "\$@" >"$W/node\$i" 2>&1 &
done
wait %1; a=\$?; wait %2; b=\$?; cat "$W/node0" "$W/node1"; [ \$a -eq 0 ] && [ \$b -eq 0 ]
EOF
    check "torchrun 2 nodes" bench bash "$W/two_nodes.sh" "${BENCH[@]}"
else
    echo "torchrun: SKIP (python3-torch is not installed)"
fi

# Open MPI: as root it needs its two consent variables (its rule, not strata's).
if command -v mpirun.openmpi >/dev/null; then
    OM=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi -np 2
        --oversubscribe)
    check "Open MPI mpirun" bench "${OM[@]}" "${BENCH[@]}"
    check "Open MPI mpirun" train "${OM[@]}" -x OPENBLAS_NUM_THREADS "${TRAIN[@]}"
else
    echo "Open MPI: SKIP (openmpi-bin is not installed)"
fi

if command -v mpiexec.hydra >/dev/null; then
    check "MPICH mpiexec" bench mpiexec.hydra -n 2 "${BENCH[@]}"
    check "MPICH mpiexec" train mpiexec.hydra -n 2 "${TRAIN[@]}"
else
    echo "MPICH: SKIP (mpich is not installed)"
fi

# Slurm: a controller and a node daemon on this machine, on ports of their own.
start_slurm() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null ||
        { echo "Slurm: SKIP (slurm-wlm is not installed)"; return 1; }
    [ "$(id -u)" -eq 0 ] || { echo "Slurm: SKIP (starting slurmd needs root)"; return 1; }
    local host d=$W/slurm
    host=$(hostname)
    mkdir -p "$d/state" "$d/spool" /run/munge
    chown munge:munge /run/munge 2>/dev/null
    pgrep -x munged >/dev/null || /usr/sbin/munged --force 2>/dev/null ||
        { echo "Slurm: SKIP (munged does not start)"; return 1; }
    local base=$((17000 + RANDOM % 2000))
    cat >"$d/slurm.conf" <<EOF
ClusterName=stratatest
SlurmctldHost=$host
SlurmctldPort=$base
SlurmdPort=$((base + 1))
AuthType=auth/munge
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
NodeName=$host CPUs=$(getconf _NPROCESSORS_ONLN) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
    export SLURM_CONF=$d/slurm.conf
    slurmctld -D -c >/dev/null 2>&1 & SLURM_PIDS+=($!)
    slurmd -D -c >/dev/null 2>&1 & SLURM_PIDS+=($!)
    for _ in $(seq 50); do
        sinfo -h -o %t 2>/dev/null | grep -q idle && return 0
        sleep 0.2
    done
    echo "Slurm: SKIP (slurmctld/slurmd did not come up: $(tail -2 "$d/slurmctld.log" 2>/dev/null))"
    return 1
}
if start_slurm; then
    check "Slurm srun" bench srun -n 2 "${BENCH[@]}"
    check "Slurm srun" train srun -n 2 "${TRAIN[@]}"
    check "Slurm srun --mpi=pmix" bench srun --mpi=pmix -n 2 "${BENCH[@]}"
    check "Slurm srun --mpi=pmi2" bench srun --mpi=pmi2 -n 2 "${BENCH[@]}"
    printf '%s\n%s\n' "$(hostname)" "$(hostname)" >"$W/hf"
    check "Slurm srun arbitrary" bench env SLURM_HOSTFILE="$W/hf" srun --distribution=arbitrary -n 2 "${BENCH[@]}"
fi

# strata launch binds each rank to its own core (when there are as many).
if [ "$(getconf _NPROCESSORS_ONLN)" -ge 2 ]; then
    "$S" launch -n 2 -- sh -c 'grep Cpus_allowed_list /proc/self/status' >"$W/cpus" 2>&1
    if [ "$(awk '{print $NF}' "$W/cpus" | sort -u | wc -l)" -eq 2 ] &&
        ! awk '{print $NF}' "$W/cpus" | grep -q '[-,]'; then
        echo "strata launch --bind-to core: ok ($(awk '{print $NF}' "$W/cpus" | paste -sd' '))"
    else
        echo "strata launch --bind-to core: FAIL"; cat "$W/cpus"; fail=1
    fi
    "$S" launch -n 2 --bind-to none -- sh -c 'grep Cpus_allowed_list /proc/self/status' >"$W/cpus" 2>&1
    [ "$(awk '{print $NF}' "$W/cpus" | sort -u | wc -l)" -eq 1 ] && echo "strata launch --bind-to none: ok" ||
        { echo "strata launch --bind-to none: FAIL"; cat "$W/cpus"; fail=1; }
fi
echo "$ran launcher runs"
exit $fail
