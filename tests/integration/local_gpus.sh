# Workers with several GPUs, emulated (spec.emulation.gpus): a rank per GPU, each a process of
# its own under its worker. holmes-operator local runs 2 workers x 2 emulated GPUs:
#  - pipeline 2 x data 2 trains (loss falls) with 2 rank processes per worker;
#  - the same math as 4 one-rank workers: data 4, losses and final parameters within 1e-5;
#  - a rank process killed mid-run fails its worker, the gang restarts in place from the last
#    checkpoint and training finishes;
#  - GPUs that are not emulated are refused by local, naming the field.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-local-gpus.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
steps=16
[ "${HOLMES_VARIANT:-}" = asan ] && steps=6
run_local() { # JOB RUNDIR METRICS
    (cd "$REPO" && timeout 300 "$OPERATOR" local "$1" --run-dir "$2" --metrics-out "$3" --quiet 2>&1)
}

# 1. pipeline 2 x data 2 on 2 workers x 2 emulated GPUs.
gpus_job "$tmp/pp.yaml" gpus-pp-$$ "$steps" "$tmp/ckpt-pp" -e "s/everySteps: 25/everySteps: 1000/"
out=$(run_local "$tmp/pp.yaml" "$tmp/run-pp" "$tmp/pp.jsonl"); rc=$?
[ $rc -eq 0 ] && pass "2 workers x 2 emulated GPUs: pipeline 2 x data 2 trains" \
    || fail "2 workers x 2 emulated GPUs: pipeline 2 x data 2 trains" "rc $rc: $out $(tail -n 5 "$tmp"/run-pp/*.log)"
grep -q "gpus-pp-$$-worker-0 x2 (infiniband" <<<"$out" && pass "placement shows each worker's two GPUs in its stage" \
    || fail "placement shows each worker's two GPUs in its stage" "$out"
ranks=$(cat "$tmp"/run-pp/worker-*.log | sed -n 's/.* rank-\([0-9]*\): step .*/\1/p' | sort -u | tr '\n' ' ')
[ "$ranks" = "0 1 2 3 " ] && grep -q "2 rank processes started" "$tmp/run-pp/worker-0.log" \
    && grep -q "2 rank processes started" "$tmp/run-pp/worker-1.log" \
    && pass "each worker runs its two ranks as processes (ranks 0-3 all step)" \
    || fail "each worker runs its two ranks as processes (ranks 0-3 all step)" "ranks: $ranks"
/usr/bin/python3 - "$tmp/pp.jsonl" "$steps" <<'PY' && pass "loss reported every step, and falls" || fail "loss reported every step, and falls" "$(head -c 400 "$tmp/pp.jsonl")"
import json, sys
rows = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda r: r["step"])
assert [r["step"] for r in rows] == list(range(1, int(sys.argv[2]) + 1)), [r["step"] for r in rows]
assert rows[0]["loss"] > 5.0 and rows[-1]["loss"] < rows[0]["loss"] - 0.3, (rows[0]["loss"], rows[-1]["loss"])
PY

# 2. The same math: data 4 on 2 workers x 2 emulated GPUs against 4 one-rank CPU workers.
par='s/parallelism: {pipeline: 2, data: 2,/parallelism: {pipeline: 1, data: 4,/'
gpus_job "$tmp/a.yaml" gpus-a-$$ "$steps" "$tmp/ckpt-a" -e "$par" -e "s/everySteps: 25/everySteps: $steps/"
gpus_job "$tmp/b.yaml" gpus-b-$$ "$steps" "$tmp/ckpt-b" -e "$par" -e "s/everySteps: 25/everySteps: $steps/" \
    -e "s/workers: 2/workers: 4/" -e "s/gpusPerWorker: 2/gpusPerWorker: 0/" -e "s/gpus: true/gpus: false/" \
    -e "s/gbps: 200, count: 1/gbps: 200, count: 2/" -e "s/gbps: 100, count: 1/gbps: 100, count: 2/"
out_a=$(run_local "$tmp/a.yaml" "$tmp/run-a" "$tmp/a.jsonl"); rc_a=$?
out_b=$(run_local "$tmp/b.yaml" "$tmp/run-b" "$tmp/b.jsonl"); rc_b=$?
[ $rc_a -eq 0 ] && [ $rc_b -eq 0 ] && pass "data 4: 2 x 2 emulated GPUs and 4 x 1 CPU workers both train" \
    || fail "data 4: 2 x 2 emulated GPUs and 4 x 1 CPU workers both train" "$out_a $out_b"
/usr/bin/python3 - "$tmp" "$steps" <<'PY' && pass "data 4: same losses and final parameters (1e-5)" || fail "data 4: same losses and final parameters (1e-5)"
import json, struct, sys, glob
tmp, steps = sys.argv[1], int(sys.argv[2])
def losses(f):
    return [r["loss"] for r in sorted((json.loads(l) for l in open(f)), key=lambda r: r["step"])]
la, lb = losses(tmp + "/a.jsonl"), losses(tmp + "/b.jsonl")
assert len(la) == len(lb) == steps, (len(la), len(lb))
for x, y in zip(la, lb):
    assert abs(x - y) <= 1e-5 * max(1.0, abs(y)), (x, y)
def params(d):
    f = glob.glob("%s/stage-0-4-step-%09d.ckpt" % (d, steps))
    assert len(f) == 1, f
    b = open(f[0], "rb").read()
    assert b[:8] == b"HOLMESCK"
    n = struct.unpack_from("<Q", b, 96)[0]
    return struct.unpack_from("<%df" % n, b, 256)
pa, pb = params(tmp + "/ckpt-a"), params(tmp + "/ckpt-b")
assert len(pa) == len(pb) and len(pa) > 1000
worst = max(abs(x - y) / max(1e-3, abs(y)) for x, y in zip(pa, pb))
print("  max relative parameter difference %.3g over %d parameters" % (worst, len(pa)))
assert worst <= 1e-5, worst
PY

# 3. A rank process killed after the first checkpoint: its worker fails, the gang restarts in
#    place from the checkpoint, training finishes.
gpus_job "$tmp/k.yaml" gpus-k-$$ $((steps * 2)) "$tmp/ckpt-k" -e "s/everySteps: 25/everySteps: 4/"
( run_local "$tmp/k.yaml" "$tmp/run-k" "$tmp/k.jsonl" >"$tmp/out-k"; echo $? >"$tmp/rc-k" ) &
for _ in $(seq 600); do
    ls "$tmp"/ckpt-k/stage-*-step-000000004.ckpt >/dev/null 2>&1 && break; sleep 0.1
done
victim=""
for w in $(pgrep -f -- "--pod gpus-k-$$-worker-1 "); do
    victim=$(pgrep -P "$w" -f "holmes-node rank" | head -1)
    [ -n "$victim" ] && break
done
[ -n "$victim" ] && kill -9 "$victim"
wait
out=$(cat "$tmp/out-k")
[ -n "$victim" ] && [ "$(cat "$tmp/rc-k")" = 0 ] && grep -q "1 restart" <<<"$out" \
    && pass "a rank process killed: its worker fails, one in-place restart, training succeeds" \
    || fail "a rank process killed: its worker fails, one in-place restart, training succeeds" "victim '$victim': $out $(tail -n 5 "$tmp"/run-k/*.log)"
grep -q "was killed by signal 9" "$tmp"/run-k/worker-1.log && pass "the worker names the rank that died and how" \
    || fail "the worker names the rank that died and how" "$(grep -h error "$tmp"/run-k/*.log | head -5)"
/usr/bin/python3 - "$tmp/k.jsonl" "$((steps * 2))" <<'PY' && pass "the loss curve continues from the checkpoint" || fail "the loss curve continues from the checkpoint"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step"] for r in rows]
assert steps[-1] == int(sys.argv[2]), steps
for a, b in zip(steps, steps[1:]):
    assert b == a + 1 or (b - 1) % 4 == 0, (a, b, steps)
PY

# 4. SIGTERM to a worker with rank processes (preemption): its ranks checkpoint at the step
#    boundary and stop, it leaves, the gang resumes from exactly that step, no restart charged.
#    SIGTERM at step 20 of 100 (60 under ASan): the steps after it only have to outlast the signal.
tsteps=100
[ "${HOLMES_VARIANT:-}" = asan ] && tsteps=60
gpus_job "$tmp/t.yaml" gpus-t-$$ $tsteps "$tmp/ckpt-t" -e "s/everySteps: 25/everySteps: 1000/"
( run_local "$tmp/t.yaml" "$tmp/run-t" "$tmp/t.jsonl" >"$tmp/out-t"; echo $? >"$tmp/rc-t" ) &
for _ in $(seq 600); do grep -q "step 20/" "$tmp"/run-t/worker-1.log 2>/dev/null && break; sleep 0.1; done
termed=""
for p in $(pgrep -f -- "--pod gpus-t-$$-worker-1 "); do
    if tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx HOLMES_SUPERVISED=1; then kill -TERM "$p"; termed=$p; fi
done
wait
left=$(sed -nE 's/.*left on SIGTERM after step ([0-9]+), checkpointed there.*/\1/p' "$tmp/run-t/worker-1.log" | head -1)
resumed=$(sed -nE 's/.*resumed from the checkpoint of step ([0-9]+).*/\1/p' "$tmp"/run-t/worker-*.log | head -1)
[ -n "$termed" ] && [ "$(cat "$tmp/rc-t")" = 0 ] && [ -n "$left" ] && [ "$resumed" = "$left" ] \
    && grep -q "0 restarts" "$tmp/out-t" && [ "$(grep -c 'rank [23]: stopped at step' "$tmp/run-t/worker-1.log")" = 2 ] \
    && pass "SIGTERM: both rank processes checkpoint and stop, the gang resumes from that step, not charged" \
    || fail "SIGTERM: both rank processes checkpoint and stop, the gang resumes from that step, not charged" \
        "termed '$termed' left '$left' resumed '$resumed': $(tail -n 4 "$tmp/out-t")"

# 5. GPUs that are not emulated: this holmes-node has no CUDA engine (`holmes-node engines`).
sed -e "s/gpus: true/gpus: false/" "$tmp/pp.yaml" >"$tmp/real.yaml"
out=$(cd "$REPO" && "$OPERATOR" local "$tmp/real.yaml" 2>&1); rc=$?
[ "$("$NODE" engines)" = cpu ] && [ $rc -eq 2 ] \
    && grep -q "spec.gpusPerWorker: 2: .*holmes-node has no cuda-fp32 engine (build it with .make cuda." <<<"$out" \
    && pass "real GPUs refused by local, naming the field: this holmes-node has no CUDA engine" \
    || fail "real GPUs refused by local, naming the field: this holmes-node has no CUDA engine" "rc $rc: $out"
# It asks the binary it would run, not itself.
out=$(HOLMES_NODE_BIN=/bin/true "$OPERATOR" local "$tmp/real.yaml" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "/bin/true has no cuda-fp32 engine" <<<"$out" \
    && pass "local asks the node binary it runs (HOLMES_NODE_BIN)" || fail "local asks the node binary it runs" "rc $rc: $out"
