#!/usr/bin/env bash
# holmes-node worker as separate processes on loopback: a 2 x 2 run finishes, all ranks agree and
# print the step --profile-step names by part; a process killed mid-run makes every other exit
# with a clear error within the timeout; a rank that never starts is named by the others. Every
# wait is bounded by `timeout`.
source "$(dirname "$0")/lib.bash"
set -u
tmp=$(mktemp -d /tmp/holmes-comm-worker.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

# text corpus (byte tokens, vocabulary 256)
for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7))"; done >"$tmp/data.txt"

table() { # P D TIMEOUT: writes $tmp/rt.json
    local P=$1 D=$2 to=$3 ports sep="" w=""
    read -r -a ports <<<"$(free_ports $((P * D)))"
    for p in "${ports[@]}"; do w="$w$sep{\"host\": \"127.0.0.1\", \"port\": $p}"; sep=", "; done
    echo "{\"parallelism\": {\"pipeline\": $P, \"data\": $D}, \"timeout_seconds\": $to, \"workers\": [$w]}" >"$tmp/rt.json"
}

MODEL=(--layers 2 --channels 32 --heads 4 --vocab 256 --max-seq 16 --batch 2 --seq 16 --micro-batches 2)

start() { # RANK STEPS LOG [FLAG...]
    timeout -k 5 60 "$NODE" worker --rank-table "$tmp/rt.json" --rank "$1" --data "$tmp/data.txt" \
        "${MODEL[@]}" --steps "$2" --all-ranks "${@:4}" >"$3" 2>&1 &
}

# 1. a complete 2 x 2 run
table 2 2 20
pids=()
for r in 0 1 2 3; do start $r 4 "$tmp/ok$r.log" --profile-step 3; pids+=($!); done
ok=1
for p in "${pids[@]}"; do wait "$p" || ok=0; done
check "2x2 workers all exit 0" test $ok = 1
l0=$(grep '^step 4 ' "$tmp/ok0.log" | awk '{print $4}')
l3=$(grep '^step 4 ' "$tmp/ok3.log" | awk '{print $4}')
check "2x2 ranks report step 4 with the same loss" test -n "$l0" -a "$l0" = "$l3"
profiled=0
for r in 0 1 2 3; do
    [ "$(grep -c '^profile step' "$tmp/ok$r.log")" = 1 ] &&
        grep -qE '^profile step 3: [0-9.]+ ms on the engine: compute [0-9.]+, .* norm [0-9.]+, adamw [0-9.]+, .* idle -?[0-9.]+ ms.*; calls: compute [1-9][0-9]*, .* norm 1, adamw [1-9][0-9]*, ' "$tmp/ok$r.log" &&
        profiled=$((profiled + 1))
done
check "--profile-step 3: every rank prints step 3's engine time and calls by part, once" test $profiled = 4
[ $ok = 1 ] || tail -3 "$tmp"/ok*.log

# 2. kill one process mid-run: the others fail with an error naming a peer, well within the timeout
table 2 2 10
pids=()
for r in 0 1 2 3; do start $r 100000 "$tmp/kill$r.log"; pids+=($!); done
for _ in $(seq 1 200); do grep -q '^step 2 ' "$tmp/kill0.log" 2>/dev/null && break; sleep 0.1; done
pkill -9 -P "${pids[3]}" # the worker under timeout
start_s=$SECONDS
fails=0
for r in 0 1 2; do
    wait "${pids[$r]}"
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE 'lost its connection to rank|timed out after' "$tmp/kill$r.log"; then
        fails=$((fails + 1))
    else
        echo "rank $r: exit $rc"; tail -2 "$tmp/kill$r.log"
    fi
done
check "killing rank 3 ends ranks 0-2 with a clear error" test $fails = 3
check "... within the 10 s timeout" test $((SECONDS - start_s)) -le 15

# 3. rank 3 never starts: the others name it
table 2 2 2
pids=()
for r in 0 1 2; do start $r 5 "$tmp/never$r.log"; pids+=($!); done
named=0
for r in 0 1 2; do
    wait "${pids[$r]}"
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'rank 3' "$tmp/never$r.log" && named=$((named + 1))
done
check "a rank that never starts is named by its peers" test $named -ge 1
grep -hq 'rank 3 .*never connected' "$tmp"/never*.log && pass "message says rank 3 never connected" \
    || fail "message says rank 3 never connected" "$(cat "$tmp"/never*.log | head -3)"

# 4. bad input
echo '{"parallelism": {"pipeline": 2, "data": 2}, "workers": []}' >"$tmp/bad.json"
out=$("$NODE" worker --rank-table "$tmp/bad.json" --rank 0 --data "$tmp/data.txt" 2>&1)
rc=$?
check "bad rank table exits 2" test $rc = 2
check "bad rank table message names the rule" grep -q "4 entries" <<<"$out"
out=$("$NODE" worker --rank-table "$tmp/bad.json" --rank 0 --data "$tmp/data.txt" --pipeline-dtype fp8 2>&1)
rc=$?
check "bad --pipeline-dtype exits 2" test $rc = 2
check "bad --pipeline-dtype names the choices" grep -q "'fp8' is not one of fp32, bf16" <<<"$out"
out=$("$NODE" worker --rank-table "$tmp/bad.json" --rank 0 --data "$tmp/data.txt" --engine tpu 2>&1)
rc=$?
check "bad --engine exits 2, naming the choices" test $rc = 2 -a -n "$(grep "'tpu' is not one of cpu, cuda-fp32, cuda-bf16" <<<"$out")"
# engines --probe: each engine with the rate and the memory bandwidth a worker reports (the
# CPU's measured product and optimizer here); a bad argument exits 2, naming it
out=$("$NODE" engines --probe 2>&1); rc=$?
check "engines --probe: the CPU engine's measured rate and memory bandwidth" \
    test $rc = 0 -a -n "$(grep -E '^cpu [0-9.e+-]+ TFLOPS \(measured.*\), [0-9.e+-]+ GB/s memory \(measured' <<<"$out")"
out=$("$NODE" engines --fast 2>&1); rc=$?
check "engines --fast exits 2, naming it" test $rc = 2 -a -n "$(grep -- "--fast" <<<"$out")"
if [ "$("$NODE" engines)" = cpu ]; then
    out=$("$NODE" worker --rank-table "$tmp/bad.json" --rank 0 --data "$tmp/data.txt" --engine cuda-bf16 2>&1)
    rc=$?
    check "--engine cuda-bf16 on a build without CUDA exits 2: no CPU fall-back" \
        test $rc = 2 -a -n "$(grep "built without the CUDA engine" <<<"$out")"
fi
out=$("$NODE" worker --rank-table "$tmp/bad.json" --rank 0 --data "$tmp/data.txt" --profile-step 0 2>&1)
rc=$?
check "--profile-step 0 exits 2, naming the option" test $rc = 2 -a -n "$(grep -- "--profile-step" <<<"$out")"
out=$(HOLMES_CPU_AFFINITY=pinned "$NODE" worker --coordinator ws://127.0.0.1:1/ --job j --pod p --worker 0 2>&1)
rc=$?
check "bad HOLMES_CPU_AFFINITY exits 2" test $rc = 2
check "bad HOLMES_CPU_AFFINITY names the option and the choices" grep -q 'cpu-affinity (or HOLMES_CPU_AFFINITY): "pinned" must be none or spread' <<<"$out"
