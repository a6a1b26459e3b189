# Gang admission on a real kube-apiserver (tests/k8s/envtest.bash): the PodGroup CRDs of Volcano
# and scheduler-plugins and Kueue's LocalQueue installed from tests/fixtures/gang (with a
# MutatingAdmissionPolicy standing in for Kueue's webhook, which gates queued pods). The operator,
# with every gang scheduler enabled, makes for a volcano job a Volcano PodGroup, for a
# coscheduling job a scheduler-plugins PodGroup (both taken by the server, owned by the job, with
# minMember = workers), labels a kueue job's pods as one Kueue pod group and says while they
# wait for admission; a none job gets nothing. The gang barrier still holds (no plan until every
# worker said hello). Suspend deletes the PodGroup, resume recreates it; an operator restart
# creates nothing twice; deleting the job removes its PodGroup (the garbage collector of the
# kube-controller-manager envtest.bash runs). Release pass only (time): the ASan pass runs
# test_controller_gang.
source "$(dirname "$0")/lib.bash"
if [ "${HOLMES_VARIANT:-release}" != release ]; then
    echo "# k8s_gang: checked in the release pass"; exit 0
fi
source "$REPO/tests/k8s/envtest.bash"
k8s_require
OP_PID=
KPIDS=()
stop_all() { k8s_stop_all "${KPIDS[@]}" $OP_PID; }
FIX=$REPO/tests/fixtures/gang
K8S_APISERVER_ARGS=(--feature-gates=MutatingAdmissionPolicy=true
                    --runtime-config=admissionregistration.k8s.io/v1beta1=true)
# installed before the controller manager, so its garbage collector watches them from the start
K8S_CRDS_BEFORE_KCM=("$REPO/crds/trainingjob.yaml" "$FIX/volcano-podgroup-crd.yaml"
                     "$FIX/coscheduling-podgroup-crd.yaml" "$FIX/kueue-localqueue-crd.yaml")
k8s_begin gang
kubectl wait --for condition=established --timeout=30s crd/podgroups.scheduling.volcano.sh \
    crd/podgroups.scheduling.x-k8s.io crd/localqueues.kueue.x-k8s.io >/dev/null
check "fixture CRDs established (Volcano and scheduler-plugins PodGroups, Kueue LocalQueue)" test $? -eq 0
check "LocalQueue team-a and PriorityClass batch-high" kubectl apply -f "$FIX/queues.yaml"
check "the stand-in for Kueue's webhook (MutatingAdmissionPolicy) installed" kubectl apply -f "$FIX/kueue-admission-gate.yaml"
# the policy takes effect once the API server has loaded it: a queued pod, created as a dry run
gate_active() {
    printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"probe","namespace":"%s","labels":{"kueue.x-k8s.io/queue-name":"team-a"}},"spec":{"containers":[{"name":"c","image":"x"}]}}' "$NS" |
        kubectl create --dry-run=server -f - -o json 2>/dev/null | jq -e '[.spec.schedulingGates[]?.name] == ["kueue.x-k8s.io/admission"]' >/dev/null
}
check "... and in effect (a queued pod gets the gate)" wait_for 30 gate_active

k8s_operator "$W/operator.log" $CPORT --gang-schedulers kueue,volcano,coscheduling --status-interval 1

# job NAME WORKERS SCHEDULING [TEMPLATE]: a tiny CPU job
job() {
    cat <<YAML
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1, namespace: $NS}
spec:
  workers: $2
  gpusPerWorker: 0
  model: {layers: 2, hidden: 32, heads: 2, vocab: 256, seqLen: 32}
  training:
    steps: 3
    data: {path: $REPO/examples/data/corpus.txt, format: text}
  parallelism: {microBatches: 2, microBatchSize: 1}
  scheduling: $3
${4:-}
YAML
}
{
    job gv 2 "{gang: volcano, queue: research}" "  template: {spec: {priorityClassName: batch-high}}"
    echo ---; job gc 3 "{gang: coscheduling, scheduleTimeoutSeconds: 45}"
    echo ---; job gk 2 "{gang: kueue, queue: team-a}"
    echo ---; job gn 1 "{gang: none}"
} >"$W/jobs.yaml"
check "four jobs applied (volcano, coscheduling, kueue, none)" kubectl apply -f "$W/jobs.yaml"

pg() { k8s_json "podgroups.$1" "$2" -n $NS; }
pods() { k8s_json pods -n $NS -l holmes.dev/job=$1; }
npods_are() { [ "$(pods "$1" | jq '.items | length')" = "$2" ]; }
tj() { k8s_json tj "$1" -n $NS; }
tj_is() { tj "$1" | jq -e "$2" >/dev/null 2>&1; }
uid_of() { k8s_json tj "$1" -n $NS | jq -r '.metadata.uid // empty'; }
OWNED='(.metadata.ownerReferences | length == 1) and .metadata.ownerReferences[0].kind == "TrainingJob" and
       .metadata.ownerReferences[0].uid == $uid and .metadata.ownerReferences[0].controller == true and
       .metadata.ownerReferences[0].blockOwnerDeletion == true'

all_pods() { npods_are gv 2 && npods_are gc 3 && npods_are gk 2 && npods_are gn 1; }
check "every job's pods created" wait_for 20 all_pods
# -- volcano
check "volcano: PodGroup gv taken by the server" wait_for 10 pg scheduling.volcano.sh gv
V=$(pg scheduling.volcano.sh gv)
jq_ok() { local j=$1; shift; jq -e "$@" <<<"$j" >/dev/null; }
check "volcano: owned by the job, minMember 2, queue research, priorityClassName batch-high" jq_ok "$V" --arg uid "$(uid_of gv)" \
    "$OWNED and .spec.minMember == 2 and .spec.queue == \"research\" and .spec.priorityClassName == \"batch-high\" and
     .metadata.labels[\"holmes.dev/job\"] == \"gv\""
check "volcano: pods with schedulerName volcano and the group-name annotation" jq_true "$(pods gv)" \
    'all(.items[]; .spec.schedulerName == "volcano" and .metadata.annotations["scheduling.k8s.io/group-name"] == "gv")'
# -- coscheduling
check "coscheduling: PodGroup gc taken by the server" wait_for 10 pg scheduling.x-k8s.io gc
C=$(pg scheduling.x-k8s.io gc)
check "coscheduling: owned by the job, minMember 3, scheduleTimeoutSeconds 45" jq_ok "$C" --arg uid "$(uid_of gc)" \
    "$OWNED and .spec.minMember == 3 and .spec.scheduleTimeoutSeconds == 45"
check "coscheduling: pods labelled with the pod group, schedulerName scheduler-plugins-scheduler" jq_true "$(pods gc)" \
    'all(.items[]; .spec.schedulerName == "scheduler-plugins-scheduler" and .metadata.labels["scheduling.x-k8s.io/pod-group"] == "gc")'
# -- kueue
check "kueue: pods in LocalQueue team-a, one pod group of 2" jq_true "$(pods gk)" \
    'all(.items[]; .metadata.labels["kueue.x-k8s.io/queue-name"] == "team-a" and .metadata.labels["kueue.x-k8s.io/pod-group-name"] == "gk"
         and .metadata.annotations["kueue.x-k8s.io/pod-group-total-count"] == "2")'
no_pg() { ! pg scheduling.volcano.sh "$1" >/dev/null && ! pg scheduling.x-k8s.io "$1" >/dev/null; }
check "kueue: no PodGroup object" no_pg gk
check "kueue: the pods carry Kueue's admission gate (the webhook stand-in)" jq_true "$(pods gk)" \
    'all(.items[]; [.spec.schedulingGates[]?.name] == ["kueue.x-k8s.io/admission"])'
check "kueue: PodsScheduled says the job waits for Kueue admission in LocalQueue team-a" wait_for 10 tj_is gk \
    '.status.conditions[] | select(.type == "PodsScheduled") | .status == "False" and .reason == "WaitingForAdmission" and (.message | test("LocalQueue team-a"))'
check "kueue: phase Queued while it waits for admission" tj_is gk '.status.phase == "Queued"'
for i in 0 1; do # Kueue admits the group: it removes the gate
    kubectl patch pod gk-worker-$i -n $NS --type=json -p '[{"op":"remove","path":"/spec/schedulingGates"}]' >/dev/null
done
check "kueue: admitted (gates removed) -> no longer WaitingForAdmission, phase Pending" wait_for 10 tj_is gk \
    '(.status.conditions[] | select(.type == "PodsScheduled") | .reason == "Scheduling") and .status.phase == "Pending"'
# -- none
check "none: no PodGroup, the default scheduler, no gang labels" jq_true "$(pods gn)" \
    'all(.items[]; .spec.schedulerName == "default-scheduler" and ((.metadata.labels | keys | map(select(test("kueue|scheduling"))) | length) == 0)
         and ((.metadata.annotations // {}) | has("scheduling.k8s.io/group-name") | not))'
check "none: no PodGroup object" no_pg gn

# -- the gang barrier: with one of gv's two workers there, no plan and no training
k8s_kubelet $NS gv-worker-0 "$W/gv-worker-0.log" & KPIDS+=($!)
sleep 4
check "gang barrier: one of two workers connected -> no plan, not Running" tj_is gv \
    '(.status.plan == null) and (.status.phase != "Running") and (.status.phase != "Planning") and
     ([.status.conditions[]? | select(.type == "GangReady" and .status == "True")] | length == 0)'
k8s_kubelet $NS gv-worker-1 "$W/gv-worker-1.log" & KPIDS+=($!)
check "gang barrier: the second worker -> planned and trained" wait_for 60 tj_is gv '.status.plan != null and .status.progress.step == 3'

# -- idempotent: an operator restart creates nothing twice
VUID=$(jq -r .metadata.uid <<<"$V"); CUID=$(jq -r .metadata.uid <<<"$C")
kill $OP_PID; wait $OP_PID 2>/dev/null
k8s_operator "$W/operator2.log" $CPORT --gang-schedulers kueue,volcano,coscheduling
sleep 3
pg_uid() { pg "$1" "$2" | jq -r .metadata.uid; }
same_pgs() { [ "$(pg_uid scheduling.volcano.sh gv)" = "$VUID" ] && [ "$(pg_uid scheduling.x-k8s.io gc)" = "$CUID" ] &&
             ! grep -q 'reconcile .* failed' "$W/operator2.log"; }
check "restart: the same PodGroups (no delete, no duplicate), no failed reconcile" same_pgs

# -- suspend deletes the PodGroup, resume recreates it
kubectl patch tj gc -n $NS --type=merge -p '{"spec":{"suspend":true}}' >/dev/null
gc_gone() { ! pg scheduling.x-k8s.io gc >/dev/null && npods_are gc 0; }
check "suspend: the coscheduling PodGroup deleted with the pods" wait_for 20 gc_gone
kubectl patch tj gc -n $NS --type=merge -p '{"spec":{"suspend":false}}' >/dev/null
gc_new() { local u; u=$(pg_uid scheduling.x-k8s.io gc) && [ -n "$u" ] && [ "$u" != "$CUID" ] && npods_are gc 3; }
check "resume: PodGroup recreated, and the pods" wait_for 20 gc_new

# -- deleting the job removes its PodGroup (the garbage collector, through the ownerReference)
kubectl delete tj gv -n $NS --wait=false >/dev/null
gv_gone() { ! pg scheduling.volcano.sh gv >/dev/null; }
check "delete: the Volcano PodGroup garbage-collected with the job" wait_for 45 gv_gone
check "no API call forbidden, no reconcile failed" bash -c "! grep -qiE 'forbidden|reconcile .* failed' '$W/operator.log' '$W/operator2.log'"
