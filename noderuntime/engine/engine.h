/* The engine seam: one interface for the trainer (pipeline schedules, ZeRO-1, the tied embedding,
 * checkpoints, data) with the CPU engine (gpt.h) and the CUDA engine (cuda/gpt_cuda.h) behind it.
 *
 * Where the state lives. Each engine keeps its buffers in its own memory (engine_mem, devmem.h):
 * host memory for the CPU engine, the GPU's for the CUDA engine. The parameters and gradients
 * (engine_params, engine_grads: the stage's flat fp32 buffers in the tensor table's layout) live
 * there for the whole run, and so do the trainer's optimizer state and its activations between
 * stages (allocated with devmem_alloc on engine_mem). The trainer never copies them to the host
 * during a step: it hands them to the communicators (comm_dev_*), and asks the engine for the
 * norm and AdamW over its shard (engine_sq_norm, engine_adamw). Only tokens and targets (host
 * arrays, from the data loader) go down, and the loss comes up once per step (engine_loss_take).
 * A checkpoint copies to the host when it is written and back when a run resumes.
 *
 * Every engine also keeps a host-side stage of the same shape (engine_host, a struct gpt_stage):
 * its tensor table, the tensor-parallel layout, and host buffers used to initialise, load and
 * save (engine_params_upload / _download move the parameters between them and the engine).
 * For the CPU engine the host stage is the engine, and both moves are nothing.
 *
 * Order. Work is queued on the engine's compute lane (devmem.h); calls return before the device
 * has done it. The forward hook runs before the engine queues work that reads a parameter range,
 * the backward hook right after it has queued the work that finishes a block's gradients, so a
 * hook that queues communication (comm_dev_*) orders it correctly. The tensor group's sum
 * (engine_set_tp_sum) gets buffers in engine memory, in that order too.
 *
 * The CPU engine is always there; with engine_spec.emulate_device its memory says it is a
 * device's (devmem_emulated), so the communicators stage it through host buffers as they do a
 * GPU's (CI runs that path on CPUs). The CUDA engines (fp32 and bf16) are linked only into the
 * CUDA build of holmes-node (`make cuda`); engine_available says whether this binary has one. */
#ifndef HOLMES_ENGINE_H
#define HOLMES_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "devmem.h"
#include "error.h"
#include "gpt.h"
#include "names.h"
#include "optimizer.h"

enum engine_kind { ENGINE_CPU = 0, ENGINE_CUDA = 1 };

struct engine_spec {
    enum engine_kind kind;
    enum dtype precision;     /* CUDA: fp32 or bf16 matrix products; CPU: fp32 only */
    int device;               /* CUDA device index */
    struct gpt_config model;
    int first, last;          /* layers [first, last) */
    int B, T, slots;          /* micro-batch shape, activation sets kept */
    int tp, tp_rank;          /* tensor-parallel group (1, 0: none) */
    int emulate_device;       /* CPU engine: memory staged as a device's (tests) */
    double timeout_s;         /* bound on a host wait for the device (0: none) */
    const char *choices_file; /* CUDA: where the rank's choices of algorithm are kept, so that a
                                 resumed run computes as the first did (NULL: not kept) */
    int forward_only;         /* forwards only (evaluation): the CPU engine keeps no gradients
                                 and shares the blocks' activations (gpt_stage_create_forward_only;
                                 engine_grads NULL, backward refused); the CUDA engines keep their
                                 training layout */
};

struct engine;

/* Where the engine's time goes (the worker's --profile-step): between engine_profile_begin and
 * engine_profile_end every operation of the engine is timed by part on the engine's own clock
 * (CUDA events on the compute lane; the host's clock for the CPU engine, whose work is done when
 * a call returns), and the caller marks work of its own that it queues on the compute lane
 * (engine_profile_enter / _leave). A part nested in another counts for the outermost. */
enum engine_part {
    ENGINE_PART_COMPUTE,   /* forward and backward: attention, matrix products, LayerNorm, the
                              classifier, the embeddings */
    ENGINE_PART_BF16_COPY, /* the bf16 copy of parameters written behind the engine's back
                              refreshed (engine_params_changed) */
    ENGINE_PART_ZEROING,   /* gradients cleared */
    ENGINE_PART_NORM,      /* sums of squares (engine_sq_norm, with its wait) */
    ENGINE_PART_ADAMW,     /* engine_adamw */
    ENGINE_PART_MASTERS,   /* the caller's: fp32 masters rounded into the parameters, gathered
                              bf16 parameters widened */
    ENGINE_PART_OTHER,     /* the rest: activation copies, tensor-parallel sums, the caller's
                              other marked work (the tied embedding's sums) */
    ENGINE_PARTS
};
struct engine_profile {
    double total_ms;             /* begin to end on the engine's clock */
    double ms[ENGINE_PARTS];     /* total_ms less their sum: the engine idle (waiting for the
                                    host, launch gaps) */
    uint64_t launches, syncs;    /* the engine's enqueued operations and host waits meanwhile
                                    (CUDA; 0 on the CPU) */
    uint64_t calls[ENGINE_PARTS]; /* the calls asked of the engine, by part, on every engine
                                    alike (engine.c counts them): forward and backward calls,
                                    gradient clears, norms, AdamW calls, bf16-copy refreshes
                                    (engine_params_changed), and the caller's marked stretches
                                    (engine_profile_enter, outermost only) */
    int lost;                    /* parts not timed (CUDA: the event pool ran out) */
};

/* The operations each engine provides (engine_cpu.c, cuda/engine_cuda.c); the wrappers below
 * say what each does. */
struct engine_ops {
    const char *name; /* "cpu", "cuda-fp32", "cuda-bf16" */
    int (*create)(struct engine *en, const struct engine_spec *s, herr *e);
    void (*destroy)(struct engine *en);
    int (*init_params)(struct engine *en, uint64_t seed, herr *e);
    int (*forward)(struct engine *en, int slot, int t0, int t1, const int *tokens,
                   const void *in_act, const int *targets, void *out_act);
    int (*backward)(struct engine *en, int slot, int t0, int t1, const void *dout, void *din,
                    float loss_scale);
    int (*zero_grads)(struct engine *en, herr *e);
    int (*loss_take)(struct engine *en, float *sum, herr *e);
    int (*sq_norm)(struct engine *en, const float *base, const size_t *lo, const size_t *hi,
                   int n, double *out, herr *e);
    int (*adamw)(struct engine *en, const struct adamw_config *o, const struct adamw_span *sp,
                 int n, float lr, long step, float grad_scale, herr *e);
    void (*params_changed)(struct engine *en, size_t lo, size_t hi);
    int (*params_upload)(struct engine *en, herr *e);
    int (*params_download)(struct engine *en, herr *e);
    /* the hooks in struct engine changed (an engine that runs them itself passes them on) */
    void (*hooks_changed)(struct engine *en);
    int (*profile_begin)(struct engine *en, herr *e);
    int (*profile_end)(struct engine *en, struct engine_profile *out, herr *e);
    void (*profile_enter)(struct engine *en, enum engine_part part);
    void (*profile_leave)(struct engine *en);
    const char *(*error)(const struct engine *en);
    /* device engines: the compute rate of GPUs 0..n-1 in TFLOPS (the slowest), measured with the
     * engine's own matrix product; NULL where the engine has none to measure */
    int (*probe_tflops)(int n, double *tflops, herr *e);
    /* device engines: the optimizer's rate on GPUs 0..n-1 in GB/s (the slowest), the engine's
     * own gradient norm and AdamW over a stage's parameters, counted at
     * OPTIMIZER_PROBE_BYTES_PER_PARAM bytes a parameter as optimizer_probe_gbps counts the CPU's;
     * NULL where the engine has none */
    int (*probe_optimizer_gbps)(int n, double *gbps, herr *e);
};

struct engine {
    const struct engine_ops *ops;
    struct gpt_stage *host;   /* the host-side stage (CPU: the engine itself) */
    void *impl;               /* the engine's own state */
    struct devmem *mem;       /* where params, grads and activations live */
    float *params, *grads;    /* [num_params] fp32, in mem */
    enum dtype act_dtype;     /* activations between stages: fp32, or bf16 (cuda-bf16) */
    int (*fwd_hook)(void *ctx, size_t lo, size_t hi);
    void *fwd_ctx;
    void (*bwd_hook)(void *ctx, int layer);
    void *bwd_ctx;
    int (*tp_sum)(void *ctx, float *buf, size_t n);
    void *tp_ctx;
    int profiling, marked;         /* between profile begin and end; caller's enters open */
    uint64_t calls[ENGINE_PARTS];  /* engine_profile.calls so far */
    char err[512];
};

/* The engine a command line names: "cpu" (fp32), "cuda-fp32", "cuda-bf16". 0, or -1 for any
 * other name (whether this binary has it: engine_available). */
int engine_by_name(const char *name, enum engine_kind *kind, enum dtype *precision);
/* 1 when this binary has the engine of `kind` for `precision`; 0 with the reason in `why`. */
int engine_available(enum engine_kind kind, enum dtype precision, char *why, size_t why_len);
/* The smallest total memory of GPUs 0..n-1, in bytes, where this binary has the CUDA engine
 * (read without creating a context). -1 with the reason otherwise (no CUDA engine here, no
 * device, fewer than n). */
int engine_gpu_memory(int n, double *bytes, herr *e);
/* The least peak memory bandwidth of GPUs 0..n-1, GB/s (memory clock and bus width, read
 * without creating a context), where this binary has the CUDA engine; -1 with the reason. */
int engine_gpu_memory_gbps(int n, double *gbps, herr *e);
/* What a GPU worker tells the planner, where this binary has the CUDA engine, measured in a child
 * process so that this one creates no CUDA context, given up after timeout_s: the compute rate
 * (TFLOPS a GPU, the slowest: the bf16 engine's own matrix product, cuBLASLt, 4096^3, the median
 * of 10), and the optimizer's memory rate (GB/s a GPU, the slowest; what the planner prices a
 * stage's optimizer step at: engine_ops.probe_optimizer_gbps), 0 with gbps_why where only that
 * part failed. -1 with the reason otherwise (no CUDA engine here, no device, the probe failed or
 * did not answer). */
struct engine_gpu_rates {
    double tflops, gbps;
    char gbps_why[sizeof(((herr *)0)->msg)];
};
int engine_gpu_probe(int n, double timeout_s, struct engine_gpu_rates *r, herr *e);
/* Creates the engine the spec names (parameters zero until engine_init_params or a load). */
int engine_create(struct engine **out, const struct engine_spec *s, herr *e);
void engine_free(struct engine *en);
const char *engine_name(const struct engine *en);
struct gpt_stage *engine_host(struct engine *en);
struct devmem *engine_mem(struct engine *en);
float *engine_params(struct engine *en);
float *engine_grads(struct engine *en);
size_t engine_num_params(const struct engine *en);
/* Bytes of one activation element between stages (4 for fp32, 2 for bf16). */
size_t engine_act_bytes(const struct engine *en);
enum dtype engine_act_dtype(const struct engine *en);

/* gpt_stage_init_params's values on every engine (same seed, same numbers), in engine memory. */
int engine_init_params(struct engine *en, uint64_t seed, herr *e);
/* As gpt_stage_forward_slice / gpt_stage_backward_slice, on activation buffers in engine memory
 * of engine_act_bytes per element ([B][t1 - t0][C]); tokens and targets are host arrays of the
 * whole micro-batch ([B*T], read at t0 = 0). The last stage adds the slice's share of the loss to
 * a sum in the engine (engine_loss_take). -1 with engine_error. An engine without token slices
 * refuses any range other than (0, T). */
int engine_forward(struct engine *en, int slot, int t0, int t1, const int *tokens,
                   const void *in_act, const int *targets, void *out_act);
int engine_backward(struct engine *en, int slot, int t0, int t1, const void *dout, void *din,
                    float loss_scale);
/* The next backward's gradients are as if engine_grads had been zeroed (an engine may write
 * instead of accumulating rather than clear the buffer). A step's first call. */
int engine_zero_grads(struct engine *en, herr *e);
/* The losses the last stage's forwards added since the last call, summed (one host wait). */
int engine_loss_take(struct engine *en, float *sum, herr *e);
/* Sum of squares of base[lo[i], hi[i]) over the n ranges (base: engine memory, e.g. the
 * gradients), in a fixed order (double accumulation): one host wait. */
int engine_sq_norm(struct engine *en, const float *base, const size_t *lo, const size_t *hi,
                   int n, double *out, herr *e);
/* AdamW (optimizer.h's adamw_update_at) over n spans (at most ENGINE_ADAMW_SPANS; empty ones
 * skipped): each span's p, g, m, v in engine memory, element 0 of each belonging to its parameter
 * lo. One pass: queued on the compute lane as one launch on a GPU. Where a span's p is
 * engine_params + lo the engine refreshes whatever it computes with; otherwise the caller calls
 * engine_params_changed once it has written the parameters. */
#define ENGINE_ADAMW_SPANS 48
int engine_adamw(struct engine *en, const struct adamw_config *o, const struct adamw_span *sp,
                 int n, float lr, long step, float grad_scale, herr *e);
/* engine_params [lo, hi) were written by someone else (a gather, a load), in the compute lane's
 * order: what the engine derives from them (a bf16 copy) is refreshed before it reads them. */
void engine_params_changed(struct engine *en, size_t lo, size_t hi);
/* The host stage's parameters -> engine_params (after an initialisation or a load into the host
 * stage), and back (before a checkpoint or the run's end), each with one host wait. */
int engine_params_upload(struct engine *en, herr *e);
int engine_params_download(struct engine *en, herr *e);
const char *engine_error(const struct engine *en);

/* As gpt_stage_set_forward_hook / _set_backward_hook / _set_tp_sum (see "Order" above: the
 * buffers the tensor group's sum gets are in engine memory). An engine that cannot report
 * per-block progress calls the forward hook once for all parameters before it reads any, and
 * never the backward hook (the trainer then reduces every bucket after the pipeline). */
void engine_set_forward_hook(struct engine *en, int (*fn)(void *ctx, size_t lo, size_t hi),
                             void *ctx);
void engine_set_backward_hook(struct engine *en, void (*fn)(void *ctx, int layer), void *ctx);
void engine_set_tp_sum(struct engine *en, int (*fn)(void *ctx, float *buf, size_t n), void *ctx);

/* Profiling (enum engine_part above): begin starts timing the engine's work by part; end waits
 * for the engine's work so far (one host wait) and fills `out`. Between them the caller's own
 * work on the compute lane from enter to leave counts as `part`; outside them enter and leave do
 * nothing. */
int engine_profile_begin(struct engine *en, herr *e);
int engine_profile_end(struct engine *en, struct engine_profile *out, herr *e);
void engine_profile_enter(struct engine *en, enum engine_part part);
void engine_profile_leave(struct engine *en);
/* "compute", "bf16 copy", "zeroing", "norm", "adamw", "masters", "other". */
const char *engine_part_name(int part);

/* For engines: records a message for engine_error and returns -1. */
int engine_fail(struct engine *en, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
