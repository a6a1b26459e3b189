# The memory bandwidth a worker says, from its hello to the planner's price of each stage's
# optimizer step (holmes-node worker --memory-gbps / HOLMES_MEMORY_GBPS; otherwise a CPU worker
# times its own gradient norm and AdamW at start, the CUDA holmes-node reads its GPUs' peak).
# On the example job (two fabrics, 2 stages x 2 replicas, CPU workers):
#   - holmes-operator local: its workers declare the planner's CPU default (5 GB/s), as they
#     declare their compute; status.plan.stages[] shows it (declared) and the optimizer's price;
#   - declared 100 times slower: the optimizer priced far higher (100 times on a stage whose
#     layers stay), and the predicted step longer;
#   - the declaration emptied: the workers measure their own optimizer, log it, and each stage
#     is priced at the least its workers measured, or a little under (measured figures within
#     5 % are one kind of device, planned at the least of them);
#   - holmes-operator plan JOB predicts both plans (--memory-gbps for the declared one);
#   - a bad value is refused by the worker naming the flag and the variable.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-membw.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

# run NAME MODE [ENV...]: holmes-operator local (MODE: --simulate, or "" to train) with ENV
# set, read /api/jobs once the gang has rendezvoused, then stopped
run() {
    local name=$1 mode=$2
    shift 2
    example_job "$tmp/$name.yaml" "$name" 300 "$tmp/ckpt-$name"
    ( cd "$REPO" && exec env "$@" timeout 120 "$OPERATOR" local "$tmp/$name.yaml" $mode --step-ms 100 \
          --run-dir "$tmp/run-$name" >"$tmp/out-$name" 2>&1 ) &
    local lp=$!
    if wait_for 60 grep -q "Running: rendezvous complete" "$tmp/out-$name"; then
        local url
        url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/jobs' "$tmp/out-$name" | head -1)
        curl -sf "${url%/jobs}/api/jobs" >"$tmp/api-$name.json" 2>/dev/null
    fi
    kill "$lp" 2>/dev/null || true
    wait "$lp" 2>/dev/null || true
    [ -s "$tmp/api-$name.json" ] || echo '{}' >"$tmp/api-$name.json"
}

stages() { jq -c '[.jobs[0].plan.stages[] | {g: .memoryGbps, s: .memoryGbpsSource, o: .optimizerSeconds}]' "$1" 2>&1; }

run default --simulate
jq -e '.jobs[0].plan.stages | length == 2 and all(.memoryGbps == 5 and .memoryGbpsSource == "declared"
        and .optimizerSeconds > 0)' "$tmp/api-default.json" >/dev/null &&
    pass "local workers declare the planner's CPU default: 5 GB/s a stage, declared, its optimizer priced" \
    || fail "local workers declare 5 GB/s" "$(stages "$tmp/api-default.json") $(tail -n 3 "$tmp/out-default")"
grep -q "memory: 5 GB/s a device (declared)" "$tmp/run-default/worker-0.log" &&
    pass "the worker logs the bandwidth it declares" \
    || fail "the worker logs the bandwidth it declares" "$(head -n 6 "$tmp/run-default/worker-0.log")"

run slow --simulate HOLMES_MEMORY_GBPS=0.05
/usr/bin/python3 - "$tmp/api-default.json" "$tmp/api-slow.json" <<'PY' &&
import json, sys
a, b = (json.load(open(p))["jobs"][0]["plan"] for p in sys.argv[1:3])
assert [s["memoryGbps"] for s in b["stages"]] == [0.05, 0.05], b["stages"]
assert all(s["memoryGbpsSource"] == "declared" for s in b["stages"]), b["stages"]
# the same layers: each stage's optimizer 100 times the price (the planner may move layers
# away from the stages whose optimizer weighs most: then the longest at least 50 times)
if [s["layers"] for s in a["stages"]] == [s["layers"] for s in b["stages"]]:
    for x, y in zip(a["stages"], b["stages"]):
        assert abs(y["optimizerSeconds"] / x["optimizerSeconds"] - 100) < 1e-6, (x, y)
longest = lambda p: max(s["optimizerSeconds"] for s in p["stages"])
assert longest(b) > 50 * longest(a), (a, b)
assert b["predictedStepSeconds"] > a["predictedStepSeconds"] + 0.25 * longest(b), (a, b)
PY
    pass "declared 100 times slower: the optimizer priced far higher, the step predicted longer" \
    || fail "declared 100 times slower: the optimizer priced higher" "$(stages "$tmp/api-default.json") / $(stages "$tmp/api-slow.json")"

# holmes-operator plan JOB predicts what local planned: by default, and with --memory-gbps as
# the workers declared it
same_plan() { # API.json PLAN.json: the same layers, bandwidths and predicted step
    /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["jobs"][0]["plan"]
p = json.load(open(sys.argv[2]))
assert [s["layers"] for s in a["stages"]] == [s["layers"][1] - s["layers"][0] for s in p["stages"]], (a, p)
assert [s["memoryGbps"] for s in a["stages"]] == [s["memory_gbps"] for s in p["stages"]], (a, p)
assert abs(a["predictedStepSeconds"] / p["predicted_step_seconds"] - 1) < 1e-9, (a, p)
PY
}
"$OPERATOR" plan "$tmp/default.yaml" --json >"$tmp/plan-default.json" 2>&1 &&
    "$OPERATOR" plan "$tmp/slow.yaml" --memory-gbps 0.05 --json >"$tmp/plan-slow.json" 2>&1 &&
    same_plan "$tmp/api-default.json" "$tmp/plan-default.json" && same_plan "$tmp/api-slow.json" "$tmp/plan-slow.json" &&
    pass "holmes-operator plan JOB predicts local's plans (5 GB/s by default, --memory-gbps 0.05 as declared)" \
    || fail "holmes-operator plan JOB predicts local's plans" "$(head -c 300 "$tmp/plan-slow.json")"

run measured "" HOLMES_MEMORY_GBPS=
/usr/bin/python3 - "$tmp/api-measured.json" "$tmp"/run-measured/worker-*.log <<'PY' &&
import json, re, sys
plan = json.load(open(sys.argv[1]))["jobs"][0]["plan"]
said = {}
for path in sys.argv[2:]:
    m = re.search(r"memory: ([0-9.e+]+) GB/s \(measured: the optimizer's norm and AdamW", open(path).read())
    assert m, path + ": no measured memory line"
    said["worker-%s" % re.search(r"worker-(\d+)\.log$", path).group(1)] = float(m.group(1))
for st in plan["stages"]:
    least = min(v for k, v in said.items() if any(w.endswith(k) for w in st["workers"]))
    assert st["memoryGbpsSource"] == "measured", st
    # the log prints 4 digits; a kind's least may be another stage's worker, within 5 %
    assert least / 1.05 * (1 - 1e-3) <= st["memoryGbps"] <= least * (1 + 1e-3), (st, said)
    assert st["memoryGbps"] >= min(said.values()) * (1 - 1e-3), (st, said)
    assert 0.05 < st["memoryGbps"] < 1e5, st
PY
    pass "declaration emptied: the workers measure their optimizer, each stage priced at its least or its kind's (measured)" \
    || fail "the workers measure their optimizer's bandwidth" "$(stages "$tmp/api-measured.json") $(grep -h 'memory:' "$tmp"/run-measured/worker-*.log)"

worker_refuses_figure HOLMES_MEMORY_GBPS --memory-gbps "a number of GB/s" 0 -3 fast 2e6
