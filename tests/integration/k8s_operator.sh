# The operator on a real kube-apiserver (tests/k8s/envtest.bash), running as the chart's
# ServiceAccount with the chart's RBAC (a token from `kubectl create token`, not the admin
# certificate), with the test playing kubelet (pod status patched, one `holmes-node worker`
# per pod with the pod's environment): a job from apply to Succeeded (Secret, Service, pods,
# owner references, labels, plan, progress, conditions, events, `kubectl get tj` columns); a
# spec the server takes but the operator refuses; two operators with --leader-elect on a real
# Lease, exactly one acting, the other taking over and adopting the pods when the first is
# killed; a job failed past spec.activeDeadlineSeconds; a finished job deleted after
# spec.ttlSecondsAfterFinished; deleting a job
# garbage-collects what it owns; no call was forbidden.
source "$(dirname "$0")/lib.bash"
source "$REPO/tests/k8s/envtest.bash"
k8s_require
OP_PIDS=()
stop_all() { k8s_stop_all "${OP_PIDS[@]}"; }
# The chart's CRD before the controller manager: its garbage collector then follows jobs (and
# what they own) from the start, not after its 30 s resync (the deletion check below waits on it).
K8S_CRDS_BEFORE_KCM=("$REPO/helm/holmes/crds/trainingjob.yaml")
k8s_start || exit 1
trap stop_all EXIT
FIX=$REPO/tests/fixtures/sysfs
W=$K8S_DIR/op-test
mkdir -p "$W"
RELNS=holmes-system
NS=team
kubectl create namespace $RELNS >/dev/null && kubectl create namespace $NS >/dev/null
kubectl apply -f "$REPO/helm/holmes/crds/trainingjob.yaml" >/dev/null &&
    kubectl wait --for condition=established crd/trainingjobs.holmes.dev --timeout=30s >/dev/null ||
    { fail "CRD installed" "$(kubectl get crd -o yaml 2>&1 | head -20)"; exit 1; }

# --- the chart's ServiceAccount and RBAC, and a token for it -----------------------------------
HELM=$REPO/tools/helm
[ -x "$HELM" ] || HELM=$(command -v helm || true)
[ -n "$HELM" ] || { fail "helm available" "no tools/helm: run 'make deps'"; exit 1; }
"$HELM" template h "$REPO/helm/holmes" -n $RELNS >"$W/chart.yaml" 2>"$W/chart.err" ||
    { fail "helm template" "$(cat "$W/chart.err")"; exit 1; }
/usr/bin/python3 -c '
import sys, yaml
keep = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] in keep]
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))' "$W/chart.yaml" "$W/rbac.yaml"
check "the chart's ServiceAccount, ClusterRole and leader-election Role applied" \
    bash -c "'$KUBECTL' apply -n $RELNS -f '$W/rbac.yaml' >'$W/rbac.out' 2>&1"
SA=h-holmes-operator
TOKEN_SA=$(kubectl create token $SA -n $RELNS --duration 2h) ||
    { fail "kubectl create token" "no token for $SA"; exit 1; }
k8s_kubeconfig "$W/operator.kubeconfig" --token "$TOKEN_SA"
check "the token authenticates as the chart's ServiceAccount" bash -c \
    "'$KUBEBUILDER_ASSETS/kubectl' --kubeconfig '$W/operator.kubeconfig' auth whoami -o jsonpath='{.status.userInfo.username}' | grep -qx 'system:serviceaccount:$RELNS:$SA'"
check "... which may not read Secrets it does not need (get)" bash -c \
    "! '$KUBEBUILDER_ASSETS/kubectl' --kubeconfig '$W/operator.kubeconfig' auth can-i get secrets -n $NS >/dev/null 2>&1"

# --- two operators with leader election ------------------------------------------------------
CPORT_A=$(k8s_free_port); CPORT_B=$(k8s_free_port)
LE=(--leader-elect --lease-namespace $RELNS --lease-duration 3 --renew-deadline 2 --retry-period 0.25)
start_op() { # NAME COORD-PORT
    "$OPERATOR" run --kubeconfig "$W/operator.kubeconfig" "${LE[@]}" --identity "$1" \
        --metrics-addr 0 --health-addr 0 --coordinator-addr 127.0.0.1:$2 \
        --coordinator-url ws://127.0.0.1:$2/ --node-image holmes-node:test >"$W/$1.log" 2>&1 &
    OP_PIDS+=($!)
}
holder() { k8s_json lease holmes-operator -n $RELNS | jq -r '.spec.holderIdentity // empty'; }
holder_is() { [ "$(holder)" = "$1" ]; }
start_op op-a "$CPORT_A"; PID_A=${OP_PIDS[-1]}
check "first operator takes the Lease" wait_for 30 holder_is op-a
start_op op-b "$CPORT_B"; PID_B=${OP_PIDS[-1]}
sleep 2
check "second operator stands by (Lease still held by op-a)" holder_is op-a

# --- a job from apply to Succeeded -------------------------------------------------------------
tj() { k8s_json tj "$1" -n $NS; }
tj_is() { jq -e "$2" <<<"$(tj "$1")" >/dev/null 2>&1; } # tj_is NAME FILTER
pods_json() { k8s_json pods -n $NS -l "holmes.dev/job=$1"; }
npods() { pods_json "$1" | jq '.items | length'; }
pods_are() { [ "$(npods "$1")" = "$2" ]; }
cat >"$W/e2e.yaml" <<YAML
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: e2e, namespace: $NS}
spec:
  gangTimeoutSeconds: 120
  restartPolicy: {maxRestarts: 1, backoffSeconds: 0}
  workers: 4
  gpusPerWorker: 0
  model: {layers: 4, hidden: 64, heads: 4, vocab: 256, seqLen: 64}
  parallelism: {pipeline: 2, data: 2, microBatches: 2, microBatchSize: 2}
  training: {steps: 40}
YAML
kubectl apply -f "$W/e2e.yaml" >/dev/null
UID_E=$(k8s_json tj e2e -n $NS | jq -r '.metadata.uid // empty')
check "apply -> 4 worker pods" wait_for 30 pods_are e2e 4
P=$(pods_json e2e)
check "pods named <job>-worker-<i>, owned by the job as controller" jq_true "$P" \
    "([.items[].metadata.name] | sort) == [\"e2e-worker-0\",\"e2e-worker-1\",\"e2e-worker-2\",\"e2e-worker-3\"] and all(.items[]; .metadata.ownerReferences[0].uid == \"$UID_E\" and .metadata.ownerReferences[0].controller)"
check "pods get 300 s to checkpoint on SIGTERM (terminationGracePeriodSeconds)" jq_true "$P" \
    'all(.items[]; .spec.terminationGracePeriodSeconds == 300)'
SEC=$(k8s_json secret e2e-token -n $NS)
check "Secret e2e-token owned by the job" jq_true "$SEC" ".metadata.ownerReferences[0].uid == \"$UID_E\" and (.data.token | length > 40)"
SVC=$(k8s_json service e2e -n $NS)
check "headless Service owned by the job" jq_true "$SVC" ".spec.clusterIP == \"None\" and .metadata.ownerReferences[0].uid == \"$UID_E\""
check "status: Pending, workers 0/4, Valid" wait_for 20 tj_is e2e \
    '.status.phase == "Pending" and .status.workers.summary == "0/4" and (.status.conditions[] | select(.type == "Valid") | .status == "True")'
check "only the leader acted" bash -c "! grep -q 'caches synced' '$W/op-b.log'"

# kubelet: the pods run and are ready.
pod_status() { # POD PHASE READY
    k8s_pod_status $NS "$1" \
        "{\"phase\":\"$2\",\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\"},{\"type\":\"Ready\",\"status\":\"$3\"}]}"
}
for i in 0 1 2 3; do pod_status e2e-worker-$i Running True; done
check "pods ready -> workers 4/4" wait_for 20 tj_is e2e '.status.workers.summary == "4/4" and .status.workers.ready == 4'
TOKEN=$(k8s_json secret e2e-token -n $NS | jq -r '.data.token // empty' | base64 -d)
run_worker() { # INDEX FIXTURE: holmes-node worker with the pod's env, simulating 40 steps
    local envs
    envs=$(k8s_json pod "e2e-worker-$1" -n $NS | jq -r '.spec.containers[0].env[] | select(.value != null) | "\(.name)=\(.value)"')
    # shellcheck disable=SC2086
    env -i PATH="$PATH" HOSTNAME="e2e-worker-$1" HOLMES_TOKEN="$TOKEN" NODE_NAME="node-$1" $envs \
        timeout -k 5 180 "$NODE" worker --sysfs "$FIX/$2/sys" --simulate 40 --step-ms 50 --progress-ms 100 \
        >"$W/worker-$1.log" 2>&1
}
WPIDS=()
for i in 0 1; do run_worker $i cx6-hdr-ib & WPIDS+=($!); done
for i in 2 3; do run_worker $i cx5-roce-100g & WPIDS+=($!); done
labels_are() { jq -e "$2" <<<"$(k8s_json pod "e2e-worker-$1" -n $NS | jq -c .metadata.labels)" >/dev/null 2>&1; }
# The fabric label is the one the NIC labeller puts on Nodes: class prefix, 16 hex digits of SHA-256.
ROCE_LABEL=roce-$(printf %s 'roce-10.1.0.0/16' | sha256sum | cut -c1-16)
check "pods labelled with their NIC class and fabric (as Nodes are)" wait_for 30 labels_are 3 \
    ".[\"holmes.dev/nic-class\"] == \"roce\" and .[\"holmes.dev/fabric\"] == \"$ROCE_LABEL\""
check "status.plan: two stages, each inside one fabric" wait_for 30 tj_is e2e \
    '.status.plan.pipeline == 2 and ([.status.plan.stages[].fabric] | sort) == ["ib-fe80000000000000-sm1","roce-10.1.0.0/16"]'
check "pods labelled with stage and data-parallel rank" wait_for 10 labels_are 1 '.["holmes.dev/stage"] != null and .["holmes.dev/dp-rank"] != null'
check "status.progress while training" wait_for 40 tj_is e2e \
    '.status.phase == "Running" and .status.progress.step > 0 and .status.progress.loss > 0 and .status.progress.tokensPerSecond > 0'
ok=1
for p in "${WPIDS[@]}"; do wait "$p" || ok=0; done
[ $ok = 1 ] && pass "every worker finished (exit 0)" || fail "every worker finished (exit 0)" "$(tail -n 3 "$W"/worker-*.log)"
for i in 0 1 2 3; do pod_status e2e-worker-$i Succeeded False; done
check "job Succeeded" wait_for 30 tj_is e2e '.status.phase == "Succeeded" and .status.progress.step == 40'
check "conditions: Valid, GangReady, Planned" tj_is e2e \
    '[.status.conditions[] | select(.status == "True") | .type] as $t | ($t | index("Valid")) and ($t | index("GangReady")) and ($t | index("Planned"))'
EV=$(k8s_json events -n $NS)
check "events: Planned on the job" jq_true "$EV" 'any(.items[]; .reason == "Planned" and .involvedObject.kind == "TrainingJob" and .involvedObject.name == "e2e")'
kubectl get tj e2e -n $NS >"$W/get-tj.txt" 2>&1
check "kubectl get tj: NAME PHASE WORKERS STEP LOSS AGE header" grep -qE '^NAME +PHASE +WORKERS +STEP +LOSS +AGE$' "$W/get-tj.txt"
check "kubectl get tj: e2e Succeeded, workers 0/4, step 40, a loss" \
    grep -qE '^e2e +Succeeded +0/4 +40 +[0-9]+(\.[0-9]{1,4})? +[0-9]+[sm]' "$W/get-tj.txt"

# --- a spec the server takes and the operator refuses --------------------------------------------
sed -e 's/name: e2e,/name: bad-split,/' -e 's/pipeline: 2, data: 2, microBatches: 2/pipeline: 3, data: auto, microBatches: 4/' "$W/e2e.yaml" >"$W/bad.yaml"
check "server takes a pipeline that does not divide the ranks (a rule it cannot state)" bash -c "\"$KUBECTL\" apply -f $W/bad.yaml -o name >/dev/null"
check "the operator refuses it: Valid=False naming the field" wait_for 20 tj_is bad-split \
    '.status.conditions[] | select(.type == "Valid") | .status == "False" and (.message | contains("spec.parallelism"))'
check "... a Warning Event" wait_for 10 bash -c "'$KUBECTL' get events -n $NS -o json | jq -e 'any(.items[]; .type == \"Warning\" and .involvedObject.name == \"bad-split\")' >/dev/null"
check "... and no pods" pods_are bad-split 0

# --- leader killed: the standby takes the Lease and adopts the pods --------------------------------
sed -e 's/name: e2e,/name: adopt,/' -e 's/workers: 4/workers: 2/' -e 's/pipeline: 2, data: 2/pipeline: 2, data: 1/' "$W/e2e.yaml" >"$W/adopt.yaml"
kubectl apply -f "$W/adopt.yaml" >/dev/null
check "second job: 2 pods" wait_for 30 pods_are adopt 2
UIDS=$(pods_json adopt | jq -c '[.items[].metadata.uid] | sort')
{ kill -KILL "$PID_A"; wait "$PID_A"; } 2>/dev/null
check "standby takes the Lease when the leader is killed" wait_for 30 holder_is op-b
check "the new leader syncs its caches" wait_for 20 grep -q 'caches synced' "$W/op-b.log"
for i in 0 1; do pod_status adopt-worker-$i Running True; done
check "the new leader reconciles the adopted job (workers 2/2)" wait_for 20 tj_is adopt '.status.workers.summary == "2/2"'
check "the pods were adopted, not recreated (same UIDs, no duplicates)" test "$(pods_json adopt | jq -c '[.items[].metadata.uid] | sort')" = "$UIDS"
check "Lease transitions counted" bash -c "[ \"\$('$KUBECTL' get lease holmes-operator -n $RELNS -o jsonpath='{.spec.leaseTransitions}')\" -ge 1 ]"

# --- an operator restart adopts too ------------------------------------------------------------
kill -TERM "$PID_B"; wait "$PID_B"; rc=$?
check "SIGTERM: clean exit 0" test "$rc" = 0
check "SIGTERM released the Lease" wait_for 5 bash -c "[ -z \"\$('$KUBECTL' get lease holmes-operator -n $RELNS -o jsonpath='{.spec.holderIdentity}')\" ]"
start_op op-c "$CPORT_A"
check "a restarted operator takes the released Lease" wait_for 30 holder_is op-c
check "... syncs" wait_for 20 grep -q 'caches synced' "$W/op-c.log"
sleep 2
check "... and keeps the pods it finds (same UIDs)" test "$(pods_json adopt | jq -c '[.items[].metadata.uid] | sort')" = "$UIDS"

# --- activeDeadlineSeconds: a job still running past it fails and its pods are deleted ---------------
sed -e 's/name: e2e,/name: dl,/' -e 's/workers: 4/workers: 2/' -e 's/pipeline: 2, data: 2/pipeline: 2, data: 1/' \
    -e 's/^spec:$/spec:\n  activeDeadlineSeconds: 2/' "$W/e2e.yaml" >"$W/dl.yaml"
kubectl apply -f "$W/dl.yaml" >/dev/null
check "deadline job: 2 pods" wait_for 30 pods_are dl 2
for i in 0 1; do pod_status dl-worker-$i Running True; done
check "deadline job: Failed, condition Failed DeadlineExceeded" wait_for 30 tj_is dl \
    '.status.phase == "Failed" and (.status.conditions[] | select(.type == "Failed") | .status == "True" and .reason == "DeadlineExceeded")'
check "deadline job: failed no sooner than startTime + 2 s (the API's timestamps)" tj_is dl \
    '(.status.completionTime | fromdateiso8601) - (.status.startTime | fromdateiso8601) >= 2'
pods_deleting() { [ "$(pods_json dl | jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length')" = 0 ]; }
check "deadline job: its pods deleted (terminating: no kubelet here)" wait_for 20 pods_deleting
check "deadline job: a Warning Event DeadlineExceeded" bash -c "'$KUBECTL' get events -n $NS -o json | jq -e 'any(.items[]; .reason == \"DeadlineExceeded\" and .type == \"Warning\" and .involvedObject.name == \"dl\")' >/dev/null"

# --- ttlSecondsAfterFinished: a finished job deleted by the operator, under the chart's RBAC ---------
sed -e 's/name: e2e,/name: ttl,/' -e 's/workers: 4/workers: 2/' -e 's/pipeline: 2, data: 2/pipeline: 2, data: 1/' \
    -e 's/^spec:$/spec:\n  ttlSecondsAfterFinished: 1/' "$W/e2e.yaml" >"$W/ttl.yaml"
kubectl apply -f "$W/ttl.yaml" >/dev/null
check "ttl job: 2 pods" wait_for 30 pods_are ttl 2
UID_T=$(k8s_json tj ttl -n $NS | jq -r '.metadata.uid // empty')
for i in 0 1; do pod_status ttl-worker-$i Succeeded False; done
ttl_gone() {
    ! k8s_json tj ttl -n $NS >/dev/null &&
        [ "$(kubectl get pods,secrets,services -n $NS -o json | jq --arg u "$UID_T" '[.items[] | select(.metadata.ownerReferences[0].uid == $u)] | length')" = 0 ]
}
check "ttl job: Succeeded, then deleted with its pods, Secret and Service" wait_for 60 ttl_gone
check "ttl job: a Normal Event Deleted" bash -c "'$KUBECTL' get events -n $NS -o json | jq -e 'any(.items[]; .reason == \"Deleted\" and .type == \"Normal\" and .involvedObject.name == \"ttl\" and (.message | contains(\"ttlSecondsAfterFinished 1\")))' >/dev/null"

# --- delete: the garbage collector removes what the job owns ----------------------------------------
kubectl delete tj e2e adopt -n $NS --wait=false >/dev/null
gone() {
    [ "$(kubectl get pods,secrets,services -n $NS -o json | jq '[.items[] | select(.metadata.ownerReferences[0].name as $o | $o == "e2e" or $o == "adopt")] | length')" = 0 ]
}
check "deleting the jobs garbage-collects their pods, Secrets and Services" wait_for 60 gone
sleep 1
check "no pods recreated for deleted jobs" bash -c "[ \"\$('$KUBECTL' get pods -n $NS -o json | jq '[.items[] | select(.metadata.labels[\"holmes.dev/job\"] as \$j | \$j == \"e2e\" or \$j == \"adopt\")] | length')\" = 0 ]"

# --- least privilege: the whole job done with no call refused --------------------------------------
if grep -qiE 'forbidden|\b403\b' "$W"/op-*.log; then
    fail "no API call of the operator was forbidden by the chart's RBAC" "$(grep -hiE 'forbidden|\b403\b' "$W"/op-*.log | head -5)"
else
    pass "no API call of the operator was forbidden by the chart's RBAC"
fi
if grep -l 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' "$W"/op-*.log >/dev/null 2>&1; then
    fail "operator logs free of sanitizer reports" "$(grep -h -m5 'Sanitizer\|runtime error' "$W"/op-*.log)"
else
    pass "operator logs free of sanitizer reports"
fi
