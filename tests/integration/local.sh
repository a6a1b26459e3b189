# holmes-operator local with simulated workers (no model): placement inside fabrics, progress,
# metrics per step, in-place restart after a worker is killed, failure when restarts run out,
# spec.activeDeadlineSeconds, and bad input. The real-training run is tests/integration/local_train.sh.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-local.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
name=it-local-$$
example_job "$tmp/job.yaml" "$name" 100 "$tmp/ckpt"

# 1. A whole run.
out=$(cd "$REPO" && timeout 120 "$OPERATOR" local "$tmp/job.yaml" --simulate --step-ms 5 \
      --run-dir "$tmp/run" --metrics-out "$tmp/metrics.jsonl" 2>&1)
rc=$?
[ $rc -eq 0 ] && pass "local run succeeds" || fail "local run succeeds" "rc $rc: $out"
grep -q "succeeded in" <<<"$out" && pass "summary printed" || fail "summary printed" "$out"
grep -Eq '^  0 +ib-a ' <<<"$out" && grep -Eq '^  1 +roce-b ' <<<"$out" \
    && pass "stages placed inside fabrics" || fail "stages placed inside fabrics" "$out"
grep -q "worker-0 (infiniband 200 Gb/s), $name-worker-1 (infiniband" <<<"$out" \
    && pass "placement names workers and NICs" || fail "placement names workers and NICs" "$out"
n=$(wc -l <"$tmp/metrics.jsonl")
[ "$n" -eq 100 ] && pass "one metrics line per step" || fail "one metrics line per step" "$n lines"
/usr/bin/python3 - "$tmp/metrics.jsonl" <<'PY' && pass "metrics lines are complete JSON" || fail "metrics lines are complete JSON"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = sorted(r["step"] for r in rows)
assert steps == list(range(1, 101)), steps[:5]
for r in rows:
    assert len(r["stages"]) == 2 and "loss" in r and r["step_ms"] >= 0 and "tokens_per_s" in r
assert rows[-1]["loss"] < rows[0]["loss"]
PY
ls "$tmp/run"/worker-{0,1,2,3}.log >/dev/null 2>&1 && pass "worker logs written" || fail "worker logs written"

# 2. Kill one worker mid-run: the others are stopped, everyone restarts in place, success.
( cd "$REPO" && timeout 120 "$OPERATOR" local "$tmp/job.yaml" --simulate --step-ms 20 \
      --run-dir "$tmp/run2" >"$tmp/out2" 2>&1; echo $? >"$tmp/rc2" ) &
for _ in $(seq 100); do
    grep -q "Running: rendezvous complete" "$tmp/out2" 2>/dev/null && break; sleep 0.1
done
sleep 1
victim=$(pgrep -f -- "--pod $name-worker-2 " | head -1)
[ -n "$victim" ] && kill -9 "$victim"
wait
out2=$(cat "$tmp/out2")
[ "$(cat "$tmp/rc2")" = 0 ] && pass "killed worker: job still succeeds" \
    || fail "killed worker: job still succeeds" "$out2"
grep -q "1 restart" <<<"$out2" && pass "killed worker: one in-place restart" \
    || fail "killed worker: one in-place restart" "$out2"
grep -q "worker 2 ($name-worker-2) disconnected" <<<"$out2" \
    && pass "killed worker: failure names the worker" || fail "killed worker: failure names the worker" "$out2"

# 3. No restarts allowed: the same kill fails the job.
sed -e "s/maxRestarts: 2/maxRestarts: 0/" "$tmp/job.yaml" >"$tmp/job0.yaml"
( cd "$REPO" && timeout 120 "$OPERATOR" local "$tmp/job0.yaml" --simulate --step-ms 20 \
      --run-dir "$tmp/run3" >"$tmp/out3" 2>&1; echo $? >"$tmp/rc3" ) &
for _ in $(seq 100); do
    grep -q "Running: rendezvous complete" "$tmp/out3" 2>/dev/null && break; sleep 0.1
done
victim=$(pgrep -f -- "--pod $name-worker-1 " | head -1)
[ -n "$victim" ] && kill -9 "$victim"
wait
[ "$(cat "$tmp/rc3")" = 1 ] && pass "no restarts left: job fails" || fail "no restarts left: job fails" "$(cat "$tmp/out3")"
grep -q "no restarts left" "$tmp/out3" && pass "no restarts left: reason printed" \
    || fail "no restarts left: reason printed" "$(cat "$tmp/out3")"

# 3b. spec.activeDeadlineSeconds: a run longer than it is stopped (as an interrupted one) and
# fails, saying why.
sed -e "s/^spec:$/spec:\n  activeDeadlineSeconds: 2/" -e "s/steps: 100$/steps: 1000000/" "$tmp/job.yaml" >"$tmp/jobdl.yaml"
out=$(cd "$REPO" && timeout 120 "$OPERATOR" local "$tmp/jobdl.yaml" --simulate --step-ms 20 \
      --run-dir "$tmp/rundl" 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "failed in" <<<"$out" && pass "activeDeadlineSeconds: the run stops and fails" ||
    fail "activeDeadlineSeconds: the run stops and fails" "rc $rc: $(tail -5 <<<"$out")"
grep -q "reason: .*DeadlineExceeded: running longer than spec.activeDeadlineSeconds 2" <<<"$out" &&
    pass "activeDeadlineSeconds: the reason names the field" ||
    fail "activeDeadlineSeconds: the reason names the field" "$(tail -5 <<<"$out")"

# 4. kill -9 of holmes-operator local: its workers die with it (each worker is a supervisor and
# the worker process it runs: 8 processes).
( cd "$REPO" && exec timeout 120 "$OPERATOR" local "$tmp/job.yaml" --simulate --step-ms 50 \
      --run-dir "$tmp/run4" >"$tmp/out4" 2>&1 ) &
for _ in $(seq 100); do
    grep -q "Running: rendezvous complete" "$tmp/out4" 2>/dev/null && break; sleep 0.1
done
nw=$(pgrep -f -- "--pod $name-worker-" | wc -l)
lp=$(pgrep -f -- "^$OPERATOR local $tmp/job.yaml --simulate --step-ms 50")
kill -9 "$lp" 2>/dev/null
left=$nw
for _ in $(seq 50); do
    left=$(pgrep -f -- "--pod $name-worker-" | wc -l)
    [ "$left" -eq 0 ] && break
    sleep 0.1
done
wait
[ "$nw" -eq 8 ] && [ "$left" -eq 0 ] && pass "kill -9 of local: its 4 workers (supervisor and worker process each) die with it" \
    || fail "kill -9 of local: its 4 workers die with it" "$nw worker processes before (want 8), $left after 5 s"
pkill -9 -f -- "--pod $name-worker-" 2>/dev/null

# 5. Bad input.
"$OPERATOR" local 2>/dev/null; [ $? -eq 2 ] && pass "local without a job: usage" || fail "local without a job: usage"
printf 'apiVersion: holmes.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: x}\nspec: {workers: 0}\n' >"$tmp/bad.yaml"
err=$("$OPERATOR" local "$tmp/bad.yaml" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "spec.workers" <<<"$err" && pass "invalid job names the field" \
    || fail "invalid job names the field" "rc $rc: $err"
"$OPERATOR" local "$tmp/missing.yaml" 2>/dev/null; [ $? -eq 2 ] && pass "missing file refused" || fail "missing file refused"
