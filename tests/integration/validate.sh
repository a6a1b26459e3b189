# holmes-operator validate: exit codes, every error with its path, multi-document files, --print.
source "$(dirname "$0")/lib.bash"
M=$REPO/tests/manifests
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

out=$("$OPERATOR" validate "$M/valid/minimal-cpu.yaml" "$M/valid/custom-model.yaml" 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(grep -c ' valid: ' <<<"$out")" -eq 2 ] && pass "validate: valid files exit 0, one line per job" \
    || fail "validate: valid files exit 0" "rc=$rc out=$out"

# Accepted by the API but not runnable yet (tj_spec_runnable): exit 1 with the reason the
# coordinator would give; the runnable document of the same file is still reported valid.
out=$("$OPERATOR" validate "$M/valid/multi-doc.yaml" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(grep -c ' valid: ' <<<"$out")" -eq 1 ] \
    && ! grep -q 'gpusPerWorker' <<<"$out" \
    && grep -q 'multi-doc.yaml\[1\]: spec.training.precision: bf16 needs real GPUs' <<<"$out" \
    && pass "validate: a job the coordinator cannot run is refused with its reason" \
    || fail "validate: a job the coordinator cannot run is refused with its reason" "rc=$rc out=$out"

# Token slices (TeraPipe) on real GPUs: runnable (the CUDA engine slices), with tensor 1 and with
# tensor 2 (its tensor groups' sums over each slice's rows).
for tensor in 1 2; do
cat >"$tmp/gpu-slices.yaml" <<YAML
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: gpu-slices}
spec:
  workers: 2
  gpusPerWorker: $tensor
  model: {preset: gpt2-124m}
  parallelism: {tensor: $tensor, pipeline: 2, data: 1, microBatches: 2, tokenSlices: 4}
  training: {steps: 2, precision: bf16}
YAML
out=$("$OPERATOR" validate "$tmp/gpu-slices.yaml" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q ' valid: ' <<<"$out" \
    && pass "validate: token slices on real GPUs with tensor $tensor are runnable" \
    || fail "validate: token slices on real GPUs with tensor $tensor are runnable" "rc=$rc out=$out"
done

# Every shipped example is runnable: several GPUs per worker, bf16, and tensor parallelism on real
# GPUs (the CUDA engine's) among them.
bad=0; n=0; tp_gpus=0
for f in "$REPO"/examples/*.yaml "$REPO"/examples/clusters/*-job.yaml; do
    n=$((n + 1))
    out=$("$OPERATOR" validate "$f" 2>&1); rc=$?
    tensor=$(sed -nE 's/.*tensor: *([0-9]+).*/\1/p' "$f" | head -1)
    gpus=$(sed -nE 's/^ *gpusPerWorker: *([0-9]+).*/\1/p' "$f" | head -1)
    if [ "${tensor:-1}" -gt 1 ] && [ "${gpus:-0}" -gt 0 ] && ! grep -Eq '^ *gpus: *true' "$f"; then
        tp_gpus=$((tp_gpus + 1))
    fi
    [ $rc -eq 0 ] && grep -q " valid: " <<<"$out" || { bad=$((bad + 1)); echo "  $f: rc $rc: $out"; }
done
[ $bad -eq 0 ] && [ $n -ge 5 ] && [ $tp_gpus -ge 1 ] \
    && pass "validate: the $n examples are valid, $tp_gpus of them with tensor parallelism on real GPUs" \
    || fail "validate: examples" "$bad of $n unexpected ($tp_gpus with tensor parallelism on real GPUs)"

err=$("$OPERATOR" validate "$M/invalid/pipeline-exceeds-layers.yaml" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q 'pipeline-exceeds-layers.yaml: spec.parallelism.pipeline: 12 exceeds model layers 8' <<<"$err" \
    && pass "validate: invalid file exits 1 with field path and rule" || fail "validate: invalid exits 1" "rc=$rc err=$err"

err=$("$OPERATOR" validate "$M/invalid/many-errors.yaml" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <<<"$err")" -ge 4 ] && pass "validate: all errors reported at once" \
    || fail "validate: all errors at once" "$err"

# A valid and an invalid document in one file: the bad one is named by its index.
cat "$M/valid/minimal-cpu.yaml" > "$tmp/two.yaml"; echo --- >> "$tmp/two.yaml"
cat "$M/invalid/workers-zero.yaml" >> "$tmp/two.yaml"
err=$("$OPERATOR" validate "$tmp/two.yaml" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q 'two.yaml\[1\]: spec.workers: 0 is below the minimum 1' <<<"$err" \
    && pass "validate: multi-document error names the document" || fail "validate: multi-document" "rc=$rc err=$err"

# Valid plus invalid files: exit 1, the valid one still reported.
out=$("$OPERATOR" validate "$M/valid/minimal-cpu.yaml" "$M/invalid/bf16-on-cpu.yaml" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'minimal-cpu valid' <<<"$out" && grep -q 'bf16 needs GPU workers' <<<"$out" \
    && pass "validate: mixed files exit 1" || fail "validate: mixed files" "rc=$rc out=$out"

"$OPERATOR" validate --print "$M/valid/minimal-cpu.yaml" >"$tmp/p.json" 2>&1 \
    && grep -q '"pipeline":[[:space:]]*"auto"' "$tmp/p.json" && grep -q '"microBatches":[[:space:]]*8' "$tmp/p.json" \
    && pass "validate --print shows the resolved spec" || fail "validate --print" "$(cat "$tmp/p.json")"

"$OPERATOR" validate /nonexistent.yaml 2>"$tmp/e"; rc=$?
[ $rc -eq 1 ] && grep -q '/nonexistent.yaml: No such file' "$tmp/e" && pass "validate: missing file" \
    || fail "validate: missing file" "rc=$rc $(cat "$tmp/e")"
"$OPERATOR" validate 2>/dev/null; [ $? -eq 2 ] && pass "validate: no file is a usage error" || fail "validate: usage"
"$OPERATOR" validate --help | grep -q '^Usage: holmes-operator validate' && pass "validate --help" || fail "validate --help"
head -c 300 /dev/urandom > "$tmp/garbage.yaml"
"$OPERATOR" validate "$tmp/garbage.yaml" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] && pass "validate: random bytes rejected without crashing" || fail "validate: garbage" "rc=$rc"

# Standard input, and a List as `kubectl get tj -o yaml` prints it.
{ echo "apiVersion: v1"; echo "kind: List"; echo "items:";
  sed -n '/^apiVersion/,$p' "$M/valid/minimal-cpu.yaml" | sed 's/^/  /; 1s/^  /- /';
  sed -n '/^apiVersion/,$p' "$M/invalid/steps-zero.yaml" | sed 's/^/  /; 1s/^  /- /'; } > "$tmp/list.yaml"
err=$("$OPERATOR" validate - <"$tmp/list.yaml" 2>&1); rc=$?
[ $rc -eq 1 ] && ! grep -q '<stdin>\[0\]' <<<"$err" && grep -q '<stdin>\[1\]: spec.training.steps: 0 is below the minimum 1' <<<"$err" \
    && pass "validate: a List on standard input" || fail "validate: List on stdin" "rc=$rc $err"
"$OPERATOR" validate "$tmp" >/dev/null 2>&1; [ $? -eq 1 ] && pass "validate: a directory is an error" || fail "validate: directory"

# Every invalid manifest of the corpus in one run: exit 1, nothing reported valid, and each
# file's expected errors on stderr under its name.
"$OPERATOR" validate "$M"/invalid/*.yaml >"$tmp/out" 2>"$tmp/err"; rc=$?
bad=0; total=0
for f in "$M"/invalid/*.yaml; do
    total=$((total + 1))
    mine=$(grep -F -- "$f" "$tmp/err")
    while IFS= read -r line; do
        [[ $line == "# expect: "* ]] || continue
        want=${line#"# expect: "}
        [[ $mine == *"$want"* ]] || { bad=$((bad + 1)); echo "  $f: missing '$want'"; }
    done <"$f"
done
[ $rc -eq 1 ] && [ ! -s "$tmp/out" ] && [ $bad -eq 0 ] && [ $total -ge 30 ] \
    && pass "validate: all $total invalid manifests rejected with their expected errors" \
    || fail "validate: invalid corpus" "rc=$rc, $bad problems in $total files, stdout: $(head -3 "$tmp/out")"
