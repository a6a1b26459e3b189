#!/usr/bin/env bash
# Emulated fabrics in network namespaces, for the heterogeneous-fabric benchmark.
#
#   fabric-netns.sh up PREFIX CROSS_MBIT FABRIC:WORKERS:MBIT [FABRIC:WORKERS:MBIT ...]
#   fabric-netns.sh down PREFIX
#
# Builds one namespace per worker (PREFIX-w0, PREFIX-w1, ...), numbered across fabrics in the
# order given, and a router namespace PREFIX-r. Each fabric is a bridge inside the router
# namespace; its workers hang off it by veth pairs whose bridge-side egress is shaped (TBF) to the
# fabric's MBIT, so traffic inside a fabric runs at the fabric's speed. The router has an address
# on every bridge and routes between fabrics; each bridge device's own egress carries only routed,
# i.e. cross-fabric, traffic and is shaped (TBF) to CROSS_MBIT. A coordinator in the router
# namespace is reachable from every worker at its fabric's gateway address.
#
# Every link runs jumbo frames (MTU 9000, FABRIC_MTU to change), as RDMA and HPC Ethernet fabrics
# do: a real NIC segments and shapes in hardware, here the kernel does it on the cores the workers
# compute on, and at MTU 1500 that packet work took a visible share of them (docs/hetero.md).
#
# Addresses: fabric k (0-based) is 10.77.<k+1>.0/24, router .1, workers .10, .11, ...
# `up` prints one line per worker: "NAMESPACE FABRIC ADDRESS GATEWAY". `down` removes everything
# with PREFIX (namespaces, and with them their veths and qdiscs) and is safe to run twice.
set -euo pipefail

die() { echo "fabric-netns: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces and tc); run as root"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"

down() {
    local prefix=$1 ns
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^${prefix}-(r|w[0-9]+)$" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
}

# shape NS DEV MBIT MTU: a token bucket (TBF) at MBIT, burst 2 ms at the rate (16 KB at least),
# emptied no faster than 1.1 x MBIT (peakrate) from a peak bucket of 0.5 ms at that rate (one
# frame at least): a real link sends nothing faster than its rate. Without the peak rate a
# message shorter than the burst left at veth speed: 49 KB crossed 125 Mbit/s in 1.3 ms instead
# of the 3.1 ms the rate allows, which flattered every short transfer, a stage boundary's
# activations most. The 10 % headroom and a peak bucket of more than one frame keep bulk
# transfers at the rate (a one-frame peak bucket held a 4 MB transfer to 63 % of 1000 Mbit/s and
# 81 % of 500; 0.2 ms was enough on an idle machine, 0.5 ms leaves room for a busy one). TBF,
# not HTB: HTB charges a whole GSO packet (up to 64 KB) against the bucket at once and lets it go
# while any token is left; TBF splits a GSO packet larger than its buckets into segments and
# sends each only when the buckets hold it. The queue holds 1000 full-size packets, like the
# pfifo it replaces.
shape() {
    local ns=$1 dev=$2 mbit=$3 mtu=$4 burst peak
    burst=$((mbit * 250)) # bytes in 2 ms at the rate
    [ "$burst" -ge 16384 ] || burst=16384
    peak=$((mbit * 275 / 4)) # bytes in 0.5 ms at 1.1 x the rate
    [ "$peak" -ge $((mtu + 100)) ] || peak=$((mtu + 100))
    ip netns exec "$ns" tc qdisc replace dev "$dev" root handle 1: tbf rate "${mbit}mbit" \
        burst "$burst" peakrate "$((mbit * 1100))kbit" mtu "$peak" limit $((1000 * 1514))
}

up() {
    local prefix=$1 cross=$2; shift 2
    [[ $prefix =~ ^[a-z][a-z0-9]{0,6}$ ]] || die "PREFIX must be 1-7 lowercase letters/digits"
    [[ $cross =~ ^[0-9]+$ ]] && [ "$cross" -gt 0 ] || die "CROSS_MBIT must be a positive integer"
    [ $# -ge 1 ] || die "at least one FABRIC:WORKERS:MBIT is needed"
    [ $# -le 8 ] || die "at most 8 fabrics"
    local mtu=${FABRIC_MTU:-9000}
    [[ $mtu =~ ^[0-9]+$ ]] && [ "$mtu" -ge 1280 ] && [ "$mtu" -le 65535 ] ||
        die "FABRIC_MTU=$mtu: must be an integer in 1280..65535"
    local r="$prefix-r" k=0 w=0 spec name count mbit i
    for spec in "$@"; do # validate everything before creating anything
        IFS=: read -r name count mbit <<<"$spec"
        [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || die "fabric name '$name': use letters, digits, . _ -"
        [[ $count =~ ^[0-9]+$ ]] && [ "$count" -ge 1 ] && [ "$count" -le 64 ] ||
            die "fabric $name: WORKERS must be 1..64"
        [[ $mbit =~ ^[0-9]+$ ]] && [ "$mbit" -gt 0 ] || die "fabric $name: MBIT must be a positive integer"
    done
    down "$prefix"
    trap 'down "$prefix"' ERR
    ip netns add "$r"
    ip netns exec "$r" ip link set lo up
    ip netns exec "$r" sysctl -qw net.ipv4.ip_forward=1
    for spec in "$@"; do
        IFS=: read -r name count mbit <<<"$spec"
        local net="10.77.$((k + 1))" br="br$k"
        ip netns exec "$r" ip link add "$br" mtu "$mtu" type bridge
        ip netns exec "$r" ip addr add "$net.1/24" dev "$br"
        ip netns exec "$r" ip link set "$br" up
        shape "$r" "$br" "$cross" "$mtu"
        for ((i = 0; i < count; i++)); do
            local ns="$prefix-w$w" a="v${k}p$i"
            ip netns add "$ns"
            ip netns exec "$ns" ip link set lo up
            ip link add "$a" netns "$r" mtu "$mtu" type veth peer name eth0 netns "$ns" mtu "$mtu"
            ip netns exec "$r" ip link set "$a" master "$br" up
            ip netns exec "$ns" ip addr add "$net.$((10 + i))/24" dev eth0
            ip netns exec "$ns" ip link set eth0 up
            ip netns exec "$ns" ip route add default via "$net.1"
            shape "$r" "$a" "$mbit" "$mtu"
            echo "$ns $name $net.$((10 + i)) $net.1"
            w=$((w + 1))
        done
        k=$((k + 1))
    done
    trap - ERR
}

case "${1:-}" in
up) shift; [ $# -ge 3 ] || die "usage: $0 up PREFIX CROSS_MBIT FABRIC:WORKERS:MBIT..."; up "$@" ;;
down) shift; [ $# -eq 1 ] || die "usage: $0 down PREFIX"; down "$1" ;;
*) die "usage: $0 up PREFIX CROSS_MBIT FABRIC:WORKERS:MBIT... | down PREFIX" ;;
esac
