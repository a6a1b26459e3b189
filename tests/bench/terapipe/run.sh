#!/usr/bin/env bash
# make bench-terapipe: TeraPipe token slicing against the unsliced pipeline, real processes.
# A long-sequence job with one sequence per replica (micro-batch 1, GPipe, 1 micro-batch) over 4
# stages on two emulated fabrics (holmes-operator local: a worker process per stage, each pinned
# to its share of the cores, links paced as the planner emulates them), run unsliced and with the
# planner's slicing (tokenSlices: auto), interleaved REPS times; the median of each run's last
# steps, and the planner's prediction of each (holmes-operator plan --json on the same job).
# Calibration first: one unsliced run, to which links.compute_efficiency is fitted, then one
# with CAL_SLICES (32) even slices, to which the fixed cost per forward or backward of a unit
# (links.op_overhead_us) is fitted (bisection: the planner predicts each run); the planner then
# chooses and predicts with both (plan and local --calibration).
# Fabrics: as root (NETNS=1, the default for root), bench-hetero's set-up: every worker in its own
# network namespace, each fabric a bridge shaped with TBF (IB_MBIT, ROCE_MBIT), cross-fabric
# traffic through a router namespace shaped to CROSS_MBIT (scripts/fabric-netns.sh), the
# transport's pacing off, the coordinator in the router namespace. NETNS=0 (or not root): local's
# own paced links at the emulation block's speeds.
# Env: REPS (3), STEPS (12), SEQ (1024), CAL_SLICES (32), LAYERS (8), HIDDEN (128), OUT (a temporary folder), NETNS,
# IB_MBIT (1000), ROCE_MBIT (500), CROSS_MBIT (125).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../../.." && pwd)
bin=${HOLMES_BIN_DIR:-$repo/bin}
REPS=${REPS:-3} STEPS=${STEPS:-12} CAL_SLICES=${CAL_SLICES:-32} SEQ=${SEQ:-1024} LAYERS=${LAYERS:-8} HIDDEN=${HIDDEN:-128}
IB_MBIT=${IB_MBIT:-1000} ROCE_MBIT=${ROCE_MBIT:-500} CROSS_MBIT=${CROSS_MBIT:-125}
NETNS=${NETNS:-$([ "$(id -u)" = 0 ] && echo 1 || echo 0)}
out=${OUT:-$(mktemp -d /tmp/holmes-terapipe.XXXXXX)}
mkdir -p "$out"
P=tp$(($$ % 10000))
if [ "$NETNS" = 1 ]; then
    [ "$(id -u)" = 0 ] || { echo "bench-terapipe: NETNS=1 needs root"; exit 1; }
    trap '"$repo/scripts/fabric-netns.sh" down "$P" >/dev/null 2>&1 || true' EXIT
    trap 'exit 130' INT TERM
    "$repo/scripts/fabric-netns.sh" up "$P" "$CROSS_MBIT" "ib-a:2:$IB_MBIT" "roce-b:2:$ROCE_MBIT" >"$out/ns" ||
        { echo "bench-terapipe: building the fabrics failed"; exit 1; }
    awk '{print $1, $3}' "$out/ns" >"$out/map" # worker i: the i-th namespace (ib-a, ib-a, roce-b, roce-b)
    gb() { awk "BEGIN{print $1/1000}"; }
    IB_GBPS=$(gb "$IB_MBIT") ROCE_GBPS=$(gb "$ROCE_MBIT") CROSS_GBPS=$(gb "$CROSS_MBIT")
else
    IB_GBPS=200 ROCE_GBPS=100 CROSS_GBPS=10
fi
# local: in the router namespace with the workers in theirs (NETNS=1), or plain
run_local() { # YAML RUN_DIR JSONL OUT
    if [ "$NETNS" = 1 ]; then
        ip netns exec "$P-r" "$bin/holmes-operator" local "$1" --quiet --bind 10.77.1.1 \
            --worker-wrap "$repo/tests/bench/hetero/inns.sh $out/map {i}" --run-dir "$2" \
            --metrics-out "$3" --calibration "$out/calib.json" >"$4" 2>&1
    else
        "$bin/holmes-operator" local "$1" --quiet --run-dir "$2" --metrics-out "$3" \
            --calibration "$out/calib.json" >"$4" 2>&1
    fi
}
job() { # NAME SLICES
    cat <<YAML
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  workers: 4
  gpusPerWorker: 0
  model: {layers: $LAYERS, hidden: $HIDDEN, heads: 4, vocab: 256, seqLen: $SEQ}
  parallelism: {pipeline: 4, data: 1, microBatches: 1, microBatchSize: 1, tokenSlices: $2, schedule: gpipe}
  training: {steps: $STEPS, data: {path: examples/data/corpus.txt, format: text}, optimizer: {lr: 1.0e-3}}
  emulation:
    nics:
    - {class: infiniband, fabric: ib-a, gbps: $IB_GBPS, count: 2}
    - {class: roce, fabric: roce-b, gbps: $ROCE_GBPS, count: 2}
    crossFabricGbps: $CROSS_GBPS
    bandwidthScale: 1
YAML
}
job tp-whole 1 >"$out/whole.yaml"
job tp-auto auto >"$out/auto.yaml"
cd "$repo" || exit 1
echo "== bench-terapipe: $(date -u '+%F %H:%M UTC'), $(nproc) cores, load $(uptime | sed 's/.*load average: //')"
if [ "$NETNS" = 1 ]; then
    echo "fabrics: network namespaces, TBF: ib-a $IB_MBIT Mbit/s, roce-b $ROCE_MBIT Mbit/s, $CROSS_MBIT Mbit/s between (bench-hetero's set-up)"
else
    echo "fabrics: holmes-operator local's paced links: ib-a 200 Gb/s, roce-b 100 Gb/s, 10 Gb/s between"
fi
echo "job: GPT L$LAYERS C$HIDDEN T$SEQ, pipeline 4 (ib-a x 2, roce-b x 2), GPipe, 1 sequence per step, $STEPS steps x $REPS runs each"
median_step() { # JSONL -> median step seconds of the steps after the first 4
    /usr/bin/python3 -c 'import json,sys; v=sorted(json.loads(l)["step_ms"] for l in open(sys.argv[1]).readlines()[4:]); print("%.4f" % (v[len(v)//2] / 1e3))' "$1"
}
EFF=0.6
# the workers share this machine's cores, each pinned to the one cpu_spread gives it (local's
# HOLMES_CPU_AFFINITY=spread): the planner simulates the same pinning (links.pinned_cores)
calib() { printf '{"links": {"shared_cores": %d, "pinned_cores": 1, "tcp_gbps": %s, "gateway_gbps": %s, "compute_efficiency": %s, "op_overhead_us": %s}}\n' \
    "$(nproc)" "$CROSS_GBPS" "$CROSS_GBPS" "$EFF" "$1" >"$out/calib.json"; }
plan() { "$bin/holmes-operator" plan "$out/$1.yaml" --json --calibration "$out/calib.json"; }
predicted() { plan "$1" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["predicted_step_seconds"])'; }
job tp-cal-whole 1 >"$out/calw.yaml"
calib 0
run_local "$out/calw.yaml" "$out/run-calw" "$out/calw.jsonl" "$out/calw.out" ||
    { echo "bench-terapipe: the unsliced calibration run failed: $(tail -3 "$out/calw.out")"; exit 1; }
m1=$(median_step "$out/calw.jsonl")
lo=0.01 hi=1
for _ in $(seq 16); do # a higher efficiency predicts a shorter step
    EFF=$(/usr/bin/python3 -c "print(($lo + $hi) / 2)")
    calib 0
    if /usr/bin/python3 -c "import sys; sys.exit(0 if $(predicted calw) > $m1 else 1)"; then lo=$EFF; else hi=$EFF; fi
done
EFF=$hi
echo "calibration: unsliced measured $m1 s/step; compute_efficiency fitted to $EFF"
# many slices: the overhead is then a large enough part of the step to be told from run-to-run
# noise (at 8 slices, 16 ops per stage, it was within it: fitted 0 to 12 ms from one run to the next)
job tp-cal "$CAL_SLICES" >"$out/cal.yaml"
calib 0
run_local "$out/cal.yaml" "$out/run-cal" "$out/cal.jsonl" "$out/cal.out" ||
    { echo "bench-terapipe: the calibration run failed: $(tail -3 "$out/cal.out")"; exit 1; }
m8=$(median_step "$out/cal.jsonl")
lo=0 hi=50000
for _ in $(seq 18); do
    mid=$(/usr/bin/python3 -c "print(($lo + $hi) / 2)")
    calib "$mid"
    if /usr/bin/python3 -c "import sys; sys.exit(0 if $(predicted cal) < $m8 else 1)"; then lo=$mid; else hi=$mid; fi
done
calib "$lo"
echo "calibration: $CAL_SLICES even slices measured $m8 s/step; op_overhead_us fitted to $lo"
plan auto >"$out/plan-auto.json" && plan whole >"$out/plan-whole.json" || { echo "bench-terapipe: plan failed"; exit 1; }
/usr/bin/python3 - "$out/plan-auto.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
ts = p.get("token_slices", {})
print("planner: %s slice(s) %s; predicted %.3f s/step, unsliced %.3f s/step" % (
    ts.get("count", 1), ts.get("lengths", []), p["predicted_step_seconds"], ts.get("unsliced_step_seconds", p["predicted_step_seconds"])))
PY
: >"$out/results.tsv"
for r in $(seq "$REPS"); do
    for v in whole auto; do
        if ! run_local "$out/$v.yaml" "$out/run-$v-$r" "$out/$v-$r.jsonl" "$out/$v-$r.out"; then
            echo "bench-terapipe: the $v run $r failed: $(tail -3 "$out/$v-$r.out")"; exit 1
        fi
        s=$(median_step "$out/$v-$r.jsonl")
        printf '%s\t%d\t%s\n' "$v" "$r" "$s" | tee -a "$out/results.tsv"
    done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = [l.split("\t") for l in open(out + "/results.tsv").read().split("\n") if l]
m = {v: statistics.median(float(r[2]) for r in rows if r[0] == v) for v in ("whole", "auto")}
pa, pw = json.load(open(out + "/plan-auto.json")), json.load(open(out + "/plan-whole.json"))
ts = pa.get("token_slices", {})
pred_auto, pred_whole = pa["predicted_step_seconds"], pw["predicted_step_seconds"]
print("| run | slices | measured s/step (median) | predicted s/step | prediction error |")
print("| --- | --- | --- | --- | --- |")
print("| unsliced | 1 | %.3f | %.3f | %+.0f %% |" % (m["whole"], pred_whole, 100 * (pred_whole / m["whole"] - 1)))
print("| planner's slicing | %s (%s) | %.3f | %.3f | %+.0f %% |" % (ts.get("count", 1), ", ".join(map(str, ts.get("lengths", []))),
      m["auto"], pred_auto, 100 * (pred_auto / m["auto"] - 1)))
print("speed-up %.2fx (goal 1.5x); predicted %.2fx" % (m["whole"] / m["auto"], pred_whole / pred_auto))
PY
