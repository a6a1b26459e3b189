# Helpers for integration scripts: source it, then use pass/fail/check.
# HOLMES_BIN_DIR points at the binaries of the variant under test.
: "${HOLMES_BIN_DIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/bin}"
OPERATOR=$HOLMES_BIN_DIR/holmes-operator
NODE=$HOLMES_BIN_DIR/holmes-node
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: ${2:-}"; }
# check NAME COMMAND...: passes when the command exits 0.
check() { local n=$1; shift; if "$@"; then pass "$n"; else fail "$n" "command failed: $(printf "%s " "$@" | head -c 400)"; fi; }
# wait_for SECONDS COMMAND...: polls until the command succeeds: every 0.1 s for the first
# second, then every WAIT_FOR_SLOW seconds (default 0.1; tests/k8s/envtest.bash sets 0.5: a
# kubectl call costs about 0.1 s of CPU, which a long wait at 0.1 s would take from the rest).
wait_for() {
    local t=$1 n=0; shift
    local end=$((SECONDS + t))
    while [ $SECONDS -le $end ]; do
        "$@" >/dev/null 2>&1 && return 0
        if [ $((n += 1)) -le 10 ]; then sleep 0.1; else sleep "${WAIT_FOR_SLOW:-0.1}"; fi
    done
    return 1
}
# free_ports N: prints N TCP ports free on 127.0.0.1 now, chosen by the kernel (never a fixed
# range: one inside ip_local_port_range can be taken by any outgoing connection meanwhile)
free_ports() {
    /usr/bin/python3 - "$1" <<'EOF'
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))
for s in ss: s.close()
EOF
}
jq_true() { jq -e "$2" <<<"$1" >/dev/null 2>&1; } # jq_true JSON FILTER

# rank_table_job OUT P D TABLE_FIELDS WORKER_ARGS...: pipeline P x data D `holmes-node worker`
# ranks in rank-table mode on free ports of 127.0.0.1, each with WORKER_ARGS; TABLE_FIELDS: more
# top-level fields of the table, each followed by a comma ('"warmup_extra": 2,'), or "". The
# table in OUT.json, rank r's output in OUT.r.log; 0 when every rank exited 0.
rank_table_job() {
    local out=$1 P=$2 D=$3 fields=$4 w="" p r rc=0 pids=()
    shift 4
    for p in $(free_ports $((P * D))); do w="$w${w:+, }{\"host\": \"127.0.0.1\", \"port\": $p}"; done
    printf '{"parallelism": {"pipeline": %d, "data": %d}, %s "workers": [%s]}' "$P" "$D" "$fields" "$w" >"$out.json"
    for ((r = 0; r < P * D; r++)); do
        timeout -k 5 240 "$NODE" worker --rank-table "$out.json" --rank $r "$@" >"$out.$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}

# gpus_job OUT NAME STEPS CKPT_DIR [sed expressions...]: examples/local-gpus.yaml (2 workers x 2
# emulated GPUs) renamed, with its own step count (a 2-step warm-up) and checkpoint directory.
gpus_job() {
    local out=$1 name=$2 steps=$3 ckpt=$4
    shift 4
    sed -e "s/name: local-gpus/name: $name/" -e "s/steps: 100/steps: $steps/" -e "s/warmupSteps: 20/warmupSteps: 2/" \
        -e "s#local-runs/local-gpus/checkpoints#$ckpt#" "$@" "$REPO/examples/local-gpus.yaml" >"$out"
}

# example_job OUT NAME STEPS CKPT_DIR [sed expressions...]: examples/local-tiny.yaml renamed, with
# its own step count and checkpoint directory, plus the caller's edits.
example_job() {
    local out=$1 name=$2 steps=$3 ckpt=$4
    shift 4
    sed -e "s/name: local-tiny/name: $name/" -e "s/steps: 300/steps: $steps/" \
        -e "s#local-runs/local-tiny/checkpoints#$ckpt#" "$@" "$REPO/examples/local-tiny.yaml" >"$out"
}

# worker_refuses_figure VAR FLAG WHAT BAD...: holmes-node worker refuses each BAD value of the
# environment variable VAR and the value x of FLAG (exit 2, naming both: "must be WHAT in (0,
# 1000000]"); one PASS, or a FAIL for each value let through
worker_refuses_figure() {
    local var=$1 flag=$2 what=$3 bad out rc ok=1
    shift 3
    for bad in "$@"; do
        out=$(env "$var=$bad" timeout 10 "$NODE" worker --coordinator ws://127.0.0.1:9 --job j --pod p --worker 0 2>&1)
        rc=$?
        [ $rc = 2 ] && grep -qF -- "$flag (or $var): \"$bad\" must be $what in (0, 1000000]" <<<"$out" ||
            { fail "worker refuses $var=$bad" "rc $rc: $out"; ok=0; }
    done
    out=$(timeout 10 "$NODE" worker --coordinator ws://127.0.0.1:9 --job j --pod p --worker 0 "$flag" x 2>&1)
    rc=$?
    [ $rc = 2 ] && grep -qF -- "$flag (or $var): \"x\" must be" <<<"$out" ||
        { fail "worker refuses $flag x" "rc $rc: $out"; ok=0; }
    [ $ok = 1 ] && pass "worker refuses bad values of $flag ($*, x), naming the flag and $var"
}

# once_per_run NAME: for a test whose result does not depend on the build variant (it builds
# into the repository, or checks files and manifests): `make test` runs it in one pass only,
# HOLMES_ONCE_IN (tests/run.sh sets it to the pass with less else to do); run by hand, it runs.
once_per_run() {
    if [ -n "${HOLMES_ONCE_IN:-}" ] && [ "$HOLMES_ONCE_IN" != "${HOLMES_VARIANT:-release}" ]; then
        echo "# $1: independent of the build variant, run in the $HOLMES_ONCE_IN pass"
        exit 0
    fi
}
