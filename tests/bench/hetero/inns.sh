#!/usr/bin/env bash
# inns.sh MAP I CMD...: runs CMD (a holmes-node worker) as worker I of the fabric benchmark:
# inside the network namespace line I of MAP names ("NAMESPACE ADDRESS"), advertising that
# address to its peers, with the transport's own pacing off (tc shapes the links instead).
set -euo pipefail
map=$1 i=$2; shift 2
read -r ns addr < <(sed -n "$((i + 1))p" "$map")
[ -n "${ns:-}" ] && [ -n "${addr:-}" ] || { echo "inns.sh: $map has no line for worker $i" >&2; exit 127; }
exec ip netns exec "$ns" env HOLMES_ADVERTISE_HOST="$addr" HOLMES_NO_PACING=1 "$@"
