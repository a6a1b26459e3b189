# The Helm chart: helm lint and helm template with several values files, checks on the rendered
# manifests (well-formed, no privileged/root containers, RBAC = exactly the operator's API
# calls), schema errors for bad values, the CRD copy in sync with crds/.
# Needs tools/helm (`make tools/helm`, a `make deps` hook) and /usr/bin/python3 with python3-yaml.
source "$(dirname "$0")/lib.bash"
CHART=$REPO/helm/holmes
HELM=${HELM:-$REPO/tools/helm}
[ -x "$HELM" ] || HELM=$(command -v helm || true)
if [ -z "$HELM" ]; then
    fail "helm available" "no tools/helm and no helm on PATH: run 'make tools/helm' (or 'make deps')"
    exit 1
fi
PY=/usr/bin/python3
if ! $PY -c 'import yaml' 2>/dev/null; then
    fail "python3-yaml available" "/usr/bin/python3 cannot import yaml: run 'make deps'"
    exit 1
fi
check_py() { $PY "$REPO/tests/helm/check_manifests.py" "$@"; }
tmp=$(mktemp -d /tmp/holmes-helm.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
NS=holmes-system
REL=h
OP_SA=$NS/$REL-holmes-operator
LABELER_SA=$NS/$REL-holmes-nic-labeler

# expect NAME OUTPUT-FILE: passes when the command succeeded, else fails with its output.
expect_ok() { local n=$1 out=$2; shift 2; if "$@" >"$out" 2>&1; then pass "$n"; else fail "$n" "$(head -c 2000 "$out")"; fi; }
has() { grep -qxF -- "$2" "$1"; }          # summary file, exact line
has_re() { grep -qE -- "$2" "$1"; }

# --- the CRD copy -------------------------------------------------------------------------
if [ -f "$REPO/crds/trainingjob.yaml" ]; then
    if diff -u "$REPO/crds/trainingjob.yaml" "$CHART/crds/trainingjob.yaml" >"$tmp/crd.diff"; then
        pass "chart CRD is crds/trainingjob.yaml"
    else
        fail "chart CRD is crds/trainingjob.yaml" "helm/holmes/crds/trainingjob.yaml differs; run 'make helm-sync-crd': $(head -20 "$tmp/crd.diff")"
    fi
else
    echo "note: crds/trainingjob.yaml is not in this tree yet; checking the chart's copy alone"
    grep -q '^  name: trainingjobs.holmes.dev$' "$CHART/crds/trainingjob.yaml" &&
        pass "chart CRD defines trainingjobs.holmes.dev" || fail "chart CRD defines trainingjobs.holmes.dev"
fi

# --- the API calls the RBAC must allow ------------------------------------------------------
CALLS=$REPO/tests/helm/api-calls.txt
if "$OPERATOR" run --print-api-calls >"$tmp/op-calls.txt" 2>/dev/null && [ -s "$tmp/op-calls.txt" ]; then
    CALLS=$tmp/op-calls.txt
    echo "note: RBAC compared with 'holmes-operator run --print-api-calls' ($(wc -l <"$CALLS") calls)"
else
    echo "note: holmes-operator run --print-api-calls not available; RBAC compared with tests/helm/api-calls.txt"
fi

# --- every values file: lint, render, generic checks ----------------------------------------
for v in "$REPO"/tests/helm/values/*.yaml; do
    c=$(basename "$v" .yaml)
    expect_ok "helm lint --strict ($c)" "$tmp/$c.lint" "$HELM" lint --strict "$CHART" -f "$v"
    if ! "$HELM" template "$REL" "$CHART" -n "$NS" --include-crds -f "$v" >"$tmp/$c.yaml" 2>"$tmp/$c.err"; then
        fail "helm template ($c)" "$(cat "$tmp/$c.err")"
        continue
    fi
    pass "helm template ($c)"
    expect_ok "manifests well-formed ($c)" "$tmp/$c.wf" check_py wellformed "$tmp/$c.yaml"
    expect_ok "no privileged or root containers ($c)" "$tmp/$c.sec" check_py security "$tmp/$c.yaml"
    check_py summary "$tmp/$c.yaml" >"$tmp/$c.sum"
    # The calls this rendering's flags make (gang schedulers, TLS, --metrics-secure), asked of
    # the operator itself with the Deployment's own arguments; without the binary, the listed
    # file (no gang scheduler, no TLS, plain metrics).
    calls=$CALLS
    gangs=$(sed -n "s/^arg Deployment\/$NS\/$REL-holmes-operator operator --gang-schedulers=//p" "$tmp/$c.sum")
    if [ "$CALLS" != "$REPO/tests/helm/api-calls.txt" ]; then
        calls=$tmp/$c.calls
        mapfile -t opargs < <(sed -n "s/^arg Deployment\/$NS\/$REL-holmes-operator operator //p" "$tmp/$c.sum" | grep -vx -e run -e holmes-operator)
        "$OPERATOR" run --print-api-calls "${opargs[@]}" >"$calls"
    fi
    expect_ok "operator RBAC = its API calls ($c${gangs:+, gang schedulers $gangs})" "$tmp/$c.rbac" \
        check_py rbac "$tmp/$c.yaml" "$calls" "$OP_SA"
done

# --- what each values file must change ----------------------------------------------------
s=$tmp/defaults.sum
has "$s" "object CustomResourceDefinition/trainingjobs.holmes.dev" && pass "defaults: CRD rendered" || fail "defaults: CRD rendered"
has "$s" "replicas Deployment/$NS/$REL-holmes-operator 2" &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --leader-elect" &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --identity=\$(POD_NAME)" &&
    has "$s" "object PodDisruptionBudget/$NS/$REL-holmes-operator" &&
    pass "defaults: 2 replicas with leader election and a PodDisruptionBudget" || fail "defaults: 2 replicas with leader election and a PodDisruptionBudget"
"$HELM" template "$REL" "$CHART" -n "$NS" --set operator.replicas=1 --set operator.leaderElect=false >"$tmp/one.yaml" 2>&1 &&
    check_py summary "$tmp/one.yaml" >"$tmp/one.txt" && ! has_re "$tmp/one.txt" "^object PodDisruptionBudget/" &&
    ! has_re "$tmp/one.txt" "leader-elect|^object Role/.*leader-election" && has "$tmp/one.txt" "replicas Deployment/$NS/$REL-holmes-operator 1" &&
    pass "one replica: no leader election, no Lease Role, no PodDisruptionBudget" || fail "one replica without leader election" "$(head -c 600 "$tmp/one.txt")"
has "$s" "object ClusterRole/$REL-holmes-operator" && has "$s" "object Role/$NS/$REL-holmes-operator-leader-election" &&
    pass "defaults: ClusterRole (all namespaces) + leader-election Role" || fail "defaults: ClusterRole + leader-election Role"
has "$s" "image Deployment/$NS/$REL-holmes-operator operator holmes/holmes-operator:0.1.0" &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --node-image=holmes/holmes-node:0.1.0" &&
    pass "defaults: images tagged with appVersion" || fail "defaults: images tagged with appVersion"
has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --coordinator-url=wss://$REL-holmes-coordinator.$NS.svc:8443" &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --coordinator-addr=:8443" &&
    pass "defaults: the operator serves and advertises the coordinator Service" || fail "defaults: coordinator address and URL"
# Another coordinator port: the operator is told to listen there, the Service and URL follow.
"$HELM" template "$REL" "$CHART" -n "$NS" --set coordinator.port=9443 >"$tmp/port.yaml" 2>&1 &&
    check_py summary "$tmp/port.yaml" >"$tmp/port.txt" &&
    has "$tmp/port.txt" "arg Deployment/$NS/$REL-holmes-operator operator --coordinator-addr=:9443" &&
    has "$tmp/port.txt" "arg Deployment/$NS/$REL-holmes-operator operator --coordinator-url=wss://$REL-holmes-coordinator.$NS.svc:9443" &&
    grep -q '^      port: 9443$' "$tmp/port.yaml" &&
    pass "coordinator.port: listen address, URL and Service follow" || fail "coordinator.port: listen address, URL and Service follow" "$(head -c 1000 "$tmp/port.yaml")"
has "$s" "object Service/$NS/$REL-holmes-coordinator" && has "$s" "object Service/$NS/$REL-holmes-metrics" &&
    pass "defaults: coordinator and metrics Services" || fail "defaults: coordinator and metrics Services"
! has_re "$s" "^object (ServiceMonitor|DaemonSet)/" && pass "defaults: no ServiceMonitor, no DaemonSet" ||
    fail "defaults: no ServiceMonitor, no DaemonSet" "$(grep -E '^object (ServiceMonitor|DaemonSet)' "$s")"
$PY - "$tmp/defaults.yaml" <<'PYEOF' >"$tmp/probes" 2>&1 && pass "defaults: liveness /healthz, readiness /readyz" || fail "defaults: probes" "$(cat "$tmp/probes")"
import sys, yaml
d = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x and x["kind"] == "Deployment"][0]
c = d["spec"]["template"]["spec"]["containers"][0]
assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", c.get("livenessProbe")
assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", c.get("readinessProbe")
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
assert ports == {"coordinator": 8443, "metrics": 8080, "health": 8081}, ports
assert c["resources"]["requests"] and c["resources"]["limits"], c["resources"]
PYEOF

s=$tmp/metrics.sum
has "$s" "object ServiceMonitor/$NS/$REL-holmes-operator" && has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --metrics-addr=:9090" &&
    pass "metrics: ServiceMonitor and --metrics-addr" || fail "metrics: ServiceMonitor and --metrics-addr"
! has_re "$tmp/defaults.sum" "^object (PrometheusRule|ConfigMap)/" && pass "defaults: no PrometheusRule, no dashboard" \
    || fail "defaults: no PrometheusRule, no dashboard"
# The alerts and the dashboard (metrics.yaml turns both on); their metric names are checked
# against a running operator's /metrics in k8s_gpus.sh.
$PY - "$tmp/metrics.yaml" <<'PYEOF' >"$tmp/mon" 2>&1 && pass "metrics: PrometheusRule with the 5 alerts and the Grafana dashboard ConfigMap" || fail "metrics: PrometheusRule and dashboard" "$(cat "$tmp/mon")"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
rule = [d for d in docs if d["kind"] == "PrometheusRule"]
assert len(rule) == 1 and rule[0]["metadata"]["labels"]["release"] == "prometheus"
alerts = {r["alert"]: r for g in rule[0]["spec"]["groups"] for r in g["rules"]}
assert set(alerts) == {"HolmesJobStuck", "HolmesJobRestartLoop", "HolmesStepSlowerThanPlan", "HolmesTransportFellBack",
                       "HolmesJobSkippingSteps"}, alerts
assert alerts["HolmesJobSkippingSteps"]["expr"] == "increase(holmes_job_skipped_steps[30m]) > 0"
assert alerts["HolmesStepSlowerThanPlan"]["expr"] == "holmes_job_step_seconds > 2 * holmes_job_predicted_step_seconds"
assert "{{ $labels.job }}" in alerts["HolmesJobStuck"]["annotations"]["summary"]
cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
assert len(cm) == 1 and cm[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
dash = json.loads(cm[0]["data"]["holmes-dashboard.json"])
assert dash["uid"] == "holmes-trainingjobs" and all(p["targets"] for p in dash["panels"]), dash
PYEOF
$PY - "$tmp/metrics.yaml" <<'PYEOF' >"$tmp/sm" 2>&1 && pass "metrics: ServiceMonitor selects the metrics Service" || fail "metrics: ServiceMonitor selects the metrics Service" "$(cat "$tmp/sm")"
import sys, yaml
docs = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x]
sm = [x for x in docs if x["kind"] == "ServiceMonitor"][0]
svc = [x for x in docs if x["kind"] == "Service" and x["metadata"]["name"].endswith("-metrics")][0]
sel = sm["spec"]["selector"]["matchLabels"]
assert all(svc["metadata"]["labels"].get(k) == v for k, v in sel.items()), (sel, svc["metadata"]["labels"])
assert sm["spec"]["endpoints"][0]["port"] in [p["name"] for p in svc["spec"]["ports"]]
assert sm["spec"]["endpoints"][0]["interval"] == "15s"
assert sm["metadata"]["labels"]["release"] == "prometheus"
PYEOF

s=$tmp/daemonset.sum
has "$s" "object DaemonSet/$NS/$REL-holmes-nic-labeler" &&
    has_re "$s" "^arg DaemonSet/$NS/$REL-holmes-nic-labeler nic-labeler .*holmes-node nic --label-node" &&
    has "$s" "env DaemonSet/$NS/$REL-holmes-nic-labeler nic-labeler NODE_NAME" &&
    has "$s" "image DaemonSet/$NS/$REL-holmes-nic-labeler nic-labeler holmes/holmes-node:0.1.0" &&
    pass "daemonset: holmes-node nic --label-node with NODE_NAME" || fail "daemonset: holmes-node nic --label-node with NODE_NAME"
expect_ok "daemonset: RBAC is exactly get/patch nodes" "$tmp/ds.rbac" \
    check_py rbac "$tmp/daemonset.yaml" "$REPO/tests/helm/nic-labeler-calls.txt" "$LABELER_SA"
$PY - "$tmp/daemonset.yaml" <<'PYEOF' >"$tmp/dsn" 2>&1 && pass "daemonset: GPU nodes only, NODE_NAME from spec.nodeName" || fail "daemonset: GPU nodes" "$(cat "$tmp/dsn")"
import sys, yaml
ds = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x and x["kind"] == "DaemonSet"][0]
ps = ds["spec"]["template"]["spec"]
assert ps["nodeSelector"] == {"nvidia.com/gpu.present": "true"}, ps.get("nodeSelector")
env = {e["name"]: e for e in ps["containers"][0]["env"]}
assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
assert env["INTERVAL"]["value"] == "120"
assert ps["hostNetwork"] is True
PYEOF

s=$tmp/custom-image.sum
has "$s" "image Deployment/$NS/$REL-holmes-operator operator registry.example.com/ml/holmes-operator:0.1.0-rc1" &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --node-image=registry.example.com/ml/holmes-node:0.1.0-rc1-cuda12" &&
    pass "custom-image: operator and default worker images" || fail "custom-image: operator and default worker images"
has "$s" "object Role/ml-team/$REL-holmes-operator" && ! has_re "$s" "^object ClusterRole/$REL-holmes-operator$" &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --namespace=ml-team" &&
    pass "custom-image: one namespace watched, Role instead of ClusterRole" || fail "custom-image: one namespace watched, Role instead of ClusterRole"
! has_re "$s" "^object Service/$NS/$REL-holmes-metrics" && has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --metrics-addr=0" &&
    has "$s" "replicas Deployment/$NS/$REL-holmes-operator 3" &&
    pass "custom-image: metrics off, 3 replicas" || fail "custom-image: metrics off, 3 replicas"
grep -q 'name: regcred' "$tmp/custom-image.yaml" && pass "custom-image: imagePullSecrets" || fail "custom-image: imagePullSecrets"
has "$s" "image DaemonSet/$NS/$REL-holmes-nic-labeler nic-labeler registry.example.com/ml/holmes-node:0.1.0-rc1-cuda12" &&
    pass "custom-image: DaemonSet uses nodeImage" || fail "custom-image: DaemonSet uses nodeImage"

# --- secure by default: TLS, authenticated metrics, NetworkPolicy; cert-manager; plain ---------
s=$tmp/defaults.sum
TLSN=$REL-holmes-coordinator-tls
has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --tls-secret=$TLSN" &&
    has_re "$s" "^arg Deployment/$NS/$REL-holmes-operator operator --tls-names=.*$REL-holmes-coordinator\.$NS\.svc,.*$REL-holmes-metrics\.$NS\.svc\.cluster\.local" &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --metrics-secure" &&
    has "$s" "object Role/$NS/$REL-holmes-operator-tls" && has "$s" "object ClusterRole/$REL-holmes-operator-auth" &&
    pass "defaults: wss:// with the operator's own certificate (Secret $TLSN), HTTPS metrics behind TokenReview/SAR" ||
    fail "defaults: TLS and secure metrics" "$(grep -E 'tls|secure|Role' "$s")"
$PY - "$tmp/defaults.yaml" "$TLSN" <<'PYEOF' >"$tmp/secdef" 2>&1 && pass "defaults: TLS Secret Role by name, metrics-reader ClusterRole, NetworkPolicy (workers -> coordinator, monitoring -> metrics, health open)" || fail "defaults: RBAC and NetworkPolicy for TLS and metrics" "$(cat "$tmp/secdef")"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
tls = by[("Role", "h-holmes-operator-tls")]["rules"]
named = [r for r in tls if r.get("resourceNames")]
assert named == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [sys.argv[2]], "verbs": ["get", "patch"]}], tls
reader = by[("ClusterRole", "h-holmes-metrics-reader")]["rules"]
assert reader == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}], reader
np = by[("NetworkPolicy", "h-holmes-operator")]["spec"]
assert np["policyTypes"] == ["Ingress"] and np["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
rules = {r["ports"][0]["port"]: r for r in np["ingress"]}
coord = rules["coordinator"]["from"][0]
assert coord["podSelector"]["matchExpressions"] == [{"key": "holmes.dev/job", "operator": "Exists"}], coord
assert rules["metrics"]["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}], rules["metrics"]
assert "from" not in rules["health"], rules["health"]
dep = by[("Deployment", "h-holmes-operator")]["spec"]["template"]["spec"]
assert [v["name"] for v in dep["volumes"]] == ["tmp"], dep["volumes"]
PYEOF
s=$tmp/metrics.sum
$PY - "$tmp/metrics.yaml" "$TLSN" <<'PYEOF' >"$tmp/smtls" 2>&1 && pass "metrics: ServiceMonitor scrapes over HTTPS with a bearer token, verifying the CA" || fail "metrics: ServiceMonitor over HTTPS" "$(cat "$tmp/smtls")"
import sys, yaml
sm = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ServiceMonitor"][0]
ep = sm["spec"]["endpoints"][0]
assert ep["scheme"] == "https" and ep["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token", ep
assert ep["tlsConfig"] == {"serverName": "h-holmes-metrics.holmes-system.svc", "ca": {"secret": {"name": sys.argv[2], "key": "ca.crt"}}}, ep
PYEOF
printf 'certManager:\n  enabled: true\n' >"$tmp/cm.values"
if "$HELM" template "$REL" "$CHART" -n "$NS" -f "$tmp/cm.values" >"$tmp/cm.yaml" 2>"$tmp/cm.err"; then
    check_py summary "$tmp/cm.yaml" >"$tmp/cm.sum"
    $PY - "$tmp/cm.yaml" "$TLSN" <<'PYEOF' >"$tmp/cm.chk" 2>&1 && pass "certManager.enabled: a self-signed CA, a Certificate for the Services into the Secret, mounted; the operator reads the files" || fail "certManager.enabled" "$(cat "$tmp/cm.chk")"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
certs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Certificate"}
issuers = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Issuer"}
c = certs["h-holmes-coordinator"]["spec"]
assert c["secretName"] == sys.argv[2] and "h-holmes-coordinator.holmes-system.svc" in c["dnsNames"], c
assert "h-holmes-metrics.holmes-system.svc" in c["dnsNames"] and c["issuerRef"] == {"kind": "Issuer", "name": "h-holmes-ca"}, c
assert certs["h-holmes-ca"]["spec"]["isCA"] is True and "selfSigned" in issuers["h-holmes-selfsigned"]["spec"]
dep = [d for d in docs if d["kind"] == "Deployment"][0]["spec"]["template"]["spec"]
args = dep["containers"][0]["args"]
assert "--coordinator-cert=/etc/holmes/tls/tls.crt" in args and "--coordinator-ca=/etc/holmes/tls/ca.crt" in args, args
assert not [a for a in args if a.startswith("--tls-secret")], args
assert {"name": "tls", "secret": {"secretName": sys.argv[2]}} in dep["volumes"], dep["volumes"]
assert not [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-tls")]
PYEOF
    mapfile -t opargs < <(sed -n "s/^arg Deployment\/$NS\/$REL-holmes-operator operator //p" "$tmp/cm.sum" | grep -vx -e run -e holmes-operator)
    "$OPERATOR" run --print-api-calls "${opargs[@]}" >"$tmp/cm.calls" &&
        expect_ok "certManager.enabled: operator RBAC = its API calls" "$tmp/cm.rbac" check_py rbac "$tmp/cm.yaml" "$tmp/cm.calls" "$OP_SA"
else
    fail "certManager.enabled renders" "$(cat "$tmp/cm.err")"
fi
printf 'coordinator:\n  tls:\n    enabled: false\nmetrics:\n  secure: false\nnetworkPolicy:\n  enabled: false\n' >"$tmp/plain.values"
"$HELM" template "$REL" "$CHART" -n "$NS" -f "$tmp/plain.values" >"$tmp/plain.yaml" 2>&1 &&
    check_py summary "$tmp/plain.yaml" >"$tmp/plain.sum" &&
    has "$tmp/plain.sum" "arg Deployment/$NS/$REL-holmes-operator operator --coordinator-url=ws://$REL-holmes-coordinator.$NS.svc:8443" &&
    ! has_re "$tmp/plain.sum" "tls-|metrics-secure|^object NetworkPolicy/|^object (Cluster)?Role/.*-(tls|auth)$" &&
    pass "TLS, secure metrics and the NetworkPolicy can each be turned off" || fail "TLS, secure metrics and the NetworkPolicy off" "$(grep -E 'tls|secure|Network|Role' "$tmp/plain.sum")"
printf 'coordinator:\n  tls:\n    enabled: false\n' >"$tmp/half.values"
"$HELM" template "$REL" "$CHART" -n "$NS" -f "$tmp/half.values" >/dev/null 2>"$tmp/half.err" &&
    fail "metrics.secure without TLS is refused" "rendered" ||
    { grep -q "metrics.secure serves HTTPS with the coordinator's certificate" "$tmp/half.err" &&
      pass "metrics.secure without TLS is refused, saying why" || fail "metrics.secure without TLS is refused" "$(cat "$tmp/half.err")"; }

# --- gang admission: flags and RBAC only for the gang schedulers enabled ----------------------
# podgroups rules of one API group in a rendering: "verbs" (sorted), or nothing
podgroup_verbs() {
    $PY - "$1" "$2" <<'PYEOF'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"].endswith("holmes-operator"):
        for r in d.get("rules", []):
            if sys.argv[2] in r.get("apiGroups", []) and "podgroups" in r.get("resources", []):
                print(" ".join(sorted(r["verbs"])))
PYEOF
}
[ -z "$(podgroup_verbs "$tmp/defaults.yaml" scheduling.volcano.sh)" ] &&
    [ -z "$(podgroup_verbs "$tmp/defaults.yaml" scheduling.x-k8s.io)" ] &&
    ! has_re "$tmp/defaults.sum" "--gang-" &&
    pass "defaults: no gang scheduler, no PodGroup RBAC, no --gang flags" || fail "defaults: no gang scheduler, no PodGroup RBAC"
s=$tmp/gang.sum
[ "$(podgroup_verbs "$tmp/gang.yaml" scheduling.volcano.sh)" = "create delete list watch" ] &&
    [ -z "$(podgroup_verbs "$tmp/gang.yaml" scheduling.x-k8s.io)" ] &&
    pass "gang: Volcano PodGroups list/watch/create/delete; nothing for coscheduling (not enabled)" ||
    fail "gang: Volcano PodGroup RBAC only" "volcano: $(podgroup_verbs "$tmp/gang.yaml" scheduling.volcano.sh); x-k8s: $(podgroup_verbs "$tmp/gang.yaml" scheduling.x-k8s.io)"
has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --gang-schedulers=kueue,volcano" &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --gang-default=volcano" &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --volcano-scheduler-name=volcano-prod" &&
    ! has_re "$s" "--coscheduling-scheduler-name" &&
    pass "gang: --gang-schedulers, --gang-default, --volcano-scheduler-name" || fail "gang: flags" "$(grep -- --gang "$s")"
s=$tmp/gang-coscheduling.sum
[ "$(podgroup_verbs "$tmp/gang-coscheduling.yaml" scheduling.x-k8s.io)" = "create delete list watch" ] &&
    [ -z "$(podgroup_verbs "$tmp/gang-coscheduling.yaml" scheduling.volcano.sh)" ] &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --gang-schedulers=coscheduling" &&
    has "$s" "arg Deployment/$NS/$REL-holmes-operator operator --coscheduling-scheduler-name=sp-scheduler" &&
    ! has_re "$s" "--gang-default" &&
    pass "gang-coscheduling: coscheduling PodGroups RBAC and flags only" || fail "gang-coscheduling: coscheduling PodGroups RBAC and flags only"
printf 'scheduling:\n  default: kueue\n' >"$tmp/gang-off.yaml"
if "$HELM" template "$REL" "$CHART" -n "$NS" -f "$tmp/gang-off.yaml" >/dev/null 2>"$tmp/gang-off.err"; then
    fail "a default gang scheduler that is not enabled is refused" "helm template accepted scheduling.default: kueue"
else
    grep -qF "scheduling.default: kueue is not enabled (set scheduling.kueue.enabled: true)" "$tmp/gang-off.err" &&
        pass "a default gang scheduler that is not enabled is refused" || fail "a default gang scheduler that is not enabled is refused" "$(cat "$tmp/gang-off.err")"
fi

# --- bad values are refused by the schema, naming the field -----------------------------------
for v in "$REPO"/tests/helm/bad-values/*.yaml; do
    c=$(basename "$v" .yaml)
    want=$(sed -n 's/^# expect: //p' "$v")
    if "$HELM" lint "$CHART" -f "$v" >"$tmp/bad-$c" 2>&1; then
        fail "bad values refused ($c)" "helm lint accepted $v"
    elif grep -qF -- "$want" "$tmp/bad-$c"; then
        pass "bad values refused ($c)"
    else
        fail "bad values refused ($c)" "error does not name '$want': $(grep ERROR "$tmp/bad-$c" | head -3)"
    fi
done

# --- the checks themselves can fail -----------------------------------------------------------
{ cat "$CALLS"; echo "create core configmaps"; } >"$tmp/more-calls.txt"
check_py rbac "$tmp/defaults.yaml" "$tmp/more-calls.txt" "$OP_SA" >"$tmp/neg1"
[ $? -eq 1 ] && grep -q '^not allowed: create core configmaps' "$tmp/neg1" &&
    pass "rbac check reports a call no rule allows" || fail "rbac check reports a call no rule allows" "$(cat "$tmp/neg1")"
grep -v '^delete core pods$' "$CALLS" >"$tmp/fewer-calls.txt"
check_py rbac "$tmp/defaults.yaml" "$tmp/fewer-calls.txt" "$OP_SA" >"$tmp/neg2"
[ $? -eq 1 ] && grep -q 'grants more than needed: delete core pods' "$tmp/neg2" &&
    pass "rbac check reports a rule granting more than the calls" || fail "rbac check reports a rule granting more than the calls" "$(cat "$tmp/neg2")"
sed 's/verbs: \["list", "watch", "delete"\]/verbs: ["*"]/' "$tmp/defaults.yaml" >"$tmp/wild.yaml"
check_py rbac "$tmp/wild.yaml" "$CALLS" "$OP_SA" >"$tmp/neg3"
# (the sed must have found the TrainingJobs rule's verbs: a rendering it leaves alone proves nothing)
[ $? -eq 1 ] && grep -q 'wildcard' "$tmp/neg3" && ! cmp -s "$tmp/defaults.yaml" "$tmp/wild.yaml" &&
    pass "rbac check reports wildcards" || fail "rbac check reports wildcards" "$(cat "$tmp/neg3")"
echo "get core pods please" >"$tmp/bad-calls.txt"
check_py rbac "$tmp/defaults.yaml" "$tmp/bad-calls.txt" "$OP_SA" 2>"$tmp/neg4"
[ $? -eq 2 ] && grep -q 'bad-calls.txt:1: .* is not' "$tmp/neg4" && pass "rbac check refuses a malformed call line" || fail "rbac check refuses a malformed call line" "$(cat "$tmp/neg4")"
sed 's/privileged: false/privileged: true/; s/readOnlyRootFilesystem: true/readOnlyRootFilesystem: false/' "$tmp/defaults.yaml" >"$tmp/priv.yaml"
check_py security "$tmp/priv.yaml" >"$tmp/neg5"
[ $? -eq 1 ] && grep -q ': privileged$' "$tmp/neg5" && grep -q 'readOnlyRootFilesystem is not true' "$tmp/neg5" &&
    pass "security check reports privileged containers" || fail "security check reports privileged containers" "$(cat "$tmp/neg5")"
sed 's/^  name: h-holmes-coordinator$/  name: H_Coordinator/' "$tmp/defaults.yaml" >"$tmp/badname.yaml"
check_py wellformed "$tmp/badname.yaml" >"$tmp/neg6"
[ $? -eq 1 ] && grep -q "H_Coordinator' is not a DNS-1123" "$tmp/neg6" &&
    pass "well-formed check reports a bad name" || fail "well-formed check reports a bad name" "$(cat "$tmp/neg6")"

# --- the operator accepts the flags the chart passes ------------------------------------------
if "$OPERATOR" run --help >"$tmp/run-help" 2>&1; then
    missing=""; n=0
    for f in $(grep -hE '^arg Deployment/' "$tmp"/*.sum | awk '{print $4}' | grep '^--' | sed 's/=.*//' | sort -u); do
        n=$((n + 1))
        grep -qE -- "(^|[ ,])$f([ =,]|$)" "$tmp/run-help" || missing="$missing $f"
    done
    [ -z "$missing" ] && [ "$n" -ge 8 ] && pass "holmes-operator run accepts the chart's $n flags" ||
        fail "holmes-operator run accepts the chart's flags" "checked $n; not in 'holmes-operator run --help':$missing"
else
    echo "note: 'holmes-operator run --help' not available yet; the chart's flags are not checked against it"
fi
