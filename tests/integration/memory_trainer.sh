# The planner's memory model against what the trainer allocates (CPU ranks: the same trainer,
# ZeRO and pipeline code GPU ranks run, through the engine seam's device memory): each rank
# logs the bytes it asked of devmem_alloc beside the engine's own stage (the optimizer's moments
# and masters, the tied embedding's exchange, the pipeline's buffers), and `holmes-operator plan`
# on the same job and split must price exactly that (stages[].memory_bytes: optimizer +
# pipeline). The engine's own part is held against the CUDA engine's count by cuda_build.sh
# (memory_model.py).
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-memtrainer.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

# case NAME P D M SCHEDULE WIRE GATHER WARMUP: a rank-table run of 1 step and its plan
case_() {
    local name=$1 P=$2 D=$3 M=$4 sched=$5 wire=$6 gather=$7 warm=$8 r bad="" split
    if ! rank_table_job "$tmp/$name" "$P" "$D" "\"warmup_extra\": $warm," --data "$REPO/examples/data/corpus.txt" \
            --layers 6 --channels 32 --heads 4 --vocab 256 --max-seq 32 --batch 2 --seq 32 \
            --micro-batches "$M" --schedule "$sched" --pipeline-dtype "$wire" --param-gather-dtype "$gather" \
            --steps 1 --lr 1e-3; then
        fail "$name: the ranks train" "$(grep -ihE 'error|fail' "$tmp/$name".*.log | head -3)"
        return
    fi
    # the split the ranks ran, stage by stage
    split=$(for ((s = 0; s < P; s++)); do
        sed -nE "s/.*: stage $s, layers \[([0-9]+), ([0-9]+)\): .*/\1 \2/p" "$tmp/$name".*.log | head -1
    done | awk '{ printf "%s%d", (NR > 1 ? "," : ""), $2 - $1 }')
    printf 'workers:\n- {name: w, count: %d, gpus: 0, gpu_tflops: 0.1, nic: {class: infiniband, fabric: ib, gbps: 1}}\n' \
        $((P * D)) >"$tmp/$name-cluster.yaml"
    cat >"$tmp/$name.yaml" <<Y
apiVersion: holmes.dev/v1alpha1
kind: TrainingJob
metadata: {name: $name}
spec:
  workers: $((P * D))
  gpusPerWorker: 0
  model: {layers: 6, hidden: 32, heads: 4, vocab: 256, seqLen: 32}
  parallelism: {tensor: 1, pipeline: $P, data: $D, microBatches: $M, microBatchSize: 2, schedule: $sched, pipelineDtype: $wire, paramGatherDtype: $gather}
  training:
    steps: 1
    data: {path: /dev/null, format: text}
Y
    if ! "$OPERATOR" plan --cluster "$tmp/$name-cluster.yaml" "$tmp/$name.yaml" --partition "$split" \
            $([ "$sched" = 1f1b ] && echo --warmup "$warm") --json >"$tmp/$name.json" 2>"$tmp/$name.err"; then
        fail "$name: planned" "$(cat "$tmp/$name.err")"
        return
    fi
    for ((r = 0; r < P * D; r++)); do
        local s got want
        read -r s got < <(sed -nE 's/.*: rank [0-9]+: stage ([0-9]+), layers .*\): ([0-9]+) bytes of host memory beside.*/\1 \2/p' "$tmp/$name.$r.log")
        want=$(jq -r ".stages[$s].memory_bytes | .optimizer + .pipeline" "$tmp/$name.json")
        [ -n "$got" ] && [ "$got" = "$want" ] || bad="$bad rank $r (stage $s): ran $got, priced $want;"
    done
    [ -z "$bad" ] && pass "$name: every rank's optimizer state, tied embedding and pipeline buffers as priced (split $split)" \
        || fail "$name: the trainer's memory as priced" "$bad"
}

case_ p2d2-bf16-wire-gather 2 2 4 1f1b bf16 bf16 0
case_ p3-gpipe-fp32 3 1 4 gpipe fp32 fp32 0
case_ p3-warmup2 3 1 6 1f1b fp32 bf16 2
