# Helpers for operator integration scripts: a fake API server, curl against it, waiting.
# Source after lib.bash. Needs curl and jq.
FAKEAPI_DIR=$(mktemp -d /tmp/holmes-op-it.XXXXXX)
FAKEAPI_TOKEN=tok-$$
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$FAKEAPI_DIR"
}
trap cleanup EXIT
[ -n "${KEEP_LOGS:-}" ] && trap "for p in \"\${PIDS[@]}\"; do kill \$p 2>/dev/null; done" EXIT

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_fakeapi() { # extra args...
    KUBECONFIG_FILE=$FAKEAPI_DIR/kubeconfig
    /usr/bin/python3 "$REPO/tests/fakeapi/fakeapi.py" --port-file "$FAKEAPI_DIR/port" \
        --kubeconfig "$KUBECONFIG_FILE" --token "$FAKEAPI_TOKEN" "$@" >"$FAKEAPI_DIR/fakeapi.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do [ -s "$FAKEAPI_DIR/port" ] && break; sleep 0.05; done
    API=http://127.0.0.1:$(cat "$FAKEAPI_DIR/port")
}

# api METHOD PATH [BODY]: prints the answer body.
api() {
    local ct=application/json
    [ "$1" = PATCH ] && ct=application/merge-patch+json
    curl -s -X "$1" -H "Authorization: Bearer $FAKEAPI_TOKEN" -H "Content-Type: $ct" \
        ${3:+--data-binary "$3"} "$API$2"
}
fake() { curl -s -X POST -H 'Content-Type: application/json' --data-binary "${2:-{\}}" "$API/_fake/$1"; }
stats() { curl -s "$API/_fake/stats"; }
JOBS=/apis/holmes.dev/v1alpha1/namespaces
job_get() { api GET "$JOBS/$1/trainingjobs/$2"; }
pods_of() { api GET "/api/v1/namespaces/$1/pods?labelSelector=holmes.dev%2Fjob%3D$2"; }
npods() { pods_of "$1" "$2" | jq '.items | length'; }
pods_are() { [ "$(npods "$1" "$2")" = "$3" ]; } # pods_are NS JOB N

# start_operator NAME ARGS...: runs bin/holmes-operator run in the background (metrics, health and
# coordinator off unless ARGS turn them on), log in $FAKEAPI_DIR/NAME.log
start_operator() {
    local name=$1; shift
    "$OPERATOR" run --kubeconfig "$KUBECONFIG_FILE" --metrics-addr 0 --health-addr 0 --coordinator-addr 0 \
        --coordinator-url ws://coord.test:8443 "$@" >"$FAKEAPI_DIR/$name.log" 2>&1 &
    OP_PID=$!
    PIDS+=($OP_PID)
}

job_is() { jq -e "$3" <<<"$(job_get "$1" "$2")" >/dev/null 2>&1; } # job_is NS NAME FILTER
# logs_clean: no sanitizer report in any operator log of this script.
logs_clean() {
    if grep -l 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' "$FAKEAPI_DIR"/*.log >/dev/null 2>&1; then
        fail "operator logs free of sanitizer reports" "$(grep -h -m5 'Sanitizer\|runtime error' "$FAKEAPI_DIR"/*.log)"
    else
        pass "operator logs free of sanitizer reports"
    fi
}
