# The live job page in a real browser: `holmes-operator local` (simulated workers) serves
# /jobs and prints its URL; headless Chromium loads it twice while the job trains: no console
# message (errors, failed loads, exceptions), the placement drawn (stages on their fabrics,
# every worker, each stage's optimizer price), and more loss points on the later load. /api/jobs is checked with jq, and the
# page fetches nothing from elsewhere. Screenshots: $HOLMES_BUILD_DIR/artifacts/job_page/.
source "$(dirname "$0")/lib.bash"
chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chrome" ]; then
    echo "SKIP job_page: chromium is not installed (make deps installs it: apt-get install chromium)"
    exit 0
fi
tmp=$(mktemp -d /tmp/holmes-page.XXXXXX)
art=${HOLMES_BUILD_DIR:-$REPO/build/release}/artifacts/job_page
mkdir -p "$art"
lp=""
trap '[ -n "$lp" ] && kill "$lp" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
name=it-page-$$
# 100 ms steps: the page's ring (600 steps) is not full before the second load.
example_job "$tmp/job.yaml" "$name" 400 "$tmp/ckpt" \
    -e "s#    eval: .*#    eval: {path: examples/data/corpus.txt, format: text, everySteps: 5, batches: 1}#"
( cd "$REPO" && exec timeout 90 "$OPERATOR" local "$tmp/job.yaml" --simulate --step-ms 100 \
      --run-dir "$tmp/run" >"$tmp/out" 2>&1 ) &
lp=$!
wait_for 30 grep -q "Running: rendezvous complete" "$tmp/out"
url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/jobs' "$tmp/out" | head -1)
[ -n "$url" ] && pass "local prints the job page's URL" || fail "local prints the job page's URL" "$(cat "$tmp/out")"
base=${url%/jobs}

# load N: the DOM after the page's first polls, Chromium's log (console messages), a screenshot.
load() {
    local n=$1
    timeout 40 "$chrome" --headless --disable-gpu --no-sandbox --user-data-dir="$tmp/profile-$n" \
        --enable-logging=stderr --v=0 --virtual-time-budget=3000 --dump-dom "$url" \
        >"$tmp/dom-$n.html" 2>"$tmp/chrome-$n.log"
    timeout 40 "$chrome" --headless --disable-gpu --no-sandbox --user-data-dir="$tmp/profile-$n" \
        --window-size=1280,1100 --virtual-time-budget=3000 --screenshot="$art/load-$n.png" "$url" \
        >/dev/null 2>&1
}
points() { grep -o 'class="chart loss"[^>]*data-points="[0-9]*"' "$tmp/dom-$1.html" | grep -o '[0-9]*"$' | tr -d '"'; }

wait_for 20 bash -c "curl -sf '$base/api/jobs' | jq -e '.jobs[0].points.step | length > 5'"
load 1
sleep 3
load 2

for n in 1 2; do
    console=$(grep -E ':CONSOLE[:(]|Uncaught' "$tmp/chrome-$n.log")
    [ -z "$console" ] && [ -s "$tmp/dom-$n.html" ] && pass "load $n: no console messages" \
        || fail "load $n: no console messages" "${console:-empty DOM} $(tail -3 "$tmp/chrome-$n.log")"
done
dom=$(cat "$tmp/dom-1.html")
grep -q "data-job=\"$name\"" <<<"$dom" && grep -q 'class="phase" data-phase="Running"' <<<"$dom" \
    && pass "the running job and its phase shown" || fail "the running job and its phase shown" "$(head -c 600 <<<"$dom")"
grep -q 'class="stage" data-stage="0" data-fabric="ib-a"' <<<"$dom" &&
    grep -q 'class="stage" data-stage="1" data-fabric="roce-b"' <<<"$dom" &&
    grep -q 'class="fabric" data-fabric="ib-a"' <<<"$dom" \
    && pass "placement: stages drawn on their fabrics" || fail "placement: stages drawn on their fabrics" "$(grep -o 'class="stage"[^>]*' <<<"$dom")"
nw=0
for i in 0 1 2 3; do grep -q "class=\"worker\"[^>]*>$name-worker-$i<" <<<"$dom" && nw=$((nw + 1)); done
[ "$nw" -eq 4 ] && pass "placement: every worker named" || fail "placement: every worker named" "$nw of 4"
# each stage's optimizer as the planner priced it, at its workers' memory bandwidth (local's
# workers declare 5 GB/s)
nopt=$(grep -oE 'class="optimizer"[^>]*>AdamW [0-9.]+ ms · 5\.0 GB/s<' <<<"$dom" | wc -l)
[ "$nopt" -eq 2 ] && pass "placement: each stage's optimizer price and memory bandwidth shown" \
    || fail "placement: each stage's optimizer price shown" "$nopt of 2: $(grep -oE 'AdamW [^<]*' <<<"$dom" | head -3)"
grep -q 'class="stage-times"' <<<"$dom" && grep -q 'class="conditions"' <<<"$dom" && grep -q 'class="events"' <<<"$dom" \
    && pass "stage times, conditions and events shown" || fail "stage times, conditions and events shown"
p1=$(points 1) p2=$(points 2)
[ -n "$p1" ] && [ "$p1" -gt 0 ] && [ -n "$p2" ] && [ "$p2" -gt "$p1" ] \
    && pass "loss curve grows while it trains ($p1 -> $p2 points)" \
    || fail "loss curve grows while it trains" "points ${p1:-none} then ${p2:-none}"
ev=$(grep -o 'class="chart eval"[^>]*data-points="[0-9]*"' "$tmp/dom-2.html" | grep -o '[0-9]*"$' | tr -d '"')
[ -n "$ev" ] && [ "$ev" -gt 0 ] && [ "$ev" -lt "$p2" ] && pass "the held-out loss drawn ($ev points: every 5th step)" \
    || fail "the held-out loss drawn" "${ev:-no chart} of $p2 steps"
gn=$(grep -o 'class="chart norm"[^>]*data-points="[0-9]*"' "$tmp/dom-2.html" | grep -o '[0-9]*"$' | tr -d '"')
[ -n "$gn" ] && [ "$gn" -eq "$p2" ] && pass "the gradient norm drawn ($gn points: every step)" \
    || fail "the gradient norm drawn" "${gn:-no chart} of $p2 steps"
[ -s "$art/load-1.png" ] && [ -s "$art/load-2.png" ] && pass "screenshots kept in $art" \
    || fail "screenshots kept in $art"

api=$(curl -sf "$base/api/jobs")
jq_true "$api" ".jobs[0].name == \"$name\" and (.jobs[0].plan.stages | length) == 2 and
        (.jobs[0].stages | length) == 2 and (.jobs[0].points.loss | length) > 0 and
        (.jobs[0].points.step | length) == (.jobs[0].points.loss | length) and
        (.jobs[0].points.step | length) == (.jobs[0].points.evalLoss | length) and
        ([.jobs[0].points.evalLoss[] | numbers] | length) > 0 and
        ([.jobs[0].points.gradNorm[] | numbers] | length) > 0" \
    && pass "/api/jobs: plan, stage times and loss points" || fail "/api/jobs: plan, stage times and loss points" "$(head -c 400 <<<"$api")"
html=$(curl -sf "$base/jobs")
ext=$(grep -Eio '(src|href|action)=["'"'"']?(https?:)?//[^"'"'"' >]*|@import|url\(' <<<"$html")
[ -n "$html" ] && [ -z "$ext" ] && pass "the page loads nothing from elsewhere" \
    || fail "the page loads nothing from elsewhere" "${ext:-no page}"
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/nope")
[ "$code" = 404 ] && pass "other paths 404" || fail "other paths 404" "$code"

# Interrupted, local stops its page with the job (under ASan: no leak, no error report).
kill -TERM "$lp" 2>/dev/null
wait "$lp" 2>/dev/null
lp=""
san=$(grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$tmp/out")
[ -z "$san" ] && ! curl -sf -o /dev/null "$base/jobs" && pass "SIGTERM: local ends, page and all, without a sanitizer report" \
    || fail "SIGTERM: local ends, page and all, without a sanitizer report" "${san:-the page still answers}"
