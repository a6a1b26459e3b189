/* The Holmes planner: places pipeline stages and data-parallel replicas on workers so that every
 * data- and tensor-parallel group stays inside one network fabric, partitions the layers with
 * the cost model, and picks the transport (ib | roce | socket) of every communicator.
 *
 * Pure: no I/O. Inputs are the workers (with their NIC summaries), the job and the link
 * constants; the output is a `struct plan` that the coordinator turns into assignments and
 * `plan_to_json` turns into the `--json` document described in docs/planner.md.
 *
 * Ranks: a worker with G GPUs holds G ranks (a CPU worker, gpus 0, holds one). Ranks of one
 * worker are numbered in worker order; a tensor-parallel group is `tensor` consecutive ranks of
 * one worker. Global rank = tp + tensor * (dp + data * stage), as in Megatron-LM. */
#ifndef HOLMES_PLANNER_H
#define HOLMES_PLANNER_H

#include <cjson/cJSON.h>

#include "cost_model.h"
#include "error.h"
#include "nic_summary.h"
#include "plan_doc.h"
#include "trainingjob.h"

#define PLAN_NAME_MAX 64
#define PLAN_TOP_MAX 5   /* candidates kept by the auto search */
/* The memory bandwidth of a CPU device that did not say its own, GB/s: about what one core's
 * gradient norm and AdamW move (holmes-node's start-up probe, one thread: 5.6 on the 2-core
 * development VM, 2026-11-27). `holmes-operator local`'s workers declare it, as they declare
 * their compute; GPUs that say nothing take links.memory_gbps. */
#define PLAN_CPU_MEMORY_GBPS 5.0



struct plan_worker {
    char name[PLAN_NAME_MAX];
    char node[PLAN_NAME_MAX]; /* the Kubernetes node; "" = its own node */
    int gpus;                 /* 0 = CPU worker, one device */
    double tflops;            /* per device, declared or measured */
    double memory_gb;         /* per device; 0 = unknown (not checked) */
    double memory_gbps;       /* per device: the memory bandwidth its optimizer step moves
                                 data at, GB/s (measured or declared); 0 = not said: the
                                 links' memory_gbps */
    int nics;                 /* NICs that share nic.gbps, each serving an equal run of
                                 consecutive devices (one per GPU: a rail each); 0 = the HCAs
                                 listed in nic.ib_hca (RDMA), else 1 (plan_worker_nics) */
    struct nic_summary nic;
};

/* The NICs of worker w (its `nics`, or what its NIC report lists), at least 1. */
int plan_worker_nics(const struct plan_worker *w);
/* Which of them device `dev` of w sends and receives through: 0 .. nics - 1. */
int plan_worker_nic_of(const struct plan_worker *w, int dev);

struct plan_job {
    struct tj_model model; /* the model's shape (common/trainingjob.h; preset unused) */
    int tensor;           /* >= 1; tensor groups never leave a worker */
    int pipeline;         /* 0 = auto */
    int data;             /* 0 = auto */
    int micro_batches;    /* per data-parallel replica per step */
    int micro_batch_size; /* sequences per micro-batch */
    enum dtype precision;
    enum dtype pipeline_dtype; /* between stages: DTYPE_BF16 halves fp32 activations */
    enum dtype param_gather_dtype; /* all-gather: DTYPE_BF16 halves fp32 parameters */
    enum schedule schedule;
    enum policy policy;
    const int *pinned;    /* layers per stage, or NULL for the cost model's partition */
    int n_pinned;
    int token_slices;     /* TeraPipe: 1 none, N cut evenly, TJ_AUTO the planner's choice */
    int warmup_pinned;    /* 1: the 1F1B warm-up depth is `warmup` (what-if); 0: the holmes
                             search chooses it */
    int warmup;
    int emulated;         /* 1: the workers' NICs are emulated (spec.emulation): a CPU rank's
                             links are shaped as its NIC's class, and priced and labelled so;
                             0: a CPU rank (gpus 0) sends over holmes' TCP transport whatever its
                             NIC (the CPU path has no RDMA), and is priced and labelled so */
};

/* Sensible defaults: tensor 1, pipeline/data auto, 1F1B, bf16, holmes, no pin. */
void plan_job_init(struct plan_job *j);

/* Where a communicator's traffic goes and how NCCL / the TCP backend is told so. */
struct plan_transport_spec {
    enum transport kind;
    const char *nccl_net;  /* ncclConfig_t.netName: "IB" or "Socket" */
    int gid_index;         /* RoCE: NCCL_IB_GID_INDEX (3 unless reported); else -1 */
    int intra_node;        /* every member on one node (NVLink / shared memory inside) */
    char reason[192];      /* why socket, when it is; "" otherwise */
};

struct plan_rank {
    int worker;           /* index into plan.workers */
    int local;            /* device index inside the worker */
    int stage, dp_rank, tp_rank;
};

struct plan_stage {
    int first_layer, last_layer;  /* [first, last) */
    char fabric[128];             /* the fabric id, or "mixed" */
    int mixed;                    /* members span fabrics */
    double tflops;                /* slowest device of the stage */
    double memory_gbps;           /* the least memory bandwidth of its devices (its optimizer's
                                     price) */
    double fwd_s, bwd_s;          /* predicted compute per micro-batch */
    double dp_s;                  /* predicted exposed data-parallel time per step (all-gather,
                                     reduce-scatter, embedding tie: cost_stage_terms) */
    double optimizer_s;           /* predicted optimizer step (norm + AdamW) on a rank's shard */
    double memory_gb;             /* predicted peak per device (see cost_stage_memory) */
    struct cost_memory memory;    /* the same, part by part, in bytes */
    double link_s;                /* one micro-batch to the next stage: the slowest of the
                                     boundary's links carrying its 1/tensor share (latency
                                     included); 0 on the last stage */
    double gather_s;              /* the tensor group's all-gather of a received micro-batch */
};

struct plan_group {
    enum group_kind kind;
    int stage;                    /* dp, tp: its stage; link: the sending stage (s -> s + 1);
                                     -1 for pp and embedding groups */
    int n;
    int *members;                 /* global ranks, in communicator order */
    struct plan_transport_spec transport;
    double nic_share;             /* link and embedding groups: the share of its slower end's
                                     NIC Gb/s the cost model gave this link (1 / (NICs x links
                                     through that NIC at once)); 1 inside a node; 0 otherwise */
    double gbps;                  /* link and embedding groups: the Gb/s the cost model priced
                                     this link at (efficiency, TCP and gateway caps applied) */
};

/* One point of the auto search. */
struct plan_candidate {
    int pipeline, data, micro_batches, micro_batch_size;
    double step_s, tokens_per_s;
};

struct plan {
    enum policy policy;
    int emulated;                 /* plan_job.emulated */
    int tensor, pipeline, data, micro_batches, micro_batch_size;
    enum schedule schedule;
    int warmup_extra;             /* 1F1B: micro-batches of warm-up beyond the standard on every
                                     stage but the last (common/pipe_order.h), chosen by the
                                     holmes search when it shortens the step */
    int n_workers;
    struct plan_worker *workers;  /* a copy of the input workers */
    int n_ranks;
    struct plan_rank *ranks;      /* indexed by global rank */
    int n_stages;
    struct plan_stage *stages;
    int n_groups;
    struct plan_group *groups;
    double step_s;                /* predicted seconds per step (with the token slicing) */
    int slices;                   /* TeraPipe token slices per micro-batch (0: none) */
    int *slice_bounds;            /* [slices + 1] token bounds, or NULL */
    int slices_auto;              /* chosen by the planner (tokenSlices: auto) */
    int auto_rejected_slices;     /* auto: the slicing found did not pay (0: none tried) */
    double unsliced_step_s;       /* the same plan without token slices */
    double sliced_step_s;         /* the slicing tried (kept or not); 0 when none */
    double tokens_per_s;
    struct cost_breakdown breakdown;
    double baseline_naive_s;      /* same job, naive policy (0 if not computed) */
    double baseline_ethernet_s;
    int n_socket_groups;          /* dp/tp groups that fall back to TCP */
    int homogeneous_possible;     /* a fabric-homogeneous placement exists */
    int n_top;
    struct plan_candidate top[PLAN_TOP_MAX]; /* best few of the auto search, best first */
    struct cost_links links;
    int link_group0;              /* groups[link_group0 + (s * data + d) * tensor + r]: the
                                     link of stage s -> s + 1, replica d, tensor rank r */
    long sim_runs;                /* schedule simulations the planning took (its search) */
    double sim_ops;               /* the ops they simulated: what the search budget counts */
};

/* Plans `job` on `workers` with `links`. Also computes the naive and ethernet baselines for
 * the same (pipeline, data, micro-batch) choice. Returns 0, or -1 with the rule broken in `e`
 * (tensor x pipeline x data != devices, more stages than layers, duplicate worker names, a
 * pin that does not fit, ...). Free with plan_free. */
int plan_make(const struct plan_worker *workers, int n_workers, const struct plan_job *job,
              const struct cost_links *links, struct plan *out, herr *e);
void plan_free(struct plan *p);

/* The schedule as the plan runs it, for people: "gpipe", "1f1b", or "1f1b, warm-up +4
 * micro-batches on stages 0-1 (micro-batches in flight per stage: 7, 6, 1)". */
void plan_schedule_text(const struct plan *p, char *buf, size_t cap);

/* Global rank of (stage, dp, tp). */
static inline int plan_rank_of(const struct plan *p, int stage, int dp, int tp)
{
    return tp + p->tensor * (dp + p->data * stage);
}

/* One stage boundary's links (stage s -> s + 1): how many go over each transport, the
 * boundary's transport (`mixed` when they differ), the slowest link's Gb/s and one micro-batch's
 * transfer on it, and why TCP (the first socket link's reason, "" when none). */
struct plan_boundary {
    int n[TRANSPORT_COUNT];
    int mixed;
    enum transport kind;
    int intra_node;               /* every link inside a node */
    double gbps, seconds;
    const char *reason;
};
void plan_boundary_links(const struct plan *p, int s, struct plan_boundary *out);

/* The --json document (see docs/planner.md). NULL on out-of-memory. */
cJSON *plan_to_json(const struct plan *p);
/* The plan document the workers get (common/plan_doc.h): layout, layers, each rank's NIC, each
 * group's transport; no endpoints or pacing yet. 0, or -1 with `e`. */
int plan_to_doc(const struct plan *p, struct plan_doc *d, herr *e);

/* Checks the input alone (names, NIC reports, numbers); plan_make calls it. */
int plan_check_input(const struct plan_worker *workers, int n_workers, const struct plan_job *job,
                     herr *e);

/* ---- lower-level entry points (tests, benchmarks) ---- */

/* Devices the workers provide (a CPU worker counts one). */
long plan_devices(const struct plan_worker *workers, int n_workers);

/* Predicted step time of an explicit placement: `unit_stage[u]` and `unit_dp[u]` for every
 * tensor block u (blocks numbered in worker order, `tensor` devices each), `layers[s]` per
 * stage. For tests that search exhaustively. Returns INFINITY when inconsistent. */
struct plan_eval;
struct plan_eval *plan_eval_new(const struct plan_worker *workers, int n_workers,
                                const struct plan_job *job, const struct cost_links *links,
                                herr *e);
void plan_eval_free(struct plan_eval *ev);
int plan_eval_units(const struct plan_eval *ev);
/* Fabric index of tensor block u (fabrics numbered in order of first appearance). */
int plan_eval_unit_fabric(const struct plan_eval *ev, int u);
/* Step time with `stage_units[s*data + d]` = the tensor block at (stage s, replica d). */
double plan_eval_step(struct plan_eval *ev, const int *stage_units, const int *layers);
/* Same, but each stage's blocks given as a set: they are put in the canonical replica order
 * (by fabric, class, Gb/s, TFLOPS, index) the holmes policy uses. `stage_units` is reordered. */
double plan_eval_step_canonical(struct plan_eval *ev, int *stage_units, const int *layers);
/* The 1F1B warm-up depth the next evaluations use (plan.warmup_extra; 0 when made). */
void plan_eval_set_warmup(struct plan_eval *ev, int warmup_extra);

#endif
