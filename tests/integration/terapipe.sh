# TeraPipe token slices on real processes (holmes-node worker, rank-table mode, TCP between the
# stages): 20 steps with uneven slices of 5, 17 and 42 of 64 tokens on pipeline 2 x data 2 (1F1B)
# and on pipeline 4 (GPipe) equal the unsliced runs: every step's loss within 1e-5, the final
# parameters and AdamW moments within 5e-5 (of their largest magnitude). At lr 1e-3; at 3e-3 the
# slices' different summation order, magnified by AdamW on parameters whose gradients are near
# zero, reached 1e-4 on the parameters (local_tp.sh's bound). The 5e-5: on an AMD EPYC (OpenBLAS
# 0.3.21's kernels for it) the largest difference was 2.1e-5, in 2 of 35,648 elements: the tied
# embedding's moments, where a token's gradient sums its positions across the slices in another
# order (the median difference was 2e-9); a slice computed wrongly differs by O(1). The engine
# against PyTorch is test_gpt_slice's. Release pass only (time); the ASan pass runs
# test_gpt_slice and test_pipeline.
source "$(dirname "$0")/lib.bash"
if [ "${HOLMES_VARIANT:-release}" != release ]; then
    echo "# terapipe: checked in the release pass"; exit 0
fi
tmp=$(mktemp -d /tmp/holmes-terapipe.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
steps=20

# run NAME P D SCHEDULE SLICES_JSON: 4 ranks of pipeline P x data D; logs and checkpoints in $tmp
run() {
    local name=$1 P=$2 D=$3 sched=$4 slices=$5 rc=0
    rank_table_job "$tmp/$name" "$P" "$D" "${slices:+\"token_slices\": $slices,}" \
        --data "$REPO/examples/data/corpus.txt" --layers 4 --channels 32 --heads 4 --vocab 256 \
        --max-seq 64 --batch 1 --seq 64 --micro-batches 2 --schedule "$sched" --steps $steps --lr 1e-3 \
        --checkpoint-dir "$tmp/ckpt-$name" --checkpoint-every $steps --all-ranks || rc=1
    # the last stage's first replica prints the loss
    sed -nE 's/^step ([0-9]+) loss ([0-9.]+).*/\1 \2/p' "$tmp/$name.$(((P - 1) * D)).log" >"$tmp/$name.loss"
    [ $rc -eq 0 ] && [ "$(wc -l <"$tmp/$name.loss")" -eq $steps ]
}

same() { # A B: losses within 1e-5 and final checkpoints within 5e-5
    /usr/bin/python3 - "$tmp" "$1" "$2" "$steps" <<'PY' || return 1
import sys
tmp, a, b, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
la = [float(l.split()[1]) for l in open("%s/%s.loss" % (tmp, a))]
lb = [float(l.split()[1]) for l in open("%s/%s.loss" % (tmp, b))]
worst = max(abs(x - y) / abs(y) for x, y in zip(la, lb))
print("  losses of %d steps: largest relative difference %.2g" % (len(la), worst))
assert len(la) == len(lb) == steps and worst <= 1e-5, worst
PY
    /usr/bin/python3 "$REPO/tests/integration/ckpt_same.py" "$tmp/ckpt-$1" "$tmp/ckpt-$2" "$steps" 5e-5 5e-5
}

uneven='[0, 5, 22, 64]'
for c in "p2d2 2 2 1f1b" "p4 4 1 gpipe"; do
    set -- $c
    if run "$1-sliced" "$2" "$3" "$4" "$uneven" && run "$1-whole" "$2" "$3" "$4" ""; then
        pass "$1 ($4): sliced (5, 17, 42 of 64 tokens) and unsliced runs train $steps steps"
        out=$(same "$1-sliced" "$1-whole" 2>&1) && pass "$1 ($4): slices = unsliced (losses 1e-5, parameters, moments 5e-5)" \
            || fail "$1 ($4): slices = unsliced" "$out"
        echo "$out"
    else
        fail "$1 ($4): sliced and unsliced runs train" "$(grep -iE 'error|fail|refused|in use' "$tmp"/$1-*.log | head -8; tail -n 2 "$tmp"/$1-*.log | head -24)"
    fi
done
# holmes-operator local with tokenSlices: auto: the planner's slicing is printed beside the
# unsliced prediction, and every worker trains with exactly it
cat >"$tmp/auto.yaml" <<YAML
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: terapipe-auto-$$}
spec:
  workers: 4
  gpusPerWorker: 0
  model: {layers: 4, hidden: 64, heads: 4, vocab: 256, seqLen: 256}
  parallelism: {pipeline: 4, data: 1, microBatches: 1, microBatchSize: 1, tokenSlices: auto, schedule: gpipe}
  training: {steps: 3, data: {path: $REPO/examples/data/corpus.txt, format: text}}
  emulation:
    nics:
    - {class: infiniband, fabric: ib-a, gbps: 200, count: 2}
    - {class: roce, fabric: roce-b, gbps: 100, count: 2}
    crossFabricGbps: 10
YAML
out=$(cd "$REPO" && timeout 120 "$OPERATOR" local "$tmp/auto.yaml" --run-dir "$tmp/run-auto" --metrics-out "$tmp/auto.jsonl" 2>&1); rc=$?
line=$(grep -o 'token slices: [0-9]* ([0-9, ]*\(, \.\.\.\)\? tokens), chosen by the planner; unsliced: [0-9.]* s' <<<"$out")
n=$(sed -nE 's/token slices: ([0-9]+) .*/\1/p' <<<"$line"); lens=$(sed -nE 's/.*\(([0-9, ]*) tokens\).*/\1/p' <<<"$line")
agree=1
for w in 0 1 2 3; do grep -q "TeraPipe: $n token slices of $lens tokens of 256" "$tmp/run-auto/worker-$w.log" || agree=0; done
[ $rc -eq 0 ] && [ -n "$line" ] && [ "${n:-0}" -gt 1 ] && [ $agree = 1 ] \
    && pass "local, tokenSlices auto: the planner's $n slices ($lens) printed, and every worker trains with them" \
    || fail "local, tokenSlices auto: the planner's slicing printed and trained" "rc $rc line '$line': $(tail -5 <<<"$out") $(grep -h TeraPipe "$tmp"/run-auto/worker-*.log | head -2)"
# the stages' times as the workers measure them: compute, communication and the bubble (waits for
# the neighbours) fill the step; the first stage, with the fewest layers, waits
/usr/bin/python3 - "$tmp/auto.jsonl" <<'PY' && pass "stage times: compute + comm + bubble fill each stage's step, and the bubble is measured" \
    || fail "stage times: compute + comm + bubble fill each stage's step, and the bubble is measured"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
for st in r["stages"]:
    parts = st["compute_ms"] + st["comm_ms"] + st["bubble_ms"]
    assert st["compute_ms"] > 0 and abs(parts - st["step_ms"]) <= 0.05 * st["step_ms"] + 1, st
assert sum(st["bubble_ms"] for st in r["stages"]) > 0, r["stages"]
PY
# plan --json shows the slicing beside the unsliced prediction
pj=$("$OPERATOR" plan "$tmp/auto.yaml" --json)
jq -e '.token_slices.chosen_by == "planner" and .token_slices.count > 1 and (.token_slices.lengths | add) == 256
       and .token_slices.predicted_step_seconds < .token_slices.unsliced_step_seconds' <<<"$pj" >/dev/null \
    && pass "plan --json: the slicing, its predicted step and the unsliced one" \
    || fail "plan --json: the slicing" "$(jq -c .token_slices <<<"$pj")"
# where slicing cannot pay (1 stage: nothing to overlap), auto keeps the sequence whole
sed -e 's/workers: 4/workers: 1/' -e 's/pipeline: 4/pipeline: 1/' -e 's/count: 2}/count: 1}/' \
    -e '/roce-b/d' "$tmp/auto.yaml" >"$tmp/auto1.yaml"
pj=$("$OPERATOR" plan "$tmp/auto1.yaml" --json)
jq -e '.token_slices.chosen_by == "planner" and .token_slices.count == 1 and (.token_slices.lengths | length) == 0' <<<"$pj" >/dev/null \
    && pass "plan: auto picks unsliced when slicing does not pay (one stage)" \
    || fail "plan: auto picks unsliced when slicing does not pay" "$(jq -c .token_slices <<<"$pj")"

# Token slices with tensor parallelism, end to end (holmes-operator local, 2 workers x 2 emulated
# GPUs: tensor 2 x pipeline 2, the CPU engine's ranks summing each slice's rows across the group):
# 3 slices and the unsliced run give the same loss every step (1e-5), and every rank says it
# slices. Before 2026-11-28 tensor > 1 with slices was refused.
tpjob() { # NAME SLICES
    gpus_job "$tmp/$1.yaml" "tp-$1-$$" 8 "$tmp/ckpt-tp-$1" -e 's/parallelism: {pipeline: 2, data: 2,/parallelism: {tensor: 2, pipeline: 2, data: 1, tokenSlices: '"$2"',/' \
        -e 's/logEverySteps: 10/logEverySteps: 1/'
    (cd "$REPO" && timeout 150 "$OPERATOR" local "$tmp/$1.yaml" --run-dir "$tmp/run-tp-$1" --metrics-out "$tmp/tp-$1.jsonl") >"$tmp/tp-$1.out" 2>&1
}
if tpjob sliced 3 && tpjob whole 1; then
    /usr/bin/python3 - "$tmp/tp-sliced.jsonl" "$tmp/tp-whole.jsonl" <<'PY' \
        && pass "tensor 2 with 3 token slices, end to end: the same loss as unsliced every step (1e-5)" \
        || fail "tensor 2 with 3 token slices: the same loss as unsliced every step"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("  tensor 2, sliced vs unsliced: %d steps, largest relative loss difference %.2g" % (len(a), worst))
assert len(a) == len(b) == 8 and worst <= 1e-5, (a, b)
PY
    n=$(grep -l "TeraPipe: 3 token slices of 22, 21, 21 tokens of 64" "$tmp"/run-tp-sliced/worker-*.log | wc -l)
    [ "$n" -eq 2 ] && pass "tensor 2 with slices: both workers' ranks pipeline the 3 slices" \
        || fail "tensor 2 with slices: both workers' ranks pipeline the 3 slices" "$(grep -h TeraPipe "$tmp"/run-tp-sliced/*.log | head -4)"
else
    fail "tensor 2 with token slices, end to end: both runs train" "$(tail -5 "$tmp"/tp-*.out)"
fi

# the pipeline really carried slices: each activation message is one slice's tokens
grep -q "TeraPipe: 3 token slices of 5, 17, 42 tokens of 64" "$tmp/p4-sliced.0.log" && pass "the worker says it pipelines token slices" \
    || fail "the worker says it pipelines token slices" "$(head -5 "$tmp/p4-sliced.0.log")"
