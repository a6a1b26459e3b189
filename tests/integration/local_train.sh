# holmes-operator local with real training (the CPU GPT through the trainer, 2 stages x 2
# replicas on two emulated fabrics): loss falls, the held-out loss (training.eval) is measured
# and falls, checkpoints are written; a worker killed after a
# checkpoint -> in-place restart resumes from it and the loss curve continues from there.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-local-train.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
name=it-train-$$
steps=24
[ "${HOLMES_VARIANT:-}" = asan ] && steps=8
example_job "$tmp/job.yaml" "$name" "$steps" "$tmp/ckpt" -e "s/warmupSteps: 20/warmupSteps: 2/" \
    -e "s/everySteps: 50/everySteps: 4/" \
    -e "s#    eval: .*#    eval: {path: examples/data/corpus.txt, format: text, everySteps: 10, batches: 2}#"

if [ "${HOLMES_VARIANT:-}" != asan ]; then # under ASan only the restart run below (time)
out=$(cd "$REPO" && timeout 300 "$OPERATOR" local "$tmp/job.yaml" --run-dir "$tmp/run" \
      --metrics-out "$tmp/m.jsonl" 2>&1)
rc=$?
[ $rc -eq 0 ] && pass "training run succeeds" || fail "training run succeeds" "rc $rc: $out $(tail -n 5 "$tmp"/run/*.log)"
/usr/bin/python3 - "$tmp/m.jsonl" "$steps" <<'PY' && pass "loss falls over the run; every step's gradient norm in the metrics" || fail "loss falls over the run; every step's gradient norm in the metrics" "$(head -c 600 "$tmp/m.jsonl")"
import json, sys
rows = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda r: r["step"])
assert [r["step"] for r in rows] == list(range(1, int(sys.argv[2]) + 1))
first, last = rows[0]["loss"], rows[-1]["loss"]
assert first > 5.0 and last < first - 0.5, (first, last)
assert all(len(r["stages"]) == 2 and r["stages"][0]["compute_ms"] > 0 for r in rows)
# the global gradient norm of every step, one value whichever replica reported it
assert all(0 < r["grad_norm"] < 1e3 for r in rows), [r.get("grad_norm") for r in rows]
assert not any(r.get("skipped") for r in rows)
PY
/usr/bin/python3 - "$tmp/m.jsonl" "$steps" <<'PY' && pass "training.eval: the held-out loss after steps 10, 20 and the last, falling" || fail "training.eval: the held-out loss after steps 10, 20 and the last" "$(grep -o '"step":[0-9]*,[^,]*,"loss":[^,]*,"eval_loss":[^,]*' "$tmp/m.jsonl")"
import json, sys
rows = {r["step"]: r for r in (json.loads(l) for l in open(sys.argv[1]))}
last = int(sys.argv[2])
ev = {s: r["eval_loss"] for s, r in rows.items() if "eval_loss" in r}
assert sorted(ev) == [10, 20, last], sorted(ev)
assert 0 < ev[last] < ev[10] - 0.3, ev
PY
grep -q "eval after step 10: loss" "$tmp"/run/worker-3.log && pass "training.eval: the last stage's workers log it" \
    || fail "training.eval: the last stage's workers log it" "$(grep -h eval "$tmp"/run/*.log | head -3)"
ls "$tmp"/ckpt/stage-*-step-*.ckpt >/dev/null 2>&1 && pass "checkpoints written per stage" \
    || fail "checkpoints written per stage" "$(ls "$tmp/ckpt" 2>&1)"
# the summary names the command that samples the trained model's text; it runs
cmd=$(sed -n "s/^  its text: \(.*\) sample --checkpoint-dir .* --prompt 'The '$/\1/p" <<<"$out")
text=$([ -x "$cmd" ] && "$cmd" sample --checkpoint-dir "$tmp/ckpt" --prompt 'The ' --tokens 16 2>/dev/null)
[ "${text:0:4}" = "The " ] && pass "the summary's sample command gives the model's text ($(head -c 20 <<<"$text" | cat -v))" \
    || fail "the summary's sample command gives the model's text" "command '$cmd': '$text'; $(grep 'its text' <<<"$out")"
# the summary's eval command computes, from the step's checkpoint set of two stages, the
# held-out loss the pipeline 2 x data 2 job reported after its last step (holmes-node eval)
evcmd=$(sed -n "s/^  its held-out loss: //p" <<<"$out")
ev=$(cd "$REPO" && [ -n "$evcmd" ] && eval "${evcmd/--checkpoint-dir /--json --checkpoint-dir }" 2>&1)
/usr/bin/python3 - "$tmp/m.jsonl" "$steps" "$ev" <<'PY' && pass "holmes-node eval (the summary's command) gives the job's last held-out loss" || fail "holmes-node eval (the summary's command) gives the job's last held-out loss" "command '$evcmd': $ev"
import json, sys
rows = {r["step"]: r for r in (json.loads(l) for l in open(sys.argv[1]))}
job = rows[int(sys.argv[2])]["eval_loss"]
got = json.loads(sys.argv[3])
assert got["step"] == int(sys.argv[2]) and got["data"]["batches"] == 2 and got["data"]["seq"] == 64, got
assert abs(got["data"]["loss"] - job) < 2e-6, (got["data"]["loss"], job)
print("# job %.6f, eval %.6f" % (job, got["data"]["loss"]))
PY
# and the same from the job's manifest alone (--job: its checkpoints, eval data and shape)
ev=$(cd "$REPO" && "$HOLMES_BIN_DIR/holmes-node" eval --job "$tmp/job.yaml" --json 2>&1)
/usr/bin/python3 - "$tmp/m.jsonl" "$steps" "$ev" <<'PY' && pass "holmes-node eval --job JOB.yaml gives the job's last held-out loss" || fail "holmes-node eval --job JOB.yaml gives the job's last held-out loss" "$ev"
import json, sys
rows = {r["step"]: r for r in (json.loads(l) for l in open(sys.argv[1]))}
got = json.loads(sys.argv[3])
assert got["step"] == int(sys.argv[2]) and got["data"]["batches"] == 2 and got["data"]["batch"] == 4, got
assert abs(got["data"]["loss"] - rows[int(sys.argv[2])]["eval_loss"]) < 2e-6, got
PY
# Local workers share the cores: each pins its training to its share, the two replicas of a
# stage (ranks 0,1 and 2,3) on different cores when there are two or more.
pins=$(cat "$tmp"/run/worker-*.log | sed -n 's/.*cpu affinity: rank \([0-9]*\) computes on core \([0-9-]*\) .*/\1 \2/p' | sort)
[ "$(wc -l <<<"$pins")" = 4 ] && pass "every local worker pins its training (cpu affinity spread)" \
    || fail "every local worker pins its training (cpu affinity spread)" "$pins"
if [ "$(nproc)" -ge 2 ]; then
    core() { awk -v r="$1" '$1 == r {print $2}' <<<"$pins"; }
    [ "$(core 0)" != "$(core 1)" ] && [ "$(core 2)" != "$(core 3)" ] \
        && pass "the replicas of each stage compute on different cores" \
        || fail "the replicas of each stage compute on different cores" "$pins"
fi
# more compute threads than a rank's cores: trains, and says so
sed -e "s/steps: $steps/steps: 2/" -e "s#$tmp/ckpt#$tmp/ckpt-omp#" "$tmp/job.yaml" >"$tmp/job-omp.yaml"
out=$(cd "$REPO" && OMP_NUM_THREADS=$(($(nproc) + 1)) timeout 300 "$OPERATOR" local "$tmp/job-omp.yaml" \
      --run-dir "$tmp/run-omp" 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -q "compute threads (OMP_NUM_THREADS) share this rank's" "$tmp"/run-omp/worker-0.log \
    && pass "pinned workers with too many compute threads warn" \
    || fail "pinned workers with too many compute threads warn" "rc $rc: $out $(tail -n 3 "$tmp"/run-omp/worker-0.log)"
# the same finished job run twice more: each time its checkpoints are moved aside, none deleted
for again in 1 2; do
    out=$(cd "$REPO" && timeout 300 "$OPERATOR" local "$tmp/job-omp.yaml" --run-dir "$tmp/run-omp$again" 2>&1)
done
kept=$(ls -d "$tmp"/ckpt-omp.previous-* 2>/dev/null | wc -l)
files=$(ls "$tmp"/ckpt-omp.previous-*/stage-*-step-000000002.ckpt 2>/dev/null | wc -l)
[ "$kept" = 2 ] && [ "$files" = 4 ] && grep -q "from a finished run (step 2): moved to $tmp/ckpt-omp.previous-" <<<"$out" \
    && pass "a finished run again: the earlier runs' checkpoints moved aside, none deleted" \
    || fail "a finished run again: the earlier runs' checkpoints moved aside, none deleted" \
        "$kept directories, $files step-2 files: $out"
fi
# a torn latest-step ("2abc") is refused naming the file, before anything moves: it was read
# as step 2 (a finished run: the directory moved aside) while the workers refuse it
if [ -d "$tmp/ckpt-omp" ]; then
    printf '2abc\n' >"$tmp/ckpt-omp/latest-step"
    out=$(cd "$REPO" && timeout 60 "$OPERATOR" local "$tmp/job-omp.yaml" --run-dir "$tmp/run-omp3" 2>&1)
    rc=$?
    kept2=$(ls -d "$tmp"/ckpt-omp.previous-* 2>/dev/null | wc -l)
    left=$(ls "$tmp"/ckpt-omp/stage-*-step-000000002.ckpt 2>/dev/null | wc -l)
    [ $rc -ne 0 ] && [ "$kept2" = 2 ] && [ "$left" = 2 ] \
        && grep -q "spec.training.checkpoint.path: $tmp/ckpt-omp/latest-step must hold a step number" <<<"$out" \
        && pass "a torn latest-step: refused naming the file, nothing moved" \
        || fail "a torn latest-step: refused naming the file, nothing moved" \
            "rc $rc, $kept2 moved aside: $out $(ls "$tmp/ckpt-omp")"
fi

# training.eval.holdout: the corpus's last tenth is held out. Its first 90 windows of T+1 = 65
# bytes are "abab..." (and one more byte: window 89's last target), the last ten "xyxy...": a model
# trained on the first part alone never sees x or y as a target, so its held-out loss stays
# high while its training loss falls; had training read the held-out windows, both would fall.
# The summary's eval command (--holdout) and eval --job give the job's held-out loss again.
/usr/bin/python3 -c 'import sys; sys.stdout.write("ab" * 2880 + "a" + "xy" * 320)' >"$tmp/abxy.txt"
example_job "$tmp/ho.yaml" "$name-ho" 24 "$tmp/ckpt-ho" -e "s/warmupSteps: 20/warmupSteps: 2/" \
    -e "s#examples/data/corpus.txt#$tmp/abxy.txt#" \
    -e "s#    eval: .*#    eval: {holdout: 0.1, batches: 2}#"
out=$(cd "$REPO" && timeout 300 "$OPERATOR" local "$tmp/ho.yaml" --run-dir "$tmp/run-ho" \
      --metrics-out "$tmp/mho.jsonl" 2>&1)
rc=$?
/usr/bin/python3 - "$tmp/mho.jsonl" <<'PY' && pass "training.eval.holdout: training reads none of the held-out windows (its loss falls, theirs stays high)" || fail "training.eval.holdout: training reads none of the held-out windows" "rc $rc: $(tail -c 400 "$tmp/mho.jsonl") $out"
import json, sys
rows = {r["step"]: r for r in (json.loads(l) for l in open(sys.argv[1]))}
last = rows[24]
print("# step 24: training loss %.4f, held-out loss %.4f" % (last["loss"], last["eval_loss"]))
assert last["loss"] < 2.0 and last["eval_loss"] > last["loss"] + 2.0, last
PY
grep -qE "^  held-out loss [0-9.]+ after step 24 \(the last 10 % of the training data's windows, kept out of training: training.eval.holdout\)$" <<<"$out" \
    && pass "training.eval.holdout: the summary gives the held-out loss and what was held out" \
    || fail "training.eval.holdout: the summary gives the held-out loss and what was held out" "$out"
evcmd=$(sed -n "s/^  its held-out loss: //p" <<<"$out")
ev=$(cd "$REPO" && [ -n "$evcmd" ] && eval "${evcmd/--checkpoint-dir /--json --checkpoint-dir }" 2>&1)
ev2=$(cd "$REPO" && "$HOLMES_BIN_DIR/holmes-node" eval --job "$tmp/ho.yaml" --json 2>&1)
/usr/bin/python3 - "$tmp/mho.jsonl" "$ev" "$ev2" <<'PY' && pass "training.eval.holdout: the summary's eval command (--holdout 0.1) and eval --job give the job's held-out loss" || fail "training.eval.holdout: the summary's eval command and eval --job give the job's held-out loss" "command '$evcmd': $ev; --job: $ev2"
import json, sys
job = {r["step"]: r for r in (json.loads(l) for l in open(sys.argv[1]))}[24]["eval_loss"]
for out in sys.argv[2:]:
    got = json.loads(out)
    assert got["data"]["holdout"] == 0.1 and got["data"]["windows"] == 10, got
    assert abs(got["data"]["loss"] - job) < 2e-6, (got["data"]["loss"], job)
PY

# Kill a worker after the first checkpoints: in-place restart from the checkpoint.
rm -rf "$tmp/ckpt"
sed -e "s/steps: $steps/steps: $((steps * 2))/" "$tmp/job.yaml" >"$tmp/job2.yaml"
( cd "$REPO" && timeout 300 "$OPERATOR" local "$tmp/job2.yaml" --run-dir "$tmp/run2" \
      --metrics-out "$tmp/m2.jsonl" >"$tmp/out2" 2>&1; echo $? >"$tmp/rc2" ) &
for _ in $(seq 600); do
    ls "$tmp"/ckpt/stage-3-4-step-000000004.ckpt >/dev/null 2>&1 && break; sleep 0.1
done
victim=$(pgrep -f -- "--pod $name-worker-3 " | head -1)
[ -n "$victim" ] && kill -9 "$victim"
wait
out2=$(cat "$tmp/out2")
[ "$(cat "$tmp/rc2")" = 0 ] && pass "killed worker: training still succeeds" \
    || fail "killed worker: training still succeeds" "$out2 $(tail -n 5 "$tmp"/run2/*.log)"
grep -q "1 restart" <<<"$out2" && pass "killed worker: one in-place restart" || fail "killed worker: one in-place restart" "$out2"
/usr/bin/python3 - "$tmp/m2.jsonl" "$((steps * 2))" <<'PY' && pass "loss curve continues from the checkpoint" || fail "loss curve continues from the checkpoint"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step"] for r in rows]
last = int(sys.argv[2])
assert steps[-1] == last, steps
# Steps follow each other, except where training resumed after a checkpoint (every 4 steps).
for a, b in zip(steps, steps[1:]):
    assert b == a + 1 or (b - 1) % 4 == 0, (a, b, steps)
assert rows[-1]["loss"] < rows[0]["loss"] - 0.5
PY
