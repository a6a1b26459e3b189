# Secure by default, on a real kube-apiserver (tests/k8s/envtest.bash), the operator running as
# the chart's ServiceAccount with the chart's RBAC:
#   - TLS: the operator makes its CA and serving certificate into the Secret the chart names,
#     renews a broken one, gives the CA to the job's Secret and pods (HOLMES_COORDINATOR_CA);
#     workers train over wss://; a worker with a wrong token, or one that does not trust the
#     coordinator's CA, is refused with a reason and the job goes on to Succeeded;
#   - /metrics over HTTPS: no token 401, a token without the metrics-reader role 403, with it
#     200; answers cached; health probes open; /api/jobs shows the jobs of the namespaces the
#     caller may read, the page asks for a token;
#   - the job token appears in no log, Event, status, /api/jobs, page or metrics;
#   - Pod Security: the chart's operator pod and the operator's worker pods are admitted in
#     namespaces enforcing the restricted standard (one allowing privilege escalation is not: the
#     check works).
# Release pass only (time: about 30 s); the ASan pass runs the same code in test_http_auth
# (TokenReview/SAR and their cache, the HTTPS listener, the TLS keeper against tests/fakeapi) and
# test_coord_tls (the coordinator over TLS, renewal, wrong token, wrong CA).
source "$(dirname "$0")/lib.bash"
if [ "${HOLMES_VARIANT:-release}" != release ]; then
    echo "# k8s_secure: checked in the release pass"; exit 0
fi
source "$REPO/tests/k8s/envtest.bash"
k8s_require
PIDS=()
stop_all() { k8s_stop_all "${PIDS[@]}"; }
K8S_CRDS_BEFORE_KCM=("$REPO/crds/trainingjob.yaml")
k8s_start || exit 1
trap stop_all EXIT
W=$K8S_DIR/secure
mkdir -p "$W"
RELNS=holmes-system
NS=team
kubectl create namespace $RELNS >/dev/null
kubectl create namespace other >/dev/null
# the job namespace enforces the restricted Pod Security Standard: worker pods must pass it
kubectl create namespace $NS >/dev/null &&
    kubectl label namespace $NS pod-security.kubernetes.io/enforce=restricted >/dev/null &&
    kubectl wait --for condition=established crd/trainingjobs.holmes.dev --timeout=30s >/dev/null ||
    { fail "namespaces and CRD"; exit 1; }

# --- the chart (defaults): its ServiceAccount and RBAC, a token for it --------------------------
HELM=$REPO/tools/helm
[ -x "$HELM" ] || HELM=$(command -v helm || true)
[ -n "$HELM" ] || { fail "helm available" "no tools/helm: run 'make deps'"; exit 1; }
"$HELM" template h "$REPO/helm/holmes" -n $RELNS >"$W/chart.yaml" 2>"$W/chart.err" ||
    { fail "helm template" "$(cat "$W/chart.err")"; exit 1; }
/usr/bin/python3 - "$W/chart.yaml" "$W" <<'PYEOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
keep = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
yaml.safe_dump_all([d for d in docs if d["kind"] in keep], open(sys.argv[2] + "/rbac.yaml", "w"))
dep = [d for d in docs if d["kind"] == "Deployment"][0]
del dep["metadata"]["namespace"]
yaml.safe_dump(dep, open(sys.argv[2] + "/deployment.yaml", "w"))
tpl = dep["spec"]["template"]
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "operator-pod", "labels": tpl["metadata"]["labels"]},
       "spec": tpl["spec"]}
yaml.safe_dump(pod, open(sys.argv[2] + "/operator-pod.yaml", "w"))
args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
print("\n".join(a for a in args if a.startswith("--tls-secret=")), file=open(sys.argv[2] + "/tls-secret", "w"))
PYEOF
TLS_SECRET=$(sed -n 's/^--tls-secret=//p' "$W/tls-secret")
check "the chart names the TLS Secret (--tls-secret)" test -n "$TLS_SECRET"
check "the chart's ServiceAccount and RBAC applied" bash -c "'$KUBECTL' apply -n $RELNS -f '$W/rbac.yaml' >'$W/rbac.out' 2>&1"
SA=h-holmes-operator
TOKEN_SA=$(kubectl create token $SA -n $RELNS --duration 1h) || { fail "kubectl create token" "no token for $SA"; exit 1; }
k8s_kubeconfig "$W/operator.kubeconfig" --token "$TOKEN_SA"

# --- Pod Security: the operator's own pod in a restricted namespace ------------------------------
kubectl create namespace locked >/dev/null
kubectl label namespace locked pod-security.kubernetes.io/enforce=restricted >/dev/null
kubectl create serviceaccount $SA -n locked >/dev/null
check "the chart's operator pod is admitted where the restricted standard is enforced" \
    bash -c "'$KUBECTL' create -n locked -f '$W/operator-pod.yaml' >'$W/psa-ok' 2>&1"
kubectl create namespace warned >/dev/null
kubectl label namespace warned pod-security.kubernetes.io/warn=restricted >/dev/null
kubectl create serviceaccount $SA -n warned >/dev/null
kubectl apply -n warned -f "$W/deployment.yaml" >"$W/deploy.out" 2>"$W/deploy.err"
check "... and its Deployment draws no restricted-standard warning" bash -c "! grep -qi warning '$W/deploy.err' && grep -q created '$W/deploy.out'"
sed -e 's/name: operator-pod/name: bad-pod/' -e 's/allowPrivilegeEscalation: false/allowPrivilegeEscalation: true/' \
    "$W/operator-pod.yaml" >"$W/bad-pod.yaml"
if kubectl create -n locked -f "$W/bad-pod.yaml" >"$W/psa-bad" 2>&1; then
    fail "a pod allowing privilege escalation is refused there (the check can fail)" "admitted"
else
    check "a pod allowing privilege escalation is refused there (the check can fail)" grep -q 'violates PodSecurity "restricted' "$W/psa-bad"
fi

# --- the operator: TLS from its own Secret, HTTPS metrics behind TokenReview/SAR ------------------
read -r CPORT MPORT HPORT < <(free_ports 3)
"$OPERATOR" run --kubeconfig "$W/operator.kubeconfig" --lease-namespace $RELNS \
    --metrics-addr 127.0.0.1:$MPORT --metrics-secure --health-addr 127.0.0.1:$HPORT \
    --coordinator-addr 127.0.0.1:$CPORT --coordinator-url wss://127.0.0.1:$CPORT/ \
    --tls-secret "$TLS_SECRET" --tls-names IP:127.0.0.1,localhost --tls-check-interval 1 \
    --node-image holmes-node:test >"$W/op.log" 2>&1 &
OP_PID=$!
PIDS+=($OP_PID)
secret_json() { k8s_json secret "$TLS_SECRET" -n $RELNS; }
check "the operator made its CA and serving certificate into Secret $TLS_SECRET" wait_for 30 bash -c \
    "'$KUBECTL' get secret '$TLS_SECRET' -n $RELNS -o json | jq -e '.type == \"kubernetes.io/tls\" and (.data | has(\"ca.crt\") and has(\"ca.key\") and has(\"tls.crt\") and has(\"tls.key\"))' >/dev/null"
secret_json | jq -r '.data["ca.crt"]' | base64 -d >"$W/ca.crt"
secret_json | jq -r '.data["tls.crt"]' | base64 -d >"$W/tls.crt"
check "the serving certificate verifies against the CA, for 127.0.0.1" \
    bash -c "openssl verify -CAfile '$W/ca.crt' '$W/tls.crt' >/dev/null && openssl x509 -in '$W/tls.crt' -noout -ext subjectAltName | grep -q 'IP Address:127.0.0.1'"
check "the operator serves metrics" wait_for 30 bash -c "curl -s --cacert '$W/ca.crt' -o /dev/null https://127.0.0.1:$MPORT/metrics"

# callers: a reader bound to the chart's metrics-reader ClusterRole, someone else, a team viewer
kubectl create serviceaccount reader -n $RELNS >/dev/null
kubectl create serviceaccount nobody -n $RELNS >/dev/null
kubectl create serviceaccount viewer -n $RELNS >/dev/null
kubectl create clusterrolebinding sec-reader --clusterrole h-holmes-metrics-reader --serviceaccount $RELNS:reader >/dev/null
kubectl create role tj-viewer -n $NS --verb get,list --resource trainingjobs.holmes.dev >/dev/null
kubectl create rolebinding tj-viewer -n $NS --role tj-viewer --serviceaccount $RELNS:viewer >/dev/null
T_READER=$(kubectl create token reader -n $RELNS --duration 1h)
T_NOBODY=$(kubectl create token nobody -n $RELNS --duration 1h)
T_VIEWER=$(kubectl create token viewer -n $RELNS --duration 1h)
code() { # PATH [TOKEN]: the HTTP status of a GET on the metrics listener
    curl -s --cacert "$W/ca.crt" -o "$W/body" -w '%{http_code}' ${2:+-H "Authorization: Bearer $2"} "https://127.0.0.1:$MPORT$1"
}
check "/metrics without a token: 401" test "$(code /metrics)" = 401
check "/metrics with a token that is not the API server's: 401" test "$(code /metrics not-a-real-token)" = 401
check "/metrics with a token without the metrics-reader role: 403" test "$(code /metrics "$T_NOBODY")" = 403
check "... naming who may not get /metrics" grep -q "system:serviceaccount:$RELNS:nobody may not get /metrics" "$W/body"
check "/metrics with a token bound to h-holmes-metrics-reader: 200 and the metrics" \
    bash -c "[ \"\$(curl -s --cacert '$W/ca.crt' -o '$W/m1' -w '%{http_code}' -H 'Authorization: Bearer $T_READER' https://127.0.0.1:$MPORT/metrics)\" = 200 ] && grep -q '^holmes_leader 1' '$W/m1'"
reviews() { curl -s --cacert "$W/ca.crt" -H "Authorization: Bearer $T_READER" "https://127.0.0.1:$MPORT/metrics" | awk '/^holmes_auth_reviews_total/ {s += $2} END {print s + 0}'; }
r1=$(reviews); r2=$(reviews); r3=$(reviews)
check "answers cached: repeated scrapes send no more reviews ($r1, $r2, $r3)" test "$r1" -ge 2 -a "$r2" = "$r1" -a "$r3" = "$r1"
check "plain HTTP on the metrics port gets nothing" bash -c "! curl -sf -m 5 http://127.0.0.1:$MPORT/metrics >/dev/null"
check "health probes stay open (no token)" bash -c "curl -sf http://127.0.0.1:$HPORT/healthz | grep -qx ok"

# --- a job over wss:// in the restricted namespace; a wrong token and a wrong CA refused ---------
cat >"$W/job.yaml" <<YAML
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: sec, namespace: $NS}
spec:
  workers: 2
  gpusPerWorker: 0
  model: {layers: 2, hidden: 64, heads: 4, vocab: 256, seqLen: 64}
  parallelism: {pipeline: 2, data: 1, microBatches: 2, microBatchSize: 2}
  training: {steps: 30, checkpoint: {path: /ckpt/sec, everySteps: 10}}
  gangTimeoutSeconds: 120
  restartPolicy: {maxRestarts: 0}
YAML
sed -e "s/name: sec, namespace: $NS/name: hidden, namespace: other/" "$W/job.yaml" >"$W/hidden.yaml"
kubectl apply -f "$W/job.yaml" >/dev/null && kubectl apply -f "$W/hidden.yaml" >/dev/null
tj() { k8s_json tj sec -n $NS; }
tj_is() { jq -e "$1" <<<"$(tj)" >/dev/null 2>&1; }
pods_are() { [ "$(k8s_json pods -n $NS -l holmes.dev/job=sec | jq '.items | length')" = "$1" ]; }
check "worker pods admitted in the restricted namespace" wait_for 30 pods_are 2
P=$(k8s_json pod sec-worker-0 -n $NS)
check "worker pod: non-root, seccomp RuntimeDefault, no escalation, ALL dropped (no IPC_LOCK without RDMA), read-only root" jq_true "$P" \
    '.spec.securityContext.runAsNonRoot == true and .spec.securityContext.seccompProfile.type == "RuntimeDefault" and
     (.spec.containers[0].securityContext | .allowPrivilegeEscalation == false and .readOnlyRootFilesystem == true and
      .capabilities.drop == ["ALL"] and (.capabilities.add == null))'
check "worker pod: writable /tmp, /dev/shm (memory) and the checkpoint path" jq_true "$P" \
    '([.spec.containers[0].volumeMounts[].mountPath] | contains(["/tmp", "/dev/shm", "/ckpt/sec"])) and
     any(.spec.volumes[]; .name == "holmes-shm" and .emptyDir.medium == "Memory")'
check "worker pod: the coordinator's CA from the job's Secret, HOLMES_COORDINATOR_CA" jq_true "$P" \
    'any(.spec.volumes[]; .secret.secretName == "sec-token" and .secret.items == [{"key": "ca.crt", "path": "ca.crt"}]) and
     any(.spec.containers[0].env[]; .name == "HOLMES_COORDINATOR_CA" and .value == "/var/run/holmes/coordinator/ca.crt") and
     any(.spec.containers[0].env[]; .name == "HOLMES_COORDINATOR" and (.value | startswith("wss://")))'
check "the job's Secret holds the coordinator's CA" bash -c \
    "[ \"\$('$KUBECTL' get secret sec-token -n $NS -o jsonpath='{.data.ca\\.crt}' | base64 -d)\" = \"\$(cat '$W/ca.crt')\" ]"
SEC_RV=$(k8s_json secret sec-token -n $NS | jq -r '.metadata.resourceVersion // empty')
TOKEN=$(k8s_json secret sec-token -n $NS | jq -r '.data.token // empty' | base64 -d)
BADTOKEN=bad0$(printf '%s' "$TOKEN" | cut -c5- | rev)
for i in 0 1; do
    k8s_pod_status $NS sec-worker-$i '{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}'
done
worker() { # INDEX TOKEN CA LOG [ARGS...]: holmes-node worker with the pod's env (ONCE=1: not
           # supervised, one try)
    local i=$1 tok=$2 ca=$3 log=$4 envs
    shift 4
    envs=$(k8s_json pod "sec-worker-$i" -n $NS | jq -r '.spec.containers[0].env[] | select(.value != null) | "\(.name)=\(.value)"')
    # shellcheck disable=SC2086
    env -i PATH="$PATH" HOSTNAME="sec-worker-$i" NODE_NAME="node-$i" ${ONCE:+HOLMES_SUPERVISED=1} $envs HOLMES_TOKEN="$tok" \
        HOLMES_COORDINATOR_CA="$ca" timeout -k 5 120 "$NODE" worker --emulate-nic ethernet:eth:10 \
        --simulate 30 --step-ms 30 --progress-ms 100 "$@" >"$log" 2>&1
}
ONCE=1 worker 0 "$BADTOKEN" "$W/ca.crt" "$W/w-badtoken.log" --connect-timeout 5
check "a worker with a wrong token is refused, saying so" grep -q 'the coordinator refused: hello: unknown job or wrong token' "$W/w-badtoken.log"
ONCE=1 worker 1 "$TOKEN" "$K8S_DIR/ca.crt" "$W/w-badca.log" --connect-timeout 2
check "a worker that does not trust the coordinator's CA does not connect, saying why" \
    grep -q "the coordinator's certificate does not verify against $K8S_DIR/ca.crt" "$W/w-badca.log"
check "... the job is not disturbed (no worker failed, still gathering)" tj_is \
    '.status.phase != "Failed" and ((.status.restarts // 0) == 0)'
check "a refused connection is an Event naming the pod, not the token" wait_for 20 bash -c \
    "'$KUBECTL' get events -n $NS -o json | jq -e 'any(.items[]; .message | contains(\"wrong or missing token\"))' >/dev/null"

# the TLS check renews a broken serving certificate (same CA); new connections get it
kubectl patch secret "$TLS_SECRET" -n $RELNS --type merge -p "{\"data\":{\"tls.crt\":\"$(printf 'not a certificate' | base64)\"}}" >/dev/null 2>&1
check "a broken serving certificate is renewed by the operator" wait_for 20 bash -c \
    "'$KUBECTL' get secret '$TLS_SECRET' -n $RELNS -o jsonpath='{.data.tls\\.crt}' | base64 -d | openssl x509 -noout 2>/dev/null"
check "... with the same CA" bash -c "[ \"\$('$KUBECTL' get secret '$TLS_SECRET' -n $RELNS -o jsonpath='{.data.ca\\.crt}' | base64 -d)\" = \"\$(cat '$W/ca.crt')\" ]"
check "... and logged" wait_for 10 grep -q "TLS: Secret $RELNS/$TLS_SECRET written: tls.crt: missing or not a PEM" "$W/op.log"
kubectl get secret "$TLS_SECRET" -n $RELNS -o jsonpath='{.data.tls\.crt}' | base64 -d >"$W/tls2.crt"
served_is() { [ "$(openssl s_client -connect 127.0.0.1:$CPORT -CAfile "$W/ca.crt" </dev/null 2>/dev/null | openssl x509 -noout -fingerprint)" = "$1" ]; }
check "... the coordinator serves the renewed certificate" wait_for 10 served_is "$(openssl x509 -in "$W/tls2.crt" -noout -fingerprint)"

WP=()
for i in 0 1; do worker $i "$TOKEN" "$W/ca.crt" "$W/w-$i.log" & WP+=($!); done
ok=1
for p in "${WP[@]}"; do wait "$p" || ok=0; done
[ $ok = 1 ] && pass "the workers trained over wss:// with the CA (exit 0)" || fail "the workers trained over wss://" "$(tail -n 3 "$W"/w-[01].log)"
for i in 0 1; do
    k8s_pod_status $NS sec-worker-$i '{"phase":"Succeeded","conditions":[{"type":"Ready","status":"False"}]}'
done
check "job Succeeded after the refused handshakes" wait_for 30 tj_is '.status.phase == "Succeeded" and .status.progress.step == 30'

check "the job's Secret was not written again by the reconciles since (its CA unchanged)" test \
    "$(k8s_json secret sec-token -n $NS | jq -r '.metadata.resourceVersion // empty')" = "$SEC_RV"
# --- the job page: per-namespace visibility --------------------------------------------------------
check "/api/jobs without a token: 401" test "$(code /api/jobs)" = 401
c=$(code /jobs)
check "/jobs without a token: 401 with the page, which asks for a token ($c)" \
    bash -c "[ $c = 401 ] && grep -q 'bearer token' '$W/body'"
code /api/jobs "$T_VIEWER" >"$W/viewer.code"; cp "$W/body" "$W/viewer.json"
check "/api/jobs for a viewer of $NS: its job only, not the other namespace's" bash -c \
    "[ \"\$(cat '$W/viewer.code')\" = 200 ] && jq -e '[.jobs[] | .namespace + \"/\" + .name] == [\"$NS/sec\"]' '$W/viewer.json' >/dev/null"
check "/api/jobs for a caller who may read no TrainingJobs: 403" test "$(code /api/jobs "$T_NOBODY")" = 403
kubectl create clusterrolebinding sec-all --clusterrole tj-all --serviceaccount $RELNS:reader >/dev/null &&
    kubectl create clusterrole tj-all --verb get --resource trainingjobs.holmes.dev >/dev/null
code /api/jobs "$T_READER" >/dev/null
check "/api/jobs for a caller who may get TrainingJobs everywhere: both namespaces' jobs" \
    jq_true "$(cat "$W/body")" '[.jobs[] | .namespace + "/" + .name] | sort == ["other/hidden", "team/sec"]'
code /jobs "$T_VIEWER" >/dev/null; cp "$W/body" "$W/page.html"
code /metrics "$T_READER" >/dev/null; cp "$W/body" "$W/metrics.txt"

# --- the job token is nowhere it should not be -------------------------------------------------------
kubectl get events -A -o json >"$W/events.json"
kubectl get tj -A -o json >"$W/status.json"
kubectl get pods -A -o json >"$W/pods.json"
leaks=""
for f in "$W"/op.log "$W"/w-*.log "$W/events.json" "$W/status.json" "$W/pods.json" "$W/viewer.json" "$W/page.html" "$W/metrics.txt"; do
    for t in "$TOKEN" "$BADTOKEN" "$T_READER" "$T_VIEWER" "$T_NOBODY"; do
        grep -qF -- "$t" "$f" && leaks="$leaks $(basename "$f")"
    done
done
[ -z "$leaks" ] && pass "no token in the logs, Events, status, pods, /api/jobs, the page or the metrics" ||
    fail "no token in the logs, Events, status, pods, /api/jobs, the page or the metrics" "found in:$leaks"
k8s_json secret sec-token -n $NS | jq -r .data.token | base64 -d >"$W/secret-token"
check "... (the grep finds the token where it is: the Secret)" grep -qF -- "$TOKEN" "$W/secret-token"

if grep -qiE 'forbidden|\b403\b' "$W/op.log"; then
    fail "no API call of the operator was forbidden by the chart's RBAC" "$(grep -hiE 'forbidden|\b403\b' "$W/op.log" | head -5)"
else
    pass "no API call of the operator was forbidden by the chart's RBAC"
fi
if grep -q 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' "$W"/op.log "$W"/w-*.log; then
    fail "logs free of sanitizer reports" "$(grep -h -m5 'Sanitizer\|runtime error' "$W"/op.log "$W"/w-*.log)"
else
    pass "logs free of sanitizer reports"
fi
