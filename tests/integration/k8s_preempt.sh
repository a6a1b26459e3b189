# SIGTERM on the operator path, on a real kube-apiserver (tests/k8s/envtest.bash) with the test as
# kubelet: four real training workers (examples/local-tiny.yaml's model, NICs from the job's
# spec.emulation) run with their pods' environment; one gets SIGTERM mid-run (as on eviction, a
# node drain or preemption). Every rank checkpoints at the next step boundary, the worker leaves
# with status 143 (this kubelet starts it again, as a new pod would be), the others stop for an
# in-place restart and their supervisors start them again inside their pods; the gang resumes
# from exactly that step, maxRestarts is not charged, and the TrainingJob's status and Events
# say why.
source "$(dirname "$0")/lib.bash"
source "$REPO/tests/k8s/envtest.bash"
if [ "${HOLMES_VARIANT:-release}" != release ]; then # time
    echo "SKIP k8s_preempt: run in the release pass (time); the ASan pass runs local_faults.sh, the same SIGTERM checkpoint and in-place restart on the workers"
    exit 0
fi
k8s_require
OP_PID=
WPIDS=()
stop_all() { k8s_stop_all "${WPIDS[@]}" $OP_PID; }
k8s_begin preempt
k8s_operator "$W/operator.log" $CPORT

example_job "$W/job.yaml" pre 400 "$W/ckpt" -e "s#examples/data/corpus.txt#$REPO/examples/data/corpus.txt#" \
    -e "s/everySteps: 50/everySteps: 1000/"
kubectl apply -n $NS -f "$W/job.yaml" >/dev/null
pods_are() { [ "$(k8s_json pods -n $NS -l holmes.dev/job=pre | jq '.items | length')" = "$1" ]; }
check "apply -> 4 worker pods" wait_for 30 pods_are 4
for i in 0 1 2 3; do
    k8s_pod_status $NS pre-worker-$i '{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}'
done
TOKEN=$(k8s_json secret pre-token -n $NS | jq -r '.data.token // empty' | base64 -d)

# kubelet for worker I: runs holmes-node worker (the pod's main process, a supervisor) with the
# pod's env; starts it again after a SIGTERM (143), as a recreated pod would; logs every exit.
kubelet() {
    local i=$1 envs rc
    envs=$(k8s_json pod "pre-worker-$i" -n $NS | jq -r '.spec.containers[0].env[] | select(.value != null) | "\(.name)=\(.value)"')
    for run in 1 2 3 4; do
        # shellcheck disable=SC2086
        (cd "$REPO" && exec env -i PATH="$PATH" HOSTNAME="pre-worker-$i" HOLMES_TOKEN="$TOKEN" \
            NODE_NAME="node-$i" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $envs \
            timeout -k 5 300 "$NODE" worker --tflops 0.05 --memory-gbps 5 >>"$W/worker-$i.log" 2>&1)
        rc=$?
        echo "$run $rc" >>"$W/exits-$i"
        [ "$rc" = 75 ] || [ "$rc" = 143 ] || break
    done
}
for i in 0 1 2 3; do kubelet $i & WPIDS+=($!); done
# The step from worker 2's own log (every 10 steps), not from status.progress: the coordinator
# reports progress at most every 2 s (progress_interval_ms), and on a fast machine (14 ms a
# step, 200 steps then) the status read 60 when training was near its end, so the SIGTERM
# found no worker left to preempt.
past() { local s; s=$(sed -nE 's#.* step ([0-9]+)/[0-9]+ loss .*#\1#p' "$W/worker-2.log" 2>/dev/null | tail -n 1); [ -n "$s" ] && [ "$s" -ge "$1" ]; }
check "training reaches step 60" wait_for 120 past 60
# The pod's main process (the supervisor: no HOLMES_SUPERVISED=1), as the kubelet signals it.
victim=$(pgrep -f -- "--tflops 0.05" | while read -r p; do env=$(tr '\0' '\n' </proc/$p/environ 2>/dev/null); grep -q '^HOSTNAME=pre-worker-2$' <<<"$env" && ! grep -q '^HOLMES_SUPERVISED=1$' <<<"$env" && echo "$p"; done | head -1)
if [ -n "$victim" ]; then kill -TERM "$victim"; fi
check "a worker process to preempt was found" test -n "$victim"
ok=1
for p in "${WPIDS[@]}"; do wait "$p" || ok=0; done
WPIDS=()
check "every worker ended with status 0" bash -c "for i in 0 1 2 3; do [ \"\$(tail -n 1 '$W'/exits-\$i | cut -d' ' -f2)\" = 0 ] || exit 1; done"
check "the preempted worker's pod left with 143" grep -q '^1 143$' "$W/exits-2"
check "the others restarted in place inside their pods (their supervisors; the pod process never exited)" \
    bash -c "[ \"\$(cat '$W/exits-0')\" = '1 0' ] && grep -q 'supervisor: the worker stopped for an in-place restart' '$W/worker-0.log'"
left=$(sed -nE 's/.*left on SIGTERM after step ([0-9]+), checkpointed there.*/\1/p' "$W/worker-2.log" | head -1)
resumed=$(sed -nE 's/.*resumed from the checkpoint of step ([0-9]+).*/\1/p' "$W"/worker-*.log | head -1)
if [ -n "$left" ] && [ "$resumed" = "$left" ]; then
    pass "no step lost: checkpointed at step $left and resumed there"
else
    fail "no step lost" "left at '$left', resumed at '$resumed'"
fi
for i in 0 1 2 3; do
    k8s_pod_status $NS pre-worker-$i '{"phase":"Succeeded","conditions":[{"type":"Ready","status":"False"}]}'
done
tj_is() { k8s_json tj pre -n $NS | jq -e "$1" >/dev/null 2>&1; }
check "the job Succeeded at step 400" wait_for 30 tj_is '.status.phase == "Succeeded" and .status.progress.step == 400'
check "no restart charged (status.restarts absent or 0)" tj_is '(.status.restarts // 0) == 0'
EV=$(k8s_json events -n $NS)
check "an Event says the worker got SIGTERM and the restart is not charged" jq_true "$EV" \
    'any(.items[]; .involvedObject.name == "pre" and (.message | contains("received SIGTERM")) and (.message | contains("not counted against maxRestarts")))'
