# The memory of a worker's GPUs, from its hello to the plan (holmes-node worker --gpu-memory-gb /
# HOLMES_GPU_MEMORY_GB; the CUDA holmes-node reads it from its GPUs, which CI has none of): on
# make bench-hetero's six-worker, three-fabric job run with emulated GPUs (one a worker) and its
# calibration (tests/fixtures/planner/hetero-3fab6-*), simulated steps:
#   - no memory said: the planner keeps the standard 1F1B warm-up (it could not check a deeper
#     one) and status shows no GPU memory;
#   - 80 GB declared: the deeper warm-up the planner takes for CPU workers, and
#     status.plan.stages[] shows each stage's predicted memory beside its GPUs' (declared);
#   - 1 MB declared: the job fails at once, not retried, naming the stage, the bytes it needs and
#     the bytes its GPUs have;
#   - a bad value is refused by the worker naming the flag;
#   - the job page shows each stage's predicted memory beside its GPUs' (Chromium, where installed).
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-gpumem.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
CAL=$REPO/tests/fixtures/planner/hetero-3fab6-links.json

# job NAME: the fixture with one emulated GPU a worker
job() {
    sed -e "s#examples/data/corpus.txt#$REPO/examples/data/corpus.txt#" -e "s/gpusPerWorker: 0/gpusPerWorker: 1/" \
        -e "s/^    bandwidthScale: 1$/    bandwidthScale: 1\n    gpus: true/" -e "s/name: 3fab6-holmes/name: $1/" \
        "$REPO/tests/fixtures/planner/hetero-3fab6-job.yaml" >"$tmp/$1.yaml"
    grep -q "^    gpus: true" "$tmp/$1.yaml" || fail "$1: the job has emulated GPUs" "$(cat "$tmp/$1.yaml")"
}

# run NAME MEMORY: holmes-operator local with the workers declaring MEMORY GB ("" = none), steps
# simulated; 300 steps of 100 ms, so that /api/jobs can be read while it runs (killed after)
start() {
    local name=$1 mem=$2
    job "$name"
    sed -i "s/steps: 14/steps: 300/" "$tmp/$name.yaml"
    ( cd "$REPO" && HOLMES_GPU_MEMORY_GB=$mem HOLMES_DECLARED_TFLOPS=0.1 exec timeout 60 "$OPERATOR" local \
          "$tmp/$name.yaml" --simulate --step-ms 100 --calibration "$CAL" --run-dir "$tmp/run-$name" \
          >"$tmp/out-$name" 2>&1 ) &
    lp=$!
    wait_for 30 grep -q "Running: rendezvous complete" "$tmp/out-$name"
    url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/jobs' "$tmp/out-$name" | head -1)
    curl -sf "${url%/jobs}/api/jobs" >"$tmp/api-$name.json" 2>/dev/null
    if [ -n "$chrome" ] && [ -n "$url" ]; then # the job page, as a browser renders it
        timeout 40 "$chrome" --headless --disable-gpu --no-sandbox --user-data-dir="$tmp/profile-$name" \
            --virtual-time-budget=3000 --dump-dom "$url" >"$tmp/dom-$name.html" 2>/dev/null
    fi
    kill "$lp" 2>/dev/null || true
    wait "$lp" 2>/dev/null || true
}

chrome=$(command -v chromium || command -v chromium-browser || true)
start unknown ""
if grep -q "^placement .*1f1b" "$tmp/out-unknown"; then
    ! grep -q "^placement .*warm-up" "$tmp/out-unknown" && pass "no GPU memory said: the standard warm-up" \
        || fail "no GPU memory said: the standard warm-up" "$(grep '^placement' "$tmp/out-unknown")"
    jq -e '[.jobs[0].plan.stages[] | select(has("gpuMemoryGb"))] | length == 0' "$tmp/api-unknown.json" >/dev/null &&
        pass "no GPU memory said: none in status.plan.stages" \
        || fail "no GPU memory said: none in status.plan.stages" "$(head -c 600 "$tmp/api-unknown.json")"
else
    fail "no GPU memory said: the job is planned" "$(tail -n 8 "$tmp/out-unknown")"
fi

start known 80
if grep -q "^placement .*1f1b" "$tmp/out-known"; then
    grep -qE "^placement .*warm-up \+[0-9]+ micro-batch" "$tmp/out-known" &&
        pass "80 GB declared: the planner takes a deeper warm-up" \
        || fail "80 GB declared: the planner takes a deeper warm-up" "$(grep '^placement' "$tmp/out-known")"
    grep -q "GPU memory: 80 GB a GPU (declared)" "$tmp/run-known/worker-0.log" && pass "the worker logs what it declares" \
        || fail "the worker logs what it declares" "$(head -n 5 "$tmp/run-known/worker-0.log")"
    jq -e '.jobs[0].plan.stages | length == 3 and all(.gpuMemoryGb == 80 and .gpuMemorySource == "declared"
            and .memoryGb > 0 and .memoryGb < 80)' "$tmp/api-known.json" >/dev/null &&
        pass "status.plan.stages: predicted memory beside the GPUs' (80, declared)" \
        || fail "status.plan.stages: predicted memory beside the GPUs'" "$(jq -c '.jobs[0].plan.stages' "$tmp/api-known.json" 2>&1 | head -c 600)"
    if [ -n "$chrome" ]; then
        n=$(grep -oE "stage [0-2] · 0\.[0-9]+ of 80 GB" "$tmp/dom-known.html" | sort -u | wc -l)
        [ "$n" = 3 ] && pass "the job page shows each stage's predicted memory of its GPUs' 80 GB" \
            || fail "the job page shows each stage's memory" "$n of 3: $(grep -oE 'stage [0-9][^<]*' "$tmp/dom-known.html" | head -4)"
    fi
else
    fail "80 GB declared: the job is planned" "$(tail -n 8 "$tmp/out-known")"
fi

job small
rc=0
(cd "$REPO" && HOLMES_GPU_MEMORY_GB=0.001 HOLMES_DECLARED_TFLOPS=0.1 timeout 60 "$OPERATOR" local "$tmp/small.yaml" \
     --simulate --step-ms 10 --calibration "$CAL" --run-dir "$tmp/run-small" >"$tmp/out-small" 2>&1) || rc=$?
[ $rc = 1 ] && grep -q "small failed in" "$tmp/out-small" && pass "1 MB declared: the job fails (exit 1)" \
    || fail "1 MB declared: the job fails (exit 1)" "rc $rc; $(tail -n 4 "$tmp/out-small")"
grep -qE "reason: Failed: planner: nothing fits in the GPUs' memory: .* stage [0-9]+ \(layers \[[0-9]+, [0-9]+\) on fabric [a-z-]+\) needs [0-9.]+ GB per GPU \([0-9]+ bytes: .*its GPUs have 0\.00 GB \(900000 bytes: 90 % of the 0\.001 GB each holds\)" \
    "$tmp/out-small" && pass "1 MB declared: the reason names the stage, the bytes needed and the bytes there" \
    || fail "1 MB declared: the reason names the stage and the bytes" "$(grep -i 'reason\|fits' "$tmp/out-small" | head -3)"
grep -q "0 restarts" "$tmp/out-small" && pass "1 MB declared: not retried" \
    || fail "1 MB declared: not retried" "$(tail -n 4 "$tmp/out-small")"

worker_refuses_figure HOLMES_GPU_MEMORY_GB --gpu-memory-gb "a number of GB" 0 -3 lots 2e6
