#!/usr/bin/env bash
# Runs every unit test binary and integration script for each build variant given as
# pairs "BUILDDIR BINDIR", counts PASS/FAIL lines, and ends with "N passed, N failed".
# A test that exits non-zero without printing a FAIL line (a crash, a sanitizer report,
# a timeout) counts as one failure. Per-test timeout: HOLMES_TEST_TIMEOUT (default 600 s).
#
# Lanes. The tests run in lanes side by side, each lane one test at a time. HOLMES_TEST_JOBS lanes
# (default: the machine's cores) take the tests of every variant from one shared queue, the
# longest first (the times in tests/times.txt, 10 s for a test it does not name), so that no lane
# is left with the long tail while the others idle. One more lane first runs the tests named by
# HOLMES_TEST_APART (an extended regular expression on the test's name, default '^k8s_': the
# scripts on a real control plane, which spend most of their time waiting for it and for their
# workers, about 0.4 of a core), every variant's in turn, one after another, then takes from the
# queue too. HOLMES_TEST_JOBS=1 runs everything in one lane in the order of the variants and the
# files; HOLMES_TEST_APART= (empty) puts those tests in the queue. Every test's lines appear when
# it ends; each run's times go to build/test-times.txt (copy it to tests/times.txt to re-order).
# Tests that build into the repository (make cuda, make comm-nccl) and others whose result does
# not depend on the variant run in one pass only (once_per_run: the last variant's). The tests
# named together in HOLMES_TEST_TOGETHER (default "cuda_build comm_nccl": both build
# devmem_cuda.o) run one after another in one lane, so two builds never race.
set -u
cd "$(dirname "$0")/.."
timeout_s=${HOLMES_TEST_TIMEOUT:-600}
jobs_n=${HOLMES_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
apart=${HOLMES_TEST_APART-^k8s_}
together=${HOLMES_TEST_TOGETHER-cuda_build comm_nccl}
times_in=${HOLMES_TEST_TIMES:-tests/times.txt}
times_out=build/test-times.txt
log_dir=$(mktemp -d /tmp/holmes-test.XXXXXX)
queue=$log_dir/queue

# run_one LABEL COMMAND...: one test; its summary (one write) on stdout, counts added to the lane's
run_one() {
    local label=$1; shift
    local out="$log_dir/$(echo "$label" | tr '/ ' '__').log"
    local start=$SECONDS
    timeout --kill-after=10 "$timeout_s" "$@" >"$out" 2>&1
    local rc=$?
    local p f report secs=$((SECONDS - start))
    p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1; echo "FAIL $label: exit status $rc" >>"$out"
    fi
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -gt 0 ]; then
        failed_names+=("$label")
        report=$(printf '  %-52s %4d passed %3d FAILED (%ds)\n' "$label" "$p" "$f" "$secs"
                 grep -E '^FAIL |ERROR: AddressSanitizer|runtime error:' "$out" | head -20 | sed 's/^/      /'
                 tail -5 "$out" | sed 's/^/      | /')
    else
        report=$(printf '  %-52s %4d passed (%ds)' "$label" "$p" "$secs")
    fi
    report+=$(grep '^SKIP ' "$out" | head -3 | sed 's/^/\n      /')
    printf '%s\n' "$report"
    echo "$label $secs" >>"$log_dir/times"
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

variants=()
while [ $# -ge 2 ]; do
    variants+=("$1 $2"); shift 2
done
# Tests whose result does not depend on the variant (once_per_run in tests/integration/lib.bash)
# run in the last variant's pass only.
if [ ${#variants[@]} -gt 0 ]; then
    last=(${variants[$((${#variants[@]} - 1))]})
    export HOLMES_ONCE_IN=$(basename "${last[0]}")
fi

# run_item "VARIANT_INDEX NAME COMMAND...": one test in its variant's environment
run_item() {
    local vi name cmd
    read -r vi name cmd <<<"$1"
    local v=(${variants[$vi]})
    variant_env "${v[0]}" "${v[1]}"
    # shellcheck disable=SC2086
    run_one "$(basename "${v[0]}")/$name" $cmd </dev/null
}

# Every test as "VARIANT_INDEX NAME COMMAND..." in $log_dir/all, the ones for the apart lane in
# $log_dir/apart; the tests of a together group as the group (names joined by "+", the members'
# lines in $log_dir/group-VI-NAMES), where the first of them in the files' order is.
: >"$log_dir/all"; : >"$log_dir/apart"
for ((vi = 0; vi < ${#variants[@]}; vi++)); do
    v=(${variants[$vi]})
    tests_of "${v[0]}" >"$log_dir/tests-$vi"
    members=()
    for m in $together; do
        grep -q "^$m " "$log_dir/tests-$vi" && members+=("$m")
    done
    group=$(IFS=+; echo "${members[*]-}") placed=
    for m in "${members[@]}"; do # the members in the order HOLMES_TEST_TOGETHER gives
        grep "^$m " "$log_dir/tests-$vi" | sed "s/^/$vi /" >>"$log_dir/group-$vi-$group"
    done
    while read -r name cmd; do
        if [ ${#members[@]} -gt 1 ] && [[ " ${members[*]} " == *" $name "* ]]; then
            [ -z "$placed" ] && echo "$vi $group group" >>"$log_dir/all" && placed=1
            continue
        fi
        if [ "$jobs_n" -ge 2 ] && [ -n "$apart" ] && [[ $name =~ $apart ]]; then
            echo "$vi $name $cmd" >>"$log_dir/apart"
        else
            echo "$vi $name $cmd" >>"$log_dir/all"
        fi
    done <"$log_dir/tests-$vi"
done

# The queue: with several lanes, the longest first (a test's time in $times_in, a group's the sum
# of its members'); with one, in order.
if [ "$jobs_n" -ge 2 ]; then
    declare -A known=()
    if [ -r "$times_in" ]; then
        while read -r label secs; do
            [[ $secs =~ ^[0-9]+$ ]] && known[$label]=$secs
        done <"$times_in"
    fi
    while read -r vi name cmd; do
        v=(${variants[$vi]}); variant=$(basename "${v[0]}"); w=0
        for m in ${name//+/ }; do
            w=$((w + ${known[$variant/$m]:-10}))
        done
        printf '%d\t%s %s %s\n' "$w" "$vi" "$name" "$cmd"
    done <"$log_dir/all" | sort -t $'\t' -k1,1nr -s | cut -f2- >"$queue"
else
    cp "$log_dir/all" "$queue"
fi

# take_item: prints the queue's next item and removes it; fails when the queue is empty
take_item() {
    local line
    {
        flock 8
        IFS= read -r line <"$queue" || return 1
        sed -i 1d "$queue"
    } 8>"$queue.lock"
    printf '%s\n' "$line"
}

# run_lane NAME: (apart lane: its tests first, in order) then items from the queue until it is
# empty; writes "passed failed names..." to $log_dir/lane-NAME.counts
run_lane() (
    local name=$1 item vi n cmd
    passed=0; failed=0; failed_names=()
    if [ "$name" = apart ]; then
        while IFS= read -r item; do
            run_item "$item"
        done <"$log_dir/apart"
    fi
    while item=$(take_item); do
        read -r vi n cmd <<<"$item"
        if [ "$cmd" = group ]; then
            while IFS= read -r item; do
                run_item "$item"
            done <"$log_dir/group-$vi-$n"
        else
            run_item "$item"
        fi
    done
    echo "$passed $failed ${failed_names[*]-}" >"$log_dir/lane-$name.counts"
)

lanes=()
for ((i = 0; i < jobs_n; i++)); do
    lanes+=("$i")
done
[ -s "$log_dir/apart" ] && lanes+=(apart)
names=(); for v in "${variants[@]}"; do names+=("$(basename "${v%% *}")"); done
echo "== tests (${names[*]-}): ${jobs_n} lane(s) from one queue$([ -s "$log_dir/apart" ] && echo ", and one for ${apart} first")"
bg=()
for l in "${lanes[@]}"; do
    run_lane "$l" &
    bg+=($!)
done
for p in "${bg[@]}"; do
    wait "$p"
done

passed=0; failed=0; failed_names=()
for l in "${lanes[@]}"; do
    c="$log_dir/lane-$l.counts"
    if [ ! -f "$c" ]; then
        failed=$((failed + 1)); failed_names+=("lane $l (did not finish)"); continue
    fi
    read -r p f names <"$c"
    passed=$((passed + p)); failed=$((failed + f))
    [ -n "$names" ] && failed_names+=($names)
done
if [ -s "$queue" ]; then
    failed=$((failed + 1)); failed_names+=("$(wc -l <"$queue") test(s) never ran")
fi
mkdir -p "$(dirname "$times_out")" && sort "$log_dir/times" >"$times_out" 2>/dev/null
if [ ${#failed_names[@]} -gt 0 ]; then
    echo "failed: ${failed_names[*]} (logs in $log_dir)"
else
    rm -rf "$log_dir"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
