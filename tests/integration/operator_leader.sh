# Two operators with --leader-elect: exactly one acts; the other takes over within the lease
# duration when the first is killed; a clean shutdown releases the lease.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/fakeapi.bash"
start_fakeapi
NS=le
LEASE=/apis/coordination.k8s.io/v1/namespaces/holmes-system/leases/holmes-operator
LE=(--leader-elect --lease-duration 2 --renew-deadline 1.5 --retry-period 0.25)
holder() { api GET $LEASE | jq -r '.spec.holderIdentity // empty'; }
holder_is() { [ "$(holder)" = "$1" ]; }
M1=$(free_port); M2=$(free_port)
start_operator a "${LE[@]}" --identity op-a --metrics-addr 127.0.0.1:$M1
PID_A=$OP_PID

check "first operator takes the lease" wait_for 20 holder_is op-a
start_operator b "${LE[@]}" --identity op-b --metrics-addr 127.0.0.1:$M2
PID_B=$OP_PID
sleep 1
check "second operator waits (lease held by op-a)" holder_is op-a
check "standby reports holmes_leader 0" wait_for 20 bash -c "curl -s http://127.0.0.1:$M2/metrics | grep -q '^holmes_leader 0'"
check "leader reports holmes_leader 1" bash -c "curl -s http://127.0.0.1:$M1/metrics | grep -q '^holmes_leader 1'"
api POST "$JOBS/$NS/trainingjobs" '{"metadata":{"name":"x"},"spec":{"workers":3,"image":"img","gpusPerWorker":0,"model":{"preset":"gpt2-124m"},"training":{"steps":10}}}' >/dev/null
check "the leader creates the pods" wait_for 20 pods_are $NS x 3
check "only the leader acted (3 pod creations, standby made no calls but lease gets)" jq_true "$(stats)" '.["create core pods"] == 3'
check "standby has no controller running" bash -c "! grep -q 'caches synced' '$FAKEAPI_DIR/b.log'"

# Kill -9 the leader: the standby takes over once the lease expires.
{ kill -KILL "$PID_A"; wait "$PID_A"; } 2>/dev/null
T0=$(date +%s.%N)
check "standby takes over after the leader dies" wait_for 20 holder_is op-b
T1=$(date +%s.%N)
TAKEOVER=$(echo "$T1 - $T0" | bc)
echo "# takeover took $TAKEOVER s (lease duration 2 s); the bound checked is the 20 s wait above"
api POST "$JOBS/$NS/trainingjobs" '{"metadata":{"name":"y"},"spec":{"workers":2,"image":"img","gpusPerWorker":0,"model":{"preset":"gpt2-124m"},"training":{"steps":10}}}' >/dev/null
check "the new leader reconciles" wait_for 20 pods_are $NS y 2
check "the new leader adopted the old job's pods (3 + 2 creations)" jq_true "$(stats)" '.["create core pods"] == 5'
check "lease transitions counted" jq_true "$(api GET $LEASE)" '.spec.leaseTransitions >= 1'

# Clean shutdown releases the lease at once.
kill -TERM "$PID_B"; wait "$PID_B"
check "SIGTERM releases the lease" holder_is ""
start_operator c "${LE[@]}" --identity op-c
check "a successor takes the released lease" wait_for 20 holder_is op-c
check "... at once, without waiting for it to expire" bash -c "! grep -q 'held by another' '$FAKEAPI_DIR/c.log'"
# A leader that cannot renew within the renew deadline steps down (exits 1; its pod restarts).
fake faults '{"status":500,"count":1000000,"match":"leases/holmes-operator","userAgent":"holmes-operator"}' >/dev/null
check "leader unable to renew exits" wait_for 20 bash -c "! kill -0 $OP_PID 2>/dev/null"
wait "$OP_PID"; rc=$?
check "... with status 1 and says why" bash -c "[ $rc = 1 ] && grep -q 'lost lease' '$FAKEAPI_DIR/c.log'"
fake faults '{}' >/dev/null
logs_clean
