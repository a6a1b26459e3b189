/* The plan as both binaries speak it. The operator's planner decides a placement (struct plan,
 * operator/planner/) and turns it into this document; the coordinator sends it inside every
 * worker's assignment; the worker fills in where each rank listens (from the rendezvous) and
 * derives its communicators from it (noderuntime/train/rank_table.h). One type, one encoder,
 * one decoder: a field added here reaches both sides.
 *
 * JSON form (the planner's `--json` document is a superset, so it decodes too):
 *   {parallelism: {tensor, pipeline, data}, timeout_seconds, warmup_extra, cross_fabric_pacing,
 *    stages: [{layers: [first, last)}], token_slices: [0, b1, ..., T] (optional),
 *    workers: [{rank, stage, dp_rank, tp_rank, local_rank, name, fabric, host, port,
 *               nic: {ib_hca, gid_index, socket_ifname}}],        (one per rank, in rank order)
 *    groups: [{kind, stage, ranks, transport, nccl_net, gid_index, pacing}]}
 * Global rank = tp + tensor * (dp + data * stage). Groups of a kind the document leaves out are
 * derived (dp per stage and tensor rank, pp and embedding per replica and tensor rank, tp per
 * stage and replica, link per stage boundary, replica and tensor rank; all "socket"), so a
 * document written before link groups existed still decodes. A link group is the pipeline's
 * point-to-point link between stage s and s + 1 (ranks [rank at s, rank at s + 1], same dp and
 * tp; its `stage` is s): a rank is in one link group per neighbour stage. */
#ifndef HOLMES_PLAN_DOC_H
#define HOLMES_PLAN_DOC_H

#include <cjson/cJSON.h>

#include "error.h"
#include "names.h"
#include "pipe_order.h"
#include "trainingjob.h"

#define PLAN_DOC_MAX_WORLD 65536

/* The most floats in one of the workers' data-parallel buckets (noderuntime/train/zero.c: never
 * across a block, the tied embedding or another tensor outside the blocks; each bucket is one
 * reduce-scatter and one all-gather), which the planner prices as one collective each
 * (operator/planner/cost_model.c). 16 Mi floats (64 MB): a block is reported whole (its backward
 * hook), so smaller buckets overlap no more and pay a ring's latency each (at 1 Mi, GPT-2 1.5B's
 * 1,520 buckets on 8 replicas over InfiniBand, 3 us a hop: 64 ms a step, reduce-scatter and
 * all-gather; 103 buckets now); PyTorch's DDP buckets 25 MB, Megatron-LM's 40 Mi elements. */
#define PLAN_ZERO_BUCKET_FLOATS 16777216

/* Emulated link speed: 0 = unpaced. JSON {bytes_per_second, latency_us}. */
struct plan_pacing {
    double bytes_per_sec;
    double latency_s;
};

struct plan_doc_rank {
    char name[256];         /* the worker (pod) it runs in; "" when not given */
    int local_rank;         /* device index inside that worker */
    char host[256];         /* where it listens for peers: "" / 0 until the rendezvous */
    int port;
    char fabric[128];
    char ib_hca[256];       /* NCCL_IB_HCA, "" if none */
    int gid_index;          /* -1 if none */
    char socket_ifname[64];
};

struct plan_doc_group {
    enum group_kind kind;
    int stage;              /* dp and tp groups: their stage; else -1 */
    int n;
    int *members;           /* global ranks in communicator order */
    enum transport transport;
    char nccl_net[16];      /* "IB" or "Socket" */
    int gid_index;          /* -1 = unset */
    struct plan_pacing pacing; /* every link of the group (0 = unpaced) */
};

struct plan_doc {
    int world, tensor, pipeline, data;
    double timeout_s;                /* bound on every communication wait (default 60) */
    struct plan_doc_rank *ranks;     /* [world] */
    int *stage_first, *stage_last;   /* [pipeline] layer ranges, or NULL when not given */
    int slices;                      /* TeraPipe token slices per micro-batch (0: none given) */
    int *slice_bounds;               /* [slices + 1]: slice k is tokens [b[k], b[k + 1]); b[0] 0 */
    int warmup_extra;                /* 1F1B: micro-batches of warm-up beyond the standard on
                                        every stage but the last (pipe_order.h; default 0) */
    int ngroups;
    int cap_groups;                  /* groups allocated (plan_doc_add_group doubles it) */
    struct plan_doc_group *groups;
    struct plan_pacing cross_fabric; /* links between ranks of different fabrics (0 = unpaced) */
};

static inline int plan_doc_stage_of(const struct plan_doc *d, int rank)
{
    return rank / (d->tensor * d->data);
}
static inline int plan_doc_dp_of(const struct plan_doc *d, int rank)
{
    return rank / d->tensor % d->data;
}
static inline int plan_doc_tp_of(const struct plan_doc *d, int rank) { return rank % d->tensor; }

/* An empty document of tensor x pipeline x data ranks (every rank's gid_index -1, no groups, no
 * stages); the caller fills it. 0, or -1 with the rule broken in `e`. */
int plan_doc_init(struct plan_doc *d, int tensor, int pipeline, int data, herr *e);
/* Appends a group of n ranks (members zeroed, transport socket): 0, or -1 out of memory. */
int plan_doc_add_group(struct plan_doc *d, enum group_kind kind, int stage, int n, herr *e);
/* Derives the groups of each kind that has none, then checks that every rank is in exactly one
 * group of each kind (link groups: one per neighbour stage, so 0, 1 or 2), at its place. 0, or
 * -1 naming the group and rank. */
int plan_doc_complete(struct plan_doc *d, herr *e);

/* A deep copy of src into *dst (free it with plan_doc_free): 0, or -1 out of memory. */
int plan_doc_copy(struct plan_doc *dst, const struct plan_doc *src, herr *e);
/* Decodes (and completes) a document; `where` names it in errors. Endpoints may be absent. */
int plan_doc_from_json(const cJSON *j, const char *where, struct plan_doc *d, herr *e);
/* Encodes it; NULL on out-of-memory. */
cJSON *plan_doc_to_json(const struct plan_doc *d);
/* Every rank has a host and a port. */
int plan_doc_check_endpoints(const struct plan_doc *d, const char *where, herr *e);
void plan_doc_free(struct plan_doc *d);

/* The token slices' lengths, "72, 32, 24" (bounds[0..slices]), into buf; ", ..." ends a list
 * that does not fit. For logs and reports. */
void plan_doc_slice_lengths(const int *bounds, int slices, char *buf, size_t cap);

/* Index of the group of `kind` that holds `rank`, or -1. (For links, which a rank may be in
 * twice, use plan_doc_find_link.) */
int plan_doc_find_group(const struct plan_doc *d, enum group_kind kind, int rank);
/* Index of the link group between `rank` and the same dp and tp rank of the next stage (dir +1)
 * or of the previous one (dir -1), or -1 when there is none (the last or first stage). */
int plan_doc_find_link(const struct plan_doc *d, int rank, int dir);

#define PLAN_MAX_LOCAL_RANKS 16 /* ranks of one worker: one per GPU (spec.gpusPerWorker <= 16) */

/* What the coordinator tells one worker: its ranks, the first one's place, the plan, and the
 * resolved spec. */
struct plan_assignment {
    char job[256];
    int rank, stage, stages, dp_rank, tp_rank; /* the worker's first rank (stages 0: one) */
    int nranks;                                /* a rank per GPU, one for a CPU worker (0: one) */
    int ranks[PLAN_MAX_LOCAL_RANKS];           /* global ranks by local index; ranks[0] == rank */
    char fabric[128];
    /* The ranks whose endpoints the worker needs in start.peers (a plan that knows who talks to
     * whom keeps the start small); NULL: every rank. Owned. */
    int npeers;
    int *peers;
    int has_plan;
    struct plan_doc plan;
    /* The resolved TrainingJob spec the plan was made for, by its own encoder and decoder
     * (tj_spec_to_json, tj_spec_from_json: without spec.template); owned when has_spec. */
    int has_spec;
    struct tj_spec spec;
};

/* Encodes it (the plan when has_plan, the spec when has_spec); NULL on out-of-memory. */
cJSON *plan_assignment_to_json(const struct plan_assignment *a);
/* Decodes the coordinator's "assignment": rank is required, the rest optional (a simulated job
 * sends no plan and no spec). The spec is decoded and validated as a TrainingJob's
 * (tj_spec_from_json, fields named "assignment.spec.*"). 0, or -1 naming the field. */
int plan_assignment_from_json(const cJSON *j, struct plan_assignment *a, herr *e);
void plan_assignment_free(struct plan_assignment *a);

#endif
