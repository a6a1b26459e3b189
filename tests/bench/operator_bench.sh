#!/usr/bin/env bash
# make bench-operator: JOBS TrainingJobs x WORKERS workers against the fake API server.
# Reports: time until every pod exists, reconcile latency p50/p99 (operator metrics), operator
# peak RSS (VmHWM). Usage: tests/bench/operator_bench.sh [JOBS] [WORKERS]
set -u
cd "$(dirname "$0")/../.."
export HOLMES_BIN_DIR=${HOLMES_BIN_DIR:-$PWD/bin}
source tests/integration/lib.bash
source tests/integration/fakeapi.bash
JOBS_N=${1:-1000}; WORKERS=${2:-8}
start_fakeapi --history 400000 --bookmark-seconds 10
MPORT=$(free_port)
start_operator bench --qps 100000 --burst 100000 --workers 4 --metrics-addr 127.0.0.1:$MPORT --log-level warn
wait_for 20 curl -sf "http://127.0.0.1:$MPORT/metrics" || { echo "operator did not start"; exit 1; }
sleep 1
T0=$(date +%s.%N)
# Create the jobs from 4 client threads.
/usr/bin/python3 - "$API" "$FAKEAPI_TOKEN" "$JOBS_N" "$WORKERS" <<'PY'
import json, sys, threading, urllib.request
api, tok, n, w = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def make(lo, hi):
    for i in range(lo, hi):
        body = json.dumps({"apiVersion": "holmes.dev/v1alpha1", "kind": "TrainingJob",
                           "metadata": {"name": "bench-%04d" % i},
                           "spec": {"workers": w, "image": "holmes-node:bench", "gpusPerWorker": 8,
                                    "model": {"preset": "gpt2-1.5b"}, "training": {"steps": 1000}}}).encode()
        req = urllib.request.Request(api + "/apis/holmes.dev/v1alpha1/namespaces/bench/trainingjobs",
                                     data=body, method="POST",
                                     headers={"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
        urllib.request.urlopen(req).read()
ts = [threading.Thread(target=make, args=(k * n // 4, (k + 1) * n // 4)) for k in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
PY
T1=$(date +%s.%N)
WANT=$((JOBS_N * WORKERS))
while :; do
    NP=$(stats | jq '.objects.pods // 0')
    [ "$NP" -ge "$WANT" ] && break
    sleep 0.2
done
T2=$(date +%s.%N)
# Let the status writes settle, then read metrics.
sleep 3
M=$(curl -s "http://127.0.0.1:$MPORT/metrics")
q() { grep "holmes_reconcile_latency_seconds{quantile=\"$1\"}" <<<"$M" | awk '{printf "%.2f", $2 * 1000}'; }
RSS=$(awk '/VmHWM/ {print $2}' /proc/$OP_PID/status)
# CPU seconds (user + system) a process has used so far.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f", ($14 + $15) / hz}' "/proc/$1/stat"; }
API_CPU=$(cpu_s "${PIDS[0]}"); OP_CPU=$(cpu_s "$OP_PID")
echo "jobs: $JOBS_N x $WORKERS workers ($WANT pods)"
printf 'job creation (client side): %.1f s\n' "$(echo "$T1 - $T0" | bc)"
printf 'time until all pods exist: %.1f s (from the first job created)\n' "$(echo "$T2 - $T0" | bc)"
echo "reconciles: $(grep '^holmes_reconciles_total' <<<"$M" | awk '{print $2}'), API requests: $(grep '^holmes_api_requests_total' <<<"$M" | awk '{print $2}')"
echo "reconcile latency p50: $(q 0.5) ms, p99: $(q 0.99) ms"
qo() { grep "holmes_reconcile_own_latency_seconds{quantile=\"$1\"}" <<<"$M" | awk '{printf "%.2f", $2 * 1000}'; }
echo "  without API waits p50: $(qo 0.5) ms, p99: $(qo 0.99) ms"
qa() { grep "holmes_api_request_latency_seconds{quantile=\"$1\"}" <<<"$M" | awk '{printf "%.2f", $2 * 1000}'; }
echo "API request latency p50: $(qa 0.5) ms, p99: $(qa 0.99) ms; rate limiter waits: $(grep '^holmes_api_throttled_seconds_total' <<<"$M" | awk '{printf "%.3f", $2}') s"
echo "CPU used: fake API server ${API_CPU} s, operator ${OP_CPU} s"
echo "operator peak RSS: $((RSS / 1024)) MiB ($RSS kB)"
echo "load: $(uptime | sed 's/.*load average/load average/')"
