#!/usr/bin/env bash
# Smoke tests inside the images images/build.sh built (podman, no daemon): the binaries start
# with the chart's read-only root filesystem, --version and --help answer, `holmes-node nic
# --json` prints a NIC report, every shared library (and every libibverbs provider) resolves,
# the user is non-root, the operator runs against the fake API server; image sizes are
# printed. The CUDA variant's base cannot be fetched here, so its Dockerfile is linted
# (dockerfile-utils) instead of built.
# Prints PASS/FAIL lines and ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
source images/env.bash
OP_IMAGE=$REPO_PREFIX/holmes-operator:$TAG
NODE_IMAGE=$REPO_PREFIX/holmes-node:$TAG-cpu
DOCKERFILE_UTILS=${DOCKERFILE_UTILS:-tools/dockerfile-utils}
passed=0; failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: ${2:-}"; failed=$((failed + 1)); }
tmp=$(mktemp -d /tmp/holmes-smoke.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# in IMAGE CMD...: run a command in IMAGE as the chart does (read-only root, no network).
run_in() { local img=$1; shift; podman run --rm --network=none --read-only --tmpfs /tmp "$img" "$@"; }
run_sh() { local img=$1; shift; podman run --rm --network=none --read-only --tmpfs /tmp --entrypoint /bin/sh "$img" -c "$1"; }

smoke_common() { # image, binary
    local img=$1 bin=$2 out user
    user=$(podman image inspect --format '{{.Config.User}}' "$img")
    case ${user%%:*} in
        ""|0|root) fail "$bin image: non-root user" "Config.User is '$user'" ;;
        *) pass "$bin image: non-root user ($user)" ;;
    esac
    out=$(run_sh "$img" 'id -u') && [ "$out" != 0 ] && pass "$bin image: runs as uid $out" ||
        fail "$bin image: runs as non-root uid" "id -u printed '$out'"
    out=$(run_in "$img" --version 2>&1) && [ "$out" = "$bin $version" ] && pass "$bin image: --version" ||
        fail "$bin image: --version" "$out"
    out=$(run_in "$img" --help 2>&1) && grep -q '^Commands:' <<<"$out" && pass "$bin image: --help" ||
        fail "$bin image: --help" "$out"
    if out=$(run_sh "$img" "ldd /usr/local/bin/$bin" 2>&1) && ! grep -q 'not found' <<<"$out"; then
        pass "$bin image: shared libraries resolve"
    else
        fail "$bin image: shared libraries resolve" "$(grep 'not found' <<<"$out")"
    fi
    local size
    size=$(podman image inspect --format '{{.Size}}' "$img")
    echo "note: $img is $(awk -v s="$size" 'BEGIN {printf "%.1f MB", s / 1e6}')"
}

# The operator image really running, with the chart's flags, read-only root and non-root user,
# against the fake API server (tests/fakeapi) on loopback: ready, healthy, metrics, and a
# TrainingJob turned into worker pods.
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
smoke_operator_run() {
    [ -f tests/fakeapi/fakeapi.py ] || { echo "note: no tests/fakeapi; operator run not smoke-tested"; return; }
    local tok=smoke-$$ api hp mp cp cid ok=0
    /usr/bin/python3 tests/fakeapi/fakeapi.py --port-file "$tmp/api-port" --kubeconfig "$tmp/kubeconfig" \
        --token "$tok" >"$tmp/fakeapi.log" 2>&1 &
    local fpid=$!
    for _ in $(seq 100); do [ -s "$tmp/api-port" ] && break; sleep 0.05; done
    api=http://127.0.0.1:$(cat "$tmp/api-port")
    chmod 644 "$tmp/kubeconfig"
    hp=$(free_port); mp=$(free_port); cp=$(free_port)
    cid=$(podman run -d --network=host --read-only --tmpfs /tmp -v "$tmp/kubeconfig:/etc/holmes/kubeconfig:ro" \
        "$OP_IMAGE" run --kubeconfig /etc/holmes/kubeconfig --leader-elect --identity=smoke \
        --metrics-addr=127.0.0.1:$mp --health-addr=127.0.0.1:$hp --coordinator-addr=127.0.0.1:$cp \
        --coordinator-url=ws://127.0.0.1:$cp --node-image=holmes-node:smoke --log-format=json 2>"$tmp/run.err")
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$hp/readyz" >/dev/null && { ok=1; break; }; sleep 0.2; done
    [ $ok = 1 ] && curl -sf "http://127.0.0.1:$hp/healthz" >/dev/null &&
        pass "holmes-operator image: run is ready and healthy against the fake API server" ||
        fail "holmes-operator image: run is ready and healthy" "$(cat "$tmp/run.err"; podman logs "$cid" 2>&1 | tail -5)"
    # The body is read whole before it is searched: `curl | grep -q` under pipefail fails when
    # grep stops at the first match and curl is still writing (SIGPIPE, curl exit 23).
    local metrics
    metrics=$(curl -sf "http://127.0.0.1:$mp/metrics")
    grep -q '^holmes_' <<<"$metrics" && pass "holmes-operator image: /metrics" ||
        fail "holmes-operator image: /metrics" "$(head -3 <<<"$metrics")"
    curl -s -X POST -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' \
        --data-binary '{"apiVersion":"holmes.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"smoke"},
          "spec":{"workers":2,"gpusPerWorker":1,"model":{"preset":"gpt2-124m"},"training":{"steps":10}}}' \
        "$api/apis/holmes.dev/v1alpha1/namespaces/smoke/trainingjobs" >/dev/null
    ok=0
    for _ in $(seq 50); do
        n=$(curl -s -H "Authorization: Bearer $tok" "$api/api/v1/namespaces/smoke/pods?labelSelector=holmes.dev%2Fjob%3Dsmoke" |
            /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("items", [])))' 2>/dev/null)
        [ "$n" = 2 ] && { ok=1; break; }; sleep 0.2
    done
    [ $ok = 1 ] && pass "holmes-operator image: a TrainingJob gets its 2 worker pods" ||
        fail "holmes-operator image: a TrainingJob gets its worker pods" "$(podman logs "$cid" 2>&1 | tail -5)"
    [ -n "$cid" ] && podman rm -f -t 2 "$cid" >/dev/null 2>&1
    kill "$fpid" 2>/dev/null; wait "$fpid" 2>/dev/null
}

for img in "$OP_IMAGE" "$NODE_IMAGE"; do
    podman image exists "$img" || { fail "image $img exists" "run 'make images' first"; }
done

if podman image exists "$OP_IMAGE"; then
    smoke_common "$OP_IMAGE" holmes-operator
    # The real parser and validator inside the image (libyaml, libcjson), on a shipped example
    # this version can run (the GPU examples are refused until GPU jobs run: docs/api.md).
    ex=examples/local-tiny.yaml
    if [ -f "$ex" ]; then
        out=$(podman run --rm --network=none --read-only --tmpfs /tmp -v "$PWD/examples:/examples:ro" \
            "$OP_IMAGE" validate "/$ex" 2>&1) && grep -q 'valid' <<<"$out" &&
            pass "holmes-operator image: validate $ex" || fail "holmes-operator image: validate $ex" "$out"
    fi
    smoke_operator_run
    # Only the runtime stage: no compiler, no headers, no apt lists.
    out=$(run_sh "$OP_IMAGE" 'command -v gcc cc make; ls /usr/include 2>/dev/null | head -3; ls /var/lib/apt/lists | grep -v -x -e lock -e partial')
    [ -z "$out" ] && pass "holmes-operator image: no build tools, headers or apt lists" ||
        fail "holmes-operator image: no build tools, headers or apt lists" "$out"
fi

if podman image exists "$NODE_IMAGE"; then
    smoke_common "$NODE_IMAGE" holmes-node
    if run_in "$NODE_IMAGE" nic --json >"$tmp/nic.json" 2>"$tmp/nic.err" &&
        /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert "summary" in r, list(r)' "$tmp/nic.json" 2>"$tmp/nic.py"; then
        pass "holmes-node image: nic --json prints a NIC report"
    else
        fail "holmes-node image: nic --json prints a NIC report" "$(cat "$tmp/nic.err" "$tmp/nic.py" "$tmp/nic.json" 2>/dev/null | head -c 600)"
    fi
    out=$(run_in "$NODE_IMAGE" nic --print-labels 2>&1) && grep -q '^holmes.dev/nic-class=' <<<"$out" &&
        pass "holmes-node image: nic --print-labels (the DaemonSet's labels)" ||
        fail "holmes-node image: nic --print-labels" "$out"
    # rdma-core user space: libibverbs with its providers (dlopened, so ldd on the binary misses them).
    out=$(run_sh "$NODE_IMAGE" 'set -e; d=/usr/lib/x86_64-linux-gnu/libibverbs; n=0
        for p in $d/*.so; do ldd "$p" | grep "not found" && exit 1; n=$((n + 1)); done
        test -f /etc/libibverbs.d/mlx5.driver; echo "$n"' 2>&1)
    [[ $out =~ ^[0-9]+$ ]] && [ "$out" -ge 5 ] && pass "holmes-node image: $out libibverbs providers (mlx5, ...) resolve" ||
        fail "holmes-node image: libibverbs providers resolve" "$out"
fi

# The CUDA variant, where it was built (IMAGES=node-cuda images/build.sh, on a machine that can
# pull nvidia/cuda): holmes-node is make cuda's, with both CUDA engines; a worker answers --help
# and reports its NICs (the GPUs themselves need --gpus at run time).
CUDA_IMAGE=$REPO_PREFIX/holmes-node:$TAG
if podman image exists "$CUDA_IMAGE" 2>/dev/null; then
    smoke_common "$CUDA_IMAGE" holmes-node
    out=$(run_in "$CUDA_IMAGE" engines 2>&1) && [ "$(tr '\n' ' ' <<<"$out")" = "cpu cuda-fp32 cuda-bf16 " ] &&
        pass "holmes-node CUDA image: the CUDA engines (holmes-node engines: $(tr '\n' ' ' <<<"$out"))" ||
        fail "holmes-node CUDA image: the CUDA engines" "$out"
    out=$(run_in "$CUDA_IMAGE" worker --help 2>&1) && grep -q -- '--engine E' <<<"$out" &&
        pass "holmes-node CUDA image: worker --help" || fail "holmes-node CUDA image: worker --help" "$out"
    out=$(run_in "$CUDA_IMAGE" nic --json 2>/dev/null) && grep -q '"kind":[[:space:]]*"NicReport"' <<<"$out" &&
        pass "holmes-node CUDA image: nic --json prints a NIC report" ||
        fail "holmes-node CUDA image: nic --json" "$out"
else
    echo "note: $CUDA_IMAGE not built here (NVIDIA's base images cannot be fetched): CUDA image smoke skipped"
fi

# The CUDA variant: its bases cannot be fetched here; lint both Dockerfiles instead.
if [ -x "$DOCKERFILE_UTILS" ]; then
    for f in images/Dockerfile.node images/Dockerfile.operator; do
        if out=$("$DOCKERFILE_UTILS" lint "$f" 2>&1) && [ -z "$out" ]; then
            pass "dockerfile-utils lint $f"
        else
            fail "dockerfile-utils lint $f" "$out"
        fi
    done
    printf 'FROM debian:12-slim\nEXPOSE port\n' >"$tmp/Dockerfile.bad"
    "$DOCKERFILE_UTILS" lint "$tmp/Dockerfile.bad" >/dev/null 2>&1 && fail "dockerfile-utils lint catches errors" ||
        pass "dockerfile-utils lint catches errors"
else
    fail "dockerfile-utils available" "run 'make tools/dockerfile-utils'"
fi
grep -q '^FROM nvidia/cuda:${CUDA_VERSION}-runtime-${CUDA_DISTRO} AS runtime-base-cuda$' images/Dockerfile.node &&
    grep -q '^ARG VARIANT=cuda$' images/Dockerfile.node && pass "Dockerfile.node: CUDA runtime base by default" ||
    fail "Dockerfile.node: CUDA runtime base by default"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
