/* The distributed training loop of one worker: its pipeline stage of the GPT (gpt.h), the
 * pipeline schedule over micro-batches (pipeline.h), the tied-embedding gradient exchange between
 * first and last stage, the ZeRO-1 distributed optimizer over the data-parallel replicas (zero.h)
 * with global-norm clipping across data and pipeline ranks, and checkpoints (every N steps, keep
 * K, resume from the latest) so an in-place restart continues where it stopped.
 *
 * Ranks, peers and transports come from a rank table (rank_table.h): from a file or the
 * environment today, from the coordinator later. The caller sees progress through hooks and can
 * ask for a stop; every rank stops at the same step. */
#ifndef HOLMES_TRAINER_H
#define HOLMES_TRAINER_H

#include <stdint.h>

#include "engine.h"
#include "error.h"
#include "gpt.h"
#include "optimizer.h"
#include "pipeline.h"
#include "rank_table.h"

/* Training data with random access: micro-batch k (0, 1, ... over the whole run) of
 * data-parallel replica `replica` of `replicas`; fills tokens and targets [B*T]. The global batch
 * of a step is micro-batches [step*M, step*M + M) of every replica. */
struct trainer_data {
    void *ctx;
    int (*batch)(void *ctx, uint64_t k, int replica, int replicas, int *tokens, int *targets,
                 herr *e);
    /* Held-out data for evaluation (trainer_config.eval_*), the same shape: micro-batch k of
     * replica `replica` in one evaluation, global micro-batch k * replicas + replica (below
     * eval_batches; the same at every evaluation). NULL: none. */
    void *eval_ctx;
    int (*eval_batch)(void *ctx, uint64_t k, int replica, int replicas, int *tokens,
                      int *targets, herr *e);
};

struct trainer_config {
    struct gpt_config model;
    enum engine_kind engine;     /* ENGINE_CPU (default) or ENGINE_CUDA (engine.h) */
    enum dtype precision;        /* the engine's matrix products: fp32 (default), bf16 (CUDA) */
    int device;                  /* CUDA device of this rank */
    int emulate_device;          /* CPU engine: its memory staged as a device's by the
                                    communicators, as a GPU rank's is (tests) */
    int B, T;                    /* sequences per micro-batch, tokens per sequence */
    int micro_batches;           /* per replica per step */
    int token_slices;            /* TeraPipe: slices per micro-batch (0 or 1: none) */
    const int *slice_bounds;     /* [token_slices + 1]: slice k is tokens [b[k], b[k + 1]) of T */
    long steps;                  /* total steps of the run (resume continues up to it) */
    enum schedule schedule;
    enum dtype pipe_wire;    /* element type between pipeline stages */
    enum dtype param_wire;   /* parameters all-gathered and computed with (bf16: rounded
                                    from fp32 masters the optimizer updates) */
    struct adamw_config adamw;
    struct lr_schedule lr;
    float grad_clip;             /* global-norm clip; <= 0 disables */
    int max_nonfinite;           /* a step whose loss or global gradient norm is not finite is
                                    skipped (no parameter or moment changes; its data is not
                                    reused); this many in a row are skipped, the next one fails
                                    the run (HERR_CONFIG: a resume would diverge again) */
    uint64_t seed;               /* parameter init (and the data order) */
    const char *init_from;       /* NULL = random init from seed; else an llm.c GPT-2 checkpoint
                                    of the model's exact shape: every stage loads its own layers
                                    (and the embeddings, final LayerNorm and tied head it holds).
                                    A resume from checkpoint_dir takes precedence. */
    const char *init_from_name;  /* how the caller names that setting in errors
                                    ("spec.training.initFrom", "--init-from"); NULL: "init_from" */
    size_t bucket_floats;        /* ZeRO bucket size (0 = default) */
    long profile_step;           /* this step (1-based: the first is 1) is timed by part on the
                                    engine (engine.h's engine_profile: CUDA events on a GPU) and
                                    reported (trainer_report.profiled); 0: none. The step ends
                                    with a wait for the engine. */
    int eval_every;              /* evaluate after every N steps (0: only after the last) ... */
    int eval_batches;            /* ... on this many micro-batches in all, shared among the
                                    replicas; 0: no evaluation (needs trainer_data.eval_batch) */
    const char *checkpoint_dir;  /* NULL = no checkpoints */
    int checkpoint_every;        /* steps between checkpoints (0 = only at the end / on stop) */
    int checkpoint_keep;         /* newest checkpoints kept (>= 1) */
    const char *listen_host;     /* bind address (NULL = all interfaces) */
    struct tcp_listener *listener; /* already listening (tests); NULL = listen on the rank
                                    * table's port for this rank */
};

/* Defaults: AdamW (0.9, 0.95, 1e-8, 0.1), lr 3e-4 constant, clip 1.0, gpipe off (1f1b),
 * keep 2 checkpoints. Model, B, T, micro_batches and steps must still be set. */
void trainer_config_defaults(struct trainer_config *c);

struct trainer_report {
    long step;                 /* 1-based: steps done */
    float loss;                /* mean over the global batch */
    float lr;
    float grad_norm;           /* before clipping */
    double tokens_per_s;       /* global batch tokens / step time */
    double step_s;             /* whole step */
    double pipeline_s;         /* forward/backward incl. activation exchange, without param_sync_s */
    double pipe_wait_s;        /* of pipeline_s: blocked waiting for the neighbour stages'
                                  activations or gradients (bubble, with their transfer) */
    double pipe_send_s;        /* of pipeline_s: sending activations or gradients */
    double grad_sync_s;        /* tied-embedding exchange + waiting for reduce-scatters */
    double optimizer_s;        /* norm, clipping, AdamW on the shard */
    double param_sync_s;       /* waiting in this step's forward for the parameters the previous
                                  step's all-gather brings (it runs beside the forward) */
    double dp_link_bytes_per_s; /* this rank's reduce-scatter bytes sent / grad_sync_s */
    int stage, replica;
    int buckets;                /* ZeRO gradient buckets of this stage */
    int buckets_overlapped;     /* of which reduce-scatter started during backward */
    /* the engine's memory this step (devmem.h; 0 for host memory): host waits for the device,
     * bytes copied host -> device and device -> host (the communicators' staging included) */
    uint64_t host_syncs, h2d_bytes, d2h_bytes;
    /* trainer_config.profile_step: this step's engine time by part (forward and backward, the
     * bf16 copy, zeroing, the norm, AdamW, the masters' rounding, other, and what is left: idle) */
    int profiled;
    struct engine_profile profile;
    /* an evaluation after this step: the mean loss over the eval_batches micro-batches of
     * held-out data, and its seconds (not in step_s) */
    int evaluated;
    float eval_loss;
    double eval_s;
    /* the step's loss or global gradient norm was not finite (NaN or infinite): it was skipped,
     * no parameter or optimizer moment changed (trainer_config.max_nonfinite); the count of such
     * steps in a row, this one included */
    int skipped;
    int nonfinite_run;
};

struct trainer_hooks {
    void *ctx;
    /* After every step, on every rank. A non-zero return aborts the run with an error. */
    int (*on_step)(void *ctx, const struct trainer_report *r);
    /* Polled once per step; non-zero on any rank stops every rank after that step (after a
     * checkpoint). */
    int (*should_stop)(void *ctx);
    /* At the end, with this rank's stage (e.g. to compare parameters); may be NULL. */
    void (*on_end)(void *ctx, struct gpt_stage *stage, long steps_done);
    /* Something the user must hear of that is not a failure (reason: CamelCase, e.g.
     * "CheckpointFallback", "NonFiniteStep"); called on rank 0 only. May be NULL. */
    void (*on_notice)(void *ctx, const char *reason, const char *message);
    /* Tests only (NULL otherwise): after the step's gradients are final on this rank (its
     * shards reduce-scattered), before the norm and the update; params and grads are the
     * stage's buffers of n floats in engine memory. A fault injected here (a NaN) is what a
     * diverging step makes. */
    void (*grads_final)(void *ctx, long step, float *params, float *grads, size_t n);
};

/* Layers [first, last) of stage s: the rank table's split, else an even split (remainder to the
 * first stages). */
void trainer_stage_layers(const struct plan_doc *rt, int layers, int s, int *first, int *last);

/* Runs (or resumes) training as global rank `rank`. Returns 0 when the last step is done or a stop
 * was agreed; -1 with the reason (naming the peer on communication errors). */
int trainer_run(const struct trainer_config *c, const struct plan_doc *rt, int rank,
                const struct trainer_data *data, const struct trainer_hooks *hooks, herr *e);

#endif
