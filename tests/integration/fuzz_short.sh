# The fuzzers (mk/fuzz.mk, tests/fuzz/) for a few seconds each: built with clang, ASan and UBSan,
# run from their seed corpora (real messages, API answers, manifests, checkpoints, data files,
# recorded sysfs trees);
# none may find a crash, a hang, a leak or a rejection that names no field. `make fuzz` runs them
# for 10 minutes each. Release pass only (one build in build/fuzz; the targets carry their own
# sanitizers).
source "$(dirname "$0")/lib.bash"
if [ "${HOLMES_VARIANT:-release}" != release ]; then
    echo "# fuzz_short: run in the release pass (the targets are sanitized builds of their own)"
    exit 0
fi
cc=${FUZZ_CC:-clang}
if ! command -v "$cc" >/dev/null ||
        ! printf '#include <omp.h>\nint LLVMFuzzerTestOneInput(const char *d, unsigned long n){return omp_get_max_threads() < 0;}\n' |
        "$cc" -x c -fopenmp -fsanitize=fuzzer,address,undefined -o /dev/null - 2>/dev/null; then
    echo "SKIP fuzz_short: $cc with libFuzzer and OpenMP is not installed (make deps installs clang, libclang-rt-14-dev and libomp-14-dev)"
    exit 0
fi
tmp=$(mktemp -d /tmp/holmes-fuzz.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if ! make -C "$REPO" -s -j2 fuzz-build >"$tmp/build.log" 2>&1; then
    fail "fuzz targets build" "$(tail -20 "$tmp/build.log")"
    exit 1
fi
pass "fuzz targets build (clang, ASan, UBSan, libFuzzer)"
for t in coord_message worker_message kube_decode http_request manifest train_files nic_sysfs; do
    mkdir -p "$tmp/$t" "$tmp/findings-$t"
    cp "$REPO"/tests/fuzz/seeds/$t/* "$tmp/$t/"
    if HOLMES_SYSFS_FIXTURES="$REPO/tests/fixtures/sysfs" \
        ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$REPO/build/fuzz/fuzz_$t" -max_total_time=${FUZZ_SHORT_SECONDS:-3} -timeout=10 \
        -rss_limit_mb=2048 -max_len=1100000 -print_final_stats=1 \
        -artifact_prefix="$tmp/findings-$t/" "$tmp/$t" >"$tmp/$t.log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/$t.log")
        pass "fuzz_$t: $runs inputs from $(ls "$REPO"/tests/fuzz/seeds/$t | wc -l) seeds, no finding"
    else
        fail "fuzz_$t" "$(grep -aE 'ERROR|rejection|SUMMARY|runtime error' "$tmp/$t.log" | head -5)"
        ls "$tmp/findings-$t" | sed 's/^/# finding: /'
        cp "$tmp/findings-$t"/* "$REPO/build/fuzz/" 2>/dev/null
    fi
done
