# Every field of the TrainingJob API is honoured on every path it reaches or refused at
# validation: the table "Where each field takes effect" in docs/api.md must have a row for every
# leaf of the CRD's spec schema (and no stale row), each naming symbols the sources define; then
# runs prove the rows that are cheap to prove (plan output, local runs, worker logs, checkpoints).
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-api-fields.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
name=it-fields-$$

# 1. The table against the schema and the sources.
out=$(cd "$REPO" && /usr/bin/python3 - <<'PY' 2>&1
import re, subprocess, sys, yaml

def leaves(path):
    crd = yaml.safe_load(open(path))
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    out = []
    def walk(node, p):
        if node.get("type") == "array" and "items" in node:
            if "properties" in node["items"]:
                walk(node["items"], p + "[]")
            else:
                out.append(p)
            return
        props = node.get("properties")
        if not props:
            out.append(p)
            return
        for k, v in props.items():
            walk(v, f"{p}.{k}" if p else k)
    walk(spec, "")
    return out

fields = leaves("crds/trainingjob.yaml")
chart = leaves("helm/holmes/crds/trainingjob.yaml")
if chart != fields:
    print("FAILMSG the chart's CRD has other spec fields:", sorted(set(chart) ^ set(fields)))
text = open("docs/api.md").read()
sec = text.split("## Where each field takes effect", 1)
rows = {}
if len(sec) == 2:
    body = sec[1].split("\n## ", 1)[0]
    for line in body.splitlines():
        m = re.match(r"^\| `([^`]+)` \| (.+) \| (.+) \|$", line)
        if m:
            rows[m.group(1)] = (m.group(2), re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", m.group(3)))
missing = [f for f in fields if f not in rows]
stale = [r for r in rows if r not in fields]
nosym = [r for r, (_, syms) in rows.items() if not syms]
unknown = []
for r, (_, syms) in rows.items():
    for s in syms:
        rc = subprocess.run(["grep", "-rqw", "--include=*.c", "--include=*.h", s, "common", "operator",
                             "noderuntime"]).returncode
        if rc != 0:
            unknown.append(f"{r}: {s}")
print(f"fields {len(fields)} rows {len(rows)}")
if missing: print("FAILMSG fields without a row:", missing)
if stale: print("FAILMSG rows for no schema field:", stale)
if nosym: print("FAILMSG rows naming no symbol:", nosym)
if unknown: print("FAILMSG symbols the sources lack:", unknown)
PY
)
if grep -q '^fields ' <<<"$out" && ! grep -q FAILMSG <<<"$out"; then
    pass "every CRD spec field has a row in docs/api.md naming existing symbols ($(head -1 <<<"$out"))"
else
    fail "every CRD spec field has a row in docs/api.md naming existing symbols" "$out"
fi

# 2. Proofs by plan: placement fields change what the planner predicts.
job_yaml() { # FILE, sed expressions...: local-tiny, renamed, training data absolute
    local f=$1; shift
    sed -e "s/name: local-tiny/name: $name/" -e "s#path: examples/data/corpus.txt#path: $REPO/examples/data/corpus.txt#" \
        -e "s#local-runs/local-tiny/checkpoints#$tmp/ckpt#" "$@" "$REPO/examples/local-tiny.yaml" >"$f"
}
step_of() { sed -n 's/^predicted step: \([0-9.]*\) s.*/\1/p' <<<"$1"; }
job_yaml "$tmp/plan.yaml" -e "s/placement: {policy: holmes}/placement: {policy: holmes, crossFabricGbps: 0.001}/"
a=$("$OPERATOR" plan "$REPO/examples/local-tiny.yaml" 2>&1); b=$("$OPERATOR" plan "$tmp/plan.yaml" 2>&1)
[ -n "$(step_of "$a")" ] && [ "$(step_of "$a")" != "$(step_of "$b")" ] \
    && pass "placement.crossFabricGbps changes the planner's predicted step ($(step_of "$a") -> $(step_of "$b") s)" \
    || fail "placement.crossFabricGbps changes the planner's predicted step" "$(step_of "$a") vs $(step_of "$b"): $b"
job_yaml "$tmp/naive.yaml" -e "s/placement: {policy: holmes}/placement: {policy: naive}/"
b=$("$OPERATOR" plan "$tmp/naive.yaml" 2>&1)
grep -q '^policy holmes' <<<"$a" && grep -q '^policy naive' <<<"$b" \
    && pass "placement.policy selects the planner's policy" || fail "placement.policy selects the planner's policy" "$b"

# 3. A real local run: logEverySteps (worker log lines), checkpoint.keep 1 (one file per stage),
#    image and template said to be unused locally.
job_yaml "$tmp/run.yaml" -e "s/steps: 300/steps: 4/" -e "s/warmupSteps: 20/warmupSteps: 0/" \
    -e "s/everySteps: 50, keep: 2/everySteps: 1, keep: 1/" -e "s/logEverySteps: 10/logEverySteps: 2/" \
    -e "s#^  gpusPerWorker: 0#  gpusPerWorker: 0\n  image: reg/holmes-node:x\n  template: {metadata: {labels: {a: b}}}#"
out=$(cd "$REPO" && timeout 300 "$OPERATOR" local "$tmp/run.yaml" --run-dir "$tmp/run" 2>&1); rc=$?
[ $rc -eq 0 ] && pass "local run with logEverySteps 2, keep 1 succeeds" \
    || fail "local run with logEverySteps 2, keep 1 succeeds" "rc $rc: $out"
logged=$(cat "$tmp"/run/worker-*.log 2>/dev/null | sed -n 's/.* step \([0-9]*\)\/4 .*/\1/p' | sort -u | tr '\n' ' ')
[ "$logged" = "2 4 " ] && pass "logEverySteps 2: the workers log steps 2 and 4 only" \
    || fail "logEverySteps 2: the workers log steps 2 and 4 only" "logged steps: '$logged'"
grep -q 'loss' "$tmp/run/worker-3.log" 2>/dev/null && pass "the last stage's log lines carry the loss" \
    || fail "the last stage's log lines carry the loss" "$(tail -n 3 "$tmp/run/worker-3.log" 2>&1)"
files=$(cd "$tmp/ckpt" 2>/dev/null && ls stage-*.ckpt | tr '\n' ' ')
[ "$(wc -w <<<"$files")" = 2 ] && grep -q 'step-000000004' <<<"$files" \
    && [ "$(cat "$tmp/ckpt/latest-step" 2>/dev/null)" = 4 ] \
    && pass "checkpoint.keep 1: one checkpoint per stage (the newest) after 4 saves" \
    || fail "checkpoint.keep 1: one checkpoint per stage (the newest) after 4 saves" "$files"
grep -q "note: spec.image and spec.template configure the worker pods of a cluster; local runs this build's holmes-node" <<<"$out" \
    && pass "local says spec.image and spec.template are not used" \
    || fail "local says spec.image and spec.template are not used" "$out"

# 4. data.format that does not match the files: the job fails naming the field.
job_yaml "$tmp/fmt.yaml" -e "s/steps: 300/steps: 2/" -e "s/warmupSteps: 20/warmupSteps: 0/" \
    -e "s/format: text}/format: llmc}/" -e "s/maxRestarts: 2/maxRestarts: 0/" -e "/checkpoint:/d"
out=$(cd "$REPO" && timeout 120 "$OPERATOR" local "$tmp/fmt.yaml" --run-dir "$tmp/run-fmt" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "spec.training.data.format: llmc, but $REPO/examples/data/corpus.txt is text" <<<"$out" \
    && pass "data.format llmc on a text file: the job fails naming the field" \
    || fail "data.format llmc on a text file: the job fails naming the field" "rc $rc: $out"

# 5. suspend: local starts no workers.
job_yaml "$tmp/susp.yaml" -e "s/^  gangTimeoutSeconds: 60/  gangTimeoutSeconds: 60\n  suspend: true/"
out=$(cd "$REPO" && timeout 60 "$OPERATOR" local "$tmp/susp.yaml" --run-dir "$tmp/run-susp" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "spec.suspend is true: no workers started" <<<"$out" && ! ls "$tmp"/run-susp/worker-*.log >/dev/null 2>&1 \
    && pass "suspend: local starts no workers and says so" || fail "suspend: local starts no workers and says so" "rc $rc: $out"

# 6. restartPolicy.backoffSeconds: after a killed worker the gang restarts no sooner.
job_yaml "$tmp/bo.yaml" -e "s/steps: 300/steps: 150/" -e "s/backoffSeconds: 0/backoffSeconds: 3/" -e "/checkpoint:/d"
( cd "$REPO" && timeout 120 "$OPERATOR" local "$tmp/bo.yaml" --simulate --step-ms 10 --run-dir "$tmp/run-bo" \
    >"$tmp/out-bo" 2>&1; echo $? >"$tmp/rc-bo" ) &
for _ in $(seq 100); do grep -q "Running: rendezvous complete" "$tmp/out-bo" 2>/dev/null && break; sleep 0.1; done
victim=$(pgrep -f -- "--pod $name-worker-1 " | head -1)
t0=$(date +%s.%N)
[ -n "$victim" ] && kill -9 "$victim"
wait
t1=$(date +%s.%N)
after=$(/usr/bin/python3 -c "print(round($t1 - $t0, 1))")
[ "$(cat "$tmp/rc-bo")" = 0 ] && grep -q "restarting in place after a 3 s backoff (restart 1 of 2)" "$tmp/out-bo" \
    && /usr/bin/python3 -c "import sys; sys.exit(not $after >= 3.0)" \
    && pass "restartPolicy.backoffSeconds 3: the in-place restart waits ($after s from the kill to the end)" \
    || fail "restartPolicy.backoffSeconds 3: the in-place restart waits" "rc $(cat "$tmp/rc-bo"), $after s: $(cat "$tmp/out-bo")"
