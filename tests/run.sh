#!/usr/bin/env bash
# Runs every unit test binary and integration script for each build variant given as
# pairs "BUILDDIR BINDIR", counts PASS/FAIL lines, and ends with "N passed, N failed".
# A test that exits non-zero without printing a FAIL line (a crash, a sanitizer report,
# a timeout) counts as one failure. Per-test timeout: HOLMES_TEST_TIMEOUT (default 600 s).
# The variants run side by side, each its tests one after another (HOLMES_TEST_JOBS, default:
# the machine's cores; 1 runs them one after another): the first variant's lines appear as they
# come, the others' when they are done. Tests that build into the repository (make cuda,
# make comm-nccl) and others whose result does not depend on the variant run in one pass only
# (once_per_run: the last variant's), so two never build at once.
set -u
cd "$(dirname "$0")/.."
timeout_s=${HOLMES_TEST_TIMEOUT:-600}
jobs_n=${HOLMES_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
log_dir=$(mktemp -d /tmp/holmes-test.XXXXXX)

# run_one LABEL COMMAND...: one test; its summary line on stdout, counts added to the variant's
run_one() {
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

# run_variant BUILDDIR BINDIR: all of one variant's tests; writes "passed failed names..." to
# $log_dir/VARIANT.counts
run_variant() (
    local build=$1 bindir=$2 variant t s
    variant=$(basename "$build")
    passed=0; failed=0; failed_names=()
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
    echo "$passed $failed ${failed_names[*]}" >"$log_dir/$variant.counts"
)

variants=()
while [ $# -ge 2 ]; do
    variants+=("$1 $2"); shift 2
done
# Tests whose result does not depend on the variant (once_per_run in tests/integration/lib.bash)
# run in the last variant's pass only: with release and ASan that is the ASan pass, whose tests
# are fewer (the release pass runs the real control plane's end-to-end scripts).
if [ ${#variants[@]} -gt 0 ]; then
    last=(${variants[$((${#variants[@]} - 1))]})
    export HOLMES_ONCE_IN=$(basename "${last[0]}")
fi
bg=()
for ((i = 1; i < ${#variants[@]}; i++)); do
    if [ "$jobs_n" -ge 2 ]; then
        # shellcheck disable=SC2086
        run_variant ${variants[$i]} >"$log_dir/variant-$i.out" 2>&1 &
        bg+=($!)
    fi
done
# shellcheck disable=SC2086
[ ${#variants[@]} -gt 0 ] && run_variant ${variants[0]}
for ((i = 1; i < ${#variants[@]}; i++)); do
    if [ "$jobs_n" -ge 2 ]; then
        wait "${bg[$((i - 1))]}"
        cat "$log_dir/variant-$i.out"
    else
        # shellcheck disable=SC2086
        run_variant ${variants[$i]}
    fi
done

passed=0; failed=0; failed_names=()
for v in "${variants[@]}"; do
    c="$log_dir/$(basename "${v%% *}").counts"
    if [ ! -f "$c" ]; then
        failed=$((failed + 1)); failed_names+=("$(basename "${v%% *}") (did not finish)"); continue
    fi
    read -r p f names <"$c"
    passed=$((passed + p)); failed=$((failed + f))
    [ -n "$names" ] && failed_names+=($names)
done
if [ ${#failed_names[@]} -gt 0 ]; then
    echo "failed: ${failed_names[*]} (logs in $log_dir)"
else
    rm -rf "$log_dir"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
