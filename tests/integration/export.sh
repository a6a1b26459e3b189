# holmes-node export on a real job's checkpoints: examples/local-tiny.yaml trains (pipeline 2 x
# data 2: a set of two stage files) and the set is exported as one llm.c GPT-2 checkpoint and as
# safetensors with GPT-2's tensor names. holmes-node train starts from the exported llm.c file
# (initFrom's import) and computes its loss on one window of text; PyTorch (Debian's
# python3-torch, where installed for /usr/bin/python3) loads the safetensors file into a GPT-2
# with transformers' conventions (Conv1D weights [in, out], tied head) and must compute the same
# loss on the same tokens, and the llm.c file must hold the same values. Without torch that part
# prints SKIP. Both exported files are initFrom files (model_import.h): the same loss from each, the
# same text sampled. (The bit-exact import/export/import round trip: tests/unit/test_model_export.c
# and test_model_import.c.)
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-export.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
example_job "$tmp/job.yaml" "ex-$$" 8 "$tmp/ckpt" -e "s/everySteps: 50/everySteps: 4/" -e "s/warmupSteps: 20/warmupSteps: 2/"
(cd "$REPO" && timeout 300 "$OPERATOR" local "$tmp/job.yaml" --quiet --run-dir "$tmp/run" >"$tmp/local.out" 2>&1)
check "a pipeline 2 x data 2 job trains 8 steps and checkpoints" grep -q "succeeded in" "$tmp/local.out"
check "its set is two stage files" test "$(ls "$tmp/ckpt" | grep -c 'step-000000008.ckpt')" = 2

out=$("$NODE" export --checkpoint-dir "$tmp/ckpt" --llmc "$tmp/model.bin" --safetensors "$tmp/model.safetensors" 2>&1)
check "export: step 8 written as llm.c and safetensors" grep -q "exported step 8 of" <<<"$out"
check "export: both files there, no temporary left" bash -c "[ -s '$tmp/model.bin' ] && [ -s '$tmp/model.safetensors' ] && ! ls '$tmp' | grep -q '\.tmp\.'"
out=$("$NODE" export --checkpoint-dir "$tmp/ckpt" --step 3 --llmc "$tmp/x.bin" 2>&1)
check "export of a step with no set: refused, naming it" grep -q "no checkpoint of step 3" <<<"$out"
out=$("$NODE" export --checkpoint-dir "$tmp/ckpt" 2>&1)
check "export with nothing to write: usage" grep -q "nothing to write" <<<"$out"
# what is wrong with the directory, said as it is (until 2026-11-29 all three were "no checkpoint
# set covers a whole model", and latest-step's "8abc" read as 8)
out=$("$NODE" export --checkpoint-dir "$tmp/no-such" --llmc "$tmp/x.bin" 2>&1)
check "export of a missing directory: named, with the system's reason" grep -q "checkpoint directory $tmp/no-such: No such file or directory" <<<"$out"
mkdir "$tmp/empty"
out=$("$NODE" export --checkpoint-dir "$tmp/empty" --llmc "$tmp/x.bin" 2>&1)
check "export of a directory without checkpoints: says so" grep -q "holds no checkpoint" <<<"$out"
cp -r "$tmp/ckpt" "$tmp/ck2" && printf '8abc\n' >"$tmp/ck2/latest-step"
out=$("$NODE" export --checkpoint-dir "$tmp/ck2" --llmc "$tmp/x.bin" 2>&1)
check "export: a latest-step that is not a number refused, naming the file and what it holds" \
    grep -q 'ck2/latest-step must hold a step number (decimal digits, at most 2^53), not "8abc"' <<<"$out"
printf '99999999999999999999\n' >"$tmp/ck2/latest-step"
out=$("$NODE" export --checkpoint-dir "$tmp/ck2" --llmc "$tmp/x.bin" 2>&1)
check "export: a latest-step beyond any step refused, not clamped" grep -q 'must hold a step number' <<<"$out"
rm -rf "$tmp/ck2" "$tmp/x.bin"
# each file is renamed over its target: never over the set being read, nor onto a link, a FIFO,
# nor twice onto one file (until 2026-11-29 each of these replaced what was there)
sum_ck=$(sha256sum "$tmp/ckpt"/* | sha256sum)
ckf=$(ls "$tmp/ckpt"/*step-000000008.ckpt | head -1)
out=$("$NODE" export --checkpoint-dir "$tmp/ckpt" --llmc "$ckf" 2>&1); rc=$?
check "export onto a file of the set it reads: refused, naming it (exit 2)" \
    bash -c "[ $rc = 2 ] && grep -q -- '--llmc $ckf: that is a file of --checkpoint-dir' <<<\"\$1\"" _ "$out"
out=$("$NODE" export --checkpoint-dir "$tmp/ckpt" --llmc "$tmp/same.bin" --safetensors "$tmp/same.bin" 2>&1); rc=$?
check "export: --llmc and --safetensors one file refused (exit 2)" \
    bash -c "[ $rc = 2 ] && grep -q -- '--safetensors $tmp/same.bin: the same file as --llmc' <<<\"\$1\" && [ ! -e '$tmp/same.bin' ]" _ "$out"
ln -s model.bin "$tmp/link.bin"
out=$("$NODE" export --checkpoint-dir "$tmp/ckpt" --llmc "$tmp/link.bin" 2>&1); rc=$?
check "export onto a symbolic link refused, the link kept (exit 2)" \
    bash -c "[ $rc = 2 ] && grep -q 'a symbolic link is there' <<<\"\$1\" && [ -L '$tmp/link.bin' ]" _ "$out"
ln "$tmp/model.bin" "$tmp/hard.bin"
out=$("$NODE" export --checkpoint-dir "$tmp/ckpt" --llmc "$tmp/model.bin" --safetensors "$tmp/hard.bin" 2>&1); rc=$?
check "export: two targets that are one file (a hard link) refused (exit 2)" \
    bash -c "[ $rc = 2 ] && grep -q 'the same file as --llmc' <<<\"\$1\"" _ "$out"
mkfifo "$tmp/fifo"
out=$("$NODE" export --checkpoint-dir "$tmp/ckpt" --llmc "$tmp/fifo" 2>&1); rc=$?
check "export onto a FIFO refused, the FIFO kept (exit 2)" \
    bash -c "[ $rc = 2 ] && grep -q 'a FIFO is there' <<<\"\$1\" && [ -p '$tmp/fifo' ]" _ "$out"
check "the refused exports left the checkpoint set as it was" test "$(sha256sum "$tmp/ckpt"/* | sha256sum)" = "$sum_ck"

# One window of T + 1 = 65 tokens: the only batch of a micro-batch of one sequence.
head -c 65 "$REPO/examples/data/corpus.txt" >"$tmp/one.txt"
(cd "$tmp" && OMP_NUM_THREADS=1 "$NODE" train --data "$tmp/one.txt" --init-from "$tmp/model.bin" \
    --batch 1 --seq 64 --steps 1 --lr 1e-9 --metrics-out "$tmp/m.jsonl" >"$tmp/train.out" 2>&1)
loss=$(jq -r .loss "$tmp/m.jsonl" 2>/dev/null | head -1)
check "holmes-node train imports the exported llm.c file (loss $loss)" awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 10) }'

# The safetensors file is an initFrom too (model_import.h): the same loss on the same window
(cd "$tmp" && OMP_NUM_THREADS=1 "$NODE" train --data "$tmp/one.txt" --init-from "$tmp/model.safetensors" \
    --batch 1 --seq 64 --steps 1 --lr 1e-9 --metrics-out "$tmp/ms.jsonl" >"$tmp/train-st.out" 2>&1)
loss_st=$(jq -r .loss "$tmp/ms.jsonl" 2>/dev/null | head -1)
check "holmes-node train imports the exported safetensors file: the llm.c file's loss ($loss_st, $loss)" \
    test -n "$loss" -a "$loss_st" = "$loss"
a=$("$NODE" sample --init-from "$tmp/model.bin" --prompt 'In the' --tokens 16 --seed 3 2>/dev/null)
b=$("$NODE" sample --init-from "$tmp/model.safetensors" --prompt 'In the' --tokens 16 --seed 3 2>/dev/null)
check "holmes-node sample: the safetensors file writes the llm.c file's text" test -n "$a" -a "$a" = "$b"
out=$("$NODE" export --checkpoint-dir "$tmp/ckpt" --hf-dir "$tmp/hf" 2>&1)
heads=$(sed -n 's/.* \([0-9]*\) heads,.*/\1/p' <<<"$out" | head -1)
check "export --hf-dir: model.safetensors and config.json (GPT2LMHeadModel, n_head $heads)" \
    test -s "$tmp/hf/model.safetensors" -a "$(jq -r '.architectures[0] + " " + (.n_head | tostring)' "$tmp/hf/config.json" 2>/dev/null)" = "GPT2LMHeadModel $heads"
(cd "$tmp" && OMP_NUM_THREADS=1 "$NODE" train --data "$tmp/one.txt" --init-from "$tmp/hf" \
    --batch 1 --seq 64 --steps 1 --lr 1e-9 --metrics-out "$tmp/mh.jsonl" >"$tmp/train-hf.out" 2>&1)
check "holmes-node train --init-from the directory: the llm.c file's loss ($(jq -r .loss "$tmp/mh.jsonl" 2>/dev/null | head -1))" \
    test -n "$loss" -a "$(jq -r .loss "$tmp/mh.jsonl" 2>/dev/null | head -1)" = "$loss"
printf '\x15\x00\x00\x00\x00\x00\x00\x00{"x":{"dtype":"F32"}}' >"$tmp/other.safetensors"
out=$(cd "$tmp" && "$NODE" train --data "$tmp/one.txt" --init-from "$tmp/other.safetensors" --steps 1 2>&1)
check "holmes-node train: a safetensors file of another model refused, naming its tensor" \
    grep -q 'tensor "x" is not one of GPT-2' <<<"$out"

if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "SKIP export: PyTorch is not installed for /usr/bin/python3 (apt-get install python3-torch): the safetensors file was not loaded in PyTorch"
    exit 0
fi
res=$(/usr/bin/python3 - "$tmp/model.safetensors" "$tmp/model.bin" "$tmp/one.txt" "$REPO/tests/reference" <<'PY' 2>&1
import struct, sys
import torch
st_path, llmc_path, text_path = sys.argv[1:4]
sys.path.insert(0, sys.argv[4])
import gpt2_torch

sd, _ = gpt2_torch.load_safetensors(st_path)
V, C = sd["wte.weight"].shape
L = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("h."))
hdr = struct.unpack("<256i", open(llmc_path, "rb").read(1024))
maxT, NH, Vp = hdr[2], hdr[5], hdr[7]
assert (hdr[3], hdr[4], hdr[6]) == (V, L, C), ("llm.c header", hdr[:8])

# the llm.c file holds the same values (its matrices [out, in], the safetensors ones [in, out])
flat = torch.frombuffer(bytearray(open(llmc_path, "rb").read()[1024:]), dtype=torch.float32)
sizes = [("wte", Vp * C), ("wpe", maxT * C)] + [(k, L * s) for k, s in [
    ("ln_1.weight", C), ("ln_1.bias", C), ("attn.c_attn.weight", 3 * C * C), ("attn.c_attn.bias", 3 * C),
    ("attn.c_proj.weight", C * C), ("attn.c_proj.bias", C), ("ln_2.weight", C), ("ln_2.bias", C),
    ("mlp.c_fc.weight", 4 * C * C), ("mlp.c_fc.bias", 4 * C), ("mlp.c_proj.weight", 4 * C * C),
    ("mlp.c_proj.bias", C)]] + [("ln_f.weight", C), ("ln_f.bias", C)]
at, groups = 0, {}
for k, n in sizes:
    groups[k] = flat[at:at + n]
    at += n
assert at == flat.numel()
assert torch.equal(groups["wte"].reshape(Vp, C)[:V], sd["wte.weight"])
assert torch.equal(groups["ln_f.bias"], sd["ln_f.bias"])
for l in range(L):
    for k in ("attn.c_attn.weight", "mlp.c_proj.weight", "mlp.c_fc.bias"):
        g = groups[k].reshape(L, -1)[l]
        hf = sd[f"h.{l}.{k}"]
        assert torch.equal(g, (hf.t().reshape(-1) if hf.dim() == 2 else hf)), (l, k)

# GPT-2 as transformers computes it (tests/reference/gpt2_torch.py), in double precision
def gpt2_loss(sd, tokens, targets):
    return torch.nn.functional.cross_entropy(gpt2_torch.logits(sd, NH, tokens), targets).item()

ids = torch.tensor(list(open(text_path, "rb").read()), dtype=torch.long)
sd64 = {k: v.double() for k, v in sd.items()}
print("%.7f" % gpt2_loss(sd64, ids[:-1], ids[1:]))
PY
)
torch_loss=$(tail -n 1 <<<"$res")
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d / a < 1e-4) }'; }
check "PyTorch loads the safetensors file (GPT-2's names and layout; the llm.c file holds the same values)" \
    grep -qE '^[0-9]+\.[0-9]+$' <<<"$torch_loss"
check "PyTorch's loss on the window ($torch_loss) equals Holmes's on the exported model ($loss), within 1e-4" \
    close "$torch_loss" "$loss"
[ -n "${VERBOSE:-}" ] && echo "$res"
# transformers itself, where it is installed: from_pretrained of the --hf-dir directory
if ! /usr/bin/python3 -c 'import transformers' 2>/dev/null; then
    echo "SKIP export: transformers is not installed for /usr/bin/python3: --hf-dir was not loaded by from_pretrained"
    exit 0
fi
hf_loss=$(/usr/bin/python3 - "$tmp/hf" "$tmp/one.txt" <<'PY' 2>&1 | tail -n 1
import sys, torch, transformers
m = transformers.GPT2LMHeadModel.from_pretrained(sys.argv[1]).double().eval()
ids = torch.tensor([list(open(sys.argv[2], "rb").read())], dtype=torch.long)
with torch.no_grad():
    logits = m(ids[:, :-1]).logits[0]
print("%.7f" % torch.nn.functional.cross_entropy(logits, ids[0, 1:]).item())
PY
)
check "transformers' from_pretrained of the --hf-dir directory: the same loss ($hf_loss, $loss), within 1e-4" \
    close "$hf_loss" "$loss"
exit 0
