# The 1F1B warm-up depth (the plan's warmup_extra, common/pipe_order.h) on real processes:
#   - holmes-node worker in rank-table mode, TCP between the stages: pipeline 3 (4 micro-batches)
#     and pipeline 2 x data 2 with 3 token slices, each with a deeper warm-up against the
#     standard one: the same losses, bit for bit, and the same final parameters and moments (the
#     backwards keep their order, so every sum is the same); the first stage says how many
#     micro-batches it holds;
#   - holmes-operator local on make bench-hetero's six-worker, three-fabric job with its
#     calibration (tests/fixtures/planner/hetero-3fab6-*): the planner chooses a deeper warm-up,
#     the placement line says so, and the workers of every stage but the last run it; the job's
#     status (/api/jobs: status.plan.warmupExtra) and its page show the depth.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-warmup.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
steps=6
[ "${HOLMES_VARIANT:-}" = asan ] && steps=3

# run NAME P D WARMUP SLICES_JSON: P x D ranks; logs and checkpoints in $tmp
run() {
    local name=$1 P=$2 D=$3 warm=$4 slices=$5 rc=0
    rank_table_job "$tmp/$name" "$P" "$D" "\"warmup_extra\": $warm, ${slices:+\"token_slices\": $slices,}" \
        --data "$REPO/examples/data/corpus.txt" --layers 6 --channels 32 --heads 4 --vocab 256 \
        --max-seq 32 --batch 1 --seq 32 --micro-batches 4 --schedule 1f1b --steps $steps --lr 1e-3 \
        --checkpoint-dir "$tmp/ckpt-$name" --checkpoint-every $steps --all-ranks || rc=1
    sed -nE 's/^step ([0-9]+) loss ([0-9.]+).*/\1 \2/p' "$tmp/$name.$(((P - 1) * D)).log" >"$tmp/$name.loss"
    [ $rc -eq 0 ] && [ "$(wc -l <"$tmp/$name.loss")" -eq $steps ]
}

for c in "p3 3 1 2 -" "p2d2s 2 2 1 [0,5,17,32]"; do
    set -- $c
    sl=$5; [ "$sl" = - ] && sl=
    if run "$1-deep" "$2" "$3" "$4" "$sl" && run "$1-std" "$2" "$3" 0 "$sl"; then
        pass "$1: warm-up +$4 and the standard one train $steps steps"
        cmp -s "$tmp/$1-deep.loss" "$tmp/$1-std.loss" && pass "$1: the same losses, bit for bit" \
            || fail "$1: the same losses" "$(paste "$tmp/$1-deep.loss" "$tmp/$1-std.loss")"
        out=$(/usr/bin/python3 "$REPO/tests/integration/ckpt_same.py" "$tmp/ckpt-$1-deep" "$tmp/ckpt-$1-std" "$steps" 0 0 2>&1) \
            && pass "$1: the same final parameters and moments" || fail "$1: the same final parameters and moments" "$out"
        grep -q "1F1B warm-up $4 micro-batches deeper" "$tmp/$1-deep.0.log" && pass "$1: the first stage runs the deeper warm-up" \
            || fail "$1: the first stage runs the deeper warm-up" "$(head -n 20 "$tmp/$1-deep.0.log")"
        last=$((($2 - 1) * $3))
        ! grep -q "warm-up" "$tmp/$1-deep.$last.log" && pass "$1: the last stage keeps the standard one" \
            || fail "$1: the last stage keeps the standard one"
    else
        fail "$1: both runs train" "$(grep -iE 'error|fail|refused' "$tmp"/$1-*.log | head -8)"
    fi
done

# the planner's choice, through the coordinator to the workers (six workers: the release pass only)
if [ "${HOLMES_VARIANT:-release}" != release ]; then
    echo "# warmup: the planner's choice through holmes-operator local is checked in the release pass"; exit 0
fi
sed -e "s#examples/data/corpus.txt#$REPO/examples/data/corpus.txt#" -e "s/steps: 14/steps: 3/" \
    -e "s/name: 3fab6-holmes/name: warmup-$$/" "$REPO/tests/fixtures/planner/hetero-3fab6-job.yaml" >"$tmp/job.yaml"
if (cd "$REPO" && HOLMES_DECLARED_TFLOPS=0.1 timeout 300 "$OPERATOR" local "$tmp/job.yaml" --quiet \
        --calibration "$REPO/tests/fixtures/planner/hetero-3fab6-links.json" --run-dir "$tmp/run" >"$tmp/out" 2>&1); then
    pass "3fab6: the job trains"
    grep -qE "^placement .*1f1b, warm-up \+[0-9]+ micro-batch" "$tmp/out" && pass "3fab6: the placement names a deeper warm-up" \
        || fail "3fab6: the placement names a deeper warm-up" "$(grep -A8 '^placement' "$tmp/out")"
    n=$(grep -l "1F1B warm-up [0-9]* micro-batches deeper" "$tmp"/run/worker-*.log | wc -l)
    [ "$n" = 4 ] && pass "3fab6: the 4 workers of stages 0 and 1 run it, the last stage's 2 do not" \
        || fail "3fab6: the workers of stages 0 and 1 run it" "$n of 4; $(grep -h "warm-up" "$tmp"/run/worker-*.log)"
else
    fail "3fab6: the job trains" "$(tail -n 15 "$tmp/out")"
fi
# the depth in the job's status (/api/jobs: status.plan.warmupExtra) and on its page
sed -i -e "s/steps: 3/steps: 300/" -e "s/name: warmup-$$/name: warmup-page-$$/" "$tmp/job.yaml"
( cd "$REPO" && HOLMES_DECLARED_TFLOPS=0.1 exec timeout 60 "$OPERATOR" local "$tmp/job.yaml" --simulate --step-ms 100 \
      --calibration "$REPO/tests/fixtures/planner/hetero-3fab6-links.json" --run-dir "$tmp/run-page" >"$tmp/out-page" 2>&1 ) &
lp=$!
wait_for 30 grep -q "Running: rendezvous complete" "$tmp/out-page"
url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/jobs' "$tmp/out-page" | head -1)
want=$(grep -oE "warm-up \+[0-9]+" "$tmp/out-page" | head -1 | tr -dc 0-9)
got=$(curl -sf "${url%/jobs}/api/jobs" | jq -r '.jobs[0].plan.warmupExtra' 2>/dev/null)
[ -n "$want" ] && [ "$got" = "$want" ] && pass "3fab6: status.plan.warmupExtra is the plan's ($got)" \
    || fail "3fab6: status.plan.warmupExtra is the plan's" "want '$want', got '$got'; $(tail -n 5 "$tmp/out-page")"
chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$chrome" ] && [ -n "$url" ]; then
    timeout 40 "$chrome" --headless --disable-gpu --no-sandbox --user-data-dir="$tmp/profile" \
        --virtual-time-budget=3000 --dump-dom "$url" >"$tmp/dom.html" 2>/dev/null
    grep -q "1F1B warm-up +$want" "$tmp/dom.html" && pass "3fab6: the job page shows the warm-up depth" \
        || fail "3fab6: the job page shows the warm-up depth" "$(grep -o 'pipeline [^<]*' "$tmp/dom.html" | head -3)"
fi
kill "$lp" 2>/dev/null || true
wait "$lp" 2>/dev/null || true

