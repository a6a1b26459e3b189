# End to end on a real kube-apiserver (tests/k8s/envtest.bash), the test playing kubelet: each
# pod's main process (`holmes-node worker`, a supervisor) runs with the pod's environment, four
# real training workers (examples/local-tiny.yaml's model). One job lives through:
#   1. a worker process killed mid-run: restarted inside its pod, the gang restarts in place
#      (same pod UIDs, no pod process exits), status.restarts 1, training resumes from the
#      last checkpoint;
#   2. the operator killed (-9) mid-run and started again: it adopts the job, training goes on,
#      and the restart counter carries over (a second kill makes it 2, not 1);
#   3. a pod deleted: its worker checkpoints on SIGTERM, the pod is recreated, the gang resumes
#      from that step (not charged);
#   4. suspend and resume: every worker checkpoints and leaves, pods go; on resume new pods
#      continue from that step to the end; the job Succeeds, its held-out loss (training.eval)
#      in status.evalLoss.
# A second job (simulated workers, maxRestarts 0) fails on its first worker death: phase
# Failed with the reason, every pod process exits 1, and no failed pod is replaced.
# A third (real workers, the learning rate and weight decay at their largest) diverges: its
# skipped steps in status.skippedSteps, a NonFiniteStep Warning Event each, then Failed
# (NotRetried) naming spec.training.maxNonFiniteSteps, no restart charged.
source "$(dirname "$0")/lib.bash"
source "$REPO/tests/k8s/envtest.bash"
# Release pass only (about 2 min under ASan, and make test must stay under 20 min on CI's 2
# cores); the sanitized supervisor, controller and coordinator run in k8s_preempt.sh,
# k8s_operator.sh and test_supervisor under ASan.
if [ "${HOLMES_VARIANT:-release}" != release ]; then
    echo "SKIP k8s_e2e: run in the release pass (time); the ASan pass runs k8s_preempt and k8s_operator"
    exit 0
fi
k8s_require
OP_PID=
declare -A KPID # pod -> its kubelet's pid
TAG=HOLMES_E2E_TEST=$$ # in every worker's environment: how this test finds its processes
procs() { # pids of this test's worker processes whose environment has every line given
    local p env l ok
    for p in $(pgrep -f -- "worker --tflops 0.05"); do
        env=$(tr '\0' '\n' </proc/$p/environ 2>/dev/null) || continue
        ok=1
        for l in "$TAG" "$@"; do
            case $l in
            !*) grep -qx -- "${l#!}" <<<"$env" && ok=0 ;;
            *) grep -qx -- "$l" <<<"$env" || ok=0 ;;
            esac
        done
        [ $ok = 1 ] && echo "$p"
    done
}
stop_all() {
    local p
    for p in $(procs '!HOLMES_SUPERVISED=1'); do kill -9 "$p" 2>/dev/null; done
    k8s_stop_all "${KPID[@]}" $OP_PID
}
k8s_begin e2e
start_operator() { k8s_operator "$W/operator.log" $CPORT --status-interval 1; }
start_operator

# ~0.1 s a step: time to act mid-run
example_job "$W/job.yaml" e2e 320 "$W/ckpt" -e "s#examples/data/corpus.txt#$REPO/examples/data/corpus.txt#" \
    -e "s/everySteps: 50/everySteps: 20/" -e "s/keep: 2/keep: 3/" \
    -e "s/maxRestarts: 2, backoffSeconds: 0/maxRestarts: 3, backoffSeconds: 1/" \
    -e "s/bandwidthScale: 0.01/bandwidthScale: 0.001/" \
    -e "s#    eval: .*#    eval: {path: $REPO/examples/data/corpus.txt, format: text, everySteps: 100, batches: 2}#"
kubectl apply -n $NS -f "$W/job.yaml" >/dev/null
npods() { k8s_json pods -n $NS -l "holmes.dev/job=$1" | jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length'; }
pods_are() { [ "$(npods "$1")" = "$2" ]; }
uids() { k8s_json pods -n $NS -l "holmes.dev/job=$1" | jq -c '[.items[] | [.metadata.name, .metadata.uid]] | sort'; }
uid_of() { k8s_json pod "$1" -n $NS | jq -r '.metadata.uid // empty'; }
set_pod() { # pod phase ready
    k8s_pod_status $NS "$1" "{\"phase\":\"$2\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"$3\"}]}"
}
token_of() { k8s_json secret "$1-token" -n $NS | jq -r '.data.token // empty' | base64 -d; }

# kubelet POD [worker args...]: runs the pod's main process once with the pod's env; logs its
# exit status to exits-POD. No restarts here: a worker that dies is the supervisor's business.
kubelet() {
    local pod=$1 pj envs tok rc
    shift
    pj=$(k8s_json pod "$pod" -n $NS)
    envs=$(jq -r '.spec.containers[0].env[] | select(.value != null) | "\(.name)=\(.value)"' <<<"$pj")
    tok=$(token_of "$(jq -r '.metadata.labels["holmes.dev/job"] // empty' <<<"$pj")")
    # shellcheck disable=SC2086
    (cd "$REPO" && exec env -i PATH="$PATH" HOSTNAME="$pod" HOLMES_TOKEN="$tok" "$TAG" \
        NODE_NAME="node-$pod" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $envs \
        timeout -k 5 400 "$NODE" worker --tflops 0.05 --memory-gbps 5 "$@" >>"$W/$pod.log" 2>&1)
    rc=$?
    echo "$rc" >>"$W/exits-$pod"
}
run_pod() { # pod [args]: Running + Ready, and its main process started
    set_pod "$1" Running True
    kubelet "$@" &
    KPID[$1]=$!
}
supervisor_of() { procs "HOSTNAME=$1" '!HOLMES_SUPERVISED=1' | head -1; } # the pod's main process
worker_of() { procs "HOSTNAME=$1" 'HOLMES_SUPERVISED=1' | head -1; }         # the worker it runs
tj_is() { k8s_json tj "$1" -n $NS | jq -e "$2" >/dev/null 2>&1; }
step_of() { k8s_json tj e2e -n $NS | jq -r '.status.progress.step // empty'; }
past() { local s; s=$(step_of); [ -n "$s" ] && [ "$s" -ge "$1" ]; }
alive() { kill -0 "${KPID[$1]}" 2>/dev/null; }

check "apply -> 4 worker pods" wait_for 30 pods_are e2e 4
for i in 0 1 2 3; do run_pod e2e-worker-$i; done
check "training reaches step 50" wait_for 120 past 50
U0=$(uids e2e)

# 1. A worker process dies (kill -9): restarted inside its pod, the gang restarts in place.
victim=$(worker_of e2e-worker-1)
kill -9 "$victim" 2>/dev/null
check "a worker process was killed" test -n "$victim"
check "status.restarts 1 (the coordinator's count), lastRestartTime set" wait_for 30 tj_is e2e '.status.restarts == 1 and .status.lastRestartTime != null'
at=$(step_of)
check "training goes on after the in-place restart" wait_for 120 past $((at + 30))
check "no pod recreated: the same 4 pod UIDs" test "$(uids e2e)" = "$U0"
check "no pod's main process exited" bash -c "for p in ${KPID[*]}; do kill -0 \$p || exit 1; done"
check "the supervisor started the killed worker again in its pod" \
    grep -q "supervisor: the worker was killed by signal 9" "$W/e2e-worker-1.log"
check "the gang resumed from a checkpoint, not step 0" \
    grep -qE "resumed from the checkpoint of step [1-9]" "$W/e2e-worker-0.log"
EV=$(k8s_json events -n $NS)
check "an Event says the gang restarts in place (restart 1 of 3)" jq_true "$EV" \
    'any(.items[]; .involvedObject.name == "e2e" and (.message | contains("restarting in place")) and (.message | contains("restart 1 of 3")))'

# 2. The operator killed mid-run: a new one adopts the job; training goes on meanwhile.
kill -9 "$OP_PID"; wait "$OP_PID" 2>/dev/null
at=$(step_of)
start_operator
check "a new operator adopts the job: progress goes on" wait_for 120 past $((at + 30))
check "after the operator restart: the same pods" test "$(uids e2e)" = "$U0"
check "after the operator restart: status.restarts still 1" tj_is e2e '.status.restarts == 1'
kill -9 "$(worker_of e2e-worker-3)" 2>/dev/null
check "the count carries over the operator restart: a second death makes restarts 2" \
    wait_for 30 tj_is e2e '.status.restarts == 2'

# 3. A pod deleted (as by a drain): SIGTERM to its main process, the worker checkpoints and
# leaves, the pod goes, a new one comes and the gang resumes from that step; not charged.
at=$(step_of)
wait_for 120 past $((at + 10))
kubectl delete pod e2e-worker-2 -n $NS --wait=false >/dev/null
kill -TERM "$(supervisor_of e2e-worker-2)" 2>/dev/null
wait "${KPID[e2e-worker-2]}" 2>/dev/null
check "the deleted pod's main process left with 143 after checkpointing" \
    bash -c "[ \"\$(tail -n 1 '$W/exits-e2e-worker-2')\" = 143 ] && grep -q 'left on SIGTERM after step' '$W/e2e-worker-2.log'"
old2=$(jq -r '.[] | select(.[0] == "e2e-worker-2") | .[1]' <<<"$U0")
kubectl delete pod e2e-worker-2 -n $NS --grace-period=0 --force >/dev/null 2>&1
newpod() { local u; u=$(uid_of e2e-worker-2); [ -n "$u" ] && [ "$u" != "$old2" ]; }
check "the pod is recreated (a new UID)" wait_for 30 newpod
left=$(sed -nE 's/.*left on SIGTERM after step ([0-9]+).*/\1/p' "$W/e2e-worker-2.log" | tail -1)
run_pod e2e-worker-2
check "the gang resumes with the new pod" wait_for 120 past $((left + 20))
check "resumed from exactly the step the deleted pod's worker left at ($left)" \
    grep -q "resumed from the checkpoint of step $left" "$W/e2e-worker-0.log"
check "a deleted pod is not charged (restarts still 2)" tj_is e2e '.status.restarts == 2'

# 4. Suspend and resume.
kubectl patch tj e2e -n $NS --type=merge -p '{"spec":{"suspend":true}}' >/dev/null
# (pods not bound to a node go at once: no kubelet has to confirm)
check "suspend: the controller deletes every pod" wait_for 30 pods_are e2e 0
for i in 0 1 2 3; do kill -TERM "$(supervisor_of e2e-worker-$i)" 2>/dev/null; done
for i in 0 1 2 3; do wait "${KPID[e2e-worker-$i]}" 2>/dev/null; done
check "suspend: every worker checkpointed and left (143)" \
    bash -c "for i in 0 1 2 3; do [ \"\$(tail -n 1 '$W/exits-e2e-worker-'\$i)\" = 143 ] || exit 1; done"
check "suspend: phase Suspended, the last progress kept" wait_for 30 tj_is e2e '.status.phase == "Suspended" and .status.progress.step > 0'
sus=$(step_of)
kubectl patch tj e2e -n $NS --type=merge -p '{"spec":{"suspend":false}}' >/dev/null
check "resume: 4 new pods" wait_for 30 pods_are e2e 4
for i in 0 1 2 3; do run_pod e2e-worker-$i; done
for i in 0 1 2 3; do wait "${KPID[e2e-worker-$i]}" 2>/dev/null; done
check "resume: every pod's main process finished (0)" \
    bash -c "for i in 0 1 2 3; do [ \"\$(tail -n 1 '$W/exits-e2e-worker-'\$i)\" = 0 ] || exit 1; done"
ls "$W/ckpt" >"$W/ckpt.list" 2>&1
check "resume: training went on from where the suspended run stopped (step $sus), not step 0" \
    bash -c "grep -hoE 'resumed from the checkpoint of step [0-9]+' '$W/e2e-worker-0.log' | tail -1 | awk '{ exit !(\$NF >= $sus && \$NF > 0) }'"
for i in 0 1 2 3; do set_pod e2e-worker-$i Succeeded False; done
check "the job Succeeded at step 320, restarts 2" wait_for 30 tj_is e2e '.status.phase == "Succeeded" and .status.progress.step == 320 and .status.restarts == 2'
loss=$(kubectl get tj e2e -n $NS -o jsonpath='{.status.progress.loss}')
gn=$(kubectl get tj e2e -n $NS -o jsonpath='{.status.progress.gradNorm}')
check "status.progress.gradNorm: the last step's global gradient norm ($gn)" awk -v g="$gn" 'BEGIN { exit !(g > 0 && g < 100) }'
check "the final loss ($loss) is below 3.5 (from ~5.5: the curve continued)" awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 3.5) }'
ev=$(kubectl get tj e2e -n $NS -o jsonpath='{.status.evalLoss.step} {.status.evalLoss.loss}')
check "status.evalLoss: the held-out loss after the last step ($ev), below 3.5" \
    awk -v s="${ev% *}" -v l="${ev#* }" 'BEGIN { exit !(s == 320 && l > 0 && l < 3.5) }'

# A job out of restarts: Failed, for good.
sed -e "s/name: e2e/name: lim/" -e "s/maxRestarts: 3, backoffSeconds: 1/maxRestarts: 0, backoffSeconds: 1/" \
    -e "s#$W/ckpt#$W/ckpt-lim#" "$W/job.yaml" >"$W/lim.yaml"
kubectl apply -n $NS -f "$W/lim.yaml" >/dev/null
check "second job: 4 pods" wait_for 30 pods_are lim 4
for i in 0 1 2 3; do run_pod lim-worker-$i --simulate 100000 --step-ms 20; done
running() { tj_is lim '.status.phase == "Running"'; }
check "second job runs" wait_for 60 running
kill -9 "$(worker_of lim-worker-0)" 2>/dev/null
check "out of restarts -> phase Failed, condition Failed RestartLimitExceeded" wait_for 30 tj_is lim \
    '.status.phase == "Failed" and .status.completionTime != null and (.status.conditions[] | select(.type == "Failed") | .status == "True" and .reason == "RestartLimitExceeded")'
for i in 0 1 2 3; do wait "${KPID[lim-worker-$i]}" 2>/dev/null; done
check "every pod's main process exits 1 (the killed worker's too: it hears the job is over)" \
    bash -c "for i in 0 1 2 3; do [ \"\$(tail -n 1 '$W/exits-lim-worker-'\$i)\" = 1 ] || exit 1; done"
UL=$(uids lim)
for i in 0 1 2 3; do set_pod lim-worker-$i Failed False; done
sleep 3
check "a failed job's pods are kept, not replaced" test "$(uids lim)" = "$UL"
check "phase Failed stays" tj_is lim '.status.phase == "Failed"'
# A job that diverges: the steps it skips counted in status, then Failed without a restart.
sed -e "s/name: e2e/name: div/" -e "s#$W/ckpt#$W/ckpt-div#" -e "s/steps: 320/steps: 60/" \
    -e "s/optimizer: {.*}/optimizer: {lr: 10, warmupSteps: 0, schedule: constant, weightDecay: 10, gradClip: 1.0}/" \
    "$W/job.yaml" >"$W/div.yaml"
kubectl apply -n $NS -f "$W/div.yaml" >/dev/null
check "diverging job: 4 pods" wait_for 30 pods_are div 4
for i in 0 1 2 3; do run_pod div-worker-$i; done
check "diverging job: Failed (NotRetried) naming spec.training.maxNonFiniteSteps, 3 steps skipped in status.skippedSteps, no restart" \
    wait_for 60 tj_is div '.status.phase == "Failed" and .status.skippedSteps.count == 3 and .status.skippedSteps.lastStep > 0 and (.status.restarts // 0) == 0 and (.status.conditions[] | select(.type == "Failed") | .reason == "NotRetried" and (.message | contains("training diverged") and contains("spec.training.maxNonFiniteSteps")))'
nev=$(kubectl get events -n $NS --field-selector involvedObject.name=div,reason=NonFiniteStep -o json | jq '[.items[] | select(.type == "Warning") | .count // 1] | add // 0')
check "diverging job: a NonFiniteStep Warning Event for each step skipped ($nev)" test "$nev" = 3
for i in 0 1 2 3; do wait "${KPID[div-worker-$i]}" 2>/dev/null; done
check "no call forbidden, no sanitizer report in the operator log" bash -c "! grep -qE 'forbidden|ERROR: AddressSanitizer|runtime error' '$W/operator.log'"
