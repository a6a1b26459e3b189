# holmes-node eval on a model holmes-node train made (byte-level text, 2 layers): the held-out
# loss equals the one training.eval reported after the last step (the same windows), from the
# checkpoint set and from the model exported as an llm.c file; a multiple-choice set in
# HellaSwag's JSON lines (the real continuation of a text against its letters shuffled) is
# answered well by the trained model and by chance by an untrained one; the same set written as
# llm.c's eval file (write_evalfile's layout, by Python here) gives the same scores, example by
# example; each choice is the argmin of the losses it reports; bad input is refused naming the
# file and line or flag. (The scores against the engine's own loss: tests/unit/test_choice_eval.c.)
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-eval.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
corpus=$REPO/examples/data/corpus.txt
head -c 180000 "$corpus" >"$tmp/train.txt"
tail -c 28000 "$corpus" >"$tmp/val.txt"
train() { # train CKPT STEPS LR
    (cd "$tmp" && OMP_NUM_THREADS=2 "$NODE" train --data train.txt --layers 2 --channels 64 \
        --heads 4 --vocab 256 --seq 64 --batch 4 --micro-batches 1 --steps "$2" --lr "$3" \
        --eval-data val.txt --eval-batches 6 --checkpoint-dir "$1" --seed 7 2>&1)
}
steps=150
[ "${HOLMES_VARIANT:-}" = asan ] && steps=60
out=$(train ck $steps 3e-3)
job=$(sed -n "s/^eval after step $steps: loss \([0-9.]*\) .*/\1/p" <<<"$out")
check "a byte-level model trained $steps steps, its held-out loss reported ($job)" test -n "$job"

ev=$(cd "$tmp" && "$NODE" eval --checkpoint-dir ck --data val.txt --batch 4 --seq 64 --batches 6 --seed 7 2>&1)
check "eval: the job's last held-out loss from its checkpoint, the same windows" \
    grep -q "data: 6 batches of 4 x 64 tokens (1536 tokens) of val.txt: loss $job," <<<"$ev"
(cd "$tmp" && "$NODE" export --checkpoint-dir ck --llmc model.bin >/dev/null 2>&1)
ev=$(cd "$tmp" && "$NODE" eval --init-from model.bin --data val.txt --batch 4 --seq 64 --batches 6 --seed 7 2>&1)
check "eval --init-from the exported llm.c file: the same loss" grep -q "loss $job," <<<"$ev"
# (--json's object is standard output alone: on a loaded machine an evaluation past 10 s writes
# progress lines on standard error)
js=$(cd "$tmp" && "$NODE" eval --checkpoint-dir ck --data val.txt --json 2>>"$tmp/eval.err")
windows=$(( ($(stat -c %s "$tmp/val.txt") - 1) / 64 ))
check "eval --json: by default every window once ($windows of 65 bytes), one sequence a batch, perplexity exp(loss)" \
    jq_true "$js" ".step == $steps and .data.batches == $windows and .data.batch == 1 and .data.seq == 64 and
                   .data.tokens == $windows * 64 and ((.data.perplexity - (.data.loss | exp)) | fabs) < 1e-9 and
                   .data.engine == \"cpu\""

# HellaSwag-style: 40 examples, the right ending among three of its letters shuffled
/usr/bin/python3 - "$tmp/val.txt" >"$tmp/hs.jsonl" <<'PY'
import json, random, sys
words = open(sys.argv[1]).read().split()
rng = random.Random(5)
for i in range(40):
    k = rng.randrange(0, len(words) - 20)
    right = " ".join(words[k + 8:k + 12])
    ends = []
    for _ in range(3):
        l = list(right)
        rng.shuffle(l)
        ends.append("".join(l))
    label = rng.randrange(4)
    ends.insert(label, right)
    print(json.dumps({"ind": i, "ctx": " ".join(words[k:k + 8]), "endings": ends,
                      "label": label if i % 2 else str(label), "split": "val"}))
PY
js=$(cd "$tmp" && "$NODE" eval --checkpoint-dir ck --choices hs.jsonl --scores-out sc.jsonl --json 2>>"$tmp/eval.err")
check "choices: the trained model picks the real text (acc_norm $(jq -r .choices.acc_norm <<<"$js" 2>/dev/null) >= 0.8 of 40)" \
    jq_true "$js" ".choices.examples == 40 and .choices.acc_norm >= 0.8 and .choices.acc >= 0.8"
check "choices: --scores-out, a line an example, each choice the argmin of its losses, counted as reported" \
    /usr/bin/python3 - "$tmp/sc.jsonl" "$js" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rep = json.loads(sys.argv[2])["choices"]
assert len(rows) == 40 and [r["example"] for r in rows] == list(range(1, 41))
for r in rows:
    assert r["pred"] == r["sum"].index(min(r["sum"])) and r["pred_norm"] == r["mean"].index(min(r["mean"])), r
    assert all(s > 0 for s in r["sum"]), r
assert sum(r["pred"] == r["label"] for r in rows) == rep["correct"]
assert sum(r["pred_norm"] == r["label"] for r in rows) == rep["correct_norm"]
PY
out=$(train ck0 1 1e-9)
js0=$(cd "$tmp" && "$NODE" eval --checkpoint-dir ck0 --choices hs.jsonl --json 2>>"$tmp/eval.err")
check "choices: a model of one step at lr 1e-9 (as initialised) does not (acc_norm $(jq -r .choices.acc_norm <<<"$js0" 2>/dev/null) < 0.6)" \
    jq_true "$js0" ".choices.examples == 40 and .choices.acc_norm < 0.6"

# the same examples as llm.c's eval file (bytes as tokens; the ending after a space)
/usr/bin/python3 - "$tmp/hs.jsonl" "$tmp/hs.bin" <<'PY'
import json, struct, sys
stream, longest = [], 0
for idx, line in enumerate(open(sys.argv[1])):
    ex = json.loads(line)
    ctx = list(ex["ctx"].encode())
    ends = [list((" " + e).encode()) for e in ex["endings"]]
    s = [65535, 0, idx, int(ex["label"]), len(ends), len(ctx)] + ctx
    for e in ends:
        s += [len(e)] + e
    s[1] = 2 * len(s)
    longest = max(longest, s[1])
    stream += s
header = [20240522, 1, idx + 1, longest] + [0] * 252
open(sys.argv[2], "wb").write(struct.pack("<256i", *header) + struct.pack("<%dH" % len(stream), *stream))
PY
(cd "$tmp" && "$NODE" eval --checkpoint-dir ck --hellaswag hs.bin --scores-out scb.jsonl >/dev/null 2>&1)
check "choices: llm.c's eval file of the same examples scores them alike, example by example" \
    /usr/bin/python3 - "$tmp/sc.jsonl" "$tmp/scb.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 40
for x, y in zip(a, b):
    assert y["example"] == x["example"] - 1
    x.pop("example"); y.pop("example")
    assert x == y, (x, y)
PY
# the scores against PyTorch (tests/reference/gpt2_torch.py: GPT-2 as transformers computes it,
# in double precision) on the same model exported as safetensors, the context shortened alike
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    (cd "$tmp" && "$NODE" export --checkpoint-dir ck --safetensors model.safetensors >/dev/null 2>&1)
    res=$(/usr/bin/python3 - "$tmp/model.safetensors" "$tmp/hs.jsonl" "$tmp/sc.jsonl" "$REPO/tests/reference" <<'PY' 2>&1
import json, sys
import torch
sys.path.insert(0, sys.argv[4])
import gpt2_torch
sd, meta = gpt2_torch.load_safetensors(sys.argv[1])
sd = {k: v.double() for k, v in sd.items()}
NH, T = int(meta["n_head"]), sd["wpe.weight"].shape[0]
worst, picks = 0.0, 0
for line, got in zip(open(sys.argv[2]), open(sys.argv[3])):
    ex, got = json.loads(line), json.loads(got)
    ctx = list(ex["ctx"].encode())
    ends = [list((" " + e).encode()) for e in ex["endings"]]
    drop = max(0, len(ctx) + max(len(e) for e in ends) - 1 - T)
    assert got["dropped"] == drop, (got["dropped"], drop)
    c = ctx[drop:]
    sums = []
    for e in ends:
        seq = torch.tensor(c + e, dtype=torch.long)
        lg = gpt2_torch.logits(sd, NH, seq[:-1])[len(c) - 1:]
        sums.append(torch.nn.functional.cross_entropy(lg, seq[len(c):], reduction="sum").item())
    worst = max(worst, max(abs(a - b) / b for a, b in zip(got["sum"], sums)))
    picks += got["pred"] == sums.index(min(sums))
assert picks == 40, picks
print("%.3g" % worst)
assert worst < 1e-4, worst
PY
)
    check "choices: PyTorch's GPT-2 in float64 gives every completion's summed loss within 1e-4 (worst $(tail -n 1 <<<"$res")) and the same choices" \
        grep -qE '^[0-9.e-]+$' <<<"$(tail -n 1 <<<"$res")"
    # the held-out loss over every window once (the order does not change the mean)
    js=$(cd "$tmp" && "$NODE" eval --checkpoint-dir ck --data val.txt --json 2>>"$tmp/eval.err")
    res=$(/usr/bin/python3 - "$tmp/model.safetensors" "$tmp/val.txt" "$REPO/tests/reference" "$js" <<'PY' 2>&1
import json, sys
import torch
sys.path.insert(0, sys.argv[3])
import gpt2_torch
sd, meta = gpt2_torch.load_safetensors(sys.argv[1])
sd = {k: v.double() for k, v in sd.items()}
NH, T = int(meta["n_head"]), sd["wpe.weight"].shape[0]
data = torch.tensor(list(open(sys.argv[2], "rb").read()), dtype=torch.long)
n = (data.numel() - 1) // T
total = 0.0
with torch.no_grad():
    for k in range(n):
        w = data[k * T:k * T + T + 1]
        total += torch.nn.functional.cross_entropy(gpt2_torch.logits(sd, NH, w[:-1]), w[1:]).item()
got = json.loads(sys.argv[4])["data"]
assert got["batches"] == n, (got["batches"], n)
rel = abs(got["loss"] - total / n) / (total / n)
print("%.6f %.3g" % (total / n, rel))
assert rel < 1e-5, rel
PY
)
    check "data: PyTorch's mean loss over the $(jq -r .data.batches <<<"$js" 2>/dev/null) windows ($(tail -n 1 <<<"$res")) is eval's, within 1e-5" \
        grep -qE '^[0-9.]+ [0-9.e-]+$' <<<"$(tail -n 1 <<<"$res")"
else
    echo "SKIP eval: PyTorch is not installed for /usr/bin/python3 (apt-get install python3-torch): the scores were not checked against PyTorch"
fi
out=$(cd "$tmp" && "$NODE" eval --checkpoint-dir ck --choices hs.jsonl --examples 5 2>&1)
check "choices: --examples 5 scores the first 5" grep -q "choices: 5 examples of hs.jsonl" <<<"$out"

# refusals: refused RC TEXT checks the last command's exit status and output
refused() { [ "$rc" = "$1" ] && grep -qF -- "$2" <<<"$out"; }
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" 2>&1); rc=$?
check "nothing to evaluate: usage (exit 2)" refused 2 "nothing to evaluate"
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --choices "$tmp/hs.jsonl" --batch 4 2>&1); rc=$?
check "--batch without --data: usage (exit 2)" refused 2 "go with --data"
{ head -3 "$tmp/hs.jsonl"; echo '{"ctx": "x", "endings": ["a", "b"], "label": 5}'; } >"$tmp/bad.jsonl"
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --choices "$tmp/bad.jsonl" 2>&1); rc=$?
check "a bad example refused, naming the file and line 4 (exit 1)" \
    refused 1 'bad.jsonl: line 4: "label" 5 is not the index of one of its 2 endings'
# a run that fails leaves an earlier --scores-out as it was, and no temporary file
cp "$tmp/sc.jsonl" "$tmp/keep.jsonl"
{ head -3 "$tmp/hs.jsonl"; printf '{"ctx": "x", "endings": ["a", "%s"], "label": 0}\n' "$(head -c 300 /dev/zero | tr '\0' b)"; } >"$tmp/long.jsonl"
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --choices "$tmp/long.jsonl" --scores-out "$tmp/keep.jsonl" 2>&1); rc=$?
check "a completion too long for the model refused, naming its line; the earlier --scores-out kept, no .tmp left" \
    bash -c "[ $rc = 1 ] && grep -q 'long.jsonl, line 4: a completion of 301 tokens' <<<\"\$1\" && cmp -s '$tmp/sc.jsonl' '$tmp/keep.jsonl' && [ ! -e '$tmp/keep.jsonl.tmp' ]" _ "$out"
# --scores-out is renamed over its path: never over what is read, nor onto a non-regular file
# (until 2026-11-29 the choices file itself was replaced by the scores)
sum_in=$(sha256sum "$tmp/hs.jsonl" "$tmp/ck"/* | sha256sum)
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --choices "$tmp/hs.jsonl" --scores-out "$tmp/hs.jsonl" 2>&1); rc=$?
check "--scores-out onto the --choices file refused, naming both (exit 2)" \
    refused 2 "--scores-out $tmp/hs.jsonl: that is --choices $tmp/hs.jsonl, which this command reads"
ln -s hs.jsonl "$tmp/hs-link.jsonl"
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --choices "$tmp/hs-link.jsonl" --scores-out "$tmp/hs.jsonl" 2>&1); rc=$?
check "--scores-out onto the file --choices names through a link refused (exit 2)" refused 2 "which this command reads"
ckf=$(ls "$tmp/ck"/*.ckpt | head -1)
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --choices "$tmp/hs.jsonl" --scores-out "$ckf" 2>&1); rc=$?
check "--scores-out onto a checkpoint file refused (exit 2)" refused 2 "a file of --checkpoint-dir"
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --choices "$tmp/hs.jsonl" --scores-out "$tmp/hs-link.jsonl" 2>&1); rc=$?
check "--scores-out onto a symbolic link refused, the link kept (exit 2)" \
    bash -c "[ $rc = 2 ] && grep -q 'a symbolic link is there' <<<\"\$1\" && [ -L '$tmp/hs-link.jsonl' ]" _ "$out"
mkfifo "$tmp/fifo"
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --choices "$tmp/hs.jsonl" --scores-out "$tmp/fifo" 2>&1); rc=$?
check "--scores-out onto a FIFO refused, the FIFO kept (exit 2)" \
    bash -c "[ $rc = 2 ] && grep -q 'a FIFO is there' <<<\"\$1\" && [ -p '$tmp/fifo' ]" _ "$out"
check "the refused runs changed none of their inputs" test "$(sha256sum "$tmp/hs.jsonl" "$tmp/ck"/* | sha256sum)" = "$sum_in"
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --data "$tmp/val.txt" --seq 65 2>&1); rc=$?
check "--seq beyond the model's 64 positions refused" refused 1 "the model has 64 positions"
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --data "$tmp/val.txt" --engine tpu 2>&1); rc=$?
check "--engine tpu refused, naming the engines (exit 2)" refused 2 '--engine: "tpu" is not one of cpu, cuda-fp32, cuda-bf16'
if ! "$NODE" engines 2>/dev/null | grep -q cuda-bf16; then
    out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --data "$tmp/val.txt" --engine cuda-bf16 2>&1); rc=$?
    check "--engine cuda-bf16 in a build without CUDA refused, saying so (exit 2)" refused 2 "built without the CUDA engine"
fi
cat >"$tmp/job.yaml" <<YAML
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: ev}
spec:
  workers: 1
  gpusPerWorker: 0
  model: {layers: 2, hidden: 64, heads: 4, vocab: 256, seqLen: 64}
  parallelism: {microBatchSize: 4}
  training:
    steps: $steps
    seed: 7
    data: {path: train.txt, format: text}
    eval: {path: val.txt, format: text, batches: 6}
    checkpoint: {path: ck}
YAML
out=$(cd "$tmp" && "$NODE" eval --job job.yaml 2>&1)
check "eval --job: the manifest's checkpoints, eval data, batch, seq, batches and seed: the job's loss" \
    grep -q "data: 6 batches of 4 x 64 tokens (1536 tokens) of val.txt: loss $job," <<<"$out"
sed '/checkpoint:/d' "$tmp/job.yaml" >"$tmp/nock.yaml"
out=$(cd "$tmp" && "$NODE" eval --job nock.yaml 2>&1); rc=$?
check "eval --job of a job that keeps no checkpoint refused, naming the field (exit 2)" \
    refused 2 "spec.training.checkpoint.path is not set"
out=$(cd "$tmp" && "$NODE" eval --job job.yaml --choices hs.jsonl --batch 4 2>&1); rc=$?
check "eval --job with --choices and --batch (its held-out data not taken): refused (exit 2)" \
    refused 2 "--batch, --seq, --batches and --seed go with --data"
out=$(cd "$tmp" && "$NODE" eval --job job.yaml --checkpoint-dir ck 2>&1); rc=$?
check "eval --job with --checkpoint-dir: usage (exit 2)" refused 2 "give one of --checkpoint-dir, --init-from and --job"
out=$("$NODE" eval --checkpoint-dir "$tmp/ck" --data "$tmp/none*.bin" 2>&1); rc=$?
check "--data matching no file refused, naming the flag" refused 1 "--data"
out=$("$NODE" eval --checkpoint-dir "$tmp/nock" --data "$tmp/val.txt" 2>&1); rc=$?
check "a directory without checkpoints refused" refused 1 "nock"
