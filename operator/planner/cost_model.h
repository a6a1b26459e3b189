/* The planner's cost model: how long one training step of a GPT model takes on a pipeline of
 * stages, given each stage's layers, speed and links. Pure arithmetic, no I/O.
 *
 * Units: seconds, bytes, bytes/s, FLOP. Every formula is written out in docs/planner.md. */
#ifndef HOLMES_COST_MODEL_H
#define HOLMES_COST_MODEL_H

#include <cjson/cJSON.h>

#include "error.h"
#include "names.h"
#include "trainingjob.h"

/* Link and device constants. Every field can be overridden by the cluster file's `links`
 * object (or a calibration file with the same keys), so measured numbers replace defaults. */
struct cost_links {
    double tcp_gbps;              /* cross-fabric TCP bandwidth of one worker (its node's path
                                     to the other fabrics), Gb/s, shared by the worker's flows
                                     there (a tensor group's links share it) */
    double gateway_gbps;          /* a fabric's link to the other fabrics (gateway, router
                                     port), per direction, shared by every flow that enters
                                     the fabric at the same time; 0 = no shared limit */
    double tcp_latency_us;        /* one TCP message */
    double tcp_efficiency;        /* usable fraction of an Ethernet NIC's Gb/s over sockets */
    double ib_latency_us;         /* one InfiniBand RDMA message */
    double roce_latency_us;       /* one RoCE RDMA message */
    double rdma_efficiency;       /* usable fraction of an RDMA NIC's Gb/s */
    double intra_node_gbps;       /* inside one node (NVLink / shared memory), tensor parallel */
    double intra_node_latency_us;
    double loopback_gbps;         /* between two CPU workers on one node: our TCP transport over
                                     loopback, which the CPU ranks' sends run on */
    double loopback_latency_us;
    double compute_efficiency;    /* achieved fraction of a device's declared TFLOPS */
    double memory_gbps;           /* device memory bandwidth in GB/s (optimizer step) of the
                                     devices that do not say theirs (plan_worker.memory_gbps) */
    double optimizer_bytes_per_param; /* bytes the optimizer reads+writes per parameter */
    double overlap;               /* fraction of one micro-batch backward that hides the
                                     gradient reduce-scatter, in [0, 1] */
    double shared_cores;          /* the job's devices share this many cores (all CPU workers on
                                     one machine, as `holmes-operator local` runs them): a stage
                                     computes at min(1, cores / busy devices) of its rate, so a
                                     waiting stage leaves its core to the others; 0 = every
                                     device has its own */
    double pinned_cores;          /* 1 (with shared_cores): every rank computes only on the core
                                     common/core_spread.h's cpu_spread gives it, as
                                     `holmes-operator local`'s workers pin themselves, so a stage
                                     shares a core only with the ranks pinned beside it; 0: the
                                     cores are shared by all (the kernel's scheduler) */
    double op_overhead_us;        /* fixed cost of one forward or backward of one unit (a
                                     micro-batch, or a token slice of one) on a stage, beside its
                                     compute: kernel launches, thread wake-ups, message set-up.
                                     What makes many small token slices cost more than a few */
    double send_buffers;          /* the pipeline's send buffers per direction: 0, a send runs on
                                     the sending stage's thread (the runtime's comm_send), which
                                     goes on only once its message has arrived; N (integer, at
                                     most COST_SEND_BUFFERS_MAX), sends are asynchronous and a
                                     stage waits only for a free buffer (the send N before) */
};
#define COST_SEND_BUFFERS_MAX 16

void cost_links_default(struct cost_links *l);
/* Applies the overrides in a JSON object with the field names above (all optional). Unknown
 * keys, non-numbers and out-of-range values are errors naming `where`.key. */
int cost_links_apply_json(struct cost_links *l, const cJSON *j, const char *where, herr *e);
/* Checks every field is finite and in range (bandwidths > 0, efficiencies in (0, 1], ...). */
int cost_links_check(const struct cost_links *l, herr *e);
cJSON *cost_links_to_json(const struct cost_links *l);


/* Model shape and per-step work, as the cost model needs it. */
struct cost_job {
    struct tj_model model; /* the shape (common/trainingjob.h) */
    int tensor;            /* tensor-parallel degree */
    int data;              /* data-parallel degree */
    int micro_batches;     /* per replica per step */
    int micro_batch_size;  /* sequences per micro-batch */
    int elem_bytes;        /* 4 for fp32, 2 for bf16/fp16 */
    int act_elem_bytes;    /* per element between pipeline stages; 0 = elem_bytes */
    int gather_elem_bytes; /* per element of the parameter all-gather; 0 = 4 (fp32) */
    int gather_masters;    /* the replicas gather bf16 parameters (paramGatherDtype bf16): the
                              trainer keeps fp32 masters of its shard */
    enum schedule schedule;
    int slices;               /* TeraPipe token slices per micro-batch (0 or 1: none) */
    int mem_slices;           /* the slices the workers will run, for the memory model while
                                 slice_bounds is not set yet (an explicit tokenSlices: N during
                                 the search); 0 or 1: none */
    const int *slice_bounds;  /* [slices + 1] token bounds 0 .. seq_len (NULL: none) */
    int warmup_extra;         /* 1F1B: micro-batches of warm-up beyond the standard on every
                                 stage but the last (common/pipe_order.h) */
};

/* One link: bandwidth in bytes/s and latency in seconds. */
struct cost_link {
    double bw;
    double lat;
};

/* What the placement decided for one stage; layers come from the partition. */
struct cost_stage {
    int layers;
    double tflops;         /* declared TFLOPS of the stage's slowest device */
    double memory_gbps;    /* the least memory bandwidth of its devices, GB/s (the optimizer);
                              0 = cost_links.memory_gbps */
    double mem_bytes;      /* memory of the stage's smallest device; INFINITY = not checked */
    struct cost_link dp;   /* data-parallel ring of the stage (bottleneck link, NIC share) */
    struct cost_link next; /* to the next stage (unused on the last): the slowest of the
                              boundary's tensor x data point-to-point links, each carrying
                              cost_link_bytes (1/t of the activation) at its share of the NICs */
};

/* Breakdown of the predicted step along its critical stage. The terms sum to the total. */
struct cost_breakdown {
    double compute;   /* forward + backward FLOPs / effective TFLOPS */
    double tp_comm;   /* tensor-parallel all-reduces */
    double pp_comm;   /* activation and gradient transfers between stages (critical path) */
    double bubble;    /* pipeline idle time */
    double dp_comm;   /* exposed gradient reduce-scatter + parameter all-gather + tie, and the
                         norm's all-reduces (their latency) */
    double optimizer; /* optimizer step on the stage's shard */
    double total;
    int critical_stage;
};

/* Formulas (per micro-batch, per layer unless said): see docs/planner.md. */
double cost_layer_fwd_flops(const struct cost_job *j);        /* one layer, one micro-batch */
double cost_head_fwd_flops(const struct cost_job *j);         /* LM head, one micro-batch */
double cost_layer_params(const struct cost_job *j);
double cost_embedding_params(const struct cost_job *j);      /* token + position embeddings */
/* The parameters one tensor rank of a stage holds (noderuntime/engine/gpt.c build_layout): the
 * split tensors' 1/t (the padded vocabulary's wte rows among them), the replicated ones whole. */
double cost_rank_params(const struct cost_job *j, int layers, int first, int last);
double cost_activation_bytes(const struct cost_job *j);      /* one boundary, one micro-batch */
/* What one pipeline link carries per micro-batch: with tensor parallelism each of a stage's t
 * ranks sends its 1/t of the activation to the same tensor rank of the next stage (Megatron-LM's
 * scatter-gather), which all-gathers the t chunks over its tensor group. */
double cost_link_bytes(const struct cost_job *j);

/* Per-stage terms of one micro-batch (forward compute, tensor comm) and per step after the
 * last backward (exposed data-parallel comm, optimizer). `last`/`first`: stage position. */
struct cost_stage_terms {
    double fwd, bwd;         /* compute per micro-batch */
    double tp_fwd, tp_bwd;   /* tensor-parallel all-reduces per micro-batch */
    double tp_fwd_lat, tp_bwd_lat; /* of which latency: paid once per all-reduce */
    double tp_fwd_slice_lat, tp_bwd_slice_lat; /* what one token slice pays in latency (its bytes
                                      are its tokens' share): a slice sums each sequence's rows
                                      apart, so the per-row sums' latency b times */
    double gather;           /* scatter-gather: the tensor group's all-gather of one received
                                micro-batch (activation or its gradient); 0 with tensor 1 */
    double gather_lat;       /* of which latency (paid once per message, also by a token slice) */
    double rs_exposed;       /* gradient reduce-scatter after the last backward */
    double ag_exposed;       /* parameter all-gather before the next forward can finish */
    double tie;              /* one shard of the tied embedding's gradient, first <-> last stage */
    double dp_exposed;       /* the stage's data-parallel total: ag + max(rs, tie) */
    double optimizer;        /* norm + AdamW over the rank's shard */
    double param_copies;     /* then, over the stage's parameters: a bf16 engine's copy
                                refreshed, a bf16 all-gather widened */
};
void cost_stage_terms(const struct cost_job *j, const struct cost_links *l,
                      const struct cost_stage *st, int first, int last,
                      const struct cost_link *tie, struct cost_stage_terms *out);

/* Scratch for cost_simulate, sized for `stages` stages and `micro_batches` micro-batches.
 * Reusable across calls of the same or smaller size. */
struct cost_sim {
    int cap_stages, cap_mb;     /* cap_mb: units (micro-batches x token slices) */
    double *buf;
    int *ibuf;
    int S;                      /* token slices of the simulation under way (>= 1) */
    double ovh;                 /* links.op_overhead_us in seconds */
    double *cw, *tw;            /* [S] each slice's share of a micro-batch's compute, tokens */
    int cap_slices;
    int *pin_first, *pin_count; /* links.pinned_cores: each rank's core and core count */
    double *pin_busy, *rate;    /* per core: running ranks; per stage: its ops' progress rate */
    int cap_ranks, cap_cores, cap_rate;
    double work;                /* ops simulated so far (2 x stages x units per schedule pass):
                                   what the planner's search budget counts */
    long runs;                  /* schedule passes so far */
};
int cost_sim_init(struct cost_sim *s, int stages, int micro_batches, herr *e);
void cost_sim_free(struct cost_sim *s);

/* A token slice [t0, t1)'s share of one micro-batch's forward compute: its tokens' share of
 * the matrix products plus its share of the causal attention's (query, key) pairs. */
double cost_slice_compute_share(const struct cost_job *j, int t0, int t1);

/* Predicts the step time of `n` stages by simulating the schedule (1F1B or GPipe, in
 * common/pipe_order.h's order with j->warmup_extra) with
 * per-stage op times and per-boundary transfers (a link carries one transfer at a time per
 * direction; a stage receiving from a neighbour all-gathers over its tensor group before the op;
 * links.send_buffers: a send holds its stage until it arrives, or waits only for a buffer). With
 * token slices (j->slices) the units are the slices of each micro-batch (TeraPipe: forwards in
 * order, backwards in reverse, 1F1B warming up slices - 1 more units), each costing its compute
 * share and carrying its tokens' share of the activations, a message latency each. The sim must
 * be sized for micro_batches x slices units.
 * With links.shared_cores > 0 the simulation is a processor-sharing one: at every moment the
 * running stages' ops progress at min(1, shared_cores / (data x tensor x running stages)); with
 * links.pinned_cores as well, each rank is on the core cpu_spread gives it (loads: its stage's
 * layers) and a stage progresses at 1 / (running ranks on its busiest core).
 * Fills `br` when non-NULL (one more simulation without transfers splits pp_comm from
 * bubble). `tie`: the embedding tie link between first and last stage (NULL when n == 1).
 * Returns the step time in seconds. */
double cost_simulate(const struct cost_job *j, const struct cost_links *l,
                     const struct cost_stage *st, int n, const struct cost_link *tie,
                     struct cost_sim *sim, struct cost_breakdown *br);

/* What one device of stage `s` (of `n`) holds with `layers` layers, in bytes (docs/planner.md,
 * "Memory"): its 1/t of the stage's parameters in weights and gradients (elem_bytes each), the
 * optimizer state sharded over data parallel (AdamW's fp32 moments, 8 bytes a parameter, and
 * with 16-bit weights the fp32 masters, 4 more), the activations of the micro-batches in flight
 * (common/pipe_order.h's pipe_slots of them, the runtime's rule, with j->warmup_extra; sbh(10 + 24/t + 5as/(ht)) x elem_bytes/2 bytes per layer each), and
 * the last stage's fp32 logits. */
/* A stage's device memory per GPU, part by part, as the runtime allocates it: the engine's stage
 * (noderuntime/engine/cuda/gpt_cuda.cu, alloc_device and slot_alloc; counted by
 * gpu_stage_device_bytes), the trainer's optimizer state (trainer.c, zero.c) and the pipeline's
 * activation buffers (pipeline.c). tests/gpu/memory_model.sh holds the engine's part against
 * gpu_stage_device_bytes. */
struct cost_memory {
    double params;         /* parameters per device */
    double weights_grads;  /* fp32 parameters and gradients, and the 16-bit copy of a bf16 engine */
    double optimizer;      /* AdamW's fp32 moments of the ZeRO-1 shard; fp32 masters of the shard
                              and the bf16 gather buffer when the replicas gather bf16 */
    double activations;    /* what a micro-batch in flight keeps (its layers, its input), x slots */
    double logits;         /* the last stage's logits and loss buffers, one set per slot */
    double scratch;        /* the engine's workspace and backward buffers, held once */
    double pipeline;       /* received activations (x slots), send rings, gradient buffers */
    double total;
    int slots;             /* micro-batches whose activations are held at once */
};
void cost_stage_memory_parts(const struct cost_job *j, int layers, int s, int n,
                             struct cost_memory *out);
double cost_stage_memory(const struct cost_job *j, int layers, int s, int n);

/* A link of `gbps` Gb/s with latency `lat_us`, shared by `flows` concurrent flows. */
struct cost_link cost_link_make(double gbps, double lat_us, double flows);

#endif
