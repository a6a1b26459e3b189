#!/usr/bin/env bash
# make chaos: a local training job of a few minutes (4 workers, pipeline 2 x data 2, each
# worker in its own network namespace on two emulated fabrics) under repeated faults:
#   kill   SIGKILL of a random worker
#   term   SIGTERM of a random worker (eviction, drain, preemption)
#   stop   SIGSTOP of a random worker for longer than the gang timeout, then SIGCONT
#   drop   the link between two workers dropped (blackhole routes both ways) for a while
#   lose   once, halfway: a worker killed that never comes back (started again, it hangs before
#          its hello); the job is elastic (spec.elastic.minWorkers 3), so after
#          replaceTimeoutSeconds it counts as lost and the 3 others re-plan by their NICs and go on
#          (the global batch of 6 micro-batches kept); the faults that follow spare it
# It must end with the job succeeded and every step's loss equal to an uninterrupted run's
# (training resumes exactly: same data order, same math; after the re-plan up to the summation
# order of another layout, within 1e-4); it counts the faults and the steps each restart lost
# (the newest step reached before the restart minus the step it resumed from).
# Goal: no step lost to SIGTERM, at most checkpoint.everySteps lost to SIGKILL or to the loss.
#
# Root (namespaces, routes). Knobs: STEPS (default 6000), EVERY (checkpoint interval, 100),
# GAP (mean seconds between faults, 8), SEED (random choices, 1), OUT (work directory, kept).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${HOLMES_BIN_DIR:-$REPO/bin}
STEPS=${STEPS:-6000} EVERY=${EVERY:-100} GAP=${GAP:-8} SEED=${SEED:-1}
OUT=${OUT:-$(mktemp -d /tmp/holmes-chaos.XXXXXX)}
GANG=10
P=hc$$
NETNS=$REPO/scripts/fabric-netns.sh
die() { echo "chaos: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, routes)"
mkdir -p "$OUT"
RANDOM=$SEED
cleanup() {
    pkill -9 -f -- "--job chaos-$P" 2>/dev/null || true
    "$NETNS" down "$P" 2>/dev/null || true
}
trap cleanup EXIT

sed -e "s/name: local-tiny/name: chaos-$P/" -e "s/steps: 300/steps: $STEPS/" \
    -e "s#local-runs/local-tiny/checkpoints#$OUT/ckpt#" -e "s/everySteps: 50/everySteps: $EVERY/" \
    -e "s/keep: 2/keep: 3/" -e "s/gangTimeoutSeconds: 60/gangTimeoutSeconds: $GANG/" \
    -e "s/maxRestarts: 2/maxRestarts: 100/" \
    -e "s/microBatches: 2, microBatchSize: 4/microBatches: 3, microBatchSize: 4/" \
    -e "/^  restartPolicy/i\\  elastic: {minWorkers: 3, replaceTimeoutSeconds: $GANG}" \
    "$REPO/examples/local-tiny.yaml" >"$OUT/job.yaml"
sed -e "s/name: chaos-$P/name: base-$P/" -e "s#$OUT/ckpt#$OUT/base-ckpt#" "$OUT/job.yaml" >"$OUT/base.yaml"

echo "chaos: the uninterrupted run ($STEPS steps)"
(cd "$REPO" && "$BIN/holmes-operator" local "$OUT/base.yaml" --quiet --run-dir "$OUT/base-run" \
    --metrics-out "$OUT/base.jsonl" >"$OUT/base.out" 2>&1) || { cat "$OUT/base.out"; die "the uninterrupted run failed"; }

"$NETNS" up "$P" 100000 ib:2:100000 roce:2:100000 >"$OUT/ns.txt"
awk '{print $1, $3}' "$OUT/ns.txt" >"$OUT/map.txt"
addr() { sed -n "$(($1 + 1))p" "$OUT/map.txt" | awk '{print $2}'; }
nsof() { sed -n "$(($1 + 1))p" "$OUT/map.txt" | awk '{print $1}'; }

echo "chaos: the run under faults (one every ~${GAP} s)"
# Every worker starts under a gate: worker i hangs before its hello once $OUT/gone-i exists.
printf '#!/bin/sh\ni=$1; shift\n[ -e "%s/gone-$i" ] && exec sleep 100000\nexec "$@"\n' "$OUT" >"$OUT/gate.sh"
chmod +x "$OUT/gate.sh"
(cd "$REPO" && exec ip netns exec "$P-r" "$BIN/holmes-operator" local "$OUT/job.yaml" --quiet \
    --bind 10.77.1.1 --worker-wrap "$OUT/gate.sh {i} $REPO/tests/bench/hetero/inns.sh $OUT/map.txt {i}" \
    --run-dir "$OUT/run" --metrics-out "$OUT/chaos.jsonl" >"$OUT/chaos.out" 2>&1) &
RUN=$!
pid_of() { pgrep -f -- "--pod chaos-$P-worker-$1 " | head -1; }
last_step() { tail -n 1 "$OUT/chaos.jsonl" 2>/dev/null | jq -r .step 2>/dev/null || echo 0; }
: >"$OUT/faults.tsv"
kinds=(kill term stop drop)
n=0
gone=-1
sleep "$GAP"
while kill -0 "$RUN" 2>/dev/null; do
    kind=${kinds[$((n % 4))]}
    w=$((RANDOM % 4))
    if [ "$gone" -lt 0 ] && [ "$(last_step)" -ge $((STEPS / 2)) ]; then
        kind=lose
    elif [ "$w" = "$gone" ]; then
        continue
    fi
    pid=$(pid_of "$w")
    step=$(last_step)
    if [ -z "$pid" ] || [ "$step" -ge $((STEPS - 2 * EVERY)) ]; then
        sleep 1
        [ "$step" -ge $((STEPS - 2 * EVERY)) ] && break
        continue
    fi
    t=$(date +%s.%N)
    case $kind in
    kill) kill -KILL "$pid" ;;
    lose) touch "$OUT/gone-$w"; kill -KILL "$pid"; gone=$w; sleep $((2 * GANG)) ;; # until re-planned
    term) kill -TERM "$pid" ;;
    stop) kill -STOP "$pid"; sleep $((GANG + 5)); kill -CONT "$pid" 2>/dev/null || true ;;
    drop)
        v=$(((w + 1 + RANDOM % 3) % 4))
        [ "$v" = "$gone" ] && v=$(((v + 1) % 4)) && [ "$v" = "$w" ] && v=$(((v + 1) % 4))
        ip -n "$(nsof "$w")" route add blackhole "$(addr "$v")/32"
        ip -n "$(nsof "$v")" route add blackhole "$(addr "$w")/32"
        sleep 8
        ip -n "$(nsof "$w")" route del blackhole "$(addr "$v")/32" || true
        ip -n "$(nsof "$v")" route del blackhole "$(addr "$w")/32" || true
        w="$w-$v"
        ;;
    esac
    printf '%s\t%s\t%s\t%s\n' "$t" "$kind" "$w" "$step" >>"$OUT/faults.tsv"
    echo "chaos: $(date -u +%T) $kind worker $w at step $step"
    n=$((n + 1))
    sleep $((GAP / 2 + RANDOM % (GAP + 1)))
done
rc=0
wait "$RUN" || rc=$?
echo "chaos: the job exited with status $rc"
tail -n 8 "$OUT/chaos.out"
/usr/bin/python3 "$REPO/tests/chaos/report.py" "$OUT" "$EVERY" | tee "$OUT/summary.txt"
status=${PIPESTATUS[0]}
[ "$rc" = 0 ] || die "the job did not succeed (see $OUT/chaos.out)"
exit "$status"
