#!/usr/bin/env bash
# An emulated cluster on one machine: one network namespace per host, a bridge per rack (and per
# zone), a spine bridge, veth links, and tbf shaping every host NIC and every uplink to the rates
# asked for. Runs commands as the job's ranks inside their hosts' namespaces, or one launcher
# command whose ranks enter them, then tears it all down (always: on success, failure or
# interrupt). Only the cluster's own addresses are used (10.99.0.0/16 inside its namespaces).
# Needs root, iproute2 (ip, tc) and the tbf qdisc.
#
# usage: bench/emu_cluster.sh [shape] --run 'COMMAND' [--run 'COMMAND' ...]
#        bench/emu_cluster.sh [shape] --launch 'COMMAND'
#   --racks R          racks (per zone when --zones is given)      default 2
#   --hosts H          hosts per rack                              default 4
#   --rack-hosts LIST  hosts of each rack, e.g. 3,5 (racks of unequal size; replaces --racks and
#                      --hosts; with --zones, the list is cut into that many equal zones)
#   --zones Z          zones, each with R racks (0 = no zone level) default 0
#   --ranks-per-host K ranks in every host (shared memory inside)  default 1
#   --host-mbit M      every host's NIC, each direction            default 800
#   --oversub O        rack uplink = (hosts in the rack) * M / O    default 8
#   --zone-oversub P   zone uplink = (its racks' uplinks) / P       default 2
#   --numbering rr|packed  rank r on host (r mod hosts) round-robin across racks, as a rack-blind
#                      launcher does (rr, default), or racks filled in order (packed)
#   --keep-file F      copy the generated cluster file to F
#   --path-only        give the ranks only STRATA_TOPO_PATH, not the cluster file (the links are
#                      then unknown to them, as under a launcher; the file is still written)
#   --torus DIMS       hosts wired as a torus instead (3x3, 2x3, 2x2x2): a shaped veth to each
#                      neighbour at --host-mbit, routes along dimension order (bench/emu_torus.sh)
#   --ecmp             racks are routed, not bridged: each rack is a subnet (10.99.RACK.0/24) behind
#                      a router, joined to the other racks through two spine routers, each path
#                      shaped to half the rack uplink; the rack routers hold multipath routes over
#                      both spines with L4 hashing (fib_multipath_hash_policy=1), so one TCP flow
#                      stays on one path and only several flows spread (bench/ecmp.sh; no --zones)
#   --switch-nodes     one more host per rack, plugged into the rack's bridge where the switch's own
#                      memory would sit (NetDAM; strata pool nodes): namespace PREFIXp<RACK>, address
#                      10.99.200.<RACK+1>, its link shaped to --switch-mbit (default: the rack's hosts
#                      times --host-mbit, so it keeps up with every host of its rack at once). Listed
#                      in $EMU_DIR/switches (RACK NAMESPACE ADDRESS); the ranks get EMU_SWITCHES, the
#                      addresses in rack order, comma-separated (tree shapes only)
#   --switch-run CMD   run CMD in every switch node (SWITCH=rack, SWITCH_ADDR set) before the ranks
#                      start, in the background until the end; needs --switch-nodes
#   --loss PCT         every bridge a frame crosses drops it with probability PCT percent (e.g. 0.1;
#                      nftables' random numbers in the bridges' forward hook, so TCP and UDP lose
#                      alike; a frame between racks crosses three bridges). Needs nft (nftables)
#   --mtu M            every link's MTU (default 1500; 9000: jumbo frames, as NetDAM and many
#                      training fabrics use)
#   --queue-bytes B    every shaped link queues at most B bytes (tbf limit) instead of 200 ms worth:
#                      a small B makes bursts overflow and drop frames, real loss (no netem here);
#                      the links then send frame by frame (no GSO), as a switch port queues them
# Every COMMAND runs once per rank, in that rank's namespace, with RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, STRATA_TOPO_PATH and STRATA_TOPO_FILE set (and
# EMU_DIR, a scratch folder, where the cluster file is EMU_DIR/cluster.json). The script exits
# non-zero when any rank of any command fails.
# --launch runs COMMAND once, in the machine's own namespace, with EMU_DIR and EMU_ENTER set:
# EMU_ENTER (bench/emu_enter.sh) used as the program of `strata launch` puts rank $RANK into its
# host's namespace and points it at rank 0's host for the store, so a launched job's ranks talk
# TCP across the emulated links while the launcher still watches, signals and restarts them:
#   bench/emu_cluster.sh --racks 1 --hosts 4 \
#       --launch 'strata launch -n 4 --max-restarts 3 -- "$EMU_ENTER" strata train ...'
# SIGTERM/SIGINT to the script go to COMMAND, and the script exits with its status.
# $EMU_DIR/ranks has a line per rank: RANK NAMESPACE ADDRESS PATH FABRIC_NAMESPACE FABRIC_LINK
# (the host's NIC is eth0 in NAMESPACE; FABRIC_LINK is its other end, in FABRIC_NAMESPACE; both
# are tbf-shaped), for tools that cut or slow a host's link (bench/faults.py).
# Exit status 77: namespaces cannot be made here (not root, or no netns/tbf support).
set -euo pipefail

racks=2 hosts=4 zones=0 rph=1 mbit=800 oversub=8 zoversub=2 numbering=rr keep="" rack_hosts=""
path_only=0 torus="" ecmp=0 switches=0 switch_mbit="" switch_run="" queue="" mtu=1500 loss=""
runs=() launch=""
while (($#)); do
    case "$1" in
    --racks) racks=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --zones) zones=$2; shift 2 ;;
    --ranks-per-host) rph=$2; shift 2 ;;
    --host-mbit) mbit=$2; shift 2 ;;
    --oversub) oversub=$2; shift 2 ;;
    --zone-oversub) zoversub=$2; shift 2 ;;
    --numbering) numbering=$2; shift 2 ;;
    --keep-file) keep=$2; shift 2 ;;
    --rack-hosts) rack_hosts=$2; shift 2 ;;
    --path-only) path_only=1; shift ;;
    --torus) torus=$2; shift 2 ;;
    --ecmp) ecmp=1; shift ;;
    --switch-nodes) switches=1; shift ;;
    --switch-mbit) switch_mbit=$2; shift 2 ;;
    --switch-run) switch_run=$2; shift 2 ;;
    --queue-bytes) queue=$2; shift 2 ;;
    --mtu) mtu=$2; shift 2 ;;
    --loss) loss=$2; shift 2 ;;
    --run) runs+=("$2"); shift 2 ;;
    --launch) launch=$2; shift 2 ;;
    -h | --help) sed -n "2,$(grep -n '^# Exit status 77' "$0" | cut -d: -f1)p" "$0"; exit 0 ;;
    *) echo "emu_cluster: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if ((${#runs[@]} == 0)) && [ -z "$launch" ]; then
    echo "emu_cluster: nothing to --run or --launch" >&2; exit 2
elif ((${#runs[@]})) && [ -n "$launch" ]; then
    echo "emu_cluster: --run and --launch do not mix" >&2; exit 2
fi
for v in racks hosts rph mbit oversub zoversub; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "emu_cluster: --$v must be a positive integer" >&2; exit 2; }
done
[[ $zones =~ ^[0-9]+$ ]] || { echo "emu_cluster: --zones must be >= 0" >&2; exit 2; }
[[ $numbering == rr || $numbering == packed ]] || { echo "emu_cluster: --numbering rr|packed" >&2; exit 2; }
((ecmp && zones > 0)) && { echo "emu_cluster: --ecmp does not take --zones" >&2; exit 2; }
if ((switches)); then
    [ -z "$torus" ] && ((!ecmp)) || { echo "emu_cluster: --switch-nodes needs a tree (no --torus, --ecmp)" >&2; exit 2; }
    [ -z "$switch_mbit" ] || [[ $switch_mbit =~ ^[1-9][0-9]*$ ]] ||
        { echo "emu_cluster: --switch-mbit must be a positive integer" >&2; exit 2; }
else
    [ -z "$switch_run$switch_mbit" ] || { echo "emu_cluster: --switch-run and --switch-mbit need --switch-nodes" >&2; exit 2; }
fi
[ -z "$queue" ] || [[ $queue =~ ^[1-9][0-9]*$ ]] || { echo "emu_cluster: --queue-bytes must be a positive integer" >&2; exit 2; }
[ -z "$loss" ] || [[ $loss =~ ^[0-9]*\.?[0-9]{0,3}$ && $loss != . ]] || { echo "emu_cluster: --loss is a percentage with at most 3 decimals (0.1)" >&2; exit 2; }
[ -z "$loss" ] || command -v nft >/dev/null || { echo "emu_cluster: --loss needs nft (apt-get install nftables)" >&2; exit 2; }
[ -z "$loss" ] || [ -z "$torus" ] || { echo "emu_cluster: --loss works on the bridges of racks, not on --torus" >&2; exit 2; }
[[ $mtu =~ ^[0-9]+$ ]] && ((mtu >= 576 && mtu <= 65535)) || { echo "emu_cluster: --mtu must be 576..65535" >&2; exit 2; }
[ -z "$queue" ] || ((queue >= mtu + 14)) || { echo "emu_cluster: --queue-bytes $queue holds no frame of --mtu $mtu (needs at least $((mtu + 14)): the frame and its Ethernet header)" >&2; exit 2; }
nz=$((zones > 0 ? zones : 1))
if [ -n "$rack_hosts" ]; then # racks of the sizes listed
    IFS=, read -ra rsize <<<"$rack_hosts"
    for v in "${rsize[@]}"; do
        [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "emu_cluster: --rack-hosts expects positive integers like 3,5" >&2; exit 2; }
    done
    ((${#rsize[@]} % nz == 0)) || { echo "emu_cluster: --rack-hosts: ${#rsize[@]} racks do not split into $nz zones" >&2; exit 2; }
    racks=$((${#rsize[@]} / nz))
else
    rsize=()
    for ((k = 0; k < nz * racks; k++)); do rsize+=("$hosts"); done
fi

if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    echo "emu_cluster: needs root and iproute2 (ip, tc)" >&2
    exit 77
fi

P="se$$"                      # prefix of every namespace and link name of this run
FAB="${P}f"                   # the namespace holding the bridges
nracks=$((nz * racks))
rack_of=() first=() nhosts=0 hmax=0 # hosts are numbered rack after rack
for ((k = 0; k < nracks; k++)); do
    first+=("$nhosts")
    for ((i = 0; i < rsize[k]; i++)); do rack_of+=("$k"); done
    nhosts=$((nhosts + rsize[k]))
    hmax=$((rsize[k] > hmax ? rsize[k] : hmax))
done
nranks=$((nhosts * rph))
rack_desc=$(IFS=,; echo "${rsize[*]}")
EMU_DIR=$(mktemp -d /tmp/strata-emu.XXXXXX)
export EMU_DIR

teardown() {
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${P}" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$EMU_DIR"
}
trap teardown EXIT
trap 'exit 130' INT TERM

shape() { # shape DEV NS MBIT: tbf on DEV's egress
    local rate_bps=$(($3 * 1000000 / 8)) burst
    burst=$((rate_bps / 100 > 131072 ? rate_bps / 100 : 131072)) # >= rate/HZ, >= one GSO frame
    local room=(latency 200ms)
    [ -n "$queue" ] && room=(limit "$queue")
    ip netns exec "$2" tc qdisc add dev "$1" root tbf rate "$3mbit" burst "$burst" "${room[@]}"
}

# With --queue-bytes every link sends one frame at a time (no GSO): TCP hands a veth super-packets
# of up to 64 KiB, which tbf queues whole, so a queue smaller than one of them dropped every large
# burst outright (a 1 MiB exchange stalled 20 s in retransmission timeouts) where a switch's queue
# drops frames.
link_pair() { # link_pair NS_A DEV_A NS_B DEV_B
    ip link add "$2" netns "$1" type veth peer name "$4" netns "$3"
    local gso=()
    [ -n "$queue" ] && gso=(gso_max_size "$mtu" gso_max_segs 1)
    ip netns exec "$1" ip link set "$2" mtu "$mtu" "${gso[@]}" up
    ip netns exec "$3" ip link set "$4" mtu "$mtu" "${gso[@]}" up
}

bridge() { # bridge NAME
    ip netns exec "$FAB" ip link add "$1" type bridge
    ip netns exec "$FAB" ip link set "$1" up
}

if [ -n "$torus" ]; then # the hosts as a torus, not racks of bridges
    . "$(dirname "$0")/emu_torus.sh"
else
if ! ip netns add "$FAB" 2>/dev/null; then
    echo "emu_cluster: cannot create network namespaces here" >&2
    exit 77
fi
ip netns exec "$FAB" ip link set lo up
bridge "${P}sp"
rack_up=() # per rack: its hosts' NICs over the oversubscription
for ((k = 0; k < nracks; k++)); do
    u=$((rsize[k] * mbit / oversub))
    rack_up+=($((u > 0 ? u : 1)))
done
zone_up=() # per zone: its racks' uplinks over the zone oversubscription
for ((z = 0; z < zones; z++)); do
    u=0
    for ((k = z * racks; k < (z + 1) * racks; k++)); do u=$((u + rack_up[k])); done
    u=$((u / zoversub))
    zone_up+=($((u > 0 ? u : 1)))
done
uplink() { # uplink NAME LOWER_BRIDGE UPPER_BRIDGE MBIT: a shaped link from a unit to the level above
    link_pair "$FAB" "$1u" "$FAB" "$1d"
    ip netns exec "$FAB" ip link set "$1u" master "$2"
    ip netns exec "$FAB" ip link set "$1d" master "$3"
    shape "$1u" "$FAB" "$4" || { echo "emu_cluster: tbf unavailable" >&2; exit 77; }
    shape "$1d" "$FAB" "$4"
}
for ((z = 0; z < zones; z++)); do # zone bridges hang off the spine
    bridge "${P}z$z"
    uplink "${P}z$z" "${P}z$z" "${P}sp" "${zone_up[z]}"
done
for ((k = 0; k < nracks; k++)); do # rack bridges hang off their zone, or the spine
    bridge "${P}r$k"
    ((ecmp)) && continue # routed instead (below)
    up="${P}sp"
    ((zones > 0)) && up="${P}z$((k / racks))"
    uplink "${P}r$k" "${P}r$k" "$up" "${rack_up[k]}"
done
# Random loss in every bridge: PCT percent is PCT*1000 in 100000. The table must come after the
# bridges: a bridge created later is not seen by the hook.
if [ -n "$loss" ]; then
    per=$(awk -v p="$loss" 'BEGIN { printf "%d", p * 1000 + 0.5 }')
    ip netns exec "$FAB" nft add table bridge emu
    ip netns exec "$FAB" nft "add chain bridge emu lossy { type filter hook forward priority 0; }"
    ip netns exec "$FAB" nft add rule bridge emu lossy numgen random mod 100000 "<" "$per" counter drop
fi
router() { # router NS: a namespace that forwards, hashing multipath routes on L4
    ip netns add "$1"
    ip netns exec "$1" ip link set lo up
    ip netns exec "$1" sysctl -qw net.ipv4.ip_forward=1
    ip netns exec "$1" sysctl -qw net.ipv4.fib_multipath_hash_policy=1 ||
        { echo "emu_cluster: no L4 multipath hashing here" >&2; exit 77; }
}
if ((ecmp)); then # rack k's router t$k: 10.99.k.1 on the rack, 10.98.k.(4j+1)/30 towards spine j
    for j in 0 1; do router "${P}s$j"; done
    for ((k = 0; k < nracks; k++)); do
        t="${P}t$k"
        router "$t"
        link_pair "$t" rk "$FAB" "${P}t${k}d"
        ip netns exec "$FAB" ip link set "${P}t${k}d" master "${P}r$k"
        ip netns exec "$t" ip addr add "10.99.$k.1/24" dev rk
        half=$((rack_up[k] / 2 > 0 ? rack_up[k] / 2 : 1))
        for j in 0 1; do
            link_pair "$t" "up$j" "${P}s$j" "r$k"
            ip netns exec "$t" ip addr add "10.98.$k.$((4 * j + 1))/30" dev "up$j"
            ip netns exec "${P}s$j" ip addr add "10.98.$k.$((4 * j + 2))/30" dev "r$k"
            ip netns exec "${P}s$j" ip route add "10.99.$k.0/24" via "10.98.$k.$((4 * j + 1))"
            shape "up$j" "$t" "$half" || { echo "emu_cluster: tbf unavailable" >&2; exit 77; }
            shape "r$k" "${P}s$j" "$half"
        done
    done
    for ((k = 0; k < nracks; k++)); do
        for ((m = 0; m < nracks; m++)); do
            ((m == k)) && continue
            ip netns exec "${P}t$k" ip route add "10.99.$m.0/24" \
                nexthop via "10.98.$k.2" dev up0 nexthop via "10.98.$k.6" dev up1
        done
    done
fi
host_addr() { # host number -> its address (with --ecmp: in its rack's subnet, .1 is the router)
    if ((ecmp)); then
        local k=${rack_of[$1]}
        echo "10.99.$k.$(($1 - first[k] + 2))"
    else
        echo "10.99.$(($1 / 250)).$(($1 % 250 + 1))"
    fi
}
host_path() { # host_path H: zone/rack/host of host number h
    local h=$1 k=${rack_of[$1]}
    if ((zones > 0)); then echo "zone$((k / racks))/rack$k/host$h"; else echo "rack$k/host$h"; fi
}
for ((h = 0; h < nhosts; h++)); do
    ns="${P}h$h"
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    link_pair "$ns" eth0 "$FAB" "${P}h$h"
    ip netns exec "$FAB" ip link set "${P}h$h" master "${P}r${rack_of[h]}"
    if ((ecmp)); then
        ip netns exec "$ns" ip addr add "$(host_addr "$h")/24" dev eth0
        ip netns exec "$ns" ip route add default via "10.99.${rack_of[h]}.1"
    else
        ip netns exec "$ns" ip addr add "$(host_addr "$h")/16" dev eth0
    fi
    shape eth0 "$ns" "$mbit"
    shape "${P}h$h" "$FAB" "$mbit"
done

: >"$EMU_DIR/switches"
for ((k = 0; switches && k < nracks; k++)); do # a node beside each rack's switch
    ns="${P}p$k"
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    link_pair "$ns" eth0 "$FAB" "${P}p$k"
    ip netns exec "$FAB" ip link set "${P}p$k" master "${P}r$k"
    ip netns exec "$ns" ip addr add "10.99.200.$((k + 1))/16" dev eth0
    sw=${switch_mbit:-$((rsize[k] * mbit))}
    shape eth0 "$ns" "$sw"
    shape "${P}p$k" "$FAB" "$sw"
    echo "$k $ns 10.99.200.$((k + 1))" >>"$EMU_DIR/switches"
done
EMU_SWITCHES=$(awk '{print $3}' "$EMU_DIR/switches" | paste -sd, -)
export EMU_SWITCHES

# The cluster file: the levels and their links as built (bandwidth per rank, per direction).
per_rank_gbps=$(awk "BEGIN{print $mbit / 8000 / $rph}")
{
    echo "{\"name\": \"emulated-${rack_desc//,/-}\", \"levels\": ["
    echo "  {\"name\": \"host\", \"fanout\": $rph, \"bandwidth_GBps\": 4, \"latency_us\": 2, \"class\": \"scale-up\"},"
    echo "  {\"name\": \"rack\", \"fanout\": $hmax, \"bandwidth_GBps\": $per_rank_gbps, \"latency_us\": 60},"
    if ((zones > 0)); then
        echo "  {\"name\": \"zone\", \"fanout\": $racks, \"bandwidth_GBps\": $per_rank_gbps, \"latency_us\": 90, \"oversubscription\": $oversub},"
        echo "  {\"name\": \"spine\", \"fanout\": $zones, \"bandwidth_GBps\": $per_rank_gbps, \"latency_us\": 120, \"oversubscription\": $((oversub * zoversub))}"
    else
        echo "  {\"name\": \"spine\", \"fanout\": $nracks, \"bandwidth_GBps\": $per_rank_gbps, \"latency_us\": 90, \"oversubscription\": $oversub}"
    fi
    echo "]}"
} >"$EMU_DIR/cluster.json"
[ -n "$keep" ] && cp "$EMU_DIR/cluster.json" "$keep"

echo "emu_cluster: $nranks ranks on $nhosts hosts in $nracks racks of $rack_desc hosts$( ((zones > 0)) && echo " ($zones zones)"); host NIC ${mbit} Mbit/s, rack uplinks $(IFS=,; echo "${rack_up[*]}") Mbit/s (${oversub}:1)$( ((ecmp)) && echo " as 2 ECMP paths of half that")$( ((zones > 0)) && echo ", zone uplinks $(IFS=,; echo "${zone_up[*]}") Mbit/s")" >&2

order=() # host of each rank slot: round-robin across racks (rr), or racks filled in order (packed)
if [ "$numbering" = rr ]; then
    for ((i = 0; i < hmax; i++)); do
        for ((k = 0; k < nracks; k++)); do
            if ((i < rsize[k])); then order+=($((first[k] + i))); fi
        done
    done
else
    for ((h = 0; h < nhosts; h++)); do order+=("$h"); done
fi
host_of_rank() { # the host number of rank r
    echo "${order[$(($1 / rph))]}"
}
for ((r = 0; r < nranks; r++)); do # the map emu_enter.sh and fault injectors read
    h=$(host_of_rank "$r")
    echo "$r ${P}h$h $(host_addr "$h") $(host_path "$h") $FAB ${P}h$h"
done >"$EMU_DIR/ranks"
fi # the tree

if [ -n "$launch" ]; then
    # The launcher runs here, its ranks in the hosts (emu_enter.sh): signals go to it, so it can
    # stop its ranks (a final checkpoint) before the namespaces go.
    EMU_ENTER="$(cd "$(dirname "$0")" && pwd)/emu_enter.sh"
    export EMU_ENTER
    child=""
    forward() { [ -n "$child" ] && kill -"$1" "$child" 2>/dev/null; }
    trap 'forward TERM' TERM
    trap 'forward INT' INT
    bash -c "$launch" &
    child=$!
    status=0
    until wait "$child"; status=$?; ! kill -0 "$child" 2>/dev/null; do :; done
    exit $status
fi

topo_file=$EMU_DIR/cluster.json
((path_only)) && topo_file=""
if [ -n "$switch_run" ]; then # the switch nodes' programs run until the teardown kills them
    while read -r k ns addr; do
        ip netns exec "$ns" env SWITCH="$k" SWITCH_ADDR="$addr" bash -c "$switch_run" &
        disown # killed by the teardown, quietly
    done <"$EMU_DIR/switches"
fi
port=$((20000 + $$ % 20000))
status=0
for cmd in "${runs[@]}"; do
    port=$((port + 1))
    master=$(host_addr "$(host_of_rank 0)")
    pids=()
    for ((r = 0; r < nranks; r++)); do
        h=$(host_of_rank "$r")
        ip netns exec "${P}h$h" env RANK=$r WORLD_SIZE=$nranks LOCAL_RANK=$((r % rph)) \
            LOCAL_WORLD_SIZE=$rph MASTER_ADDR="$master" MASTER_PORT=$port \
            STRATA_TOPO_PATH="$(host_path "$h")" STRATA_TOPO_FILE="$topo_file" \
            bash -c "$cmd" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        wait "$p" || status=1
    done
    ((status == 0)) || { echo "emu_cluster: a rank failed running: $cmd" >&2; break; }
done
exit $status
