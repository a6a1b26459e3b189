# spec.training.initFrom on the job path (holmes-operator local, real training, pipeline 2 x
# data 2): every stage starts from an llm.c GPT-2 checkpoint, so the first step's loss is the one
# `holmes-node train --init-from` computes on the same batch, and not the random-init loss; a
# resume from the job's checkpoints takes precedence over initFrom; a missing or mis-shaped
# initFrom fails the job with a message naming the field and the file.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-init-from.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
name=it-init-$$
corpus=$REPO/examples/data/corpus.txt

# llm.c GPT-2 checkpoint (version 3, fp32): header int32[256], then the parameter groups in
# llm.c order, every layer of a group back to back. Deterministic values from a seed.
make_llmc() { # FILE LAYERS SEED
    /usr/bin/python3 - "$@" <<'PY'
import random, struct, sys
from array import array
path, L, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
C, NH, V, VP, T = 64, 4, 256, 256, 64
rng = random.Random(seed)
def normal(n, std): return [rng.gauss(0.0, std) for _ in range(n)]
def near_one(n): return [1.0 + rng.gauss(0.0, 0.1) for _ in range(n)]
wte = normal(VP * C, 0.2)
groups = [wte, normal(T * C, 0.1),
          near_one(L * C), normal(L * C, 0.02),            # ln_1
          normal(L * 3 * C * C, 0.1), normal(L * 3 * C, 0.02),  # attn.qkv
          normal(L * C * C, 0.1), normal(L * C, 0.02),      # attn.proj
          near_one(L * C), normal(L * C, 0.02),            # ln_2
          normal(L * 4 * C * C, 0.1), normal(L * 4 * C, 0.02),  # mlp.fc
          normal(L * C * 4 * C, 0.1), normal(L * C, 0.02),  # mlp.proj
          near_one(C), normal(C, 0.02)]                    # ln_f
header = [20240326, 3, T, V, L, NH, C, VP] + [0] * 248
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *header))
    for g in groups:
        array("f", g).tofile(f)
PY
}
make_llmc "$tmp/a.bin" 4 1 && make_llmc "$tmp/b.bin" 4 2 && make_llmc "$tmp/l2.bin" 2 1 \
    || { fail "llm.c checkpoints written" "python failed"; exit 1; }

# job: the local-tiny example with a constant learning rate (a shorter run's steps are the
# longer run's steps), checkpoints in $tmp/ckpt-TAG
job() { # TAG STEPS INIT_FROM(or "") EVERY
    sed -e "s/name: local-tiny/name: $name-$1/" -e "s/steps: 300/steps: $2/" \
        -e "s/warmupSteps: 20, /warmupSteps: 0, schedule: constant, /" \
        -e "s/everySteps: 50/everySteps: $4/" -e "s#local-runs/local-tiny/checkpoints#$tmp/ckpt-$1#" \
        -e "s#format: text}#format: text}\n    ${3:+initFrom: $3}#" \
        -e "s#data: {path: examples/data/corpus.txt#data: {path: $corpus#" -e "/^    eval: /d" \
        "$REPO/examples/local-tiny.yaml" >"$tmp/job-$1.yaml"
}
run_job() { # TAG [RUNTAG]: runs job-TAG.yaml, metrics in m-RUNTAG.jsonl, output in out-RUNTAG
    local r=${2:-$1}
    (cd "$REPO" && timeout 300 "$OPERATOR" local "$tmp/job-$1.yaml" --run-dir "$tmp/run-$r" \
        --metrics-out "$tmp/m-$r.jsonl" >"$tmp/out-$r" 2>&1)
}
loss_at() { # RUNTAG STEP
    /usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["step"] == int(sys.argv[2]): print("%.6f" % r["loss"])' "$tmp/m-$1.jsonl" "$2" 2>/dev/null
}
close() { # A B: relative difference below 1e-4
    /usr/bin/python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-4 * max(1.0, abs(b)))' "$1" "$2" 2>/dev/null
}

# The reference: one process, every layer, the same 4 x 4 sequences (2 replicas x 2 micro-batches).
ref=$("$NODE" train --data "$corpus" --init-from "$tmp/a.bin" --batch 4 --seq 64 --grad-accum 4 \
      --steps 1 --seed 1337 2>&1 | sed -n 's/^step 1\/1 loss \([0-9.]*\) .*/\1/p')
[ -n "$ref" ] && pass "holmes-node train --init-from gives a first loss ($ref)" \
    || fail "holmes-node train --init-from gives a first loss" "no loss line"

job init 4 "$tmp/a.bin" 2
run_job init; rc=$?
l1=$(loss_at init 1)
[ $rc -eq 0 ] && [ -n "$l1" ] && close "$l1" "$ref" \
    && pass "initFrom: the job's first loss ($l1) is train --init-from's ($ref)" \
    || fail "initFrom: the job's first loss is train --init-from's" "rc $rc, job $l1, train $ref: $(tail -n 5 "$tmp/out-init")"

job rand 1 "" 0
run_job rand; rc=$?
lr1=$(loss_at rand 1)
[ $rc -eq 0 ] && [ -n "$lr1" ] && [ -n "$l1" ] && ! close "$lr1" "$l1" \
    && pass "without initFrom the first loss differs ($lr1)" \
    || fail "without initFrom the first loss differs" "rc $rc, random $lr1, initFrom $l1"

# Resume precedence: 2 steps from a.bin with a checkpoint, then the same checkpoint directory
# with initFrom b.bin up to step 4: steps 3 and 4 are the uninterrupted run's.
job res 2 "$tmp/a.bin" 2
run_job res res1; rc1=$?
job res 4 "$tmp/b.bin" 2
run_job res res2; rc2=$?
r3=$(loss_at res2 3); r4=$(loss_at res2 4); u3=$(loss_at init 3); u4=$(loss_at init 4)
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -z "$(loss_at res2 1)" ] && [ -n "$r3" ] && close "$r3" "$u3" \
    && close "$r4" "$u4" \
    && pass "a resume from the job's checkpoint takes precedence over initFrom" \
    || fail "a resume from the job's checkpoint takes precedence over initFrom" \
            "rc $rc1/$rc2, resumed $r3 $r4, uninterrupted $u3 $u4: $(tail -n 5 "$tmp/out-res2")"

# Bad initFrom: the job fails, naming the field and the file.
for bad in missing l2; do
    f=$tmp/$bad.bin
    job "bad-$bad" 2 "$f" 0
    sed -i "s/maxRestarts: 2/maxRestarts: 0/" "$tmp/job-bad-$bad.yaml"
    run_job "bad-$bad"; rc=$?
    out=$(cat "$tmp/out-bad-$bad")
    [ $rc -ne 0 ] && grep -q "spec.training.initFrom" <<<"$out" && grep -qF "$f" <<<"$out" \
        && pass "initFrom $bad: the job fails naming spec.training.initFrom and $bad.bin" \
        || fail "initFrom $bad: the job fails naming spec.training.initFrom and $bad.bin" "rc $rc: $out"
done
grep -q "layers is 2 but the job has 4" "$tmp/out-bad-l2" \
    && pass "initFrom of another shape: says which size differs" \
    || fail "initFrom of another shape: says which size differs" "$(cat "$tmp/out-bad-l2")"
