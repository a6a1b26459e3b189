# holmes-operator run: flags, bad input, --print-api-calls, JSON logs.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/fakeapi.bash"
out=$("$OPERATOR" run --help) && grep -q -- '--leader-elect' <<<"$out" && grep -q -- '--metrics-addr' <<<"$out" \
    && pass "run --help lists the flags" || fail "run --help lists the flags" "$out"
calls=$("$OPERATOR" run --print-api-calls)
check "--print-api-calls: one '<verb> <group|core> <resource>[/sub]' per line" \
    bash -c "grep -vqE '^(get|list|watch|create|patch|delete) [a-z0-9.]+ [a-z]+(/status)?$' <<<'$calls'; [ \$? = 1 ]"
check "--print-api-calls: the status subresource and leases" \
    bash -c "grep -qx 'patch holmes.dev trainingjobs/status' <<<'$calls' && grep -qx 'patch coordination.k8s.io leases' <<<'$calls'"
check "--print-api-calls: no duplicates" test "$(sort <<<"$calls" | uniq -d | wc -l)" = 0
expect() { # name status pattern args...
    local n=$1 st=$2 pat=$3; shift 3
    local o; o=$("$OPERATOR" run "$@" 2>&1); local rc=$?
    if [ "$rc" = "$st" ] && grep -q -- "$pat" <<<"$o"; then pass "$n"; else fail "$n" "rc $rc: $o"; fi
}
expect "unknown flag -> 2" 2 "unknown or incomplete option '--bogus'" --bogus
expect "bad --log-format -> 2 naming it" 2 '--log-format: "xml" is not text or json' --log-format xml
expect "bad --log-level -> 2 naming it" 2 '--log-level: "loud"' --log-level loud
expect "bad --qps -> 2" 2 '--qps: "fast" is not a positive number' --qps fast
expect "renew deadline >= lease duration -> 2" 2 'must be below --lease-duration' --leader-elect --lease-duration 5 --renew-deadline 5
expect "missing kubeconfig -> 1 naming the file" 1 '/no/such/kubeconfig' --kubeconfig /no/such/kubeconfig
start_fakeapi
printf 'apiVersion: v1\ncurrent-context: x\ncontexts: []\n' >"$FAKEAPI_DIR/bad.yaml"
expect "kubeconfig without the context -> 1 naming it" 1 'no context named "x"' --kubeconfig "$FAKEAPI_DIR/bad.yaml"
expect "bad --metrics-addr -> 1 naming it" 1 '--metrics-addr' --kubeconfig "$KUBECONFIG_FILE" --metrics-addr nowhere
start_operator json --log-format json
check "JSON logs: runs" wait_for 20 grep -q 'caches synced' "$FAKEAPI_DIR/json.log"
kill -TERM "$OP_PID"; wait "$OP_PID"
check "JSON logs: every line is a JSON object with level and msg" \
    bash -c "grep -v 'Sanitizer' '$FAKEAPI_DIR/json.log' | jq -e -s 'length > 0 and all(.[]; has(\"level\") and has(\"msg\"))' >/dev/null"
logs_clean
