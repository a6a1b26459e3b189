#!/usr/bin/env bash
# Runs every unit test binary and integration script for each build variant given as
# pairs "BUILDDIR BINDIR", counts PASS/FAIL lines, and ends with "N passed, N failed".
# A test that exits non-zero without printing a FAIL line (a crash, a sanitizer report,
# a timeout) counts as one failure. Per-test timeout: HOLMES_TEST_TIMEOUT (default 600 s).
#
# Lanes. The tests run in lanes side by side, each lane its tests one after another: one lane a
# variant, and one more for the tests named by HOLMES_TEST_APART (an extended regular expression
# on the test's name), every variant's in turn. By default those are the scripts on a real control
# plane (k8s_*), which spend much of their time waiting for it and for their workers, and the two
# that build the CUDA engine into the repository (cuda_build, comm_nccl: `make cuda` makes
# comm-nccl too, so they never run beside each other), the longest test of all: with it in the
# ASan lane that lane ran 1,045 s of tests against 871 and 596 for the other two (2-core VM).
# HOLMES_TEST_JOBS (default: the machine's cores) of 1 runs everything in one lane, one test after
# another; HOLMES_TEST_APART= (empty) keeps those tests in their variant's lane. The first lane's
# lines appear as they come, the others' when they are done. Tests that build into the repository
# (make cuda, make comm-nccl) and others whose result does not depend on the variant run in one
# pass only (once_per_run: the last variant's), so two never build at once.
set -u
cd "$(dirname "$0")/.."
timeout_s=${HOLMES_TEST_TIMEOUT:-600}
jobs_n=${HOLMES_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
apart=${HOLMES_TEST_APART-^(k8s_|cuda_build\$|comm_nccl\$)}
log_dir=$(mktemp -d /tmp/holmes-test.XXXXXX)

# children_cpu_ms VAR: sets VAR to the CPU time (user + system, ms) of this shell's children
# waited for so far (`times` in this shell, not in a $(...) subshell, whose children are its own)
children_cpu_ms() {
    local t u s f=$log_dir/times.$BASHPID
    times >"$f"
    t=$(tail -1 "$f") # "XmY.YYYs XmY.YYYs"
    u=${t%% *} s=${t##* }
    printf -v "$1" '%d' $(( $(cpu_ms "$u") + $(cpu_ms "$s") ))
}
cpu_ms() { # "1m2.345s" -> 62345
    local m=${1%%m*} f=${1#*m}
    f=${f%s}
    echo $(( 10#$m * 60000 + 10#${f%.*} * 1000 + 10#${f#*.} ))
}

# run_one LABEL COMMAND...: one test; its summary line on stdout (with the wall time and the CPU
# time of what it ran), counts added to the lane's
run_one() {
    local label=$1; shift
    local out="$log_dir/$(echo "$label" | tr '/ ' '__').log"
    local start=$SECONDS cpu0 cpu
    children_cpu_ms cpu0
    timeout --kill-after=10 "$timeout_s" "$@" >"$out" 2>&1
    local rc=$?
    children_cpu_ms cpu
    cpu=$(( (cpu - cpu0 + 500) / 1000 ))
    local p f
    p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1; echo "FAIL $label: exit status $rc" >>"$out"
    fi
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -gt 0 ]; then
        failed_names+=("$label")
        printf '  %-52s %4d passed %3d FAILED (%ds, %d CPU-s)\n' "$label" "$p" "$f" $((SECONDS - start)) "$cpu"
        grep -E '^FAIL |ERROR: AddressSanitizer|runtime error:' "$out" | head -20 | sed 's/^/      /'
        tail -5 "$out" | sed 's/^/      | /'
    else
        printf '  %-52s %4d passed (%ds, %d CPU-s)\n' "$label" "$p" $((SECONDS - start)) "$cpu"
    fi
    grep '^SKIP ' "$out" | head -3 | sed 's/^/      /'
}

# variant_env BUILDDIR BINDIR: the environment of that variant's tests
variant_env() {
    local variant
    variant=$(basename "$1")
    export HOLMES_BIN_DIR=$PWD/$2 HOLMES_BUILD_DIR=$PWD/$1 HOLMES_VARIANT=$variant
    if [ "$variant" = asan ]; then
        export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
        export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
        export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
    else
        unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
    fi
}

# tests_of BUILDDIR: the variant's tests, a line each: the name, then the command
tests_of() {
    local t s
    for t in "$1"/tests/test_*; do
        [ -x "$t" ] && echo "$(basename "$t") $t"
    done
    for s in tests/integration/*.sh; do
        [ -f "$s" ] && echo "$(basename "$s" .sh) bash $s"
    done
}

# run_lane NAME WHICH BUILDDIR BINDIR [BUILDDIR BINDIR ...]: the tests of those variants that
# WHICH selects (all, main: not matched by $apart, apart: matched), variant after variant;
# writes "passed failed names..." to $log_dir/lane-NAME.counts
run_lane() (
    local name=$1 which=$2 build bindir variant tname cmd
    shift 2
    passed=0; failed=0; failed_names=()
    while [ $# -ge 2 ]; do
        build=$1 bindir=$2; shift 2
        variant=$(basename "$build")
        variant_env "$build" "$bindir"
        if [ "$which" = apart ]; then
            echo "== tests ($variant, ${apart})"
        else
            echo "== tests ($variant)"
        fi
        while read -r tname cmd; do
            case $which in
                main) [ -n "$apart" ] && [[ $tname =~ $apart ]] && continue ;;
                apart) [[ $tname =~ $apart ]] || continue ;;
            esac
            # shellcheck disable=SC2086
            run_one "$variant/$tname" $cmd </dev/null
        done < <(tests_of "$build")
    done
    echo "$passed $failed ${failed_names[*]}" >"$log_dir/lane-$name.counts"
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

# The lanes: "NAME WHICH BUILDDIR BINDIR..." each
lanes=()
if [ "$jobs_n" -ge 2 ]; then
    for v in "${variants[@]}"; do
        lanes+=("$(basename "${v%% *}") main $v")
    done
    [ -n "$apart" ] && [ ${#variants[@]} -gt 0 ] && lanes+=("apart apart ${variants[*]}")
else
    lanes=("all all ${variants[*]}")
fi
bg=()
for ((i = 1; i < ${#lanes[@]}; i++)); do
    # shellcheck disable=SC2086
    run_lane ${lanes[$i]} >"$log_dir/lane-$i.out" 2>&1 &
    bg+=($!)
done
# shellcheck disable=SC2086
[ ${#lanes[@]} -gt 0 ] && run_lane ${lanes[0]}
for ((i = 1; i < ${#lanes[@]}; i++)); do
    wait "${bg[$((i - 1))]}"
    cat "$log_dir/lane-$i.out"
done

passed=0; failed=0; failed_names=()
for l in "${lanes[@]}"; do
    c="$log_dir/lane-${l%% *}.counts"
    if [ ! -f "$c" ]; then
        failed=$((failed + 1)); failed_names+=("lane ${l%% *} (did not finish)"); continue
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
