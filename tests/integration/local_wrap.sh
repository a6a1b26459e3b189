# holmes-operator local --worker-wrap / --bind (what bench-hetero uses to start workers inside
# network namespaces): every worker starts under the prefix with {i} replaced by its index,
# the coordinator listens on the given address, bad prefixes are refused. Simulated workers.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-wrap.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
name=it-wrap-$$
example_job "$tmp/job.yaml" "$name" 20 "$tmp/ckpt"
cat >"$tmp/wrap.sh" <<'W'
#!/usr/bin/env bash
# wrap.sh DIR I CMD...: notes that worker I started through the wrapper, then runs it
dir=$1 i=$2; shift 2
echo "$*" >"$dir/wrapped-$i"
exec "$@"
W
chmod +x "$tmp/wrap.sh"

out=$(cd "$REPO" && timeout 120 "$OPERATOR" local "$tmp/job.yaml" --simulate --step-ms 5 \
      --bind 127.0.0.2 --worker-wrap "$tmp/wrap.sh $tmp {i}" --run-dir "$tmp/run" 2>&1)
rc=$?
[ $rc -eq 0 ] && pass "wrapped run succeeds" || fail "wrapped run succeeds" "rc $rc: $out"
for i in 0 1 2 3; do
    grep -q -- "worker .*--worker $i " "$tmp/wrapped-$i" 2>/dev/null \
        && pass "worker $i started through the wrapper" || fail "worker $i started through the wrapper" "$(cat "$tmp/wrapped-$i" 2>&1)"
done
grep -q -- "--coordinator ws://127.0.0.2:" "$tmp/wrapped-0" 2>/dev/null \
    && pass "workers get the --bind address" || fail "workers get the --bind address" "$(cat "$tmp/wrapped-0" 2>&1)"
grep -q "coordinator ws://127.0.0.2:" <<<"$out" && pass "coordinator listens on --bind" \
    || fail "coordinator listens on --bind" "$out"

# A prefix of more than 16 words cannot start a worker: the job fails, no hang.
long=$(printf 'env %.0s' $(seq 20))
out=$(cd "$REPO" && timeout 120 "$OPERATOR" local "$tmp/job.yaml" --simulate --step-ms 5 \
      --worker-wrap "$long" --run-dir "$tmp/run2" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q -- "--worker-wrap: at most 16 words" "$tmp/run2/worker-0.log" \
    && pass "too long a prefix is refused" || fail "too long a prefix is refused" "rc $rc: $(cat "$tmp/run2/worker-0.log" 2>&1)"
