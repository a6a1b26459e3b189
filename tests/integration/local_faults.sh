# Failures that tell the truth and lose no work, on real training with `holmes-operator local`
# (4 workers, pipeline 2 x data 2):
#   SIGTERM to a worker mid-run: every rank checkpoints at the next step boundary, the gang
#     restarts in place from there (no step lost, no restart charged), the loss curve is the
#     uninterrupted run's;
#   SIGTERM to a worker whose coordinator cannot be reached: it leaves at once (status 143),
#     not when its connect timeout runs out;
#   a corrupt newest checkpoint: the resume falls back to the newest set that verifies on every
#     stage and says so ([CheckpointFallback]);
#   a second job given the first's checkpoint directory: refused at once, naming the owner, the
#     first job's files untouched;
#   a full disk under the checkpoints: the job fails at once (no restart spent) naming the cause
#     (No space left on device), not a peer's lost connection;
#   a job that diverges (its gradient norm NaN): each such step skipped with a [NonFiniteStep]
#     notice, the fourth in a row fails the job at once (no restart spent) naming the field.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-faults.XXXXXX)
cleanup() {
    # only the script itself: bash runs an inherited EXIT trap in a subshell killed right
    # after its fork, which would remove $tmp from under the rest of the script
    [ "$BASHPID" = "$$" ] || return 0
    pkill -9 -f -- "--job lf-$$-" 2>/dev/null
    mountpoint -q "$tmp/full" 2>/dev/null && umount "$tmp/full"
    rm -rf "$tmp"
}
trap cleanup EXIT
# job NAME STEPS EVERY: a copy of the example with its own name and checkpoint directory
job() {
    example_job "$tmp/$1.yaml" "lf-$$-$1" "$2" "${4:-$tmp/$1-ckpt}" -e "s/everySteps: 50/everySteps: $3/"
}
run_local() { # NAME [extra args]: runs the job in the background; output in $tmp/NAME.out
    local n=$1; shift
    ( cd "$REPO" && exec timeout 300 "$OPERATOR" local "$tmp/$n.yaml" --run-dir "$tmp/$n-run" \
          --metrics-out "$tmp/$n.jsonl" "$@" >"$tmp/$n.out" 2>&1 )
}
reached() { [ -s "$1" ] && [ "$(tail -n 1 "$1" | jq -r .step 2>/dev/null || echo 0)" -ge "$2" ]; } # METRICS STEP

# Steps of each run: 200; 60 under ASan (time), the interruptions scaled with them.
N=200
[ "${HOLMES_VARIANT:-}" = asan ] && N=60
# The uninterrupted run every other run is compared with.
job base $N 1000
run_local base
check "baseline run succeeds" grep -q "succeeded in" "$tmp/base.out"

# --- SIGTERM mid-run ---------------------------------------------------------------------------
job term $N 1000
run_local term &
RUN=$!
wait_for 120 reached "$tmp/term.jsonl" $((N / 5))
pkill -TERM -f -- "--pod lf-$$-term-worker-2 "
wait $RUN
rc=$?
out=$(cat "$tmp/term.out")
check "SIGTERM: the job succeeds" test "$rc" = 0
left=$(sed -nE 's/.*left on SIGTERM after step ([0-9]+), checkpointed there.*/\1/p' "$tmp/term-run/worker-2.log" | head -1)
resumed=$(sed -nE 's/.*resumed from the checkpoint of step ([0-9]+).*/\1/p' "$tmp/term-run/worker-0.log" | head -1)
if [ -n "$left" ] && [ "$left" -ge $((N / 5)) ] && [ "$resumed" = "$left" ]; then
    pass "SIGTERM: the worker checkpointed at step $left and the gang resumed there (no step lost)"
else
    fail "SIGTERM: no step lost" "left at '${left}', resumed at '${resumed}': $(grep -h 'SIGTERM\|resumed' "$tmp"/term-run/*.log | head -5)"
fi
check "SIGTERM: the worker left with status 143" grep -q "term-worker-2 exited with status 143" <<<"$out"
has_all() { local f=$1 p; shift; for p in "$@"; do grep -q -- "$p" "$f" || return 1; done; } # FILE PATTERN...
has_none() { ! grep -q -- "$2" "$1"; }
check "SIGTERM: the coordinator says why and charges no restart" \
    has_all "$tmp/term.out" 'received SIGTERM' 'not counted against maxRestarts' '0 restarts'
# SIGTERM while the coordinator cannot be reached (port 9: nothing listens), supervised as in a
# pod and not: it leaves (143) after its connect attempt, not when --connect-timeout 60 runs out
# (killed 20 s after the signal if it is still there: status 137, the check fails). The wait is a
# poll, not a `( sleep; kill ) &` watchdog: killing that subshell just after its fork ran this
# script's EXIT trap in it (bash), which removed $tmp (seen on a loaded CI machine).
gone() { ! kill -0 "$1" 2>/dev/null; }
for sup in 1 ""; do
    HOLMES_SUPERVISED=$sup "$NODE" worker --coordinator ws://127.0.0.1:9 --job "lf-$$-conn" --pod p \
        --worker 0 --tflops 1 --memory-gbps 5 --connect-timeout 60 >"$tmp/conn.log" 2>&1 &
    wp=$!
    wait_for 10 grep -q "connecting to ws://127.0.0.1:9" "$tmp/conn.log"
    kill -TERM $wp
    wait_for 20 gone $wp || kill -9 $wp 2>/dev/null
    wait $wp
    rc=$?
    [ $rc = 143 ] && grep -q "SIGTERM while connecting: nothing to checkpoint" "$tmp/conn.log" \
        && pass "SIGTERM while connecting${sup:+ (supervised)}: the worker leaves, status 143" \
        || fail "SIGTERM while connecting${sup:+ (supervised)}: the worker leaves" "rc $rc: $(tail -n 2 "$tmp/conn.log")"
done
same_curve() { # METRICS: every step's loss equals the baseline's (the data order and the math resume exactly)
    /usr/bin/python3 - "$tmp/base.jsonl" "$1" "$N" <<'PY'
import json, sys
base = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
N = int(sys.argv[3])
run = [json.loads(l) for l in open(sys.argv[2])]
bad = [(r["step"], r["loss"], base.get(r["step"])) for r in run
       if r["step"] not in base or abs(r["loss"] - base[r["step"]]) > 1e-4]
steps = sorted({r["step"] for r in run})
assert not bad, bad[:5]
assert steps[-1] == N, steps[-5:]
PY
}
check "SIGTERM: the loss curve is the uninterrupted run's at every step" same_curve "$tmp/term.jsonl"

# --- a corrupt newest checkpoint -----------------------------------------------------------------
job corrupt $N $((N / 6))
run_local corrupt &
RUN=$!
wait_for 120 reached "$tmp/corrupt.jsonl" $((N * 2 / 5))
pkill -INT -f -- "^$OPERATOR local $tmp/corrupt.yaml"
wait $RUN
newest=$(cat "$tmp/corrupt-ckpt/latest-step" 2>/dev/null)
victim=$(ls "$tmp"/corrupt-ckpt/stage-3-4-step-*.ckpt 2>/dev/null | tail -n 1)
older=$(ls "$tmp"/corrupt-ckpt/stage-3-4-step-*.ckpt 2>/dev/null | tail -n 2 | head -n 1 | sed -E 's/.*step-0*([0-9]+)\.ckpt/\1/')
if [ -n "$victim" ] && [ -n "$newest" ] && [ "$older" -lt "$newest" ]; then
    pass "interrupted run left checkpoints of steps $older and $newest"
    /usr/bin/python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[4096]^=0xff; open(p,"wb").write(b)' "$victim"
    rm -f "$tmp/corrupt.jsonl"
    run_local corrupt
    out=$(cat "$tmp/corrupt.out")
    check "corrupt newest: the job still succeeds" grep -q "succeeded in" <<<"$out"
    check "corrupt newest: [CheckpointFallback] names both steps" \
        grep -q "\[CheckpointFallback\] .*resuming from the checkpoint of step $older: the newer set of step $newest does not verify" <<<"$out"
    check "corrupt newest: the worker of the bad stage names the file and the CRC" \
        grep -q "step-0*$newest.ckpt: payload CRC mismatch" "$tmp/corrupt-run/worker-2.log"
    check "corrupt newest: the loss curve is the uninterrupted run's" same_curve "$tmp/corrupt.jsonl"
else
    fail "interrupted run left two checkpoints" "latest '$newest', files: $(ls "$tmp/corrupt-ckpt" 2>&1)"
fi

# --- another job's checkpoint directory -------------------------------------------------------
# A second job given the corrupt run's checkpoint.path: refused at once (the directory's claim
# names its job), not retried, and not one file of the first job's changed or gone.
if [ -s "$tmp/corrupt-ckpt/holmes-job" ]; then
    before=$(cd "$tmp/corrupt-ckpt" && ls | sort | xargs sha256sum)
    job intruder 20 10 "$tmp/corrupt-ckpt"
    run_local intruder
    rc=$?
    out=$(cat "$tmp/intruder.out")
    check "shared checkpoint directory: the second job fails" test "$rc" = 1
    check "shared checkpoint directory: the error names the field, the owner and the claim" grep -q \
        "spec.training.checkpoint.path: checkpoint directory $tmp/corrupt-ckpt holds the checkpoints of job lf-$$-corrupt .*holmes-job" <<<"$out"
    check "shared checkpoint directory: no worker started" test ! -e "$tmp/intruder-run/worker-0.log"
    check "shared checkpoint directory: the first job's files unchanged" \
        test "$before" = "$(cd "$tmp/corrupt-ckpt" && ls | sort | xargs sha256sum)"
else
    fail "shared checkpoint directory" "the corrupt run left no claim: $(ls "$tmp/corrupt-ckpt" 2>&1)"
fi

# --- a full disk under the checkpoints -------------------------------------------------------------
if [ "$(id -u)" = 0 ] && mkdir -p "$tmp/full" && mount -t tmpfs -o size=512k tmpfs "$tmp/full" 2>/dev/null; then
    job full $N 20 "$tmp/full/ckpt"
    start=$SECONDS
    run_local full
    rc=$?
    out=$(cat "$tmp/full.out")
    check "full disk: the job fails" test "$rc" = 1
    check "full disk: the reason is the cause (No space left on device)" \
        grep -q "reason: .*No space left on device" <<<"$out"
    check "full disk: not a peer's lost connection" has_none "$tmp/full.out" 'reason: .*lost its connection'
    check "full disk: not retried (0 restarts, says why)" has_all "$tmp/full.out" '0 restarts' 'not retried'
    echo "# full disk: failed in $((SECONDS - start)) s"
else
    echo "SKIP full disk: needs root to mount a small tmpfs"
fi

# --- a diverging job -------------------------------------------------------------------------------
# The learning rate and weight decay at their largest: the gradient norm turns NaN within a few
# steps. Every rank skips those steps (the same ones: one notice each, from rank 0), the metrics
# file marks them, and the fourth in a row fails the job as a configuration error: not retried.
job diverge 60 2
sed -i 's/optimizer: {.*}/optimizer: {lr: 10, warmupSteps: 0, schedule: constant, weightDecay: 10, gradClip: 1.0}/' \
    "$tmp/diverge.yaml"
run_local diverge
rc=$?
check "diverging job: fails" test "$rc" = 1
check "diverging job: the reason names the step and spec.training.maxNonFiniteSteps" grep -q \
    "reason: .*training diverged: step [0-9]*: its .* is NaN .*4 steps in a row (spec.training.maxNonFiniteSteps skips at most 3)" \
    "$tmp/diverge.out"
# How many steps diverge before the run of four depends on the machine's rounding (a finite step
# may come between skipped ones): each skipped step has its notice and its mark in the metrics,
# and the last three skipped are the three steps before the one that failed the job.
skipped=$(jq -s -c '[.[] | select(.skipped == true) | .step]' "$tmp/diverge.jsonl" 2>&1)
failed_at=$(sed -n 's/.*reason: .*training diverged: step \([0-9]*\):.*/\1/p' "$tmp/diverge.out" | head -1)
check "diverging job: a NonFiniteStep notice for each step skipped ($skipped)" \
    test "$(grep -c 'NonFiniteStep.*skipped: its' "$tmp/diverge.out")" = "$(jq length <<<"$skipped" 2>&1)"
check "diverging job: the metrics file marks the 3 steps before the failing one ($failed_at) skipped" \
    /usr/bin/python3 -c 'import json, sys
s, f = json.loads(sys.argv[1]), int(sys.argv[2])
assert s[-3:] == [f - 3, f - 2, f - 1], (s, f)
assert not any(s[i + 3] == s[i] + 3 for i in range(len(s) - 3)), s  # no four in a row before' \
    "$skipped" "${failed_at:-0}"
check "diverging job: not retried (0 restarts, says why)" has_all "$tmp/diverge.out" '0 restarts' 'not retried'
