# tests/bench/hetero/run.sh (make bench-hetero) in small: refuses without root; with root,
# one scenario of one short run produces the table, the calibration and the results, and
# every namespace is gone afterwards, also when the run is interrupted.
source "$(dirname "$0")/lib.bash"
if [ "${HOLMES_VARIANT:-release}" != release ]; then # time
    echo "SKIP bench_hetero: run in the release pass (time): it checks the benchmark's harness; the ASan pass runs fabric_netns.sh"
    exit 0
fi
B=$REPO/tests/bench/hetero/run.sh
if [ "$(id -u)" != 0 ]; then
    out=$("$B" 2>&1); rc=$?
    [ $rc -ne 0 ] && grep -q "needs root" <<<"$out" && pass "refuses without root" || fail "refuses without root" "rc $rc: $out"
    echo "SKIP bench_hetero: the rest needs root"
    exit 0
fi
if command -v setpriv >/dev/null; then
    # As nobody, from a copy: the checkout may sit where nobody cannot read it (/root is 0700).
    nb=$(mktemp -d /tmp/holmes-bh-nobody.XXXXXX)
    mkdir -p "$nb/tests/bench/hetero" && cp "$B" "$nb/tests/bench/hetero/" && chmod -R a+rX "$nb"
    out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$nb/tests/bench/hetero/run.sh" 2>&1); rc=$?
    rm -rf "$nb"
    [ $rc -ne 0 ] && grep -q "needs root" <<<"$out" && pass "refuses without root" || fail "refuses without root" "rc $rc: $out"
fi
for v in fast 0; do
    out=$(LINK_SCALE=$v "$B" 2>&1); rc=$?
    [ $rc -ne 0 ] && grep -q "LINK_SCALE=$v: must be auto or a positive number" <<<"$out" \
        && pass "a bad LINK_SCALE ($v) is refused naming it" || fail "a bad LINK_SCALE ($v) is refused naming it" "rc $rc: $out"
done
tmp=$(mktemp -d /tmp/holmes-bh.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export HOLMES_BIN_DIR
# This run's namespaces only: other runs (other worktrees' tests) may be going on at the same time.
pfx=ht$(($$ % 100000))
export HETERO_NS_PREFIX=$pfx
# a reference (phase 1, fitted) and a cluster with two fabrics (phase 2, planned with the fit)
out=$(ONLY="all-rdma 2fab-naive" LAYERS=4 REPS=1 CAL_REPS=1 STEPS=4 WARMUP=1 OUT=$tmp timeout 300 "$B" 2>&1); rc=$?
[ $rc -eq 0 ] && pass "a short run succeeds" || fail "a short run succeeds" "rc $rc: $out"
for s in all-rdma:holmes 2fab-naive:naive; do
    grep -q "^| ${s%:*} | ${s#*:} | [0-9.]* |" "$tmp/hetero-table.md" 2>/dev/null \
        && pass "table row ${s%:*}" || fail "table row ${s%:*}" "$(cat "$tmp/hetero-table.md" 2>&1)"
done
/usr/bin/python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["links"]; assert l["compute_efficiency"] > 0' \
    "$tmp/hetero-calibration.json" && pass "calibration written" || fail "calibration written"
/usr/bin/python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["links"]; assert l["rdma_efficiency"] > 0' \
    "$tmp/hetero-links-refs.json" && pass "references fitted before the two-fabric run" \
    || fail "references fitted before the two-fabric run" "$out"
# the emulated RDMA fabrics are the same TCP transport and shapers as the Ethernet one: one efficiency
/usr/bin/python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["links"]; assert l["rdma_efficiency"] == l["tcp_efficiency"], l' \
    "$tmp/hetero-links-refs.json" && pass "the fit keeps rdma_efficiency = tcp_efficiency" \
    || fail "the fit keeps rdma_efficiency = tcp_efficiency" "$(cat "$tmp/hetero-links-refs.json")"
grep -q 'fitting the cost model to the references (all-rdma' <<<"$out" && pass "the fit follows the reference" \
    || fail "the fit follows the reference" "$out"
# the latency between fabrics is measured before the runs and kept, not fitted, by the fit
lat=$(sed -n 's/^latency between fabrics: \([0-9.]*\) us.*/\1/p' <<<"$out")
/usr/bin/python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["links"]; assert 0 < float(sys.argv[2]) < 100000 and l["tcp_latency_us"] == float(sys.argv[2]), l' \
    "$tmp/hetero-links-refs.json" "${lat:-0}" && pass "measured latency ($lat us) kept by the fit" \
    || fail "measured latency kept by the fit" "latency '$lat': $(cat "$tmp/hetero-links-refs.json")"
# how busy the cores were before the start is said (other work moves the ratios)
grep -qE '^cores busy before the start: ([0-9]|[1-9][0-9]|100) %$' <<<"$out" \
    && pass "how busy the cores were is reported" || fail "how busy the cores were is reported" "$out"
[ "$(wc -l <"$tmp/hetero-results.tsv")" -eq 3 ] && pass "one results line per run" \
    || fail "one results line per run" "$(cat "$tmp/hetero-results.tsv")"
# the reference runs three times: the machine-speed probe, the fit, and among the measured runs
[ "$(grep -c "^all-rdma"$'\t' <<<"$out")" = 3 ] && [ "$(grep -c "^2fab-naive"$'\t' <<<"$out")" = 1 ] \
    && pass "the reference is probed, calibrated on, then measured with the others" \
    || fail "the reference is probed, calibrated on, then measured with the others" "$out"
# LINK_SCALE=auto: the rates scaled by the probe's compute efficiency / 0.6, and shaped so
read -r ib scale eff < <(sed -n 's/^links: IB \([0-9]*\), .*(rates x \([0-9.]*\): the machine computed at efficiency \([0-9.]*\) .*/\1 \2 \3/p' <<<"$out")
/usr/bin/python3 -c 'import sys; ib, s, e = map(float, sys.argv[1:]); sys.exit(not (abs(s - min(4, max(0.25, e / 0.6))) < 2e-3 and ib == max(1, int(1000 * s + 0.5))))' \
    "${ib:-0}" "${scale:-0}" "${eff:-0}" && grep -q "InfiniBand fabric $ib Mbit/s" "$tmp/hetero-table.md" \
    && pass "links scaled to the machine's speed (x$scale, IB $ib Mbit/s)" \
    || fail "links scaled to the machine's speed" "ib '$ib' scale '$scale' efficiency '$eff': $(grep '^links:' <<<"$out")"
left=$(ip netns list | grep -E "^$pfx-" || true)
[ -z "$left" ] && pass "namespaces removed after the run" || fail "namespaces removed after the run" "$left"

# Interrupted in the middle of a run: everything is still removed.
ONLY="2fab-naive" LINK_SCALE=1 LAYERS=4 REPS=1 STEPS=50 OUT=$tmp/int "$B" >"$tmp/int.log" 2>&1 &
pid=$!
for _ in $(seq 150); do
    ip netns list | grep -qE "^$pfx-w3" && break; sleep 0.1
done
sleep 2
wpids=$(for i in 0 1 2 3; do ip netns pids "$pfx-w$i" 2>/dev/null; done)
kill -TERM "$pid"; wait "$pid"; rc=$?
sleep 0.5
left=$(ip netns list | grep -E "^$pfx-" || true)
procs=$(for p in $wpids; do # still running (a zombie waiting for its reaper is not)
    st=$(ps -o stat= -p "$p" 2>/dev/null) && [[ $st != Z* ]] && echo "$p $st"; done)
[ $rc -ne 0 ] && [ -z "$left" ] && [ -z "$procs" ] && pass "clean-up after an interrupt" \
    || fail "clean-up after an interrupt" "rc $rc, namespaces: $left, workers: $procs"
