# End to end with the fake API server: apply a TrainingJob -> the operator creates pods -> this
# script plays kubelet (one `holmes-node worker` per pod with the pod's env, NICs from sysfs
# fixtures: two InfiniBand and two RoCE workers) -> pods labelled -> plan with stages inside
# fabrics -> simulated training steps -> status.progress -> Succeeded. A worker with a wrong
# token and one for a pod not in the job are refused while the job carries on.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/fakeapi.bash"
FIX=$REPO/tests/fixtures/sysfs
start_fakeapi
CPORT=$(free_port)
start_operator op --coordinator-addr 127.0.0.1:$CPORT --coordinator-url ws://127.0.0.1:$CPORT/ --node-image holmes-node:test
NS=team
JOB='{"apiVersion":"holmes.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"e2e"},
 "spec":{"workers":4,"gpusPerWorker":0,"model":{"layers":4,"hidden":64,"heads":4,"vocab":256,"seqLen":64},
 "parallelism":{"pipeline":2,"data":2,"microBatches":2,"microBatchSize":2},
 "training":{"steps":40},"gangTimeoutSeconds":60,"restartPolicy":{"maxRestarts":1,"backoffSeconds":0}}}'
api POST "$JOBS/$NS/trainingjobs" "$JOB" >/dev/null
check "apply -> 4 worker pods" wait_for 20 pods_are $NS e2e 4
fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=e2e\",\"phase\":\"Running\",\"ready\":true}" >/dev/null
TOKEN=$(api GET /api/v1/namespaces/$NS/secrets/e2e-token | jq -r .data.token | base64 -d)

# kubelet: run worker i of JOB with its pod's env (+ the fixture for its NICs), simulating
# STEPS steps of STEP_MS each; its log is $FAKEAPI_DIR/LOG-i.log.
run_job_worker() { # job steps step-ms log index sysfs-fixture [extra env assignments...]
    local job=$1 steps=$2 ms=$3 log=$4 i=$5 fx=$6; shift 6
    local pod; pod=$(api GET /api/v1/namespaces/$NS/pods/$job-worker-$i)
    local envs; envs=$(jq -r '.spec.containers[0].env[] | select(.value != null) | "\(.name)=\(.value)"' <<<"$pod")
    env -i PATH="$PATH" HOSTNAME=$job-worker-$i HOLMES_TOKEN="$TOKEN" NODE_NAME=node-$i $envs "$@" \
        timeout -k 5 180 "$NODE" worker --sysfs "$FIX/$fx/sys" --simulate "$steps" --step-ms "$ms" --progress-ms 100 \
        >"$FAKEAPI_DIR/$log-$i.log" 2>&1
}
run_worker() { run_job_worker e2e 40 50 worker "$@"; } # index sysfs-fixture [extra env...]
WPIDS=()
# The InfiniBand workers declare their compute rate (sent in hello); the RoCE ones send none.
for i in 0 1; do run_worker $i cx6-hdr-ib HOLMES_DECLARED_TFLOPS=0.5 & WPIDS+=($!); done
for i in 2 3; do run_worker $i cx5-roce-100g & WPIDS+=($!); done

pod_labels() { api GET /api/v1/namespaces/$NS/pods/e2e-worker-$1 | jq -c .metadata.labels; }
labels_are() { jq_true "$(pod_labels "$1")" "$2"; } # labels_are INDEX FILTER
check "pods labelled with their NIC" wait_for 20 labels_are 0 '.["holmes.dev/nic-class"] == "infiniband" and .["holmes.dev/nic-gbps"] == "200"'
check "status.plan: the declared TFLOPS reached the planner (ib 0.5, roce the 0.05 default)" wait_for 20 job_is $NS e2e '([.status.plan.stages[] | select(.fabric | startswith("ib")) | .tflops] == [0.5]) and ([.status.plan.stages[] | select(.fabric | startswith("roce")) | .tflops] == [0.05])'
# The fabric label is the one the NIC labeller puts on Nodes: class prefix, 16 hex digits of SHA-256.
ROCE_LABEL=roce-$(printf %s 'roce-10.1.0.0/16' | sha256sum | cut -c1-16)
check "RoCE pod labelled, fabric label as on Nodes" wait_for 20 labels_are 3 ".[\"holmes.dev/nic-class\"] == \"roce\" and .[\"holmes.dev/fabric\"] == \"$ROCE_LABEL\""
check "status.plan: two stages, each inside one fabric" wait_for 20 job_is $NS e2e '.status.plan.pipeline == 2 and ([.status.plan.stages[].fabric] | sort) == ["ib-fe80000000000000-sm1","roce-10.1.0.0/16"]'
J=$(job_get $NS e2e)
check "status.plan: IB workers share a stage" jq_true "$J" '.status.plan.stages[] | select(.fabric | startswith("ib")) | (.workers | sort) == ["e2e-worker-0","e2e-worker-1"]'
check "status.nicGroups" jq_true "$J" '(.status.nicGroups | length) == 2 and all(.status.nicGroups[]; .workers == 2)'
check "pods labelled with stage and dp-rank" wait_for 5 labels_are 1 '.["holmes.dev/stage"] != null and .["holmes.dev/dp-rank"] != null'

# Refusals while the job runs. The wrong token runs unsupervised (HOLMES_SUPERVISED=1): a
# refusal for an unknown job or token is worth retrying (caches catching up), so a supervisor
# would keep trying for a while; what is tested here is the coordinator's answer.
pod0=$(api GET /api/v1/namespaces/$NS/pods/e2e-worker-0)
env -i PATH="$PATH" HOSTNAME=e2e-worker-0 HOLMES_TOKEN=not-the-token HOLMES_SUPERVISED=1 \
    $(jq -r '.spec.containers[0].env[] | select(.value != null) | "\(.name)=\(.value)"' <<<"$pod0") \
    "$NODE" worker --emulate-nic ethernet:x:1 --simulate 1 --connect-timeout 5 >"$FAKEAPI_DIR/bad1.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "unknown job or wrong token" "$FAKEAPI_DIR/bad1.log" && pass "wrong token refused" \
    || fail "wrong token refused" "rc $rc: $(cat "$FAKEAPI_DIR/bad1.log")"
env -i PATH="$PATH" HOSTNAME=intruder HOLMES_TOKEN="$TOKEN" HOLMES_JOB_NAME=e2e HOLMES_JOB_NAMESPACE=$NS \
    HOLMES_WORKER_INDEX=2 HOLMES_COORDINATOR=ws://127.0.0.1:$CPORT/ \
    "$NODE" worker --emulate-nic ethernet:x:1 --simulate 1 --connect-timeout 5 >"$FAKEAPI_DIR/bad2.log" 2>&1
rc=$?
# Supervised: "not part of the job" is final, so the pod fails at once (1), not after retries.
[ $rc -eq 1 ] && grep -q "not part of job" "$FAKEAPI_DIR/bad2.log" && pass "pod not in the job refused" \
    || fail "pod not in the job refused" "rc $rc: $(cat "$FAKEAPI_DIR/bad2.log")"

check "status.progress: steps, loss, tokens/s, ETA" wait_for 30 job_is $NS e2e '.status.phase == "Running" and .status.progress.step > 0 and .status.progress.loss > 0 and .status.progress.tokensPerSecond > 0 and .status.progress.etaSeconds >= 0 and .status.progress.stepSeconds > 0 and .status.plan.predictedStepSeconds > 0 and (.status.message | contains("predicted"))'
ok=1
for p in "${WPIDS[@]}"; do wait "$p" || ok=0; done
[ $ok = 1 ] && pass "every worker finished (exit 0)" || fail "every worker finished (exit 0)" "$(tail -n 3 "$FAKEAPI_DIR"/worker-*.log)"
fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=e2e\",\"phase\":\"Succeeded\",\"ready\":false}" >/dev/null
check "job Succeeded" wait_for 20 job_is $NS e2e '.status.phase == "Succeeded"'
has_event() { api GET /api/v1/namespaces/$NS/events | jq -e --arg r "$1" '[.items[].reason] | index($r)' >/dev/null; }
check "events: Planned" wait_for 5 has_event Planned
e2e_conds_set() { job_is $NS e2e '[.status.conditions[]? | select((.type == "GangReady" and .status == "True" and .reason == "AllWorkersConnected") or (.type == "Planned" and .status == "True"))] | length == 2'; }
check "conditions: GangReady True and Planned True set by the coordinator" wait_for 5 e2e_conds_set
check "conditions: the controller's Valid condition kept beside them" job_is $NS e2e '[.status.conditions[].type] | (index("Valid") != null and index("GangReady") != null and index("Running") != null)'
check "events: refused connection reported" has_event ConnectionRefused

# Kill the operator mid-run: workers keep training, reconnect to the new operator, which
# registers the job again from their hellos and adopts them; the job still succeeds.
api POST "$JOBS/$NS/trainingjobs" "$(sed 's/"name":"e2e"/"name":"e2f"/' <<<"$JOB")" >/dev/null
check "second job: 4 pods" wait_for 20 pods_are $NS e2f 4
fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=e2f\",\"phase\":\"Running\",\"ready\":true}" >/dev/null
TOKEN=$(api GET /api/v1/namespaces/$NS/secrets/e2f-token | jq -r .data.token | base64 -d)
run_worker2() { run_job_worker e2f 60 50 worker2 "$@"; } # job e2f, 60 steps
WPIDS=()
for i in 0 1; do run_worker2 $i cx6-hdr-ib & WPIDS+=($!); done
for i in 2 3; do run_worker2 $i cx5-roce-100g & WPIDS+=($!); done
check "second job running with progress" wait_for 30 job_is $NS e2f '.status.phase == "Running" and .status.progress.step > 0'
kill -9 "$OP_PID"
wait "$OP_PID" 2>/dev/null
STEP_BEFORE=$(job_get $NS e2f | jq .status.progress.step)
sleep 1
start_operator op2 --coordinator-addr 127.0.0.1:$CPORT --coordinator-url ws://127.0.0.1:$CPORT/ --node-image holmes-node:test
check "new operator: progress moves on" wait_for 60 job_is $NS e2f ".status.progress.step > $STEP_BEFORE"
ok=1
for p in "${WPIDS[@]}"; do wait "$p" || ok=0; done
[ $ok = 1 ] && pass "operator killed: every worker finished (exit 0)" \
    || fail "operator killed: every worker finished (exit 0)" "$(tail -n 3 "$FAKEAPI_DIR"/worker2-*.log)"
check "new operator adopted the running workers" bash -c "curl -s -H 'Authorization: Bearer $FAKEAPI_TOKEN' '$API/api/v1/namespaces/$NS/events' | jq -e '[.items[] | select(.message | contains(\"adopted\"))] | length > 0' >/dev/null"

# Gang timeout: 3 of 4 workers say hello within gangTimeoutSeconds 2 -> condition GangReady
# False (GangTimeout) naming the missing pod, the controller's conditions kept; the last worker
# arriving completes the gang -> GangReady True.
api POST "$JOBS/$NS/trainingjobs" "$(sed 's/"name":"e2e"/"name":"e2g"/; s/"gangTimeoutSeconds":60/"gangTimeoutSeconds":2/; s/"steps":40/"steps":5/' <<<"$JOB")" >/dev/null
check "gang job: 4 pods" wait_for 20 pods_are $NS e2g 4
fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=e2g\",\"phase\":\"Running\",\"ready\":true}" >/dev/null
TOKEN=$(api GET /api/v1/namespaces/$NS/secrets/e2g-token | jq -r .data.token | base64 -d)
run_worker3() { run_job_worker e2g 5 20 worker3 "$@"; } # job e2g, 5 short steps
WPIDS=()
for i in 0 1; do run_worker3 $i cx6-hdr-ib & WPIDS+=($!); done
run_worker3 2 cx5-roce-100g & WPIDS+=($!)
gang_timed_out() { job_is $NS e2g '[.status.conditions[]? | select(.type == "GangReady" and .status == "False" and .reason == "GangTimeout" and (.message | contains("e2g-worker-3")))] | length == 1'; }
check "gang timeout: condition GangReady=False (GangTimeout) names the missing pod" wait_for 20 gang_timed_out
check "gang timeout: the controller's conditions kept" job_is $NS e2g '[.status.conditions[].type] | index("Valid") != null and index("PodsReady") != null'
run_worker3 3 cx5-roce-100g & WPIDS+=($!)
gang_ready() { job_is $NS e2g '[.status.conditions[]? | select(.type == "GangReady" and .status == "True")] | length == 1'; }
check "gang completed late: GangReady=True" wait_for 20 gang_ready
ok=1
for p in "${WPIDS[@]}"; do wait "$p" || ok=0; done
[ $ok = 1 ] && pass "gang job: every worker finished (exit 0)" \
    || fail "gang job: every worker finished (exit 0)" "$(tail -n 3 "$FAKEAPI_DIR"/worker3-*.log)"
# spec.activeDeadlineSeconds with workers running: the controller fails the job past it and
# deletes its pods; the test, playing kubelet, sends their workers SIGTERM and they leave (143);
# the coordinator forgets the job a few seconds later.
api POST "$JOBS/$NS/trainingjobs" "$(sed 's/"name":"e2e"/"name":"e2d"/; s/"steps":40/"steps":100000/; s/"gangTimeoutSeconds":60/"gangTimeoutSeconds":60,"activeDeadlineSeconds":8/' <<<"$JOB")" >/dev/null
check "deadline job: 4 pods" wait_for 20 pods_are $NS e2d 4
fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=e2d\",\"phase\":\"Running\",\"ready\":true}" >/dev/null
TOKEN=$(api GET /api/v1/namespaces/$NS/secrets/e2d-token | jq -r .data.token | base64 -d)
WPIDS=()
for i in 0 1; do run_job_worker e2d 100000 20 worker4 $i cx6-hdr-ib & WPIDS+=($!); done
for i in 2 3; do run_job_worker e2d 100000 20 worker4 $i cx5-roce-100g & WPIDS+=($!); done
# (8 s from the pods' creation: the workers train for several of them even on a loaded machine;
# whether they did is read from the status once it failed, not raced against the deadline)
check "deadline job: Failed past activeDeadlineSeconds (DeadlineExceeded)" wait_for 40 job_is $NS e2d \
    '.status.phase == "Failed" and (.status.conditions[] | select(.type == "Failed") | .reason == "DeadlineExceeded")'
check "deadline job: the workers trained before it (progress kept)" job_is $NS e2d '.status.progress.step > 0'
check "deadline job: its pods deleted" wait_for 15 pods_are $NS e2d 0
sleep 1
check "deadline job: a report after the deadline does not move it back to Running" job_is $NS e2d '.status.phase == "Failed"'
kill -TERM "${WPIDS[@]}" 2>/dev/null
codes=""
for p in "${WPIDS[@]}"; do wait "$p"; codes="$codes $?"; done
check "deadline job: every worker left on SIGTERM (143)" test "$codes" = " 143 143 143 143"
check "deadline job: the coordinator forgets it" wait_for 20 grep -q "job $NS/e2d forgotten (failed)" "$FAKEAPI_DIR"/op2.log
logs_clean
