# A real Kubernetes control plane for integration tests: etcd, kube-apiserver and
# kube-controller-manager (garbage collector, service-account tokens, namespaces), from the
# binaries in $KUBEBUILDER_ASSETS (controller-runtime's envtest convention; .ci/run points it
# at ../shared/k8s unpacked). Source this file after lib.bash, then:
#
#   k8s_require            # prints "SKIP ..." and exits 0 when KUBEBUILDER_ASSETS is unset
#   k8s_start              # certificates, free ports, servers up; sets K8S_DIR, K8S_API,
#                          # KUBECONFIG_FILE (admin), KUBECTL (kubectl as admin; also a function)
#                          # K8S_APISERVER_ARGS (an array): more kube-apiserver flags;
#                          # K8S_CRDS_BEFORE_KCM (an array): CRD files applied before the
#                          # controller manager starts (its garbage collector watches them at once)
#   k8s_stop               # stops exactly the processes k8s_start started (also on EXIT)
#
# Each run has its own directory and ports, so several runs can go at once. There are no
# nodes or kubelets: pods stay Pending.

K8S_PIDS=()
K8S_DIR=
# wait_for (lib.bash) polls every 0.5 s after its first second: most waits here read the API
# server (k8s_json and jq, about 0.06 s of CPU a poll) for a status that moves once a second
# (--status-interval 1).
WAIT_FOR_SLOW=0.5

k8s_require() {
    if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
        echo "SKIP $(basename "$0" .sh): needs a real control plane; set KUBEBUILDER_ASSETS to a directory with etcd, kube-apiserver, kube-controller-manager and kubectl (e.g. \$(../shared/k8s/unpack .cache/k8s))"
        exit 0
    fi
    local b
    for b in etcd kube-apiserver kube-controller-manager kubectl; do
        if [ ! -x "$KUBEBUILDER_ASSETS/$b" ]; then
            echo "FAIL envtest: $KUBEBUILDER_ASSETS/$b is missing or not executable"
            exit 1
        fi
    done
}

k8s_free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Keys are ECDSA P-256: an RSA 2048 key takes openssl 0.1-0.6 s to make (seconds a start on a
# loaded machine), a P-256 key a millisecond; kube-apiserver, kubectl and libcurl take either.
K8S_KEY=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1)

# k8s_cert NAME CN [O] [SAN]: a key and a certificate signed by the run's CA.
k8s_cert() {
    local name=$1 cn=$2 org=${3:-} san=${4:-}
    local subj="/CN=$cn"
    [ -n "$org" ] && subj="/O=$org$subj"
    openssl req -new "${K8S_KEY[@]}" -nodes -keyout "$K8S_DIR/$name.key" -subj "$subj" \
        -out "$K8S_DIR/$name.csr" 2>/dev/null || return 1
    local ext="$K8S_DIR/$name.ext"
    if [ -n "$san" ]; then
        printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$ext"
    else
        printf 'extendedKeyUsage=clientAuth\n' >"$ext"
    fi
    openssl x509 -req -in "$K8S_DIR/$name.csr" -CA "$K8S_DIR/ca.crt" -CAkey "$K8S_DIR/ca.key" \
        -CAcreateserial -days 2 -extfile "$ext" -out "$K8S_DIR/$name.crt" 2>/dev/null
}

# k8s_kubeconfig FILE CERTNAME | k8s_kubeconfig FILE --token TOKEN
k8s_kubeconfig() {
    local file=$1 user
    if [ "$2" = --token ]; then
        user="token: \"$3\""
    else
        user="client-certificate: $K8S_DIR/$2.crt
    client-key: $K8S_DIR/$2.key"
    fi
    cat >"$file" <<YAML
apiVersion: v1
kind: Config
current-context: envtest
clusters:
- name: envtest
  cluster:
    server: $K8S_API
    certificate-authority: $K8S_DIR/ca.crt
contexts:
- name: envtest
  context: {cluster: envtest, user: u, namespace: default}
users:
- name: u
  user:
    $user
YAML
}

# kubectl as admin; $KUBECTL is the same as a command, for `bash -c` and `wait_for`.
kubectl() { "$KUBECTL" "$@"; }

# k8s_json RESOURCE [NAME] [-n NAMESPACE] [-l SELECTOR]: what `kubectl get ... -o json` prints,
# read from the API server with curl as admin, for the kinds tests poll (tj, pod, secret, service,
# lease, event, serviceaccount, the PodGroups of k8s_gang.sh; a list without NAME, with .items).
# Exit status 0, or non-zero when it is not there (404) or the server did not answer. A kubectl
# process costs 0.15-0.2 s of CPU, most of it starting up; this 0.03 s: the tests poll status.
k8s_json() {
    local res=$1 name= ns= sel= base
    shift
    [ $# -gt 0 ] && [ "${1#-}" = "$1" ] && { name=$1; shift; }
    while [ $# -gt 0 ]; do
        case $1 in
        -n) ns=$2; shift 2 ;;
        -l) sel=$2; shift 2 ;;
        *) echo "k8s_json: unknown argument $1" >&2; return 2 ;;
        esac
    done
    case $res in
    tj | tjs | trainingjob | trainingjobs) base=/apis/holmes.dev/v1alpha1 res=trainingjobs ;;
    pod | pods) base=/api/v1 res=pods ;;
    secret | secrets) base=/api/v1 res=secrets ;;
    service | services) base=/api/v1 res=services ;;
    event | events) base=/api/v1 res=events ;;
    lease | leases) base=/apis/coordination.k8s.io/v1 res=leases ;;
    serviceaccount | serviceaccounts) base=/api/v1 res=serviceaccounts ;;
    podgroups.scheduling.volcano.sh) base=/apis/scheduling.volcano.sh/v1beta1 res=podgroups ;;
    podgroups.scheduling.x-k8s.io) base=/apis/scheduling.x-k8s.io/v1alpha1 res=podgroups ;;
    *) echo "k8s_json: resource $res is not mapped (tests/k8s/envtest.bash)" >&2; return 2 ;;
    esac
    k8s_curl -s -G ${sel:+--data-urlencode "labelSelector=$sel"} "$base${ns:+/namespaces/$ns}/$res${name:+/$name}"
}

# k8s_curl [CURL OPTIONS...] PATH: curl to the API server as admin (-f: an error status fails);
# PATH last, from the API's root (/api/v1/...)
k8s_curl() {
    curl -f --cacert "$K8S_DIR/ca.crt" --cert "$K8S_DIR/admin.crt" --key "$K8S_DIR/admin.key" \
        "${@:1:$#-1}" "$K8S_API${!#}"
}

# k8s_pod_status NAMESPACE POD STATUS: STATUS (a JSON object: phase, conditions...) merged into
# the pod's status subresource, as a kubelet writes it; with curl, as k8s_json reads
k8s_pod_status() {
    k8s_curl -sS -X PATCH -H 'Content-Type: application/merge-patch+json' --data-binary "{\"status\":$3}" \
        "/api/v1/namespaces/$1/pods/$2/status" >/dev/null
}

k8s_start() {
    K8S_DIR=$(mktemp -d /tmp/holmes-envtest.XXXXXX)
    trap k8s_stop EXIT
    openssl req -x509 "${K8S_KEY[@]}" -nodes -days 2 -subj /CN=holmes-envtest-ca \
        -keyout "$K8S_DIR/ca.key" -out "$K8S_DIR/ca.crt" 2>/dev/null || { echo "FAIL envtest: CA"; return 1; }
    k8s_cert apiserver kube-apiserver "" "IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc" &&
        k8s_cert admin admin system:masters &&
        k8s_cert kcm system:kube-controller-manager &&
        openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$K8S_DIR/sa.key" 2>/dev/null &&
        openssl pkey -in "$K8S_DIR/sa.key" -pubout -out "$K8S_DIR/sa.pub" 2>/dev/null ||
        { echo "FAIL envtest: certificates"; return 1; }

    local etcd_port peer_port api_port
    etcd_port=$(k8s_free_port); peer_port=$(k8s_free_port); api_port=$(k8s_free_port)
    cat >"$K8S_DIR/etcd.yaml" <<YAML
name: envtest
data-dir: $K8S_DIR/etcd-data
listen-client-urls: http://127.0.0.1:$etcd_port
advertise-client-urls: http://127.0.0.1:$etcd_port
listen-peer-urls: http://127.0.0.1:$peer_port
initial-advertise-peer-urls: http://127.0.0.1:$peer_port
initial-cluster: envtest=http://127.0.0.1:$peer_port
log-level: warn
YAML
    "$KUBEBUILDER_ASSETS/etcd" --config-file "$K8S_DIR/etcd.yaml" >"$K8S_DIR/etcd.log" 2>&1 &
    K8S_PIDS+=($!)

    K8S_API=https://127.0.0.1:$api_port
    "$KUBEBUILDER_ASSETS/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$etcd_port" \
        --bind-address 127.0.0.1 --secure-port "$api_port" \
        --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
        --tls-cert-file "$K8S_DIR/apiserver.crt" --tls-private-key-file "$K8S_DIR/apiserver.key" \
        --client-ca-file "$K8S_DIR/ca.crt" \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$K8S_DIR/sa.pub" \
        --service-account-signing-key-file "$K8S_DIR/sa.key" \
        --service-cluster-ip-range 10.0.0.0/24 \
        --authorization-mode RBAC ${K8S_APISERVER_ARGS[@]+"${K8S_APISERVER_ARGS[@]}"} \
        >"$K8S_DIR/apiserver.log" 2>&1 &
    K8S_PIDS+=($!)

    KUBECONFIG_FILE=$K8S_DIR/admin.kubeconfig
    k8s_kubeconfig "$KUBECONFIG_FILE" admin
    KUBECTL=$K8S_DIR/kubectl
    printf '#!/bin/sh\nexec "%s/kubectl" --kubeconfig "%s" "$@"\n' "$KUBEBUILDER_ASSETS" "$KUBECONFIG_FILE" >"$KUBECTL"
    chmod +x "$KUBECTL"
    k8s_kubeconfig "$K8S_DIR/kcm.kubeconfig" kcm
    local i
    for i in $(seq 300); do
        if k8s_curl -s /readyz >/dev/null 2>&1; then
            break
        fi
        sleep 0.2
    done
    if [ "$i" -ge 300 ]; then
        echo "FAIL envtest: kube-apiserver not ready in 60 s"; tail -20 "$K8S_DIR/apiserver.log"
        return 1
    fi

    # CRDs a test names in K8S_CRDS_BEFORE_KCM go in before the controller manager starts: its
    # garbage collector then watches their objects from the start, instead of discovering the
    # new kinds on its 30 s resync.
    if [ -n "${K8S_CRDS_BEFORE_KCM[*]+x}" ]; then
        k8s_install_crds "${K8S_CRDS_BEFORE_KCM[@]}" || { echo "FAIL envtest: CRDs ${K8S_CRDS_BEFORE_KCM[*]}"; return 1; }
    fi
    "$KUBEBUILDER_ASSETS/kube-controller-manager" \
        --kubeconfig "$K8S_DIR/kcm.kubeconfig" \
        --authentication-kubeconfig "$K8S_DIR/kcm.kubeconfig" \
        --authorization-kubeconfig "$K8S_DIR/kcm.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$(k8s_free_port)" \
        --leader-elect=false \
        --service-account-private-key-file "$K8S_DIR/sa.key" \
        --root-ca-file "$K8S_DIR/ca.crt" \
        --use-service-account-credentials \
        --controllers garbagecollector,namespace,serviceaccount,serviceaccount-token \
        >"$K8S_DIR/kcm.log" 2>&1 &
    K8S_PIDS+=($!)
    # The default ServiceAccount shows up once the serviceaccount controller runs.
    for i in $(seq 150); do
        k8s_json serviceaccount default -n default >/dev/null && return 0
        sleep 0.2
    done
    echo "FAIL envtest: kube-controller-manager did not create the default ServiceAccount in 30 s"
    tail -20 "$K8S_DIR/kcm.log"
    return 1
}

# k8s_begin NAME: the control plane started (stop_all, the caller's, on exit), a work directory
# W=$K8S_DIR/NAME, namespace NS=team with the TrainingJob CRD, and a free coordinator port CPORT.
# Exits the test when any of it fails.
k8s_begin() {
    # the TrainingJob CRD before the controller manager: its garbage collector follows jobs
    # (and what they own) from the start
    [ -n "${K8S_CRDS_BEFORE_KCM[*]+x}" ] || K8S_CRDS_BEFORE_KCM=("$REPO/crds/trainingjob.yaml")
    k8s_start || exit 1
    trap stop_all EXIT
    W=$K8S_DIR/$1
    mkdir -p "$W"
    NS=team
    k8s_setup_jobs $NS || { fail "namespace and CRD installed"; exit 1; }
    CPORT=$(k8s_free_port)
}

# k8s_setup_jobs NAMESPACE: that namespace, and the TrainingJob CRD installed (unless k8s_start
# installed it) and established. With curl: kubectl processes cost 0.15-0.2 s of CPU each.
k8s_setup_jobs() {
    k8s_curl -sS -X POST -H 'Content-Type: application/json' \
        --data-binary "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$1\"}}" \
        /api/v1/namespaces >/dev/null || return 1
    k8s_crd_established trainingjobs.holmes.dev || k8s_install_crds "$REPO/crds/trainingjob.yaml"
}

# k8s_install_crds FILE...: the CustomResourceDefinition in each file (one a file, YAML as the
# API server takes it) created, then each waited for until it is established
k8s_install_crds() {
    local f name names=()
    for f in "$@"; do
        name=$(k8s_curl -sS -X POST -H 'Content-Type: application/yaml' --data-binary "@$f" \
            /apis/apiextensions.k8s.io/v1/customresourcedefinitions | jq -r '.metadata.name // empty')
        [ -n "$name" ] || { echo "k8s_install_crds: $f: not created" >&2; return 1; }
        names+=("$name")
    done
    for name in "${names[@]}"; do
        wait_for 30 k8s_crd_established "$name" || { echo "k8s_install_crds: $name: not established in 30 s" >&2; return 1; }
    done
}

# k8s_crd_established NAME: the CRD's Established condition is True
k8s_crd_established() {
    k8s_curl -s "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/$1" \
        | jq -e '.status.conditions[] | select(.type == "Established" and .status == "True")' >/dev/null
}

# k8s_operator LOG PORT [ARGS...]: `holmes-operator run` against this control plane in the
# background (OP_PID), with its coordinator on 127.0.0.1:PORT, its output appended to LOG.
k8s_operator() {
    local log=$1 port=$2
    shift 2
    "$OPERATOR" run --kubeconfig "$KUBECONFIG_FILE" --metrics-addr 0 --health-addr 0 \
        --coordinator-addr 127.0.0.1:$port --coordinator-url ws://127.0.0.1:$port/ \
        --node-image holmes-node:test "$@" >>"$log" 2>&1 &
    OP_PID=$!
}

# k8s_kubelet NS POD LOG [worker args...]: plays kubelet once for POD: marks it Running and
# Ready and runs its main process (`holmes-node worker`, a supervisor) with the pod's env and its
# job's token (and K8S_KUBELET_ENV, NAME=VALUE words, when set: e.g. a tag to find the test's
# processes by), output appended to LOG; returns its exit status.
k8s_kubelet() {
    local ns=$1 pod=$2 log=$3 pj envs job tok
    shift 3
    k8s_pod_status "$ns" "$pod" '{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}'
    pj=$(k8s_json pod "$pod" -n "$ns")
    envs=$(jq -r '.spec.containers[0].env[] | select(.value != null) | "\(.name)=\(.value)"' <<<"$pj")
    job=$(jq -r '.metadata.labels["holmes.dev/job"] // empty' <<<"$pj")
    tok=$(k8s_json secret "$job-token" -n "$ns" | jq -r '.data.token // empty' | base64 -d)
    # shellcheck disable=SC2086
    (cd "$REPO" && exec env -i PATH="$PATH" HOSTNAME="$pod" HOLMES_TOKEN="$tok" NODE_NAME="node-$pod" \
        ${K8S_KUBELET_ENV:-} OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $envs timeout -k 5 400 "$NODE" worker \
        "$@" >>"$log" 2>&1)
}

# k8s_stop_all PID...: those processes (TERM, then waited for), then the control plane.
k8s_stop_all() {
    local p
    for p in "$@"; do kill "$p" 2>/dev/null; done
    for p in "$@"; do wait "$p" 2>/dev/null; done
    k8s_stop
}

k8s_stop() {
    local p
    # The API server and the controller manager first, etcd (started first) last: an API server
    # whose etcd is already gone waits about 15 s for it before it exits.
    for p in "${K8S_PIDS[@]:1}"; do kill "$p" 2>/dev/null; done
    for p in "${K8S_PIDS[@]:1}"; do wait "$p" 2>/dev/null; done
    for p in "${K8S_PIDS[@]:0:1}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    K8S_PIDS=()
    if [ -n "$K8S_DIR" ] && [ -z "${KEEP_LOGS:-}" ]; then rm -rf "$K8S_DIR"; fi
}
