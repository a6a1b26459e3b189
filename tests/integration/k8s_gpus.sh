# Workers with several (emulated) GPUs on a real kube-apiserver (tests/k8s/envtest.bash), the test
# playing kubelet: a TrainingJob of 2 workers x 2 GPUs with spec.emulation.gpus. Its pods ask for
# no nvidia.com/gpu; each pod's worker runs a rank process per GPU; status shows the 4 ranks'
# plan (and the GPU memory and memory bandwidth each worker declared, beside the predicted); a rank process killed
# (-9) fails its worker, the gang restarts in place (status.restarts 1, the same pods) and the job
# Succeeds. A second job whose workers declare 1 MB a GPU is refused by the planner (Planned=False,
# PlanFailed, naming the stage and the bytes) and Fails without a retry. With tokenSlices: auto, status.plan.tokenSlices says
# what the planner chose and the ranks train with it. The operator's /metrics carries the job's training
# gauges (and its job page, /jobs and /api/jobs, the job), and every metric the chart's alerts and Grafana dashboard name (helm template with
# tests/helm/values/metrics.yaml).
source "$(dirname "$0")/lib.bash"
source "$REPO/tests/k8s/envtest.bash"
if [ "${HOLMES_VARIANT:-release}" != release ]; then # time: the ASan pass runs local_gpus.sh
    echo "SKIP k8s_gpus: run in the release pass (time); local_gpus runs the rank processes under ASan"
    exit 0
fi
k8s_require
OP_PID=
KPIDS=()
stop_all() { k8s_stop_all "${KPIDS[@]}" $OP_PID; }
k8s_begin gpus
MPORT=$(k8s_free_port)
k8s_operator "$W/operator.log" $CPORT --status-interval 1 --metrics-addr 127.0.0.1:$MPORT

sed -e "s/name: local-gpus/name: gj/" -e "s/steps: 100/steps: 160/" -e "s#local-runs/local-gpus/checkpoints#$W/ckpt#" \
    -e "s#examples/data/corpus.txt#$REPO/examples/data/corpus.txt#" -e "s/everySteps: 25/everySteps: 20/" \
    -e "s/bandwidthScale: 0.01/bandwidthScale: 0.001/" -e "s/schedule: 1f1b}/schedule: 1f1b, tokenSlices: auto}/" \
    "$REPO/examples/local-gpus.yaml" >"$W/job.yaml"
kubectl apply -n $NS -f "$W/job.yaml" >/dev/null
pods() { k8s_json pods -n $NS -l holmes.dev/job=gj; }
npods_are() { [ "$(pods | jq '.items | length')" = "$1" ]; }
tj_is() { k8s_json tj gj -n $NS | jq -e "$1" >/dev/null 2>&1; }
step_of() { k8s_json tj gj -n $NS | jq -r '.status.progress.step // empty'; }
past() { local s; s=$(step_of); [ -n "$s" ] && [ "$s" -ge "$1" ]; }
uids() { pods | jq -c '[.items[] | .metadata.uid] | sort'; }

check "apply -> 2 worker pods" wait_for 30 npods_are 2
check "emulated GPUs: the pods ask for no nvidia.com/gpu" jq_true "$(pods)" \
    'all(.items[]; (.spec.containers[0].resources.limits // {}) | has("nvidia.com/gpu") | not)'
for i in 0 1; do k8s_kubelet $NS gj-worker-$i "$W/gj-worker-$i.log" --tflops 0.05 --gpu-memory-gb $((40 + 40 * i)) \
    --memory-gbps $((1000 + 1000 * i)) & KPIDS+=($!); done
check "training reaches step 40" wait_for 120 past 40
check "status: a plan of 4 ranks, pipeline 2 x data 2, each stage on one worker's fabric" tj_is \
    '.status.plan.pipeline == 2 and .status.plan.data == 2 and ([.status.plan.stages[].fabric] | sort) == ["ib-a", "roce-b"]'
check "status.plan.stages (kept by the CRD's schema): predicted memory beside the GPUs' the workers declared (40, 80 GB)" tj_is \
    '[.status.plan.stages[] | {m: .gpuMemoryGb, s: .gpuMemorySource, p: (.memoryGb > 0 and .memoryGb < 1)}] | sort_by(.m) ==
     [{"m": 40, "s": "declared", "p": true}, {"m": 80, "s": "declared", "p": true}]'
check "status.plan.stages (kept by the CRD's schema): each stage's memory bandwidth as its worker declared it (1000, 2000 GB/s) and its optimizer's price" tj_is \
    '[.status.plan.stages[] | {g: .memoryGbps, s: .memoryGbpsSource, o: (.optimizerSeconds > 0)}] | sort_by(.g) ==
     [{"g": 1000, "s": "declared", "o": true}, {"g": 2000, "s": "declared", "o": true}]'
check "status.plan.pipelineLinks (kept by the CRD's schema): the boundary's 2 links on TCP between the fabrics" tj_is \
    '.status.plan.pipelineLinks | length == 1 and .[0].fromStage == 0 and .[0].toStage == 1 and
     .[0].transport == "socket" and .[0].socket == 2 and .[0].ib == 0 and .[0].seconds > 0'
# tokenSlices: auto: the planner's choice in status, and the ranks train with exactly that
slicing_agrees() {
    local ts n lens
    ts=$(k8s_json tj gj -n $NS | jq -c '.status.plan.tokenSlices') || return 1
    [ "$(jq -r .chosenBy <<<"$ts")" = planner ] || return 1
    n=$(jq -r .count <<<"$ts"); lens=$(jq -r '.lengths | map(tostring) | join(", ")' <<<"$ts")
    if [ "$n" -gt 1 ]; then
        grep -q "TeraPipe: $n token slices of $lens tokens of 64" "$W/gj-worker-0.log"
    else
        ! grep -q "TeraPipe:" "$W/gj-worker-0.log"
    fi
}
check "status.plan.tokenSlices: the planner's choice (tokenSlices auto), and the ranks train with it" slicing_agrees
check "each pod's worker runs its two ranks as processes" bash -c \
    "grep -q '2 rank processes started' '$W/gj-worker-0.log' && grep -q '2 rank processes started' '$W/gj-worker-1.log'"
metrics() { curl -sf "http://127.0.0.1:$MPORT/metrics"; }
L='namespace="team",job="gj"'
has_gauges() {
    local m; m=$(metrics) || return 1
    grep -q "^holmes_job_phase{$L,phase=\"Running\"} 1$" <<<"$m" &&
        grep -qE "^holmes_job_tokens_per_second\{$L\} [1-9]" <<<"$m" &&
        grep -qE "^holmes_job_predicted_step_seconds\{$L\} [0-9.e+-]+$" <<<"$m" &&
        grep -qE "^holmes_job_step_seconds\{$L\} 0?\.?[0-9]" <<<"$m" &&
        grep -q "^holmes_job_socket_groups{$L} 0$" <<<"$m" &&
        grep -qE "^holmes_job_stage_seconds\{$L,stage=\"1\",part=\"compute\"\} [0-9]" <<<"$m"
}
check "/metrics: the job's phase, tokens/s, step time and prediction, groups on TCP, per-stage times" wait_for 20 has_gauges
# The job page on the same listener: its HTML, and the job as /api/jobs shows it (the status's
# phase and plan, the coordinator's loss points).
page_has_job() {
    curl -sf "http://127.0.0.1:$MPORT/jobs" | grep -q '<title>Holmes jobs</title>' &&
        curl -sf "http://127.0.0.1:$MPORT/api/jobs" | jq -e '.jobs[] | select(.namespace == "team" and
            .name == "gj") | .phase == "Running" and (.plan.stages | length) == 2 and
            (.points.loss | length) > 0 and (.stages | length) == 2' >/dev/null
}
check "/jobs and /api/jobs on the metrics port: the page, the job's phase, plan and loss points" \
    wait_for 20 page_has_job
HELM=$REPO/tools/helm
[ -x "$HELM" ] || HELM=$(command -v helm || true)
if [ -n "$HELM" ] && "$HELM" template t "$REPO/helm/holmes" -f "$REPO/tests/helm/values/metrics.yaml" >"$W/chart.yaml" 2>&1; then
    names=$(grep -oE 'holmes_[a-z_]+' "$W/chart.yaml" | grep -v '^holmes_dashboard' | sort -u)
    missing=$(for n in $names; do grep -q "^# TYPE $n " <<<"$(metrics)" || echo "$n"; done)
    [ -n "$names" ] && [ -z "$missing" ] \
        && pass "every metric the chart's alerts and dashboard name is exported ($(wc -w <<<"$names") names)" \
        || fail "every metric the chart's alerts and dashboard name is exported" "missing: $missing"
else
    fail "helm template of the chart's alerts and dashboard" "$(tail -n 3 "$W/chart.yaml" 2>/dev/null)"
fi
U0=$(uids)
victim=$(pgrep -f "holmes-node rank" | while read -r p; do
    grep -qx HOSTNAME=gj-worker-1 <(tr '\0' '\n' </proc/$p/environ 2>/dev/null) && echo "$p"; done | head -1)
[ -n "$victim" ] && kill -9 "$victim"
check "a rank process of worker 1 was killed" test -n "$victim"
check "status.restarts 1: the gang restarts in place" wait_for 30 tj_is '.status.restarts == 1'
check "the worker named the rank and how it ended" grep -q "was killed by signal 9" "$W/gj-worker-1.log"
restarts_metric() { metrics | grep -q "^holmes_job_restarts{$L} 1$"; }
check "/metrics: holmes_job_restarts 1" wait_for 20 restarts_metric
gone() { for p in "${KPIDS[@]}"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
check "both pods' main processes finish" wait_for 180 gone
for i in 0 1; do
    k8s_pod_status $NS gj-worker-$i '{"phase":"Succeeded","conditions":[{"type":"Ready","status":"False"}]}'
done
check "the job Succeeds at step 160" wait_for 180 tj_is '.status.phase == "Succeeded" and .status.progress.step == 160'
check "no pod recreated: the same 2 pod UIDs" test "$(uids)" = "$U0"
# (said by the first stage's ranks, on whichever worker the plan put it)
check "the gang resumed from a checkpoint, not step 0" grep -qE "resumed from the checkpoint of step [1-9]" "$W/gj-worker-0.log" "$W/gj-worker-1.log"

# A plan that cannot fit the memory its workers declare (1 MB a GPU): refused naming the stage,
# the bytes it needs and the bytes there (condition Planned=False, PlanFailed, and its Event); the
# job Fails and is not retried (no restart, the same pods).
sed -e "s/name: gj/name: gm/" -e "s#$W/ckpt#$W/ckpt-gm#" "$W/job.yaml" >"$W/job-gm.yaml"
kubectl apply -n $NS -f "$W/job-gm.yaml" >/dev/null
gm_pods() { k8s_json pods -n $NS -l holmes.dev/job=gm; }
gm_npods_are() { [ "$(gm_pods | jq '.items | length')" = "$1" ]; }
gm_is() { k8s_json tj gm -n $NS | jq -e "$1" >/dev/null 2>&1; }
check "a second job (gm) gets its 2 worker pods" wait_for 30 gm_npods_are 2
GU0=$(gm_pods | jq -c '[.items[] | .metadata.uid] | sort')
GPIDS=()
for i in 0 1; do k8s_kubelet $NS gm-worker-$i "$W/gm-worker-$i.log" --tflops 0.05 --memory-gbps 5 --gpu-memory-gb 0.001 & GPIDS+=($!); done
KPIDS+=("${GPIDS[@]}")
check "1 MB a GPU declared: the job Fails" wait_for 60 gm_is '.status.phase == "Failed"'
re="nothing fits in the GPUs' memory: .* stage [0-9]+ \\\\(layers \\\\[[0-9]+, [0-9]+\\\\) on fabric [a-z-]+\\\\) needs [0-9.]+ GB per GPU \\\\([0-9]+ bytes: .*its GPUs have 0\\\\.00 GB \\\\(900000 bytes: 90 % of the 0\\\\.001 GB each holds\\\\)"
check "condition Planned=False, PlanFailed, naming the stage, the bytes needed and the bytes there" gm_is \
    "any(.status.conditions[]; .type == \"Planned\" and .status == \"False\" and .reason == \"PlanFailed\" and (.message | test(\"$re\")))"
check "a Warning event PlanFailed on the job" jq_true "$(k8s_json events -n $NS)" \
    'any(.items[]; .reason == "PlanFailed" and .type == "Warning" and .involvedObject.name == "gm")'
gm_gone() { for p in "${GPIDS[@]}"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
check "its workers exit" wait_for 60 gm_gone
gm_not_retried() {
    local r; r=$(k8s_json tj gm -n $NS | jq -r '.status.restarts // empty')
    [ "${r:-0}" = 0 ] && [ "$(gm_pods | jq -c '[.items[] | .metadata.uid] | sort')" = "$GU0" ]
}
check "not retried: no restart, the same 2 pods" gm_not_retried
