# Event aggregation end to end: a job whose gang times out again and again gets ONE
# GangTimeout Event whose count grows (PATCHed, as client-go's recorder does), not N Events.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/fakeapi.bash"
start_fakeapi
MPORT=$(free_port)
start_operator op --metrics-addr 127.0.0.1:$MPORT
NS=ev
check "operator up" wait_for 20 curl -sf "http://127.0.0.1:$MPORT/metrics"
api POST "$JOBS/$NS/trainingjobs" '{"metadata":{"name":"g"},"spec":{"workers":1,"image":"reg/holmes-node:1",
  "gpusPerWorker":1,"model":{"preset":"gpt2-124m"},"training":{"steps":10},"gangTimeoutSeconds":1}}' >/dev/null
# One worker: the kubelet double updates pods one by one, and a reconcile between two
# updates would see a different set of unschedulable pods (a different message, so rightly
# a different Event).
check "1 pod" wait_for 20 pods_are $NS g 1
gang_timeouts() { api GET /api/v1/namespaces/$NS/events | jq '[.items[] | select(.reason == "GangTimeout" and .involvedObject.name == "g")]'; }
cond_is() { job_is $NS g ".status.conditions[] | select(.type == \"PodsScheduled\") | .reason == \"$1\""; }
for round in 1 2 3; do
    fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=g\",\"unschedulable\":\"0/4 nodes are available: 4 Insufficient nvidia.com/gpu.\"}" >/dev/null
    check "round $round: unschedulable past the gang timeout -> GangTimeout" wait_for 15 cond_is GangTimeout
    check "round $round: the Event's count is $round" wait_for 10 bash -c "[ \"\$(curl -s -H 'Authorization: Bearer $FAKEAPI_TOKEN' '$API/api/v1/namespaces/$NS/events' | jq '[.items[] | select(.reason == \"GangTimeout\")] | .[0].count')\" = $round ]"
    fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job=g\",\"phase\":\"Pending\",\"ready\":false}" >/dev/null
    check "round $round: scheduled again -> AllScheduled" wait_for 15 cond_is AllScheduled
done
EVS=$(gang_timeouts)
check "3 gang timeouts -> one GangTimeout Event" jq_true "$EVS" 'length == 1'
check "... with count 3, firstTimestamp <= lastTimestamp, the pods and the reason in its message" jq_true "$EVS" '.[0] | .count == 3 and .firstTimestamp <= .lastTimestamp and (.message | contains("g-worker-0")) and (.message | contains("Insufficient nvidia.com/gpu"))'
check "the fake server saw PATCHes on events" jq_true "$(stats)" '.["patch core events"] >= 2'
M=$(curl -s "http://127.0.0.1:$MPORT/metrics")
check "metrics: events patched" grep -q 'holmes_events_total{outcome="patched"} [2-9]' <<<"$M"
kill -TERM "$OP_PID"; wait "$OP_PID"; rc=$?
check "SIGTERM -> clean exit 0" test "$rc" = 0
logs_clean
