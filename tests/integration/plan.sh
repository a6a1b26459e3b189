# holmes-operator plan on the example clusters: table, --json, policies, bad input.
source "$(dirname "$0")/lib.bash"
EX=$REPO/examples/clusters
TMP=$(mktemp -d /tmp/holmes-plan.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# The paper's 4 IB + 4 RoCE cluster: stages inside one fabric each (one stage per fabric), DP
# groups on RDMA, each pipeline link on IB or RoCE inside a fabric and on TCP between them.
out=$("$OPERATOR" plan --cluster "$EX/paper-ib-roce.yaml" "$EX/gpt-7.5b-job.yaml" --json 2>&1)
rc=$?
[ $rc -eq 0 ] && pass "plan paper --json exits 0" || fail "plan paper --json exits 0" "$out"
echo "$out" >"$TMP/paper.json"
py() { /usr/bin/python3 - "$@"; }
py "$TMP/paper.json" <<'PY' && pass "plan paper: each fabric's stages together (pipeline 2 or 4), dp on rdma, links by fabric at tcp_gbps / 8, beats baselines" || fail "plan paper: each fabric's stages together (pipeline 2 or 4), dp on rdma, links by fabric at tcp_gbps / 8, beats baselines"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["policy"] == "holmes"
for k in ("predicted_step_seconds", "breakdown", "stages", "workers", "groups", "baselines"):
    assert k in p, k
fabrics = [s["fabric"] for s in p["stages"]]
assert "mixed" not in fabrics and len(set(fabrics)) == 2, fabrics
assert sum(s["layers"][1] - s["layers"][0] for s in p["stages"]) == 36
dp = [g for g in p["groups"] if g["kind"] == "dp"]
assert len(dp) == (p["parallelism"]["data"] > 1) * p["parallelism"]["pipeline"] * 8
assert all(g["transport"] in ("ib", "roce") for g in dp)
assert all(g["transport"] == "socket" for g in p["groups"] if g["kind"] == "pp")
roce = [g for g in p["groups"] if g["transport"] == "roce"]
assert roce and all(g["gid_index"] == 3 for g in roce)
assert p["baselines"]["naive"] > p["predicted_step_seconds"]
assert p["baselines"]["ethernet"] > p["predicted_step_seconds"]
assert abs(sum(p["breakdown"].values()) - p["predicted_step_seconds"]) < 1e-6 * p["predicted_step_seconds"]
assert len(p["workers"]) == 64 and len({(w["name"], w["local_rank"]) for w in p["workers"]}) == 64
par = p["parallelism"]
links = [g for g in p["groups"] if g["kind"] == "link"]
assert len(links) == (par["pipeline"] - 1) * par["data"] * par["tensor"], len(links)
fab = {w["rank"]: w["fabric"] for w in p["workers"]}
for g in links:
    a, b = g["ranks"]
    want = "socket" if fab[a] != fab[b] else ("ib" if fab[a].startswith("ib") else "roce")
    assert g["transport"] == want and g["gbps"] > 0, g
assert len(p["pipeline_links"]) == par["pipeline"] - 1
assert all(b["ib"] + b["roce"] + b["socket"] == par["data"] * par["tensor"] for b in p["pipeline_links"])
# each fabric's stages one after another, one crossing of the fabrics: each node's tcp_gbps (10)
# is shared by its 8 tensor ranks' links to the other fabric (1.25 Gb/s each; priced per flow,
# 8 x 10 Gb/s made the deepest pipeline, 8 x 1, win). (The paper's 2 x 4 won until the fp32
# data-parallel traffic was priced as the trainer sends it; 4 x 2 now trains 5 % more tokens/s.)
assert par["pipeline"] in (2, 4) and par["pipeline"] * par["data"] == 8, par
assert sum(fabrics[i] != fabrics[i + 1] for i in range(len(fabrics) - 1)) == 1, fabrics
assert all(abs(g["gbps"] - p["links"]["tcp_gbps"] / 8) < 1e-9 for g in links if g["transport"] == "socket"), links[0]
PY

# The readable table names stages, groups, the step time and the speed-up.
out=$("$OPERATOR" plan --cluster "$EX/paper-ib-roce.yaml" "$EX/gpt-7.5b-job.yaml" 2>&1)
echo "$out" | grep -q "^predicted step:" && echo "$out" | grep -qE "^baselines at this shape \(pipeline [0-9]+ x data [0-9]+, the paper's comparison\): naive" &&
    echo "$out" | grep -qE "^  link +[0-9]+: [0-9]+ ib, [0-9]+ roce, [0-9]+ socket" &&
    echo "$out" | grep -qE "^  [0-9]+ -> [0-9]+ .* socket .* ms at [0-9.]+ Gb/s - members span fabrics" &&
    echo "$out" | grep -q "ib-fabric-a" && pass "plan table" || fail "plan table" "$out"
echo "$out" | grep -qE "^  naive +[0-9]+ tokens/s \(this plan x[0-9.]+\) at pipeline [0-9]+ x data [0-9]+" \
    && pass "plan table: naive at its own best shape, labelled apart from the same-shape baseline" \
    || fail "plan table: naive at its own best shape" "$out"

# Every example plans (the baselines as policies on the paper's cluster).
for c in paper-ib-roce:gpt-7.5b-job:naive paper-ib-roce:gpt-7.5b-job:ethernet \
         three-fabrics:three-fabrics-job:holmes uneven-5ib-3roce:uneven-5ib-3roce-job:holmes \
         mixed-generations:mixed-generations-job:holmes; do
    pol=${c##*:}; c=${c%:*}
    for pol in $pol; do
        "$OPERATOR" plan --cluster "$EX/${c%%:*}.yaml" "$EX/${c##*:}.yaml" --policy $pol --json \
            >"$TMP/out.json" 2>"$TMP/err" &&
            /usr/bin/python3 -c "import json,sys; p=json.load(open(sys.argv[1])); assert p['policy']==sys.argv[2]" \
            "$TMP/out.json" $pol && pass "plan ${c%%:*} --policy $pol" ||
            fail "plan ${c%%:*} --policy $pol" "$(cat "$TMP/err")"
    done
done

# Mixed generations: each stage's optimizer priced at its own cards' memory bandwidth (the
# cluster file's memory_gbps: H100 3352, A100 2039, V100 900 GB/s), never mixed
"$OPERATOR" plan --cluster "$EX/mixed-generations.yaml" "$EX/mixed-generations-job.yaml" --json >"$TMP/mg.json" 2>"$TMP/err" &&
    /usr/bin/python3 - "$TMP/mg.json" <<'PY' && pass "plan mixed-generations: each stage priced at its generation's memory bandwidth" ||
import json, sys
p = json.load(open(sys.argv[1]))
gen = {"h100": 3352, "a100": 2039, "v100": 900}
for st in p["stages"]:
    kinds = {w.split("-")[0] for w in st["workers"]}
    assert len(kinds) == 1, st["workers"]
    assert st["memory_gbps"] == gen[kinds.pop()], st
    assert st["optimizer_seconds"] > 0, st
PY
    fail "plan mixed-generations: memory bandwidth per stage" "$(cat "$TMP/err") $(head -c 600 "$TMP/mg.json")"

# Uneven fabrics: the plan says which dp groups fall back to TCP and why.
out=$("$OPERATOR" plan --cluster "$EX/uneven-5ib-3roce.yaml" "$EX/uneven-5ib-3roce-job.yaml" 2>&1)
echo "$out" | grep -q "on TCP: .* dp group(s) of stage .* (members span fabrics" &&
    pass "plan uneven names TCP groups" || fail "plan uneven names TCP groups" "$out"

# A calibration file overrides the link constants.
printf 'links: {tcp_gbps: 1}\n' >"$TMP/calib.yaml"
a=$("$OPERATOR" plan --cluster "$EX/paper-ib-roce.yaml" "$EX/gpt-7.5b-job.yaml" --json | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['links']['tcp_gbps'])")
b=$("$OPERATOR" plan --cluster "$EX/paper-ib-roce.yaml" "$EX/gpt-7.5b-job.yaml" --json --calibration "$TMP/calib.yaml" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['links']['tcp_gbps'])")
[ "$a" = 10 ] && [ "$b" = 1 ] && pass "plan --calibration" || fail "plan --calibration" "$a $b"

# Bad input: one clear error naming the rule, exit 1; usage errors exit 2.
expect_err() { # name, expected substring, args...
    local n=$1 want=$2; shift 2
    local err
    err=$("$OPERATOR" plan "$@" 2>&1 >/dev/null)
    local rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [[ $err == *"$want"* ]]; then pass "$n"; else fail "$n" "rc $rc: $err"; fi
}
cluster() { # FILE WORKER...: a cluster file of those workers (each a flow-style YAML entry)
    local f=$1; shift
    { echo "workers:"; printf -- '- %s\n' "$@"; } >"$f"
}
cluster "$TMP/dup.yaml" "{name: a, gpu_tflops: 1, nic: {class: ib, fabric: f, gbps: 100}}" "{name: a, gpu_tflops: 1, nic: {class: ib, fabric: f, gbps: 100}}"
cluster "$TMP/nonic.yaml" "{name: a, gpu_tflops: 1}"
cluster "$TMP/zero.yaml" "{name: a, gpu_tflops: 1, nic: {class: roce, fabric: f, gbps: 0}}"
job() { # file workers pipeline data layers
    cat >"$1" <<Y
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: t}
spec:
  workers: $2
  gpusPerWorker: 0
  model: {layers: $5, hidden: 64, heads: 4, vocab: 256, seqLen: 32}
  parallelism: {pipeline: $3, data: $4, microBatches: 4, microBatchSize: 1}
  training: {steps: 1}
Y
}
job "$TMP/job2.yaml" 2 1 2 12
job "$TMP/job-bad.yaml" 2 3 1 12
job "$TMP/job-pin.yaml" 2 2 1 12
job "$TMP/job8.yaml" 8 8 1 4
cluster "$TMP/two.yaml" "{name: a, gpu_tflops: 1, nic: {class: ib, fabric: f, gbps: 100}}" "{name: b, gpu_tflops: 1, nic: {class: ib, fabric: f, gbps: 100}}"
cluster "$TMP/three.yaml" "{name: w, count: 3, gpu_tflops: 1, nic: {class: ib, fabric: f, gbps: 100}}"
cluster "$TMP/eight.yaml" "{name: w, count: 8, gpu_tflops: 1, nic: {class: ib, fabric: f, gbps: 100}}"
cat >"$TMP/tiny-mem.yaml" <<'Y'
workers:
- {name: a, gpu_tflops: 1, gpu_memory_gb: 0.0001, nic: {class: ib, fabric: f, gbps: 100}}
- {name: b, gpu_tflops: 1, gpu_memory_gb: 0.0001, nic: {class: ib, fabric: f, gbps: 100}}
Y
cluster "$TMP/nics.yaml" "{name: a, gpu_tflops: 1, nics: 0, nic: {class: ib, fabric: f, gbps: 100}}" "{name: b, gpu_tflops: 1, nic: {class: ib, fabric: f, gbps: 100}}"
expect_err "bad: duplicate names" "duplicate name \"a\"" --cluster "$TMP/dup.yaml" "$TMP/job2.yaml"
expect_err "bad: worker without NIC" "workers[0].nic: required" --cluster "$TMP/nonic.yaml" "$TMP/job2.yaml"
expect_err "bad: zero bandwidth" "workers[0].nic.gbps" --cluster "$TMP/zero.yaml" "$TMP/job2.yaml"
expect_err "bad: job and cluster disagree" "spec.workers: 2, but the cluster has 3 workers" --cluster "$TMP/three.yaml" "$TMP/job2.yaml"
expect_err "bad: t x p x d != devices" "tensor 1 x pipeline 3 x data 1 = 3 ranks, but workers 2 x 1 ranks per worker = 2" --cluster "$TMP/two.yaml" "$TMP/job-bad.yaml"
expect_err "bad: more stages than layers" "spec.parallelism.pipeline: 8 exceeds model layers 4" --cluster "$TMP/eight.yaml" "$TMP/job8.yaml"
expect_err "bad: pin with the wrong stage count" "3 stages pinned but pipeline is 1" --cluster "$TMP/two.yaml" "$TMP/job2.yaml" --partition 4,4,4
expect_err "bad: infeasible pin" "pinned layers sum to 8, model has 12" --cluster "$TMP/two.yaml" "$TMP/job-pin.yaml" --partition 4,4
expect_err "bad: malformed pin" "--partition: must be" --cluster "$TMP/two.yaml" "$TMP/job-pin.yaml" --partition 4,x
expect_err "bad: missing job file" "no-such-job.yaml" --cluster "$TMP/two.yaml" "$TMP/no-such-job.yaml"
expect_err "bad: missing cluster file" "no-such-file" --cluster "$TMP/no-such-file.yaml" "$TMP/job2.yaml"
expect_err "bad: unknown policy" "--policy: must be" --cluster "$TMP/two.yaml" "$TMP/job-pin.yaml" --policy best
expect_err "bad: a plan that does not fit names the stage, the bytes needed and there" \
    "stage 0 (layers [0, 6) on fabric f) needs" --cluster "$TMP/tiny-mem.yaml" "$TMP/job-pin.yaml" --partition 6,6
expect_err "bad: its GPUs' bytes" "its GPUs have 0.00 GB (90000 bytes: 90 % of the 0.0001 GB each holds)" \
    --cluster "$TMP/tiny-mem.yaml" "$TMP/job-pin.yaml"
expect_err "bad: nics 0" "workers[0].nics: must be an integer in [1, 1024]" --cluster "$TMP/nics.yaml" "$TMP/job2.yaml"
out=$("$OPERATOR" plan --cluster "$TMP/two.yaml" "$TMP/job-pin.yaml" --partition 5,7 --json) &&
    echo "$out" | /usr/bin/python3 -c "import json,sys; p=json.load(sys.stdin); assert [s['layers'] for s in p['stages']]==[[0,5],[5,12]]" &&
    pass "plan --partition pins the layers" || fail "plan --partition pins the layers" "$out"
expect_err "bad: malformed warm-up depth" "--warmup: \"-1\" must be an integer in [0, 65536]" --cluster "$TMP/two.yaml" "$TMP/job-pin.yaml" --warmup -1
# the 1F1B warm-up depth: the planner's choice on bench-hetero's six-worker job, or pinned
fx=$REPO/tests/fixtures/planner
out=$("$OPERATOR" plan "$fx/hetero-3fab6-job.yaml" --calibration "$fx/hetero-3fab6-links.json" --tflops 0.1) &&
    grep -qE "^policy holmes: .*, 1f1b, warm-up \+[0-9]+ micro-batches on stages 0-1 \(micro-batches in flight per stage: [0-9]+, [0-9]+, 1\)" <<<"$out" &&
    pass "plan: the chosen warm-up depth in the header" || fail "plan: the chosen warm-up depth in the header" "$(head -n 2 <<<"$out")"
std=$("$OPERATOR" plan "$fx/hetero-3fab6-job.yaml" --calibration "$fx/hetero-3fab6-links.json" --tflops 0.1 --warmup 0 --json) &&
    deep=$("$OPERATOR" plan "$fx/hetero-3fab6-job.yaml" --calibration "$fx/hetero-3fab6-links.json" --tflops 0.1 --json) &&
    jq -e --argjson s "$std" '.warmup_extra > 0 and $s.warmup_extra == 0 and
        .predicted_step_seconds < 0.995 * $s.predicted_step_seconds' <<<"$deep" >/dev/null &&
    pass "plan --warmup 0: the standard schedule, slower than the planner's depth ($(jq -r .predicted_step_seconds <<<"$std") s against $(jq -r .predicted_step_seconds <<<"$deep") s)" ||
    fail "plan --warmup 0: the standard schedule, slower than the planner's depth" "$(jq -c '[.warmup_extra, .predicted_step_seconds]' <<<"$std" <<<"$deep" 2>&1)"
# Without --cluster, the job's emulation block gives the workers (local runs).
cat >"$TMP/emu.yaml" <<'Y'
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: emu}
spec:
  workers: 4
  gpusPerWorker: 0
  model: {layers: 4, hidden: 64, heads: 4, vocab: 256, seqLen: 64}
  parallelism: {pipeline: 2, data: 2, microBatches: 2, microBatchSize: 4}
  training: {steps: 1}
  emulation:
    nics:
    - {class: roce, fabric: roce-b, gbps: 100, count: 1}
    - {class: infiniband, fabric: ib-a, gbps: 200, count: 2}
    - {class: roce, fabric: roce-b, gbps: 100, count: 1}
    crossFabricGbps: 10
    bandwidthScale: 0.01
Y
out=$("$OPERATOR" plan "$TMP/emu.yaml" --json 2>&1) &&
    echo "$out" | /usr/bin/python3 -c "
import json, sys
p = json.load(sys.stdin)
st = {s['fabric']: sorted(s['workers']) for s in p['stages']}
assert st == {'ib-a': ['worker-1', 'worker-2'], 'roce-b': ['worker-0', 'worker-3']}, st
assert p['links']['tcp_gbps'] == 10
" && pass "plan from the job's emulation block" || fail "plan from the job's emulation block" "$out"
expect_err "bad: no cluster and no emulation" "spec.emulation: absent" "$TMP/job2.yaml"
# --tflops: the emulation workers' rate (what local's workers declare); faster = shorter step.
t1=$("$OPERATOR" plan "$TMP/emu.yaml" --json | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['predicted_step_seconds'])")
t2=$("$OPERATOR" plan "$TMP/emu.yaml" --tflops 0.5 --json | /usr/bin/python3 -c "import json,sys; p=json.load(sys.stdin); assert all(s['tflops'] == 0.5 for s in p['stages']); print(p['predicted_step_seconds'])")
/usr/bin/python3 -c "import sys; assert float(sys.argv[2]) < float(sys.argv[1])" "$t1" "$t2" &&
    pass "plan --tflops sets the emulation workers' rate" || fail "plan --tflops sets the emulation workers' rate" "$t1 $t2"
expect_err "bad: --tflops not a number" "--tflops: \"fast\" must be a number in (0, 1e6]" "$TMP/emu.yaml" --tflops fast
expect_err "bad: --tflops with --cluster" "--tflops is for the spec.emulation workers" --cluster "$TMP/two.yaml" "$TMP/job2.yaml" --tflops 1
# gateway_gbps: a shared inter-fabric gateway makes the naive placement (both rings cross)
# slower; a negative one is refused by name.
echo '{"links": {"gateway_gbps": 0.5}}' >"$TMP/gw.json"
n0=$("$OPERATOR" plan "$TMP/emu.yaml" --policy naive --json | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['predicted_step_seconds'])")
n1=$("$OPERATOR" plan "$TMP/emu.yaml" --policy naive --calibration "$TMP/gw.json" --json | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['predicted_step_seconds'])")
/usr/bin/python3 -c "import sys; assert float(sys.argv[2]) > float(sys.argv[1])" "$n0" "$n1" &&
    pass "plan: a shared gateway slows naive" || fail "plan: a shared gateway slows naive" "$n0 $n1"
echo '{"links": {"gateway_gbps": -1}}' >"$TMP/gwbad.json"
expect_err "bad: negative gateway" "gateway_gbps: must be a number in [0, 1e+06]" "$TMP/emu.yaml" --calibration "$TMP/gwbad.json"
# holmes-operator local refuses a bad --calibration before starting anything.
out=$("$OPERATOR" local "$TMP/emu.yaml" --simulate --calibration "$TMP/gwbad.json" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "local: --calibration: .*gateway_gbps" <<<"$out" &&
    pass "local --calibration: bad file refused (exit 2)" || fail "local --calibration: bad file refused (exit 2)" "rc $rc: $out"

"$OPERATOR" plan >/dev/null 2>&1; [ $? -eq 2 ] && pass "plan without arguments exits 2" || fail "plan without arguments exits 2"
"$OPERATOR" plan --help | grep -q "^usage: holmes-operator plan" && pass "plan --help" || fail "plan --help"
