# The hosts of bench/emu_cluster.sh wired as a torus (--torus 3x3, 2x3, 2x2x2): sourced by it, not
# run. Host h sits at the coordinates of h in the dimensions (the first varying fastest); each host
# namespace has a veth to each neighbour (one per dimension of size 2), tbf-shaped to --host-mbit
# in both directions, its address (10.99.x.y/32) on lo, IP forwarding on, and a static route to
# every other host along dimension order (the first differing dimension first, the shorter way
# round), so traffic between hosts that are not neighbours is forwarded through the ones between.
# Ranks are numbered host by host (rank r on host r / ranks-per-host), which puts host h in cell h
# of the cluster file's torus level. Reads P, mbit, rph, torus, keep, EMU_DIR; defines nhosts,
# nranks, host_addr, host_path, host_of_rank and writes $EMU_DIR/cluster.json and $EMU_DIR/ranks.

IFS=x read -ra tdim <<<"$torus"
nhosts=1
for v in "${tdim[@]}"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] && ((v >= 2)) ||
        { echo "emu_cluster: --torus expects dimensions of at least 2 like 3x3 or 2x2x2, got '$torus'" >&2; exit 2; }
    nhosts=$((nhosts * v))
done
((${#tdim[@]} >= 1 && ${#tdim[@]} <= 3 && nhosts <= 250)) ||
    { echo "emu_cluster: --torus expects 1 to 3 dimensions and at most 250 hosts, got '$torus'" >&2; exit 2; }
nranks=$((nhosts * rph))

host_addr() { echo "10.99.0.$(($1 + 1))"; }
host_path() { echo "host$1"; }
host_of_rank() { echo $(($1 / rph)); }
coord() { # coord H D: host h's coordinate in dimension d
    local h=$1 d
    for ((d = 0; d < $2; d++)); do h=$((h / tdim[d])); done
    echo $((h % tdim[$2]))
}
step() { # step H D DIR: the host one step from h along dimension d (DIR +1 or -1)
    local s=1 d c
    for ((d = 0; d < $2; d++)); do s=$((s * tdim[d])); done
    c=$(coord "$1" "$2")
    echo $(($1 + ((c + $3 + tdim[$2]) % tdim[$2] - c) * s))
}

declare -A dev # dev[h,n]: host h's link to neighbour n
for ((h = 0; h < nhosts; h++)); do
    ns="${P}h$h"
    ip netns add "$ns" 2>/dev/null || { echo "emu_cluster: cannot create network namespaces here" >&2; exit 77; }
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$(host_addr "$h")/32" dev lo
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
        net.ipv4.conf.default.rp_filter=0
done
for ((h = 0; h < nhosts; h++)); do # h's link to its + neighbour in every dimension
    for ((d = 0; d < ${#tdim[@]}; d++)); do
        n=$(step "$h" "$d" 1)
        [ -n "${dev[$h,$n]:-}" ] && continue # a dimension of 2: one link between the pair
        link_pair "${P}h$h" "t${d}p" "${P}h$n" "t${d}m"
        dev[$h,$n]=t${d}p dev[$n,$h]=t${d}m
        shape "t${d}p" "${P}h$h" "$mbit" || { echo "emu_cluster: tbf unavailable" >&2; exit 77; }
        shape "t${d}m" "${P}h$n" "$mbit"
    done
done
for ((h = 0; h < nhosts; h++)); do # dimension-order routes from h to every other host
    for ((t = 0; t < nhosts; t++)); do
        ((t == h)) && continue
        for ((d = 0; d < ${#tdim[@]}; d++)); do
            a=$(coord "$h" "$d") b=$(coord "$t" "$d")
            ((a == b)) && continue
            fwd=$(((b - a + tdim[d]) % tdim[d]))
            n=$(step "$h" "$d" $((2 * fwd <= tdim[d] ? 1 : -1)))
            ip netns exec "${P}h$h" ip route add "$(host_addr "$t")/32" via "$(host_addr "$n")" \
                dev "${dev[$h,$n]}" onlink src "$(host_addr "$h")"
            break
        done
    done
done

per_rank_gbps=$(awk "BEGIN{print $mbit / 8000 / $rph}")
cat >"$EMU_DIR/cluster.json" <<EOF
{"name": "emulated-torus-$torus", "levels": [
  {"name": "host", "fanout": $rph, "bandwidth_GBps": 4, "latency_us": 2, "class": "scale-up"},
  {"name": "torus", "torus": "$torus", "bandwidth_GBps": $per_rank_gbps, "latency_us": 60}
]}
EOF
[ -n "$keep" ] && cp "$EMU_DIR/cluster.json" "$keep"
echo "emu_cluster: $nranks ranks on a $torus torus of $nhosts hosts, every torus link ${mbit} Mbit/s each way" >&2
for ((r = 0; r < nranks; r++)); do # the map emu_enter.sh reads; a host's first link stands for its NIC
    h=$(host_of_rank "$r")
    echo "$r ${P}h$h $(host_addr "$h") $(host_path "$h") ${P}h$h ${dev[$h,$(step "$h" 0 1)]}"
done >"$EMU_DIR/ranks"
