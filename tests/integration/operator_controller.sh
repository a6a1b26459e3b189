# The TrainingJob controller against the fake API server: objects, status, invalid specs,
# immutability, suspend, failed pods replaced, gang timeout, cascade, metrics,
# ttlSecondsAfterFinished, activeDeadlineSeconds.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/fakeapi.bash"
start_fakeapi
MPORT=$(free_port); HPORT=$(free_port)
start_operator op --metrics-addr 127.0.0.1:$MPORT --health-addr 127.0.0.1:$HPORT --node-image holmes-node:test
NS=team
job() { # name workers [extra spec JSON]
    echo "{\"apiVersion\":\"holmes.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"$1\"},
      \"spec\":{\"workers\":$2,\"image\":\"reg/holmes-node:1\",\"gpusPerWorker\":1,
      \"model\":{\"preset\":\"gpt2-124m\"},\"training\":{\"steps\":10},
      \"restartPolicy\":{\"maxRestarts\":1,\"backoffSeconds\":1},\"gangTimeoutSeconds\":600,
      \"template\":{\"metadata\":{\"labels\":{\"team\":\"nlp\"}},\"spec\":{\"nodeSelector\":{\"gpu\":\"a100\"},
      \"containers\":[{\"name\":\"worker\",\"env\":[{\"name\":\"FOO\",\"value\":\"bar\"},{\"name\":\"HOLMES_WORKER_INDEX\",\"value\":\"x\"}],
      \"resources\":{\"limits\":{\"rdma/hca\":1}}}]}}${3:+,$3}}}"
}
check "readyz answers once synced" wait_for 20 curl -sf "http://127.0.0.1:$HPORT/readyz"
check "healthz" curl -sfo /dev/null "http://127.0.0.1:$HPORT/healthz"

api POST "$JOBS/$NS/trainingjobs" "$(job a 3)" >/dev/null
UID_A=$(job_get $NS a | jq -r .metadata.uid)
check "apply -> 3 worker pods" wait_for 20 pods_are $NS a 3
PODS=$(pods_of $NS a)
check "pod names <job>-worker-<i>" jq_true "$PODS" '[.items[].metadata.name] | sort == ["a-worker-0","a-worker-1","a-worker-2"]'
check "pods owned by the job (controller: true)" jq_true "$PODS" "all(.items[]; .metadata.ownerReferences == [{\"apiVersion\":\"holmes.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"name\":\"a\",\"uid\":\"$UID_A\",\"controller\":true,\"blockOwnerDeletion\":true}])"
check "pod labels: job, worker index, template labels" jq_true "$PODS" 'all(.items[]; .metadata.labels["holmes.dev/job"] == "a" and .metadata.labels.team == "nlp" and (.metadata.labels["holmes.dev/worker-index"] as $i | .metadata.name | endswith("-" + $i))) '
P1=$(jq '.items[] | select(.metadata.name == "a-worker-1")' <<<"$PODS")
C='.spec.containers[0]'
check "container: image, command holmes-node worker" jq_true "$P1" "$C.image == \"reg/holmes-node:1\" and $C.command == [\"holmes-node\",\"worker\"]"
check "env: job name/namespace/uid, index, coordinator" jq_true "$P1" "[$C.env[] | {(.name): .value}] | add | .HOLMES_JOB_NAME == \"a\" and .HOLMES_JOB_NAMESPACE == \"$NS\" and .HOLMES_JOB_UID == \"$UID_A\" and .HOLMES_WORKER_INDEX == \"1\" and .HOLMES_COORDINATOR == \"ws://coord.test:8443\" and .FOO == \"bar\""
check "env: HOLMES_TOKEN from the job's Secret" jq_true "$P1" "$C.env[] | select(.name == \"HOLMES_TOKEN\") | .valueFrom.secretKeyRef == {\"name\":\"a-token\",\"key\":\"token\"}"
check "env: template entry overridden, not duplicated" jq_true "$P1" "[$C.env[] | select(.name == \"HOLMES_WORKER_INDEX\")] | length == 1"
check "template kept: nodeSelector, resources + GPUs, restartPolicy Never" jq_true "$P1" ".spec.nodeSelector.gpu == \"a100\" and $C.resources.limits[\"rdma/hca\"] == 1 and $C.resources.limits[\"nvidia.com/gpu\"] == 1 and .spec.restartPolicy == \"Never\" and .spec.subdomain == \"a\""
SEC=$(api GET /api/v1/namespaces/$NS/secrets/a-token)
check "Secret <job>-token with a token, owned by the job" jq_true "$SEC" ".data.token | length > 40 and (\"$UID_A\" as \$u | true)"
check "Secret owner reference" jq_true "$SEC" ".metadata.ownerReferences[0].uid == \"$UID_A\" and .metadata.ownerReferences[0].controller"
SVC=$(api GET /api/v1/namespaces/$NS/services/a)
check "headless Service selecting the job's pods" jq_true "$SVC" ".spec.clusterIP == \"None\" and .spec.selector[\"holmes.dev/job\"] == \"a\" and .metadata.ownerReferences[0].uid == \"$UID_A\""
check "status: Pending, workers 3/0, Valid, observedGeneration" wait_for 15 job_is $NS a '.status.phase == "Pending" and .status.workers == {"total":3,"ready":0,"summary":"0/3"} and .status.observedGeneration == 1 and (.status.conditions[] | select(.type == "Valid") | .status == "True")'

fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=a\",\"phase\":\"Running\",\"ready\":true}" >/dev/null
check "all pods ready -> Discovering, workers ready 3" wait_for 15 job_is $NS a '.status.phase == "Discovering" and .status.workers.ready == 3 and (.status.conditions[] | select(.type == "PodsReady") | .status == "True")'
W0=$(stats | jq '.["patch holmes.dev trainingjobs/status"]')
sleep 1
W1=$(stats | jq '.["patch holmes.dev trainingjobs/status"]')
check "status written only when something changed" test "$W0" = "$W1"

# Coordinator-owned phase survives reconciles.
api PATCH "$JOBS/$NS/trainingjobs/a/status" '{"status":{"phase":"Running","conditions":null}}' >/dev/null
api PATCH "$JOBS/$NS/trainingjobs/a/status" '{"status":{"phase":"Running"}}' >/dev/null
sleep 0.5
check "phase Running set by the coordinator is kept" job_is $NS a '.status.phase == "Running"'

# Immutable field change while running: refused, nothing disturbed.
UIDS=$(pods_of $NS a | jq -c '[.items[].metadata.uid] | sort')
api PATCH "$JOBS/$NS/trainingjobs/a" '{"spec":{"workers":5}}' >/dev/null
check "immutable change refused in status, naming the field" wait_for 15 job_is $NS a '.status.conditions[] | select(.type == "Valid") | .status == "False" and .reason == "ImmutableFieldChanged" and (.message | contains("spec.workers"))'
check "immutable change: pods untouched" test "$(pods_of $NS a | jq -c '[.items[].metadata.uid] | sort')" = "$UIDS"
api PATCH "$JOBS/$NS/trainingjobs/a" '{"spec":{"workers":3}}' >/dev/null
check "reverting makes the spec valid again" wait_for 15 job_is $NS a '.status.conditions[] | select(.type == "Valid") | .status == "True"'

# Suspend and resume.
api PATCH "$JOBS/$NS/trainingjobs/a" '{"spec":{"suspend":true}}' >/dev/null
check "suspend -> pods deleted, phase Suspended" wait_for 15 pods_are $NS a 0
check "suspended status kept" wait_for 15 job_is $NS a '.status.phase == "Suspended" and .status.workers.total == 3 and .status.startTime != null'
api PATCH "$JOBS/$NS/trainingjobs/a" '{"spec":{"suspend":false}}' >/dev/null
check "resume -> pods recreated" wait_for 15 pods_are $NS a 3

# A failed pod: replaced alone (the gang restarts in place, inside the other pods: the
# coordinator's business, which counts restarts); backoffSeconds after its creation at the earliest.
OLD=$(pods_of $NS a | jq -c '[.items[] | select(.metadata.name != "a-worker-2") | .metadata.uid] | sort')
OLD2=$(pods_of $NS a | jq -r '.items[] | select(.metadata.name == "a-worker-2") | .metadata.uid')
fake kubelet "{\"namespace\":\"$NS\",\"name\":\"a-worker-2\",\"phase\":\"Failed\",\"reason\":\"Evicted\",\"message\":\"node low on memory\"}" >/dev/null
replaced() { pods_of $NS a | jq -e --arg old "$OLD2" '(.items | length) == 3 and any(.items[]; .metadata.name == "a-worker-2" and .metadata.uid != $old)' >/dev/null; }
check "evicted pod -> that pod alone is replaced" wait_for 20 replaced
check "the other pods are kept (same UIDs)" test "$(pods_of $NS a | jq -c '[.items[] | select(.metadata.name != "a-worker-2") | .metadata.uid] | sort')" = "$OLD"
check "the controller charges no restart (status.restarts is the coordinator's)" job_is $NS a '(.status.restarts // 0) == 0'
EVS=$(api GET /api/v1/namespaces/$NS/events)
check "PodReplaced Warning Event naming the pod and the reason" jq_true "$EVS" 'any(.items[]; .reason == "PodReplaced" and .type == "Warning" and .involvedObject.name == "a" and (.message | contains("a-worker-2")) and (.message | contains("Evicted: node low on memory")))'
# Failed (written by the coordinator when restarts are spent) is final: nothing is replaced.
api PATCH "$JOBS/$NS/trainingjobs/a/status" '{"status":{"phase":"Failed"}}' >/dev/null
sleep 0.5
OLD0=$(pods_of $NS a | jq -r '.items[] | select(.metadata.name == "a-worker-0") | .metadata.uid')
fake kubelet "{\"namespace\":\"$NS\",\"name\":\"a-worker-0\",\"phase\":\"Failed\",\"reason\":\"Error\",\"message\":\"exit code 1\"}" >/dev/null
sleep 2.5
check "a failed job's failed pod is kept (for its logs), not replaced" test "$(pods_of $NS a | jq -r '.items[] | select(.metadata.name == "a-worker-0") | .metadata.uid')" = "$OLD0"
check "phase Failed stays" job_is $NS a '.status.phase == "Failed"'

# Invalid spec: Valid=False with every error, a Warning Event, no pods.
api POST "$JOBS/$NS/trainingjobs" '{"metadata":{"name":"bad"},"spec":{"workers":0,"image":"","restartPolicy":{"maxRestarts":-1}}}' >/dev/null
check "invalid job -> Valid=False listing every field error" wait_for 15 job_is $NS bad '.status.conditions[] | select(.type == "Valid") | .status == "False" and .reason == "InvalidSpec" and (.message | contains("spec.workers: 0 is below the minimum 1")) and (.message | contains("spec.image")) and (.message | contains("spec.model: required")) and (.message | contains("spec.restartPolicy.maxRestarts"))'
check "invalid job -> Warning Event" wait_for 15 bash -c "curl -s -H 'Authorization: Bearer $FAKEAPI_TOKEN' '$API/api/v1/namespaces/$NS/events' | jq -e 'any(.items[]; .reason == \"InvalidSpec\" and .type == \"Warning\" and .involvedObject.name == \"bad\")'"
check "invalid job -> no pods" test "$(npods $NS bad)" = 0
# Several GPUs per worker: runnable, every pod asks for them.
api POST "$JOBS/$NS/trainingjobs" "$(job multi 2 | sed 's/"gpusPerWorker":1,/"gpusPerWorker":4,/')" >/dev/null
check "several GPUs per worker -> Valid" wait_for 15 job_is $NS multi '.status.conditions[] | select(.type == "Valid") | .status == "True"'
has_npods() { [ "$(npods "$1" "$2")" = "$3" ]; }
check "several GPUs per worker -> 2 pods" wait_for 15 has_npods $NS multi 2
check "... each asking for 4 GPUs" jq_true "$(pods_of $NS multi)" 'all(.items[]; .spec.containers[0].resources.limits["nvidia.com/gpu"] == 4)'

# Accepted by the API but not runnable yet (tj_spec_runnable): refused at admission with the
# coordinator's reason, no pods.
api POST "$JOBS/$NS/trainingjobs" "$(job half 2 | sed 's/"training":{"steps":10}/"training":{"steps":10,"precision":"bf16"}/; s/"gpusPerWorker":1,/"gpusPerWorker":1,"emulation":{"gpus":true,"nics":[{"class":"ethernet","fabric":"eth-a","gbps":10,"count":2}]},/')" >/dev/null
check "bf16 on emulated GPUs -> Valid=False with the coordinator's reason" wait_for 15 job_is $NS half '.status.conditions[] | select(.type == "Valid") | .status == "False" and .reason == "InvalidSpec" and (.message | contains("bf16 needs real GPUs"))'
check "bf16 on emulated GPUs -> no pods" test "$(npods $NS half)" = 0

# Gang timeout: unschedulable pods past gangTimeoutSeconds.
api POST "$JOBS/$NS/trainingjobs" "$(job g 2 '"gangTimeoutSeconds":1')" >/dev/null
wait_for 15 pods_are $NS g 2
fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=g\",\"unschedulable\":\"0/4 nodes are available: 4 Insufficient nvidia.com/gpu.\"}" >/dev/null
check "unschedulable past the gang timeout -> condition naming pods and reason" wait_for 15 job_is $NS g '.status.conditions[] | select(.type == "PodsScheduled") | .reason == "GangTimeout" and (.message | contains("g-worker-0")) and (.message | contains("Insufficient nvidia.com/gpu"))'
check "gang timeout Warning Event" wait_for 10 bash -c "curl -s -H 'Authorization: Bearer $FAKEAPI_TOKEN' '$API/api/v1/namespaces/$NS/events' | jq -e 'any(.items[]; .reason == \"GangTimeout\" and .involvedObject.name == \"g\")'"

# Metrics.
M=$(curl -s "http://127.0.0.1:$MPORT/metrics")
check "metrics: jobs by phase" grep -q 'holmes_jobs{phase="Failed"} 1' <<<"$M"
check "metrics: reconcile latency histogram" grep -q 'holmes_reconcile_duration_seconds_bucket{le="+Inf"}' <<<"$M"
check "metrics: pod replacements" grep -q 'holmes_pod_replacements_total 1' <<<"$M"

# Delete -> cascade.
api DELETE "$JOBS/$NS/trainingjobs/g" >/dev/null
check "delete job -> pods, Secret, Service gone" wait_for 15 bash -c "[ \"\$(curl -s -H 'Authorization: Bearer $FAKEAPI_TOKEN' '$API/api/v1/namespaces/$NS/pods?labelSelector=holmes.dev%2Fjob%3Dg' | jq '.items|length')\" = 0 ] && curl -s -H 'Authorization: Bearer $FAKEAPI_TOKEN' '$API/api/v1/namespaces/$NS/secrets/g-token' | jq -e '.code == 404' && curl -s -H 'Authorization: Bearer $FAKEAPI_TOKEN' '$API/api/v1/namespaces/$NS/services/g' | jq -e '.code == 404'"
sleep 0.5
check "no pods recreated for a deleted job" test "$(npods $NS g)" = 0

# spec.ttlSecondsAfterFinished: a finished job is deleted that long after its completionTime,
# its pods, Secret and Service with it; a finished job without it is kept. The time is checked
# from the API's own timestamps (the Event's against completionTime), not by the test's clock.
api POST "$JOBS/$NS/trainingjobs" "$(job t 2 '"ttlSecondsAfterFinished":2')" >/dev/null
api POST "$JOBS/$NS/trainingjobs" "$(job k 2)" >/dev/null
wait_for 15 pods_are $NS t 2
wait_for 15 pods_are $NS k 2
for j in t k; do
    fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=$j\",\"phase\":\"Succeeded\",\"ready\":false}" >/dev/null
done
check "ttl job: Succeeded, completionTime set" wait_for 15 job_is $NS t '.status.phase == "Succeeded" and .status.completionTime != null'
DONE_AT=$(job_get $NS t | jq -r .status.completionTime)
gone() { api GET "$1" | jq -e '.code == 404' >/dev/null; } # gone PATH: the API answers 404
ttl_job_gone() {
    gone $JOBS/$NS/trainingjobs/t && gone /api/v1/namespaces/$NS/secrets/t-token &&
        gone /api/v1/namespaces/$NS/services/t && [ "$(npods $NS t)" = 0 ]
}
check "ttl job: deleted, its pods, Secret and Service with it" wait_for 20 ttl_job_gone
EV=$(api GET /api/v1/namespaces/$NS/events | jq -c '[.items[] | select(.reason == "Deleted" and .involvedObject.name == "t")]')
check "ttl job: one Normal Event Deleted naming the ttl" jq_true "$EV" 'length == 1 and .[0].type == "Normal" and (.[0].message | contains("spec.ttlSecondsAfterFinished 2"))'
check "ttl job: deleted no sooner than completionTime + 2 s" jq_true "$EV" "(.[0].firstTimestamp | fromdateiso8601) - (\"$DONE_AT\" | fromdateiso8601) >= 2"
check "job without ttlSecondsAfterFinished: kept after finishing" job_is $NS k '.status.phase == "Succeeded"'

# spec.activeDeadlineSeconds: a job still running that long after status.startTime fails
# (DeadlineExceeded) and its pods are deleted; again checked by the API's timestamps.
api POST "$JOBS/$NS/trainingjobs" "$(job d 2 '"activeDeadlineSeconds":2')" >/dev/null
wait_for 15 pods_are $NS d 2
fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=d\",\"phase\":\"Running\",\"ready\":true}" >/dev/null
check "deadline: the job Failed, DeadlineExceeded naming the field" wait_for 20 job_is $NS d '.status.phase == "Failed" and (.status.conditions[] | select(.type == "Failed") | .status == "True" and .reason == "DeadlineExceeded" and (.message | contains("spec.activeDeadlineSeconds 2")))'
check "deadline: its pods deleted" wait_for 15 pods_are $NS d 0
check "deadline: failed no sooner than startTime + 2 s" job_is $NS d '(.status.completionTime | fromdateiso8601) - (.status.startTime | fromdateiso8601) >= 2'
check "deadline: a Warning Event DeadlineExceeded" wait_for 10 bash -c "curl -s -H 'Authorization: Bearer $FAKEAPI_TOKEN' '$API/api/v1/namespaces/$NS/events' | jq -e 'any(.items[]; .reason == \"DeadlineExceeded\" and .type == \"Warning\" and .involvedObject.name == \"d\")' >/dev/null"
sleep 1
check "deadline: no pods recreated for the failed job" pods_are $NS d 0
# A pod that cannot be deleted at first (the API answers 500): the job is not Failed (final)
# before its pods are gone.
api POST "$JOBS/$NS/trainingjobs" "$(job d2 2 '"activeDeadlineSeconds":2')" >/dev/null
wait_for 15 pods_are $NS d2 2
fake faults '{"status":500,"count":3,"match":"pods/d2-worker"}' >/dev/null
d2_failed_and_gone() { job_is $NS d2 '.status.phase == "Failed"' && pods_are $NS d2 0; }
check "deadline, deletion refused at first: Failed, and its pods deleted" wait_for 30 d2_failed_and_gone
check "deadline: the refused deletions were retried (3 faults served)" test "$(stats | jq .faults)" -ge 3
fake faults '{}' >/dev/null

kill -TERM "$OP_PID"; wait "$OP_PID"; rc=$?
check "SIGTERM -> clean exit 0" test "$rc" = 0
logs_clean
