# The controller under faults: dropped watches and 410 Gone, 500/429 storms, operator restart
# (adoption). Pod creations are counted on the fake server: no duplicates, no needless restarts.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/fakeapi.bash"
start_fakeapi --bookmark-seconds 0.5
NS=ml
job() { echo "{\"metadata\":{\"name\":\"$1\"},\"spec\":{\"workers\":$2,\"image\":\"img\",\"gpusPerWorker\":0,\"model\":{\"preset\":\"gpt2-124m\"},\"training\":{\"steps\":10}}}"; }
creates() { stats | jq '.["create core pods"] // 0'; }
start_operator op1 --qps 200 --burst 200
check "operator 1 converges on a first job" wait_for 20 pods_are $NS j1 0
api POST "$JOBS/$NS/trainingjobs" "$(job j1 4)" >/dev/null
check "first job: 4 pods" wait_for 20 pods_are $NS j1 4

# Watches dropped mid-stream, history compacted: 410 -> relist; a job created meanwhile.
fake faults '{"status":503,"count":100000,"match":"watch=1","dropWatches":true}' >/dev/null
api POST "$JOBS/$NS/trainingjobs" "$(job j2 4)" >/dev/null
api DELETE /api/v1/namespaces/$NS/pods/j1-worker-3 >/dev/null
fake compact >/dev/null
fake faults '{}' >/dev/null
check "after dropped watches + 410: new job's pods created" wait_for 30 pods_are $NS j2 4
check "after dropped watches + 410: deleted pod recreated" wait_for 20 pods_are $NS j1 4
check "dropped watch + 410: exactly 9 pod creations (no duplicates)" test "$(creates)" = 9
check "operator relisted after 410" grep -q "410 Gone" "$FAKEAPI_DIR/op1.log"

# 500 and 429 storms while jobs arrive: backoff, then convergence.
fake reset-stats >/dev/null
fake faults '{"status":500,"count":40,"userAgent":"holmes-operator"}' >/dev/null
for j in s1 s2 s3; do api POST "$JOBS/$NS/trainingjobs" "$(job $j 3)" >/dev/null; done
check "500 storm: all jobs converge" wait_for 40 bash -c "for j in s1 s2 s3; do [ \"\$(curl -s -H 'Authorization: Bearer $FAKEAPI_TOKEN' '$API/api/v1/namespaces/$NS/pods?labelSelector=holmes.dev%2Fjob%3D'\$j | jq '.items|length')\" = 3 ] || exit 1; done"
check "500 storm: faults were served" jq_true "$(stats)" '.faults >= 40'
fake faults '{"status":429,"count":30,"retryAfter":0.2,"userAgent":"holmes-operator"}' >/dev/null
for j in t1 t2; do api POST "$JOBS/$NS/trainingjobs" "$(job $j 3)" >/dev/null; done
check "429 storm with Retry-After: jobs converge" wait_for 40 bash -c "for j in t1 t2; do [ \"\$(curl -s -H 'Authorization: Bearer $FAKEAPI_TOKEN' '$API/api/v1/namespaces/$NS/pods?labelSelector=holmes.dev%2Fjob%3D'\$j | jq '.items|length')\" = 3 ] || exit 1; done"
fake faults '{}' >/dev/null
check "storms: exactly 15 pod creations" test "$(creates)" = 15
check "storms: errors logged with the API's status" grep -q "500 InternalError" "$FAKEAPI_DIR/op1.log"

# Operator restart: adoption, nothing recreated or restarted.
fake kubelet "{\"namespace\":\"$NS\",\"selector\":\"holmes.dev/job\",\"phase\":\"Running\",\"ready\":true}" >/dev/null
check "jobs reach Discovering" wait_for 20 job_is $NS s1 '.status.phase == "Discovering"'
UIDS=$(api GET /api/v1/namespaces/$NS/pods | jq -c '[.items[].metadata.uid] | sort')
kill -TERM "$OP_PID"; wait "$OP_PID"
fake reset-stats >/dev/null
start_operator op2
check "restarted operator syncs" wait_for 20 bash -c "grep -q 'caches synced' '$FAKEAPI_DIR/op2.log'"
sleep 1.5
check "restart: no pod created" test "$(creates)" = 0
check "restart: no pod deleted" jq_true "$(stats)" '.["delete core pods"] == null'
check "restart: same pods (adopted)" test "$(api GET /api/v1/namespaces/$NS/pods | jq -c '[.items[].metadata.uid] | sort')" = "$UIDS"
check "restart: status kept" job_is $NS s1 '.status.phase == "Discovering" and .status.workers.ready == 3'
kill -TERM "$OP_PID"; wait "$OP_PID"
logs_clean
