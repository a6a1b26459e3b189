# The TrainingJob CRD and the Helm chart on a real kube-apiserver (tests/k8s/envtest.bash):
# the CRD is accepted (crds/ and the chart's copy), installs and upgrades with stored jobs
# intact; every invalid manifest of tests/manifests whose rule the CRD carries (layers schema
# and cel) is refused by the server itself, naming a field that `holmes-operator validate`
# names too; every valid manifest and example is accepted; what `helm template` renders passes
# server-side dry-run.
source "$(dirname "$0")/lib.bash"
source "$REPO/tests/k8s/envtest.bash"
once_per_run k8s_crd # the CRD and the chart on the server; holmes-operator validate is only compared
k8s_require
k8s_start || exit 1
tmp=$K8S_DIR/crd-test
mkdir -p "$tmp"
for ns in team research training holmes-system ml-team; do kubectl create namespace "$ns" >/dev/null; done

# --- install: an older CRD first, with a job stored, then the current one over it -----------
# "Older" = today's CRD without parallelism.paramGatherDtype and the printer columns.
/usr/bin/python3 - "$REPO/crds/trainingjob.yaml" "$tmp/old-crd.yaml" <<'PY'
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
v = d["spec"]["versions"][0]
del v["additionalPrinterColumns"]
del v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["parallelism"]["properties"]["paramGatherDtype"]
yaml.safe_dump(d, open(sys.argv[2], "w"))
PY
check "older CRD accepted" kubectl apply -f "$tmp/old-crd.yaml" >/dev/null
kubectl wait --for condition=established crd/trainingjobs.holmes.dev --timeout=30s >/dev/null
JOB_OLD='{"apiVersion":"holmes.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"stored","namespace":"team"},
 "spec":{"workers":2,"gpusPerWorker":0,"model":{"layers":4,"hidden":64,"heads":4,"vocab":256,"seqLen":64},"training":{"steps":10}}}'
check "job stored under the older CRD" kubectl create -o name -f - <<<"$JOB_OLD" >/dev/null
with_pgd() { jq -c '.metadata.name = "newfield" | .spec.parallelism = {"paramGatherDtype":"bf16"}' <<<"$JOB_OLD"; }
if kubectl create -f - <<<"$(with_pgd)" >"$tmp/old-refuse" 2>&1; then
    fail "older CRD refuses a field it does not know" "accepted"
else
    check "older CRD refuses a field it does not know" grep -q 'unknown field "spec.parallelism.paramGatherDtype"' "$tmp/old-refuse"
fi
if kubectl apply -f "$REPO/crds/trainingjob.yaml" >"$tmp/apply" 2>&1; then
    pass "crds/trainingjob.yaml accepted by kube-apiserver (upgrade over the older CRD)"
else
    fail "crds/trainingjob.yaml accepted by kube-apiserver (upgrade over the older CRD)" "$(cat "$tmp/apply")"
fi
kubectl wait --for condition=established crd/trainingjobs.holmes.dev --timeout=30s >/dev/null
check "the stored job reads back after the upgrade, defaults applied" \
    bash -c "$KUBECTL get tj stored -n team -o json | jq -e '.spec.parallelism.schedule == \"1f1b\" and .spec.training.checkpoint.everySteps == 0 and .spec.restartPolicy.maxRestarts == 3' >/dev/null"
check "the upgraded CRD takes the new field" kubectl create -f - <<<"$(with_pgd)" >/dev/null
check "re-applying the same CRD changes nothing" bash -c "$KUBECTL apply -f '$REPO/crds/trainingjob.yaml' | grep -q unchanged"
if kubectl apply --dry-run=server -f "$REPO/helm/holmes/crds/trainingjob.yaml" >"$tmp/chart-crd" 2>&1; then
    pass "the chart's CRD accepted by kube-apiserver"
else
    fail "the chart's CRD accepted by kube-apiserver" "$(cat "$tmp/chart-crd")"
fi
check "kubectl get tj (short name and columns)" bash -c "$KUBECTL get tj -n team | head -1 | grep -qE '^NAME +PHASE +WORKERS +STEP +LOSS +AGE'"

# --- invalid manifests: the server refuses them, naming a field validate names ---------------
# Paths as "spec.a.b" with list indices dropped.
server_paths() {
    grep -oE '(\* |: |\[|, |^)(spec|metadata)(\.[A-Za-z0-9_]+|\[[0-9]+\])*|unknown field "[^"]+"' "$1" |
        sed -E 's/^(\* |: |\[|, )//; s/^unknown field "//; s/"$//; s/\[[0-9]+\]//g' | sort -u
}
validate_paths() {
    sed -nE 's/^[^:]+: ((spec|metadata|apiVersion|kind)[][A-Za-z0-9_.]*):.*/\1/p' "$1" | sed -E 's/\[[0-9]+\]//g' | sort -u
}
# same_field SERVER-PATHS VALIDATE-PATHS: prints the first field both name: the same path, or
# one path the object holding the other (the server's spec.model for validate's spec.model.heads).
same_field() {
    local sp vp
    while read -r sp; do
        while read -r vp; do
            case "$vp" in "$sp" | "$sp".*) echo "$sp"; return ;; esac
            case "$sp" in "$vp".*) echo "$sp (validate: $vp)"; return ;; esac
        done <"$2"
    done <"$1"
}
# lines_of FILE OUTPUT: OUTPUT's lines about FILE: validate's (they start with "FILE:" or
# "FILE[i]:") and kubectl's ('... error when creating "FILE": ...', a line each in a call of many)
lines_of() {
    awk -v f="$1" 'index($0, f ":") == 1 || index($0, f "[") == 1 ||
                   index($0, "error when creating \"" f "\":")' "$2"
}
# One kubectl call for the manifests the schema or a CEL rule refuses, and one validate call for
# them all: a kubectl process, or an ASan build of holmes-operator, costs 0.1-0.2 s of CPU, and a
# call each was a third of this test's. Each refusal comes back as one line naming its file (when
# more than one object is refused: a lone refusal names no file, so a server that took all but one
# fails all of them). The others (the server takes them, or no kind matches, or the YAML does not
# parse) a call each.
server_args=()
for f in "$REPO"/tests/manifests/invalid/*.yaml; do
    case "$(sed -nE 's/^# layer: *([a-z]+).*/\1/p' "$f" | head -1)" in
    schema | cel) server_args+=(-f "$f") ;;
    esac
done
kubectl create --dry-run=server "${server_args[@]}" >"$tmp/invalid.server" 2>&1
"$OPERATOR" validate "$REPO"/tests/manifests/invalid/*.yaml >"$tmp/invalid.validate" 2>&1
n_server=0
for f in "$REPO"/tests/manifests/invalid/*.yaml; do
    name=$(basename "$f" .yaml)
    layer=$(sed -nE 's/^# layer: *([a-z]+).*/\1/p' "$f" | head -1)
    case "$layer" in
    schema | cel)
        lines_of "$f" "$tmp/invalid.server" >"$tmp/$name.server"
        [ -s "$tmp/$name.server" ] && src=1 || src=0 ;;
    *)
        kubectl create --dry-run=server -f "$f" >"$tmp/$name.server" 2>&1
        src=$? ;;
    esac
    lines_of "$f" "$tmp/invalid.validate" >"$tmp/$name.validate"
    [ -s "$tmp/$name.validate" ] && vrc=1 || vrc=0
    case "$layer" in
    schema | cel)
        n_server=$((n_server + 1))
        if [ $src -eq 0 ]; then
            fail "server refuses $name ($layer)" "kube-apiserver accepted it"
            continue
        fi
        if [ $vrc -eq 0 ]; then
            fail "validate refuses $name too" "holmes-operator validate accepted it"
            continue
        fi
        server_paths "$tmp/$name.server" >"$tmp/$name.sp"
        validate_paths "$tmp/$name.validate" >"$tmp/$name.vp"
        common=$(same_field "$tmp/$name.sp" "$tmp/$name.vp")
        if [ -n "$common" ]; then
            pass "server refuses $name ($layer), naming $common as validate does"
        else
            fail "server refuses $name ($layer), naming the field validate names" \
                "server: $(tr '\n' ' ' <"$tmp/$name.sp") | validate: $(tr '\n' ' ' <"$tmp/$name.vp") | $(head -c 400 "$tmp/$name.server")"
        fi
        ;;
    validator)
        # Rules the CRD cannot state (they need "auto" resolved or compare list items): the
        # server takes the object, the operator refuses it (Valid=False, tested in k8s_operator.sh).
        if [ $src -eq 0 ] || grep -q 'no matches for kind' "$tmp/$name.server"; then
            if [ $vrc -ne 0 ]; then pass "$name: left to the C validator, which refuses it"; else fail "$name refused by validate" "accepted"; fi
        else
            fail "$name is marked validator-only but the server refuses it" "$(head -c 300 "$tmp/$name.server") (mark it schema or cel)"
        fi
        ;;
    parse)
        [ $src -ne 0 ] && [ $vrc -ne 0 ] && pass "$name: kubectl and validate both refuse the YAML" ||
            fail "$name: kubectl and validate both refuse the YAML" "kubectl rc $src, validate rc $vrc"
        ;;
    *) fail "$name has a known layer" "'# layer: $layer'" ;;
    esac
done
# Every CEL rule of the CRD refused at least one of those manifests on the server.
/usr/bin/python3 -c '
import sys, yaml
def walk(n):
    if isinstance(n, dict):
        for r in n.get("x-kubernetes-validations", []):
            print(r["message"])
        for v in n.values():
            walk(v)
    elif isinstance(n, list):
        for v in n:
            walk(v)
walk(yaml.safe_load(open(sys.argv[1])))' "$REPO/crds/trainingjob.yaml" >"$tmp/cel-messages"
n_rules=0
while read -r msg; do
    n_rules=$((n_rules + 1))
    if grep -qF -- "$msg" "$tmp"/*.server; then
        pass "CEL rule exercised on the server: $msg"
    else
        fail "CEL rule exercised on the server: $msg" "no invalid manifest in tests/manifests/invalid is refused by it: add one"
    fi
done <"$tmp/cel-messages"
[ "$n_rules" -ge 10 ] && pass "CEL rules found in the CRD ($n_rules)" || fail "CEL rules found in the CRD" "only $n_rules"
[ "$n_server" -ge 40 ] && pass "server-side cases counted ($n_server)" || fail "server-side cases counted" "only $n_server"

# --- valid manifests and examples: accepted by the server and by validate --------------------
# (one kubectl call for them all: a "created" line an object; errors name their files when there
# are several, so a lone refusal fails every file of the call, its message shown)
valid=() valid_args=() n_objects=0
for f in "$REPO"/tests/manifests/valid/*.yaml "$REPO"/examples/*.yaml; do
    grep -q '^kind: TrainingJob' "$f" || continue
    valid+=("$f") valid_args+=(-f "$f") n_objects=$((n_objects + $(grep -c '^kind:' "$f")))
done
kubectl create --dry-run=server "${valid_args[@]}" >"$tmp/valid.server" 2>&1
vsrc=$?
n_created=$(grep -c 'created (server dry run)$' "$tmp/valid.server")
for f in "${valid[@]}"; do
    name=$(basename "$f" .yaml)
    refusal=$(grep -F "$f" "$tmp/valid.server")
    if [ -z "$refusal" ] && [ "$vsrc" -eq 0 ] && [ "$n_created" -eq "$n_objects" ]; then
        pass "server accepts $name"
    else
        fail "server accepts $name" "${refusal:-kubectl rc $vsrc, $n_created of $n_objects objects created: $(grep -v 'created (server dry run)$' "$tmp/valid.server" | head -c 400)}"
    fi
done

# --- docs/install.md's tokenizing and evaluating Jobs: valid batch/v1 Jobs for the server -------
for sec in "Training data on the cluster:tokenizing" "Evaluating a trained model on the cluster:evaluating"; do
    title=${sec%%:*} what=${sec##*:}
    awk -v t="### $title" '$0 == t { on = 1 } on && /^```yaml/ { f = 1; next } f && /^```/ { exit } f' \
        "$REPO/docs/install.md" >"$tmp/$what-job.yaml"
    if grep -q '^kind: Job' "$tmp/$what-job.yaml" &&
       kubectl create --dry-run=server -n default -f "$tmp/$what-job.yaml" >"$tmp/$what-job.out" 2>&1; then
        pass "server accepts docs/install.md's $what Job"
    else
        fail "server accepts docs/install.md's $what Job" "$(head -c 400 "$tmp/$what-job.out" 2>/dev/null)"
    fi
done
# the evaluating Job's command is one holmes-node eval accepts (its flags parsed: the only
# complaint is the missing checkpoint directory)
mapfile -t argv < <(/usr/bin/python3 - "$tmp/evaluating-job.yaml" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"command: \[(.*?)\]", t, re.S)
for a in m.group(1).replace("\n", " ").split(","):
    print(a.strip().strip('"'))
PY
)
out=$("$NODE" "${argv[@]:1}" 2>&1); rc=$?
if [ "${argv[0]}" = holmes-node ] && [ "${argv[1]}" = eval ] && [ $rc = 2 ] && grep -q -- "--engine cuda-bf16: this holmes-node was built without" <<<"$out" ||
   { [ $rc = 1 ] && grep -q "/data/checkpoints/gpt2-124m" <<<"$out"; }; then
    pass "docs/install.md's evaluating Job: holmes-node eval parses its command"
else
    fail "docs/install.md's evaluating Job: holmes-node eval parses its command" "rc $rc: ${argv[*]}: $(head -c 300 <<<"$out")"
fi

# --- kubectl and validate read YAML 1.1 booleans alike ---------------------------------------
cat >"$tmp/yes.yaml" <<'YAML'
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: yes-bool, namespace: team}
spec:
  workers: 1
  gpusPerWorker: 0
  model: {layers: 2, hidden: 64, heads: 4, vocab: 256, seqLen: 64}
  training: {steps: 1}
  suspend: yes
YAML
check "suspend: yes is a boolean to kubectl" bash -c "$KUBECTL create --dry-run=server -f '$tmp/yes.yaml' -o json | jq -e '.spec.suspend == true' >/dev/null"
check "... and to holmes-operator validate" bash -c "'$OPERATOR' validate --print '$tmp/yes.yaml' 2>/dev/null | jq -e '.suspend == true' >/dev/null"

# --- what the chart renders passes server-side dry-run ---------------------------------------
HELM=$REPO/tools/helm
[ -x "$HELM" ] || HELM=$(command -v helm || true)
if [ -z "$HELM" ]; then
    fail "helm available" "no tools/helm: run 'make deps'"
else
    for v in "$REPO"/tests/helm/values/*.yaml; do
        c=$(basename "$v" .yaml)
        if ! "$HELM" template h "$REPO/helm/holmes" -n holmes-system -f "$v" >"$tmp/chart-$c.yaml" 2>"$tmp/chart-$c.err"; then
            fail "helm template ($c)" "$(cat "$tmp/chart-$c.err")"
            continue
        fi
        # ServiceMonitor and PrometheusRule need the Prometheus Operator's CRDs, which this
        # cluster lacks (helm.sh checks their content; the dashboard's ConfigMap is checked here).
        /usr/bin/python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] not in ("ServiceMonitor", "PrometheusRule")]
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
print(len(docs))' "$tmp/chart-$c.yaml" "$tmp/chart-$c.core.yaml" >"$tmp/chart-$c.n"
        if kubectl apply --dry-run=server -f "$tmp/chart-$c.core.yaml" >"$tmp/chart-$c.out" 2>&1; then
            pass "helm template ($c): $(cat "$tmp/chart-$c.n") objects pass server-side dry-run"
        else
            fail "helm template ($c) passes server-side dry-run" "$(grep -v 'created (server dry run)' "$tmp/chart-$c.out" | head -c 800)"
        fi
    done
fi
