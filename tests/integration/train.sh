# holmes-node train (one rank of the distributed trainer, configured from a TrainingJob spec made of
# its flags or --job): it learns, a resumed run repeats an uninterrupted one, a checkpoint that
# does not verify is passed over for an older one, a manifest trains as its flags do, bad input
# is refused.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-train.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2
corpus=$REPO/examples/data/corpus.txt
args=(--data "$corpus" --layers 2 --channels 32 --heads 2 --seq 32 --batch 4 --steps 8
      --lr 3e-3 --warmup 2 --seed 7)

"$NODE" train "${args[@]}" --checkpoint-dir "$tmp/a" --checkpoint-every 4 --keep 5 \
    --metrics-out "$tmp/a.jsonl" >"$tmp/a.out" 2>&1
check "train.runs" test "$(wc -l <"$tmp/a.jsonl")" -eq 8
first=$(sed -n 1p "$tmp/a.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
last=$(sed -n 8p "$tmp/a.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
check "train.loss_falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }'
check "train.checkpoints" test -f "$tmp/a/stage-0-2-step-000000004.ckpt" -a -f "$tmp/a/stage-0-2-step-000000008.ckpt"

# Resume from the step-4 checkpoint in a fresh process: steps 5..8 must repeat exactly.
mkdir -p "$tmp/b"
cp "$tmp/a/stage-0-2-step-000000004.ckpt" "$tmp/b/"
"$NODE" train "${args[@]}" --checkpoint-dir "$tmp/b" --resume --metrics-out "$tmp/b.jsonl" \
    >"$tmp/b.out" 2>&1
check "train.resume_announced" grep -q "resumed from the checkpoint of step 4" "$tmp/b.out"
strip() { sed 's/,"ms".*//' "$1"; }
if [ "$(sed -n 5,8p "$tmp/a.jsonl" | sed 's/,"ms".*//')" = "$(strip "$tmp/b.jsonl")" ] &&
   [ "$(wc -l <"$tmp/b.jsonl")" -eq 4 ]; then
    pass "train.resume_same_losses"
else
    fail "train.resume_same_losses" "$(sed -n 5,8p "$tmp/a.jsonl"; cat "$tmp/b.jsonl")"
fi
check "train.resume_final_same" cmp "$tmp/a/stage-0-2-step-000000008.ckpt" "$tmp/b/stage-0-2-step-000000008.ckpt"

# --eval-holdout (training.eval.holdout): the corpus's last tenth held out, measured after the
# last step; holmes-node eval --holdout gives that loss again from the checkpoint. A share
# above 0.5 is refused naming the flag.
"$NODE" train "${args[@]}" --eval-holdout 0.1 --eval-batches 2 --checkpoint-dir "$tmp/ho" \
    --metrics-out "$tmp/ho.jsonl" >"$tmp/ho.out" 2>&1
job=$(sed -n 's/.*"step":8,.*"eval_loss":\([0-9.]*\).*/\1/p' "$tmp/ho.jsonl")
got=$("$NODE" eval --checkpoint-dir "$tmp/ho" --data "$corpus" --holdout 0.1 --batch 4 --seq 32 \
      --batches 2 --seed 7 --json 2>&1 | jq -r '.data.loss' 2>/dev/null)
if [ -n "$job" ] && [ -n "$got" ] && awk -v a="$job" -v b="$got" 'BEGIN { d = a - b; exit !(d < 1e-4 && d > -1e-4) }'; then
    pass "train.eval_holdout: the held-out tenth's loss after the last step ($job), again from eval --holdout ($got)"
else fail "train.eval_holdout" "job '$job', eval '$got': $(tail -3 "$tmp/ho.out")"; fi
out=$("$NODE" train "${args[@]}" --eval-holdout 0.6 2>&1); rc=$?
[ $rc = 2 ] && grep -q -- '--eval-holdout must be a number in \[0, 0.5\]' <<<"$out" \
    && pass "train.eval_holdout_range: 0.6 refused naming the flag" || fail "train.eval_holdout_range" "rc $rc: $out"

# holmes-node sample: text from the checkpoints just written (a byte-level model): the prompt,
# then as many bytes as asked; the same seed, the same text; greedy (temperature 0) whatever the
# seed; what cannot be sampled said with exit status 2 (usage) or 1 (the model's limits).
smp() { "$NODE" sample --checkpoint-dir "$tmp/a" --prompt "In the " --tokens 20 "$@" 2>/dev/null; }
smp --seed 5 >"$tmp/s1"; rc=$?
smp --seed 5 >"$tmp/s2"; smp --seed 6 >"$tmp/s3"
smp --temperature 0 --seed 1 >"$tmp/g1"; smp --temperature 0 --seed 2 >"$tmp/g2"
if [ $rc -eq 0 ] && [ "$(head -c 7 "$tmp/s1")" = "In the " ] && [ "$(wc -c <"$tmp/s1")" -eq 28 ] &&
   cmp -s "$tmp/s1" "$tmp/s2" && ! cmp -s "$tmp/s1" "$tmp/s3" && cmp -s "$tmp/g1" "$tmp/g2"; then
    pass "sample: the prompt and 20 bytes; the same seed the same text, another seed another; greedy alike"
else fail "sample" "rc $rc: $(cat -v "$tmp/s1" "$tmp/s2" "$tmp/s3" "$tmp/g1" "$tmp/g2")"; fi
# nucleus sampling: a nucleus of the least share keeps the most likely token alone (the greedy
# text whatever the seed); a share of 1 is no nucleus (the text of --seed 5 above)
smp --top-p 0.000001 --seed 3 >"$tmp/p1"; smp --top-p 1 --seed 5 >"$tmp/p2"
cmp -s "$tmp/p1" "$tmp/g1" && cmp -s "$tmp/p2" "$tmp/s1" && pass "sample --top-p: 1e-6 the greedy text, 1 the plain draw" \
    || fail "sample --top-p: 1e-6 the greedy text, 1 the plain draw" "$(cat -v "$tmp/p1" "$tmp/g1" "$tmp/p2" "$tmp/s1")"
# the same model exported as llm.c weights samples the same text
"$NODE" export --checkpoint-dir "$tmp/a" --llmc "$tmp/sample.bin" >/dev/null 2>&1
"$NODE" sample --init-from "$tmp/sample.bin" --prompt "In the " --tokens 20 --seed 5 >"$tmp/s4" 2>/dev/null
cmp -s "$tmp/s1" "$tmp/s4" && pass "sample --init-from the exported llm.c file: the same text" \
    || fail "sample --init-from the exported llm.c file: the same text" "$(cat -v "$tmp/s1" "$tmp/s4")"
out=$("$NODE" sample --checkpoint-dir "$tmp/a" --init-from x.bin 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "one of --checkpoint-dir and --init-from" <<<"$out" && pass "sample.usage" \
    || fail "sample.usage" "rc $rc: $out"
# usage, exit 2, before anything is printed (until 2026-11-29 exit 1 from the sampler)
out=$("$NODE" sample --checkpoint-dir "$tmp/a" --prompt "x" --tokens 40 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--tokens 40: a prompt of 1 tokens and 40 more exceed the 32 positions of the model (at most --tokens 31)" <<<"$out" \
    && pass "sample.too_long" || fail "sample.too_long" "rc $rc: $out"
out=$("$NODE" sample --checkpoint-dir "$tmp/a" --prompt "" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--prompt is empty" <<<"$out" && pass "sample.empty_prompt" || fail "sample.empty_prompt" "rc $rc: $out"
mkdir -p "$tmp/nomodel"
out=$("$NODE" sample --init-from "$tmp/nomodel" --prompt "x" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "model directory $tmp/nomodel: no readable model.safetensors" <<<"$out" \
    && pass "sample.init_from_dir_without_model" || fail "sample.init_from_dir_without_model" "rc $rc: $out"

# Bad input: a clear message naming the file, exit status 1, never a crash.
expect_error() { # name, needle, args...
    local name=$1 needle=$2; shift 2
    local out rc
    out=$("$NODE" train "$@" 2>&1); rc=$?
    if [ $rc -eq 1 ] && grep -q -- "$needle" <<<"$out"; then pass "$name"; else fail "$name" "rc $rc: $out"; fi
}
printf 'not a shard' >"$tmp/foreign.bin"
model=(--layers 2 --channels 32 --heads 2 --seq 32)
expect_error "train.bad_shard" "foreign.bin: .*header" --data "$tmp/foreign.bin" "${model[@]}" --vocab 256 --steps 1
# a truncated newest checkpoint, recorded as the latest: passed over for the one before it, with
# the reason, nothing lost (a newer file that latest-step does not name is never read)
cp "$tmp/a/stage-0-2-step-000000008.ckpt" "$tmp/b/stage-0-2-step-000000009.ckpt"
truncate -s 1000 "$tmp/b/stage-0-2-step-000000009.ckpt"
echo 9 >"$tmp/b/latest-step"
out=$("$NODE" train "${args[@]}" --steps 12 --checkpoint-dir "$tmp/b" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "step 9 does not verify: .*step-000000009.ckpt" <<<"$out" &&
   grep -q "resumed from the checkpoint of step 8" <<<"$out" && grep -q "^step 12/12 " <<<"$out"; then
    pass "train.truncated_checkpoint_passed_over"
else fail "train.truncated_checkpoint_passed_over" "rc $rc: $out"; fi
rm -f "$tmp/b/stage-0-2-step-000000009.ckpt" "$tmp/b"/*step-00000001[0-2]*
echo 8 >"$tmp/b/latest-step"
expect_error "train.checkpoint_shape" "channels is 32 but the job has 64" --data "$corpus" \
    --layers 2 --channels 64 --heads 2 --seq 32 --steps 9 --checkpoint-dir "$tmp/b" --resume
expect_error "train.vocab_too_small" "corpus.txt: byte .* not below the model's vocabulary 100" \
    --data "$corpus" "${model[@]}" --vocab 100 --steps 1
out=$("$NODE" train --data "$corpus" --layers 2 --channels 32 --heads 3 --seq 32 --steps 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "multiple of heads" <<<"$out" && pass "train.bad_heads" || fail "train.bad_heads" "$out"
expect_error "train.model_required" "model's shape is required" --data "$corpus" --steps 1
expect_error "train.steps_required" "steps is required" --data "$corpus" "${model[@]}"
# The data file truncated while training: an error naming it (exit 1), not a SIGBUS (135) from
# a mapped file. Long enough a run that it is still training when the file is cut.
cp "$corpus" "$tmp/live.txt"
"$NODE" train --data "$tmp/live.txt" "${model[@]}" --batch 4 --steps 1000000 \
    --metrics-out "$tmp/live.jsonl" >"$tmp/live.out" 2>&1 &
live=$!
if wait_for 120 test -s "$tmp/live.jsonl"; then truncate -s 100 "$tmp/live.txt"; fi
wait_for 60 eval '! kill -0 $live' || kill -9 $live
wait $live; rc=$?
if [ $rc -eq 1 ] && grep -q "live.txt: .* truncated while training" "$tmp/live.out"; then
    pass "train.data_truncated_while_training"
else fail "train.data_truncated_while_training" "rc $rc: $(tail -5 "$tmp/live.out")"; fi
# The held-out data truncated: the evaluation fails naming it, after the step's checkpoint was
# written (no step lost to the failed evaluation).
cp "$corpus" "$tmp/val.txt"
"$NODE" train --data "$corpus" "${model[@]}" --batch 4 --steps 1000000 --eval-data "$tmp/val.txt" \
    --eval-every 5 --eval-batches 2 --checkpoint-dir "$tmp/ev" --checkpoint-every 5 \
    --metrics-out "$tmp/ev.jsonl" >"$tmp/ev.out" 2>&1 &
live=$!
if wait_for 120 grep -q eval_loss "$tmp/ev.jsonl"; then truncate -s 100 "$tmp/val.txt"; fi
wait_for 60 eval '! kill -0 $live' || kill -9 $live
wait $live; rc=$?
at=$(sed -nE 's/.*evaluation after step ([0-9]+): .*evaluation data.*val.txt.*truncated while training.*/\1/p' "$tmp/ev.out")
if [ $rc -eq 1 ] && [ -n "$at" ] && [ "$(cat "$tmp/ev/latest-step" 2>/dev/null)" = "$at" ]; then
    pass "train.eval_data_truncated: the evaluation after step $at fails naming the file; that step's checkpoint is kept"
else fail "train.eval_data_truncated" "rc $rc, step '$at', latest $(cat "$tmp/ev/latest-step" 2>&1): $(tail -3 "$tmp/ev.out")"; fi

# A run that diverges (learning rate and weight decay at their largest): its gradient norm turns
# NaN; each such step is skipped with a notice, the fourth in a row fails the run naming the
# field; every metrics line is JSON (null for what is not finite); the checkpoints are finite:
# the same directory resumes with a lower learning rate and trains on.
div=(--data "$corpus" --layers 2 --channels 64 --heads 4 --seq 64 --batch 4 --micro-batches 1
     --lr-schedule constant --checkpoint-dir "$tmp/div" --checkpoint-every 2)
"$NODE" train "${div[@]}" --steps 60 --lr 10 --weight-decay 10 --metrics-out "$tmp/div.jsonl" \
    >"$tmp/div.out" 2>&1; rc=$?
at=$(sed -nE 's/.*training diverged: step ([0-9]+): its .* is NaN .*, 4 steps in a row \(spec.training.maxNonFiniteSteps skips at most 3\); the parameters are those of step ([0-9]+),.*/\1 \2/p' "$tmp/div.out")
skips=$(grep -c "^NonFiniteStep: step [0-9]* skipped: its .* (\([1-3]\) in a row, at most 3" "$tmp/div.out")
jsonl=$(/usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(sum(1 for r in rows if r.get("skipped") and r["grad_norm"] is None))' "$tmp/div.jsonl" 2>&1)
if [ $rc -eq 1 ] && [ -n "$at" ] && [ "$skips" = 3 ] && [ "$jsonl" = 3 ]; then
    pass "train.diverged: steps skipped 3 times, then failed at step ${at% *} naming spec.training.maxNonFiniteSteps"
else fail "train.diverged" "rc $rc, '$at', $skips notices, skipped rows '$jsonl': $(tail -3 "$tmp/div.out")"; fi
latest=$(cat "$tmp/div/latest-step" 2>/dev/null)
out=$("$NODE" train "${div[@]}" --steps $((latest + 2)) --lr 1e-4 --weight-decay 0 2>&1); rc=$?
if [ $rc -eq 0 ] && [ -n "$latest" ] && [ "$latest" -le "${at#* }" ] &&
   grep -q "resumed from the checkpoint of step $latest" <<<"$out" &&
   grep -q "^step $((latest + 2))/$((latest + 2)) loss [0-9]" <<<"$out"; then
    pass "train.diverged_checkpoints_finite: step $latest (at most the last update) resumes with a lower lr"
else fail "train.diverged_checkpoints_finite" "rc $rc, latest '$latest': $out"; fi
rm -rf "$tmp/div"
expect_error "train.diverged_max_nonfinite_0" "training diverged: step [0-9]*: .*, 1 step in a row" \
    "${div[@]}" --steps 60 --lr 10 --weight-decay 10 --max-nonfinite-steps 0
# an initial model holding a NaN is refused, naming the flag, the file and the tensor
"$NODE" export --checkpoint-dir "$tmp/a" --llmc "$tmp/a.bin" >/dev/null 2>&1
/usr/bin/python3 -c '
import struct, sys
f = open(sys.argv[1], "r+b"); f.seek(256 * 4 + 4 * 100); f.write(struct.pack("<f", float("nan")))' "$tmp/a.bin"
expect_error "train.init_from_nonfinite" "--init-from: model file .*a.bin: wte\[100\] = nan is not finite" \
    "${args[@]}" --init-from "$tmp/a.bin"
# latest-step naming a step of which no file is left, newer sets beside it: said as it is (until
# 2026-11-29 "no checkpoint set verifies on every stage; ... no stage file of step 3")
cp -r "$tmp/a" "$tmp/lt" && printf '3\n' >"$tmp/lt/latest-step"
expect_error "train.latest_step_gone" "lt/latest-step: names step 3, but .*lt holds no file of that step (its sets: [0-9, ]*8;" \
    "${args[@]}" --checkpoint-dir "$tmp/lt"
rm -rf "$tmp/lt"
# no --data (and no --job): refused as usage, not trained on the demo corpus (until 2026-11-29
# it was, silently: the API's default for a job that omits training.data)
out=$("$NODE" train --layers 2 --channels 32 --heads 2 --seq 32 --steps 1 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--data is required" <<<"$out" && pass "train.no_data: usage (exit 2), naming --data" \
    || fail "train.no_data" "rc $rc: $out"
expect_error "train.metrics_out_unwritable" "--metrics-out $tmp/no-such-dir/m.jsonl: cannot open it: No such file or directory" \
    "${args[@]}" --steps 2 --metrics-out "$tmp/no-such-dir/m.jsonl"
# the model's shape comes from --init-from: a flag that says otherwise is refused naming it and
# the file's value (until 2026-11-29 --vocab was silently dropped and --layers alone asked for
# the whole shape); the file's own values are accepted
"$NODE" export --checkpoint-dir "$tmp/a" --llmc "$tmp/ok.bin" >/dev/null 2>&1
expect_error "train.init_from_vocab" "--vocab 300: the model's shape comes from --init-from .*ok.bin, whose vocab is 256" \
    --data "$corpus" --init-from "$tmp/ok.bin" --vocab 300 --steps 1
expect_error "train.init_from_layers" "--layers 3: the model's shape comes from --init-from .*ok.bin, whose layers is 2" \
    --data "$corpus" --init-from "$tmp/ok.bin" --layers 3 --steps 1
out=$("$NODE" train --data "$corpus" --init-from "$tmp/ok.bin" --layers 2 --vocab 256 --batch 4 --seq 32 \
    --steps 1 --micro-batches 1 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "^step 1/1 loss [0-9]" <<<"$out" && pass "train.init_from_same_shape: the file's own values accepted" \
    || fail "train.init_from_same_shape" "rc $rc: $out"

# the learning-rate schedules reach the trainer: warmup-stable-decay (2 steps up, the peak held,
# the last 4 down towards 0) and linear (down from the peak after the warm-up; as the cosine, the
# floor is the rate a step after the last)
sched() { "$NODE" train --data "$corpus" "${model[@]}" --steps 10 --warmup 2 --lr 1e-3 --min-lr-ratio 0 \
    --log-every 1 "$@" 2>&1 | sed -nE 's/^step [0-9]+\/10 loss [0-9.]+ lr ([0-9.e+-]+) .*/\1/p' | tr '\n' ' '; }
got=$(sched --lr-schedule wsd --decay-steps 4)
want="5.000e-04 1.000e-03 1.000e-03 1.000e-03 1.000e-03 1.000e-03 1.000e-03 7.500e-04 5.000e-04 2.500e-04 "
[ "$got" = "$want" ] && pass "train.lr_wsd: warm-up, the peak held, the last 4 steps decaying" \
    || fail "train.lr_wsd" "lr per step '$got', want '$want'"
got=$(sched --lr-schedule linear)
want="5.000e-04 1.000e-03 1.000e-03 8.750e-04 7.500e-04 6.250e-04 5.000e-04 3.750e-04 2.500e-04 1.250e-04 "
[ "$got" = "$want" ] && pass "train.lr_linear: a straight line down after the warm-up" \
    || fail "train.lr_linear" "lr per step '$got', want '$want'"
expect_error "train.decay_steps_without_wsd" "spec.training.optimizer.decaySteps: only with schedule wsd" \
    --data "$corpus" "${model[@]}" --steps 10 --decay-steps 4

# --job: a TrainingJob manifest trains as the same flags do (the same spec, the same losses)
cat >"$tmp/job.yaml" <<YAML
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: train-job}
spec:
  workers: 1
  gpusPerWorker: 0
  model: {layers: 2, hidden: 32, heads: 2, vocab: 256, seqLen: 32}
  parallelism: {microBatches: 2, microBatchSize: 4}
  training:
    steps: 3
    seed: 7
    optimizer: {lr: 3.0e-3, warmupSteps: 2}
    data: {path: $corpus, format: text}
YAML
"$NODE" train --job "$tmp/job.yaml" --metrics-out "$tmp/job.jsonl" >"$tmp/job.out" 2>&1
"$NODE" train "${args[@]}" --steps 3 --micro-batches 2 --metrics-out "$tmp/flags.jsonl" >"$tmp/flags.out" 2>&1
if [ -s "$tmp/job.jsonl" ] && [ "$(strip "$tmp/job.jsonl")" = "$(strip "$tmp/flags.jsonl")" ]; then
    pass "train.job_manifest_as_flags"
else fail "train.job_manifest_as_flags" "$(cat "$tmp/job.jsonl" "$tmp/flags.jsonl"; tail -3 "$tmp/job.out")"; fi
# training.data.sources: a blend of two text sets trains; a source that is not there fails
# naming it
head -c 20000 "$corpus" >"$tmp/part.txt"
sed "s#    data: {path: $corpus, format: text}#    data: {format: text, sources: [{path: $corpus, weight: 3}, {path: $tmp/part.txt, weight: 1}]}#" \
    "$tmp/job.yaml" >"$tmp/blend.yaml"
out=$("$NODE" train --job "$tmp/blend.yaml" --metrics-out "$tmp/blend.jsonl" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "data (a blend of sources): 2 file(s), 228397 tokens" <<<"$out" && grep -q "^step 3/3 loss" <<<"$out" \
    && pass "train.data_sources: a blend of two sets trains" || fail "train.data_sources" "rc $rc: $out"
"$NODE" train "${args[@]}" --steps 3 --micro-batches 2 --data-source "$corpus=3" --data-source "$tmp/part.txt=1" \
    --metrics-out "$tmp/blend-flags.jsonl" >/dev/null 2>&1
[ -s "$tmp/blend.jsonl" ] && [ "$(strip "$tmp/blend.jsonl")" = "$(strip "$tmp/blend-flags.jsonl")" ] \
    && [ "$(strip "$tmp/blend.jsonl")" != "$(strip "$tmp/job.jsonl")" ] \
    && pass "train.data_source_flags: --data-source trains as the manifest's sources (not as its single path)" \
    || fail "train.data_source_flags" "$(cat "$tmp/blend.jsonl" "$tmp/blend-flags.jsonl")"
# the blend with eval.holdout: each source keeps its last tenth apart; training reads the rest
# (other losses than the whole blend's) and the held-out parts, blended, are evaluated after the
# last step; eval --job cannot read a blend's parts and says how to measure each
sed 's#^    data: {format: text, sources:#    eval: {holdout: 0.1, batches: 2}\n&#' "$tmp/blend.yaml" >"$tmp/blend-ho.yaml"
sed -i 's#^    data: {format: text, sources:.*#&\n    checkpoint: {path: '"$tmp"'/blend-ho-ckpt}#' "$tmp/blend-ho.yaml"
out=$("$NODE" train --job "$tmp/blend-ho.yaml" --metrics-out "$tmp/blend-ho.jsonl" 2>&1); rc=$?
ev=$(sed -n 's/.*"step":3,.*"eval_loss":\([0-9.]*\).*/\1/p' "$tmp/blend-ho.jsonl")
[ $rc -eq 0 ] && [ -n "$ev" ] && [ "$(strip "$tmp/blend-ho.jsonl" | sed 's/,"eval_loss".*//')" != "$(strip "$tmp/blend.jsonl")" ] \
    && pass "train.data_sources_holdout: a blend with eval.holdout trains on the rest and evaluates the held-out parts ($ev)" \
    || fail "train.data_sources_holdout" "rc $rc, eval '$ev': $out $(cat "$tmp/blend-ho.jsonl")"
out=$("$NODE" eval --job "$tmp/blend-ho.yaml" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'spec.training.eval.holdout holds out a share of each of spec.training.data.sources; .*give --data SOURCE --holdout 0.1 for each' <<<"$out" \
    && pass "train.data_sources_holdout_eval: eval --job of a blend's holdout says how to measure each source" \
    || fail "train.data_sources_holdout_eval" "rc $rc: $out"
sed "s#$tmp/part.txt#$tmp/none.txt#" "$tmp/blend.yaml" >"$tmp/blend-missing.yaml"
expect_error "train.data_source_missing" "spec.training.data.sources\[1\].path: .*none.txt" --job "$tmp/blend-missing.yaml"
sed 's/heads: 2/heads: 3/' "$tmp/job.yaml" >"$tmp/bad-job.yaml"
expect_error "train.job_invalid" "bad-job.yaml: .*spec.model.hidden" --job "$tmp/bad-job.yaml"
out=$("$NODE" train --steps x 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--steps must be an integer" <<<"$out" && pass "train.bad_flag" || fail "train.bad_flag" "$out"
"$NODE" train --help | grep -q -- "--checkpoint-dir" && pass "train.help" || fail "train.help"
