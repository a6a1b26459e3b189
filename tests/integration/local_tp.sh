# Tensor parallelism on emulated GPUs (holmes-operator local, a rank process per GPU, the tensor
# group inside a worker), against the same job without it: the losses of every step within 1e-5,
# and where the layers are split the same way, the final parameters and moments too (parameters
# to 1e-4 of their largest magnitude: AdamW divides by the square root of tiny second moments,
# which magnifies the sums' different rounding order; moments to 1e-5):
#   - tensor 2 x data 2 (2 workers x 2 GPUs) vs data 2 (2 CPU workers);
#   - tensor 4 (1 worker x 4 GPUs) vs 1 CPU worker;
#   - tensor 2 x pipeline 2 with GPipe and with 1F1B vs pipeline 2 with the same schedule (each
#     tensor rank sends its 1/t of the activations, the next stage's group all-gathers them);
#   - tensor 2 x pipeline 2 x data 2 on 4 workers x 2 GPUs trains;
#   - a checkpoint written at tensor 2 resumes at tensor 1, and the reverse.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-local-tp.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
steps=16
[ "${HOLMES_VARIANT:-}" = asan ] && steps=6
# tp_job OUT NAME WORKERS GPUS PARALLELISM CKPT_EVERY [sed...]: the local-gpus example reshaped
tp_job() {
    local out=$1 name=$2 workers=$3 gpus=$4 par=$5 every=$6 emu=true
    shift 6
    [ "$gpus" = 0 ] && emu=false
    gpus_job "$out" "$name" "$steps" "$tmp/ckpt-$name" -e "s/everySteps: 25/everySteps: $every/" \
        -e "s/workers: 2/workers: $workers/" -e "s/gpusPerWorker: 2/gpusPerWorker: $gpus/" -e "s/gpus: true/gpus: $emu/" \
        -e "s/parallelism: {pipeline: 2, data: 2,/parallelism: {$par,/" "$@"
}
run_job() { # NAME: runs $tmp/NAME.yaml; 0 when it succeeded
    (cd "$REPO" && timeout 300 "$OPERATOR" local "$tmp/$1.yaml" --run-dir "$tmp/run-$1" \
        --metrics-out "$tmp/$1.jsonl" --quiet >"$tmp/out-$1" 2>&1)
}
# same NAME_A NAME_B [params]: every step's loss within 1e-5; with "params", the final checkpoints too
same() {
    /usr/bin/python3 - "$tmp" "$1" "$2" <<'PY' || return 1
import json, sys
tmp, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
def losses(n):
    return {r["step"]: r["loss"] for r in (json.loads(l) for l in open("%s/%s.jsonl" % (tmp, n)))}
la, lb = losses(a), losses(b)
assert sorted(la) == sorted(lb) and len(la) > 0, (sorted(la), sorted(lb))
worst = max(abs(la[s] - lb[s]) / abs(lb[s]) for s in la)
print("  losses of %d steps: largest relative difference %.2g" % (len(la), worst))
assert worst <= 1e-5, worst
PY
    # parameters to 1e-4 of their largest magnitude, moments to 1e-5 (see the top)
    [ -z "${3:-}" ] || /usr/bin/python3 "$REPO/tests/integration/ckpt_same.py" "$tmp/ckpt-$1" "$tmp/ckpt-$2" "$steps" 1e-4 1e-5
}
both() { # NAME_A NAME_B WHAT [params]
    local a=$1 b=$2 what=$3
    run_job "$a" && run_job "$b" && pass "$what: both train" \
        || { fail "$what: both train" "$(cat "$tmp/out-$a" "$tmp/out-$b" | tail -n 8)"; return; }
    same "$a" "$b" "${4:-}" && pass "$what: the same training (losses 1e-5${4:+, final parameters and moments})" \
        || fail "$what: the same training"
}

tp_job "$tmp/t2d2.yaml" t2d2 2 2 "tensor: 2, pipeline: 1, data: 2" "$steps"
tp_job "$tmp/d2.yaml" d2 2 0 "pipeline: 1, data: 2" "$steps"
both t2d2 d2 "tensor 2 x data 2 vs data 2" params
grep -q "2 rank processes started" "$tmp/run-t2d2/worker-0.log" && pass "tensor 2: each worker runs its tensor group as 2 rank processes" \
    || fail "tensor 2: each worker runs its tensor group as 2 rank processes"

one_worker='s/- {class: roce, fabric: roce-b, gbps: 100, count: 1}//;s/gbps: 200, count: 1/gbps: 200, count: 1/'
tp_job "$tmp/t4.yaml" t4 1 4 "tensor: 4, pipeline: 1, data: 1" "$steps" -e "$one_worker"
tp_job "$tmp/t1.yaml" t1 1 0 "pipeline: 1, data: 1" "$steps" -e "$one_worker"
both t4 t1 "tensor 4 (1 worker x 4 GPUs) vs 1 CPU worker" params

gp='s/schedule: 1f1b/schedule: gpipe/'
tp_job "$tmp/t2p2.yaml" t2p2 2 2 "tensor: 2, pipeline: 2, data: 1" "$steps" -e "$gp"
tp_job "$tmp/p2.yaml" p2 2 0 "pipeline: 2, data: 1" "$steps" -e "$gp"
both t2p2 p2 "tensor 2 x pipeline 2, GPipe, vs pipeline 2, GPipe (each tensor rank sends its half of the activations)"
tp_job "$tmp/t2p2f.yaml" t2p2f 2 2 "tensor: 2, pipeline: 2, data: 1" "$steps"
tp_job "$tmp/p2f.yaml" p2f 2 0 "pipeline: 2, data: 1" "$steps"
both t2p2f p2f "tensor 2 x pipeline 2, 1F1B, vs pipeline 2, 1F1B"

if [ "${HOLMES_VARIANT:-}" != asan ]; then # 12 processes on CI's 2 cores: the release pass only
    four='s/gbps: 200, count: 1/gbps: 200, count: 2/;s/gbps: 100, count: 1/gbps: 100, count: 2/'
    tp_job "$tmp/t2p2d2.yaml" t2p2d2 4 2 "tensor: 2, pipeline: 2, data: 2" "$steps" -e "$four"
    run_job t2p2d2 && /usr/bin/python3 - "$tmp/t2p2d2.jsonl" <<'PY' && pass "tensor 2 x pipeline 2 x data 2 on 4 workers x 2 GPUs trains, loss falls" || fail "tensor 2 x pipeline 2 x data 2 on 4 workers x 2 GPUs trains" "$(tail -n 5 "$tmp/out-t2p2d2")"
import json, sys
rows = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda r: r["step"])
assert rows[0]["loss"] > 5.0 and rows[-1]["loss"] < rows[0]["loss"] - 0.3, (rows[0]["loss"], rows[-1]["loss"])
PY
fi

# Resume across tensor degrees: half the steps at one degree (checkpoint at the half), the rest
# at the other from that checkpoint; the losses after it as in the uninterrupted run. A constant
# learning rate: the half run's schedule is then the whole run's.
half=$((steps / 2))
const='s/warmupSteps: 2, /warmupSteps: 0, schedule: constant, /'
tp_job "$tmp/ref.yaml" ref 2 0 "pipeline: 1, data: 2" "$steps" -e "$const"
run_job ref || fail "the uninterrupted constant-rate run" "$(tail -n 5 "$tmp/out-ref")"
for order in "2 0" "0 2"; do
    set -- $order
    ck="$tmp/ckpt-x$1$2"
    par() { [ "$1" = 2 ] && echo "tensor: 2, pipeline: 1, data: 2" || echo "pipeline: 1, data: 2"; }
    tp_job "$tmp/x$1$2a.yaml" "x$1$2a" 2 "$1" "$(par "$1")" "$half" -e "$const" \
        -e "s#$tmp/ckpt-x$1$2a#$ck#" -e "s/steps: $steps/steps: $half/"
    tp_job "$tmp/x$1$2b.yaml" "x$1$2b" 2 "$2" "$(par "$2")" "$steps" -e "$const" -e "s#$tmp/ckpt-x$1$2b#$ck#"
    what="a checkpoint written at tensor $([ "$1" = 2 ] && echo 2 || echo 1) resumes at tensor $([ "$2" = 2 ] && echo 2 || echo 1)"
    # job b takes over job a's directory: its claim deleted (docs/api.md, checkpoint.path)
    if run_job "x$1$2a" && rm "$ck/holmes-job" && run_job "x$1$2b" && grep -q "resumed from the checkpoint of step $half" "$tmp"/run-x$1$2b/*.log; then
        pass "$what"
        /usr/bin/python3 - "$tmp/x$1$2b.jsonl" "$tmp/ref.jsonl" "$half" <<'PY' && pass "$what: the losses after it as in the uninterrupted run (1e-5)" || fail "$what: the losses after it as in the uninterrupted run"
import json, sys
r = {x["step"]: x["loss"] for x in (json.loads(l) for l in open(sys.argv[1]))}
u = {x["step"]: x["loss"] for x in (json.loads(l) for l in open(sys.argv[2]))}
after = [s for s in r if s > int(sys.argv[3])]
assert after and all(abs(r[s] - u[s]) / u[s] <= 1e-5 for s in after), [(s, r[s], u[s]) for s in after]
PY
    else
        fail "$what" "$(tail -n 6 "$tmp/out-x$1$2b" "$tmp"/run-x$1$2b/worker-0.log 2>/dev/null)"
    fi
done
