#!/usr/bin/env bash
# Runs every unit test binary and integration script for each build variant given as
# pairs "BUILDDIR BINDIR", counts PASS/FAIL lines, and ends with "N passed, N failed".
# A test that exits non-zero without printing a FAIL line (a crash, a sanitizer report,
# a timeout) counts as one failure. Per-test timeout: HOLMES_TEST_TIMEOUT (default 600 s).
set -u
cd "$(dirname "$0")/.."
timeout_s=${HOLMES_TEST_TIMEOUT:-600}
passed=0; failed=0
log_dir=$(mktemp -d /tmp/holmes-test.XXXXXX)
failed_names=()

run_one() { # variant label, command...
    local label=$1; shift
    local out="$log_dir/$(echo "$label" | tr '/ ' '__').log"
    local start=$SECONDS
    timeout --kill-after=10 "$timeout_s" "$@" >"$out" 2>&1
    local rc=$?
    local p f
    p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1; echo "FAIL $label: exit status $rc" >>"$out"
    fi
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -gt 0 ]; then
        failed_names+=("$label")
        printf '  %-52s %4d passed %3d FAILED (%ds)\n' "$label" "$p" "$f" $((SECONDS - start))
        grep -E '^FAIL |ERROR: AddressSanitizer|runtime error:' "$out" | head -20 | sed 's/^/      /'
        tail -5 "$out" | sed 's/^/      | /'
    else
        printf '  %-52s %4d passed (%ds)\n' "$label" "$p" $((SECONDS - start))
    fi
    grep '^SKIP ' "$out" | head -3 | sed 's/^/      /' 
}

while [ $# -ge 2 ]; do
    build=$1; bindir=$2; shift 2
    variant=$(basename "$build")
    echo "== tests ($variant)"
    export HOLMES_BIN_DIR=$PWD/$bindir HOLMES_BUILD_DIR=$PWD/$build HOLMES_VARIANT=$variant
    if [ "$variant" = asan ]; then
        export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
        export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
        export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
    else
        unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
    fi
    for t in "$build"/tests/test_*; do
        [ -x "$t" ] || continue
        run_one "$variant/$(basename "$t")" "$t"
    done
    for s in tests/integration/*.sh; do
        [ -f "$s" ] || continue
        run_one "$variant/$(basename "$s" .sh)" bash "$s"
    done
done

if [ ${#failed_names[@]} -gt 0 ]; then
    echo "failed: ${failed_names[*]} (logs in $log_dir)"
else
    rm -rf "$log_dir"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
