#!/usr/bin/env bash
# Captures the kube_decode fuzzer's seeds from a real kube-apiserver (tests/k8s/envtest.bash):
# watch streams and answers the operator reads - TrainingJobs (examples/), a job's pods, Secret and
# Service made by `holmes-operator run`, the operator's TLS Secret, a list, a Status error, an
# ERROR event for an expired resourceVersion. Each seed starts with the target's mode byte
# (0: a watch stream, the next byte the read size; 1: one answer). Run by hand:
#   KUBEBUILDER_ASSETS=... tests/fuzz/capture_kube_seeds.sh [OUT_DIR]
# (default tests/fuzz/seeds/kube_decode). The TLS Secret's private keys (ca.key, tls.key) are
# replaced by a placeholder PEM before the seeds are written: no key goes into the repository.
set -eu
source "$(dirname "$0")/../integration/lib.bash"
source "$REPO/tests/k8s/envtest.bash"
k8s_require
OUT=${1:-$REPO/tests/fuzz/seeds/kube_decode}
mkdir -p "$OUT"
K8S_CRDS_BEFORE_KCM=("$REPO/crds/trainingjob.yaml")
OP=
trap '[ -n "$OP" ] && kill $OP; wait; k8s_stop' EXIT
k8s_start
kubectl create namespace team >/dev/null
api() { curl -s --cacert "$K8S_DIR/ca.crt" --cert "$K8S_DIR/admin.crt" --key "$K8S_DIR/admin.key" "$K8S_API$1"; }
seed() { # NAME MODE [CHUNK]: stdin into OUT/NAME with the mode byte (and the read size)
    { printf "\\x$(printf %02x "$2")"; [ "$2" = 0 ] && printf "\\x$(printf %02x "$3")"; cat; } >"$OUT/$1"
}
rv=$(api /apis/holmes.dev/v1alpha1/namespaces/team/trainingjobs | jq -r .metadata.resourceVersion)
( api "/apis/holmes.dev/v1alpha1/namespaces/team/trainingjobs?watch=1&timeoutSeconds=8&allowWatchBookmarks=true&resourceVersion=$rv" >"$K8S_DIR/tj.watch" ) &
( api "/api/v1/namespaces/team/pods?watch=1&timeoutSeconds=8&resourceVersion=$rv" >"$K8S_DIR/pods.watch" ) &
( api "/api/v1/namespaces/team/secrets?watch=1&timeoutSeconds=8&resourceVersion=$rv" >"$K8S_DIR/secrets.watch" ) &
sleep 1
CPORT=$(k8s_free_port)
"$OPERATOR" run --kubeconfig "$KUBECONFIG_FILE" --metrics-addr 0 --health-addr 0 --lease-namespace team \
    --coordinator-addr 127.0.0.1:$CPORT --coordinator-url wss://127.0.0.1:$CPORT/ --tls-secret coordinator-tls \
    --tls-names IP:127.0.0.1 --node-image holmes-node:seed >"$K8S_DIR/op.log" 2>&1 &
OP=$!
for f in examples/local-tiny.yaml examples/gpt2-1.5b-ib-roce.yaml examples/local-gpus.yaml; do
    sed 's/^  name: \(.*\)$/  name: \1\n  namespace: team/' "$REPO/$f" | kubectl apply -f - >/dev/null
done
sleep 6
kubectl patch tj local-tiny -n team --type merge -p '{"spec":{"suspend":true}}' >/dev/null
kubectl delete tj local-gpus -n team >/dev/null
wait_for 10 bash -c "[ -s '$K8S_DIR/tj.watch' ]"
sleep 3
seed watch-trainingjobs 0 7 <"$K8S_DIR/tj.watch"
seed watch-trainingjobs-whole 0 64 <"$K8S_DIR/tj.watch"
seed watch-pods 0 13 <"$K8S_DIR/pods.watch"
seed watch-secrets 0 31 <"$K8S_DIR/secrets.watch"
api /apis/holmes.dev/v1alpha1/namespaces/team/trainingjobs | seed list-trainingjobs 1
api /api/v1/namespaces/team/pods?limit=2 | seed list-pods 1
api /api/v1/namespaces/team/secrets/coordinator-tls | seed secret-tls 1
api /api/v1/namespaces/team/secrets/local-tiny-token | seed secret-token 1
api /api/v1/namespaces/team/pods/nope | seed status-404 1
api "/api/v1/namespaces/team/pods?watch=1&resourceVersion=1&timeoutSeconds=1" | seed watch-expired 0 5
# no private key in a committed seed: ca.key and tls.key become a placeholder PEM
/usr/bin/python3 - "$OUT" <<'PYEOF'
import base64, glob, re, sys
dummy = base64.b64encode(b"-----BEGIN PRIVATE KEY-----\nREDACTED-IN-THE-SEED\n-----END PRIVATE KEY-----\n")
for f in glob.glob(sys.argv[1] + "/*"):
    raw = open(f, "rb").read()
    new = re.sub(rb'("(?:ca|tls)\.key":\s*")[A-Za-z0-9+/=]+(")', lambda m: m.group(1) + dummy + m.group(2), raw)
    open(f, "wb").write(new)
PYEOF
ls "$OUT"
