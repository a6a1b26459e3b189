#!/usr/bin/env bash
# make bench-hetero: the heterogeneous-fabric benchmark (docs/hetero.md).
# Every scenario trains the same GPT with the same global batch on 4 real `holmes-node worker`
# processes, each in its own network namespace (scripts/fabric-netns.sh): fabrics are bridges
# shaped with TBF, cross-fabric traffic goes through a router namespace shaped to CROSS_MBIT.
# The coordinator (holmes-operator local) runs in the router namespace on 10.77.1.1. Per
# scenario: REPS runs, median and spread of the post-warm-up step time, the planner's
# prediction before and after calibration. Writes $OUT/hetero-results.tsv, the table in
# $OUT/hetero-table.md and the plot $OUT/hetero.png.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
die() { echo "bench-hetero: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces and tc shaping); run as root, e.g. sudo make bench-hetero"
for c in ip tc python3; do command -v $c >/dev/null || die "needs $c"; done
BIN=${HOLMES_BIN_DIR:-$REPO/bin}
OP=$BIN/holmes-operator NODE=$BIN/holmes-node NETNS=$REPO/scripts/fabric-netns.sh
[ -x "$OP" ] && [ -x "$NODE" ] || die "build first (make): $OP, $NODE"

REPS=${REPS:-3}            # runs per scenario
CAL_REPS=${CAL_REPS:-3}    # calibration runs of each reference before the fit
STEPS=${STEPS:-14}         # training steps per run
WARMUP=${WARMUP:-4}        # steps left out of the statistics
# Bandwidths: the paper's 200 Gb/s IB, 100 Gb/s RoCE, 25 Gb/s TCP divided by 200, so that the
# data-parallel traffic to compute ratio is a real cluster's (docs/hetero.md, "The scaling").
IB_MBIT=${IB_MBIT:-1000}    # "200 Gb/s InfiniBand"
ROCE_MBIT=${ROCE_MBIT:-500} # "100 Gb/s RoCE"
CROSS_MBIT=${CROSS_MBIT:-125} # "25 Gb/s TCP between fabrics"
# Those rates give the paper's ratio of communication to compute when a step computes at the
# cost model's default efficiency (0.6 of the declared 0.1 TFLOPS per core; fitted 0.60 on
# 2026-11-22). A slower machine would weigh the links less: LINK_SCALE=auto (the default)
# measures the machine first (one all-rdma run, compute_efficiency fitted to it alone) and
# scales the three rates by efficiency / 0.6, so that the ratio, not the absolute speed, is
# kept (docs/hetero.md, "The scaling"). A number scales by that; 1 keeps the rates as given.
LINK_SCALE=${LINK_SCALE:-auto}
DESIGN_EFFICIENCY=0.6
[[ $LINK_SCALE == auto ]] || { [[ $LINK_SCALE =~ ^[0-9]*\.?[0-9]+$ ]] && awk "BEGIN{exit !($LINK_SCALE > 0)}"; } ||
    die "LINK_SCALE=$LINK_SCALE: must be auto or a positive number"
OUT=${OUT:-$REPO/docs}
# Sequences per micro-batch: 3, so that data-parallel traffic weighs against compute as in the
# paper's setting (docs/hetero.md, "The scaling"); 8 micro-batches per replica.
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-3}
ONLY=${ONLY:-}             # run only these scenarios (space-separated names)
# GPT depth: 8 layers, so that a stage's compute outweighs its boundary's activations as in the
# paper's 36-layer model (docs/hetero.md, "The scaling").
LAYERS=${LAYERS:-8}
# Activations between stages travel in bf16, as in the paper's mixed-precision training (2 bytes
# a value; the CPU engine computes in fp32): docs/hetero.md, "The scaling".
PIPELINE_DTYPE=${PIPELINE_DTYPE:-bf16}
[[ $PIPELINE_DTYPE == fp32 || $PIPELINE_DTYPE == bf16 ]] || die "PIPELINE_DTYPE=$PIPELINE_DTYPE: must be fp32 or bf16"
# The replicas all-gather their parameters in bf16 and compute with them (fp32 masters), as the
# paper's mixed-precision training holds bf16 weights (docs/hetero.md, "The scaling").
PARAM_GATHER_DTYPE=${PARAM_GATHER_DTYPE:-bf16}
[[ $PARAM_GATHER_DTYPE == fp32 || $PARAM_GATHER_DTYPE == bf16 ]] ||
    die "PARAM_GATHER_DTYPE=$PARAM_GATHER_DTYPE: must be fp32 or bf16"
for v in REPS CAL_REPS STEPS IB_MBIT ROCE_MBIT CROSS_MBIT LAYERS MICRO_BATCH_SIZE; do
    [[ ${!v} =~ ^[0-9]+$ ]] && [ "${!v}" -ge 1 ] || die "$v=${!v}: must be a positive integer"
done
TOKENS=$((2 * 8 * MICRO_BATCH_SIZE * 32)) # per step: data 2 x microBatches 8 x microBatchSize x seqLen 32
[[ $WARMUP =~ ^[0-9]+$ ]] && [ "$WARMUP" -lt "$STEPS" ] || die "WARMUP=$WARMUP: must be an integer below STEPS ($STEPS)"
# Namespace prefix: hb<pid>, or HETERO_NS_PREFIX (tests: so concurrent runs are told apart).
P=${HETERO_NS_PREFIX:-hb$$}; P=${P:0:7}
[[ $P =~ ^[a-z][a-z0-9]*$ ]] || die "HETERO_NS_PREFIX=$P: must be lowercase letters and digits, starting with a letter"
WORK=$(mktemp -d /tmp/bench-hetero.XXXXXX)
oppid=
cleanup() {
    [ -n "$oppid" ] && kill -9 "$oppid" 2>/dev/null || true
    "$NETNS" down "$P" >/dev/null 2>&1 || true
    [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# name policy pipeline workers [tensor] (fabric:class:mbit per worker, in the order the scheduler
# hands them out). Data parallel 2 everywhere, so the global batch is the same; the 6-worker
# 3-fabric cluster runs pipeline 3 so that every stage can stay inside one fabric (and, for 1F1B,
# 4 micro-batches of 2 sequences instead of 2 of 4); its references are the 6-worker all-rdma6
# and all-ethernet6 (the same shape and the same share of the cores per worker). The *-t2
# scenarios give each worker 2 emulated GPUs (2 rank processes, a tensor group of 2 inside the
# worker: each rank sends its half of the activations over its own link, both through the
# worker's port); their references are all-rdma-t2 and all-ethernet-t2.
scenarios() { # (re)builds SCENARIOS from the rates
    ib="ib-a:infiniband:$IB_MBIT" roce="roce-b:roce:$ROCE_MBIT" eth="eth-c:ethernet:$CROSS_MBIT"
    SCENARIOS=(
        "all-rdma holmes 2 $ib,$ib,$ib,$ib"
        "all-ethernet holmes 2 $eth,$eth,$eth,$eth"
        "2fab-holmes holmes 2 $ib,$roce,$ib,$roce"
        "2fab-naive naive 2 $ib,$roce,$ib,$roce"
        "3fab-holmes holmes 2 $ib,$roce,$ib,$eth"
        "3fab-naive naive 2 $ib,$roce,$ib,$eth"
        "3fab6-holmes holmes 3 $ib,$roce,$eth,$ib,$roce,$eth"
        "3fab6-naive naive 3 $ib,$roce,$eth,$ib,$roce,$eth"
        "all-rdma6 holmes 3 $ib,$ib,$ib,$ib,$ib,$ib"
        "all-ethernet6 holmes 3 $eth,$eth,$eth,$eth,$eth,$eth"
        "all-rdma-t2 holmes 2 $ib,$ib,$ib,$ib 2"
        "all-ethernet-t2 holmes 2 $eth,$eth,$eth,$eth 2"
        "2fab-holmes-t2 holmes 2 $ib,$roce,$ib,$roce 2"
        "2fab-naive-t2 naive 2 $ib,$roce,$ib,$roce 2"
    )
}
scenarios
for o in $ONLY; do
    printf '%s\n' "${SCENARIOS[@]}" | grep -q "^$o " ||
        die "ONLY: no scenario $o ($(printf '%s\n' "${SCENARIOS[@]}" | awk '{printf "%s ", $1}'))"
done

# job NAME POLICY PIPELINE WORKERS [TENSOR]: the TrainingJob (Gb/s in the emulation block = the
# shaped Mbit/1000, so the planner predicts for the links the run really has; pacing is off,
# bandwidthScale 1). TENSOR > 1: that many emulated GPUs per worker, a tensor group of them.
job() {
    local name=$1 policy=$2 pipeline=$3 workers=$4 tensor=${5:-1} prev= count=0 w f c m
    local gpus=0 emu=""
    [ "$tensor" -gt 1 ] && gpus=$tensor emu="
    gpus: true"
    # 8 micro-batches of MICRO_BATCH_SIZE sequences per replica
    local nw mb=8 mbs=$MICRO_BATCH_SIZE; nw=$(tr ',' '\n' <<<"$workers" | wc -l)
    cat <<Y
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: $name}
spec:
  workers: $nw
  gpusPerWorker: $gpus
  model: {layers: $LAYERS, hidden: 192, heads: 4, vocab: 256, seqLen: 32}
  parallelism: {tensor: $tensor, pipeline: $pipeline, data: 2, microBatches: $mb, microBatchSize: $mbs, schedule: 1f1b, pipelineDtype: $PIPELINE_DTYPE, paramGatherDtype: $PARAM_GATHER_DTYPE}
  placement: {policy: $policy}
  training:
    steps: $STEPS
    optimizer: {lr: 1.0e-3, warmupSteps: 2, minLrRatio: 0.1, weightDecay: 0.0, gradClip: 1.0}
    data: {path: $REPO/examples/data/corpus.txt, format: text}
  gangTimeoutSeconds: 60
  restartPolicy: {maxRestarts: 0, backoffSeconds: 0}
  emulation:
    crossFabricGbps: $(awk "BEGIN{print $CROSS_MBIT/1000}")
    bandwidthScale: 1$emu
    nics:
Y
    for w in ${workers//,/ } END; do
        if [ "$w" != "$prev" ] && [ -n "$prev" ]; then
            IFS=: read -r f c m <<<"$prev"
            echo "    - {class: $c, fabric: $f, gbps: $(awk "BEGIN{print $m/1000}"), count: $count}"
            count=0
        fi
        prev=$w count=$((count + 1))
    done
}

# netns NAME WORKERS: builds the fabrics, writes $WORK/NAME.map ("NAMESPACE ADDRESS" per worker)
netns() {
    local name=$1 workers=$2 specs=() fabs=() w f c m i
    for w in ${workers//,/ }; do
        IFS=: read -r f c m <<<"$w"
        [[ " ${fabs[*]-} " == *" $f "* ]] || fabs+=("$f")
    done
    for f in "${fabs[@]}"; do
        local n=0 mb=
        for w in ${workers//,/ }; do
            IFS=: read -r ff c m <<<"$w"
            [ "$ff" = "$f" ] && n=$((n + 1)) mb=$m
        done
        specs+=("$f:$n:$mb")
    done
    "$NETNS" down "$P"
    "$NETNS" up "$P" "$CROSS_MBIT" "${specs[@]}" >"$WORK/$name.ns"
    : >"$WORK/$name.map"
    local -A used=()
    for w in ${workers//,/ }; do # worker i takes the next free namespace of its fabric
        IFS=: read -r f c m <<<"$w"
        local ns fab addr gw
        while read -r ns fab addr gw; do
            if [ "$fab" = "$f" ] && [ -z "${used[$ns]:-}" ]; then
                used[$ns]=1
                echo "$ns $addr" >>"$WORK/$name.map"
                break
            fi
        done <"$WORK/$name.ns"
    done
}

# The emulated network for the planner (the coordinator in `local --calibration` and `plan
# --calibration` alike): between fabrics every flow goes through the router, whose port into
# each fabric (CROSS_MBIT) is shared by all flows entering that fabric at once.
# PLAN_LINKS=FILE plans with those constants instead (e.g. a previous run's
# hetero-calibration.json: the planner fed with what was measured).
write_links() { # the emulated network at the current rates: $WORK/links.json
    local g; g=$(awk "BEGIN{print $CROSS_MBIT/1000}")
    echo "{\"links\": {\"tcp_gbps\": $g, \"gateway_gbps\": $g, \"shared_cores\": $(nproc), \"tcp_latency_us\": $lat_us}}" \
        >"$WORK/links.json"
}
if [ -n "${PLAN_LINKS:-}" ]; then
    [ -r "$PLAN_LINKS" ] || die "PLAN_LINKS=$PLAN_LINKS: not a readable file"
    cp "$PLAN_LINKS" "$WORK/links.json"
else
    # The latency between fabrics is measured, not fitted: a 64-byte round trip through the
    # router between two fabrics' namespaces (latency.py), halved. Step times hardly depend on
    # it, so a fit would make it absorb whatever else the model misses.
    netns probe "$ib,$roce"
    { read -r ns0 _; read -r ns1 a1; } <"$WORK/probe.map"
    ip netns exec "$ns1" python3 "$HERE/latency.py" serve "$a1" 5058 &
    srv=$!
    lat_us=$(ip netns exec "$ns0" python3 "$HERE/latency.py" probe "$a1" 5058 50) ||
        die "measuring the latency between fabrics failed"
    wait "$srv" || true
    "$NETNS" down "$P"
    echo "latency between fabrics: $lat_us us (one way, 64 bytes)" >&2
    write_links
fi

# Compute: one engine thread does about 0.1 TFLOPS here, and every worker declares that
# (HOLMES_DECLARED_TFLOPS, read by holmes-node worker; `plan --tflops` the same). The workers
# share this machine's cores: links.json says so (shared_cores = nproc), and the planner
# simulates the sharing (a stage that waits leaves its core to the others).
# compute_efficiency (calibrated) covers what a step achieves of the declared rate.
TFLOPS=0.1

mkdir -p "$OUT"
RES=$WORK/results.tsv
RUNS_HEADER="scenario\tpolicy\trep\tmedian_step_s\tsteps\tpredicted_s\twall_s"
echo -e "$RUNS_HEADER" >"$RES"
# The clusters differ in how much they compute against how much they wait on shaped links, so
# other work on the machine moves the ratios (docs/hetero.md, "How to read the results"): say so.
cpu_jiffies() { awk '/^cpu /{t=0; for (i=2; i<=9; i++) t+=$i; print t, $5+$6}' /proc/stat; }
read -r tot0 idle0 < <(cpu_jiffies); sleep 2; read -r tot1 idle1 < <(cpu_jiffies)
busy=$(( (tot1 - tot0) > 0 ? 100 * ((tot1 - tot0) - (idle1 - idle0)) / (tot1 - tot0) : 0 ))
echo "cores busy before the start: $busy %"
[ "$busy" -le 25 ] || echo "bench-hetero: warning: other work keeps $busy % of the cores busy;" \
    "the step times and ratios will not measure the fabrics alone" >&2
t_start=$(date +%s)
load0=$(uptime | sed 's/.*load average: //')
write_jobs() { # the selected scenarios' TrainingJobs (and all-rdma's, for the probe)
    local sc name policy pipeline workers tensor
    for sc in "${SCENARIOS[@]}"; do
        read -r name policy pipeline workers tensor <<<"$sc"
        [ -z "$ONLY" ] || [[ " $ONLY all-rdma " == *" $name "* ]] || continue
        job "$name" "$policy" "$pipeline" "$workers" "${tensor:-1}" >"$WORK/job-$name.yaml"
    done
}
write_jobs
# run_phase LINKS PATTERN RUNS_FILE NRUNS MEASURE: NRUNS runs of every selected scenario whose name
# matches PATTERN, each line appended to RUNS_FILE. The references (all-*) are placed with
# links.json, the others with LINKS. MEASURE=1: the runs the table reports (their placements
# go to placements.txt). Runs are interleaved (every scenario once, then again, ...) so that a
# change of the machine's load during the benchmark falls on all scenarios alike.
run_phase() {
    local plinks=$1 pat=$2 runs=$3 nruns=$4 measure=$5 r sc name policy pipeline workers t0 tf pred wall links
    for ((r = 1; r <= nruns; r++)); do
        for sc in "${SCENARIOS[@]}"; do
            read -r name policy pipeline workers _ <<<"$sc"
            [ -z "$ONLY" ] || [[ " $ONLY " == *" $name "* ]] || continue
            [[ $name == $pat ]] || continue
            links=$plinks
            [[ $name == all-* ]] && links=$WORK/links.json
            netns "$name" "$workers"
            t0=$(date +%s.%N)
            tf=$TFLOPS
            echo "$tf" >"$WORK/$name.tflops"
            HOLMES_DECLARED_TFLOPS=$tf ip netns exec "$P-r" "$OP" local "$WORK/job-$name.yaml" --quiet --bind 10.77.1.1 \
                --calibration "$links" \
                --worker-wrap "$HERE/inns.sh $WORK/$name.map {i}" --run-dir "$WORK/runs/$name-$measure-$r" \
                --metrics-out "$WORK/$name-$measure-$r.jsonl" >"$WORK/$name-$measure-$r.out" 2>&1 &
            oppid=$!
            if ! wait "$oppid"; then
                oppid=
                cat "$WORK/$name-$measure-$r.out" >&2
                tail -n 20 "$WORK/runs/$name-$measure-$r"/worker-*.log >&2 || true
                die "scenario $name run $r failed"
            fi
            oppid=
            if [ "$r" = 1 ]; then
                [ "$measure" = 1 ] &&
                    { echo "== $name"; sed -n '/^placement/,/predicted step time/p' "$WORK/$name-$measure-$r.out"; } \
                        >>"$WORK/placements.txt"
                # The prediction is the coordinator's own, for the placement it ran; `holmes-operator
                # plan` computes the same (one computation, docs/hetero.md), which is checked here.
                awk '/^placement/{on=1; next} on && $1 ~ /^[0-9]+$/ {split($3, l, "-"); p = p (p ? "," : "") l[2] - l[1] + 1}
                     /predicted step time/{print p; exit}' "$WORK/$name-$measure-$r.out" >"$WORK/job-$name.partition"
                sed -n 's/.*predicted step time \([0-9.]*\) s.*/\1/p' "$WORK/$name-$measure-$r.out" >"$WORK/$name.pred"
                "$OP" plan "$WORK/job-$name.yaml" --calibration "$links" --tflops "$tf" --json |
                    python3 "$HERE/same_plan.py" "$WORK/job-$name.partition" "$WORK/$name.pred" ||
                    die "scenario $name: the coordinator's plan is not holmes-operator plan's"
            fi
            pred=$(cat "$WORK/$name.pred")
            wall=$(awk "BEGIN{print $(date +%s.%N) - $t0}")
            python3 "$HERE/steps.py" "$WORK/$name-$measure-$r.jsonl" "$WARMUP" "$name" "$policy" "$r" \
                "$pred" "$wall" >>"$runs"
            tail -n 1 "$runs" >&2
        done
    done
}

# The machine's speed (LINK_SCALE=auto): one all-rdma run at the rates given, compute_efficiency
# fitted to it alone (all-rdma is bound by compute), the rates scaled by it / DESIGN_EFFICIENCY
# (kept within 0.25-4), then the links and jobs rewritten.
link_note="rates as given"
if [ -n "${PLAN_LINKS:-}" ]; then
    link_note="rates as given (PLAN_LINKS: not scaled)"
elif [ "$LINK_SCALE" = auto ]; then
    only_given=$ONLY ONLY=all-rdma
    echo -e "$RUNS_HEADER" >"$WORK/probe-runs.tsv"
    run_phase "$WORK/links.json" all-rdma "$WORK/probe-runs.tsv" 1 p
    ONLY=$only_given
    probe_eff=$(FIT_KEYS=compute_efficiency python3 "$HERE/fit.py" "$WORK/probe-runs.tsv" "$WORK" "$OP" \
        "$WORK/probe.json" all-rdma | sed -n 's/^compute_efficiency=//p')
    [ -n "$probe_eff" ] || die "the machine-speed probe (all-rdma, compute_efficiency) failed"
    LINK_SCALE=$(awk "BEGIN{s = $probe_eff / $DESIGN_EFFICIENCY; if (s < 0.25) s = 0.25; if (s > 4) s = 4; printf \"%.3f\", s}")
    link_note="rates x $LINK_SCALE: the machine computed at efficiency $probe_eff in a probe run against the design's $DESIGN_EFFICIENCY"
else
    link_note="rates x $LINK_SCALE (LINK_SCALE)"
fi
if [ -z "${PLAN_LINKS:-}" ] && [ "$LINK_SCALE" != 1 ]; then
    for v in IB_MBIT ROCE_MBIT CROSS_MBIT; do
        printf -v "$v" '%s' "$(awk "BEGIN{r = int(${!v} * $LINK_SCALE + 0.5); print r < 1 ? 1 : r}")"
    done
    scenarios
    write_links
    write_jobs
fi
echo "links: IB $IB_MBIT, RoCE $ROCE_MBIT, between fabrics $CROSS_MBIT Mbit/s ($link_note)" >&2
export LINK_NOTE=$link_note

# Calibration: CAL_REPS runs of the references (one fabric: all-RDMA, all-Ethernet), placed with
# links.json; the cost model's constants are fitted to them (fit.py), as a platform would
# calibrate the planner on a cluster's homogeneous runs before placing jobs across its fabrics.
# Measurement: REPS runs of every scenario, interleaved; the clusters with several fabrics placed
# with the fitted constants (their predictions are then out-of-sample), the references again
# with links.json. PLAN_LINKS (given constants) or FIT_REFS=0 skip the calibration runs and place
# everything with links.json.
plan_links=$WORK/links.json
if [ -z "${PLAN_LINKS:-}" ] && [ "${FIT_REFS:-1}" != 0 ]; then
    CAL=$WORK/calibration-runs.tsv
    echo -e "$RUNS_HEADER" >"$CAL"
    run_phase "$WORK/links.json" 'all-*' "$CAL" "$CAL_REPS" 0
    refs=$(cut -f1 "$CAL" | tail -n +2 | sort -u | tr '\n' ' ')
    if [ -n "$refs" ]; then
        echo "fitting the cost model to the references ($refs)..." >&2
        # shellcheck disable=SC2086
        python3 "$HERE/fit.py" "$CAL" "$WORK" "$OP" "$WORK/links-refs.json" $refs >&2 ||
            die "fitting the references failed"
        plan_links=$WORK/links-refs.json
    fi
fi
run_phase "$plan_links" '*' "$RES" "$REPS" 1
t_end=$(date +%s)
load1=$(uptime | sed 's/.*load average: //')
cp "$RES" "$OUT/hetero-results.tsv"
cp "$WORK/placements.txt" "$OUT/hetero-placements.txt"
rm -f "$OUT/hetero-links-refs.json"
[ "$plan_links" = "$WORK/links.json" ] || cp "$plan_links" "$OUT/hetero-links-refs.json"
python3 "$HERE/report.py" "$WORK" "$OP" "$OUT" "$((t_end - t_start))" "$load0" "$load1" \
    "$IB_MBIT" "$ROCE_MBIT" "$CROSS_MBIT" "$TOKENS"
