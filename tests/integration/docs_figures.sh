# Figures the docs quote for the paper's example come from the commands the docs name: run them
# and check the docs still say what they print (docs/planner.md's example table, docs/hetero.md's
# calibration row).
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-docs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
CL=$REPO/examples/clusters/paper-ib-roce.yaml JOB=$REPO/examples/clusters/gpt-7.5b-job.yaml
"$OPERATOR" plan --cluster "$CL" "$JOB" >"$tmp/text" 2>&1 && "$OPERATOR" plan --cluster "$CL" "$JOB" --json >"$tmp/json" 2>&1 ||
    { fail "plan runs on the paper's example" "$(cat "$tmp/text")"; exit 1; }
ib=$(jq -r '.stages[0].layers[1] - .stages[0].layers[0]' "$tmp/json")
same=$(sed -nE 's/.*naive [0-9.]+ s \(x([0-9.]+)\).*/\1/p' "$tmp/text" | head -1)
own=$(sed -nE 's/^  naive +[0-9]+ tokens\/s \(this plan x([0-9.]+)\).*/\1/p' "$tmp/text" | head -1)
check "planner.md: the IB stage's layers ($ib of 36) as plan prints them" grep -q "IB stage gets $ib of 36 layers" "$REPO/docs/planner.md"
check "planner.md: naive at the same shape (x$same) as plan prints it" grep -q "naive is ${same}× slower" "$REPO/docs/planner.md"
check "planner.md: naive at its own best shape (x$own) as plan prints it" grep -q "own best shape (pipeline [0-9]* × data [0-9]*) ${own}×" "$REPO/docs/planner.md"
# the own-best figure is what --policy naive plans
naive_tps=$("$OPERATOR" plan --cluster "$CL" "$JOB" --policy naive --json | jq '.tokens_per_second')
own_tps=$(jq '.baselines_own_best.naive.tokens_per_second' "$tmp/json")
check "plan's own-best naive figure is what --policy naive plans ($own_tps tokens/s)" \
    /usr/bin/python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-6 * b)" "$naive_tps" "$own_tps"

printf 'overlap: 0\n' >"$tmp/ov.yaml"
# the paper's shape (pipeline 2 x data 4), whatever the planner's own choice
sed 's/pipeline: auto, data: auto/pipeline: 2, data: 4/' "$JOB" >"$tmp/p2d4.yaml"
"$OPERATOR" plan --cluster "$CL" "$tmp/p2d4.yaml" --calibration "$tmp/ov.yaml" --json >"$tmp/ov.json"
row=$(jq -r '.stages[0] as $s | .parallelism.micro_batches as $m |
    "\($s.layers[1] - $s.layers[0]) \($m * ($s.forward_seconds + $s.backward_seconds) * 100 | round / 100) \($s.data_parallel_seconds * 100 | round / 100)"' "$tmp/ov.json")
read -r l c d <<<"$row"
check "hetero.md: the paper row ($l of 36, compute $c s, data-parallel $d s) as plan prints it" \
    grep -q "0 (IB, $l of 36) | $c s | $d s |" "$REPO/docs/hetero.md"
