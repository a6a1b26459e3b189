/* The engine seam: one interface for the trainer (pipeline schedules, ZeRO-1, checkpoints, data)
 * with the CPU engine (gpt.h) and the CUDA engine (cuda/gpt_cuda.h) behind it.
 *
 * Every engine keeps a host-side stage of the same shape (`engine_host`, a struct gpt_stage): its
 * tensor table, its flat fp32 parameter and gradient buffers and the tensor-parallel layout. The
 * trainer reads and writes those host buffers (ZeRO shards, AdamW, checkpoints, the tied
 * embedding), and tells the engine when they change:
 *   - parameters written outside a forward (a checkpoint loaded, initFrom): engine_params_changed;
 *   - at every step's start (engine_zero_grads) parameters count as changed too: the optimizer
 *     wrote them, and the forward hook (the all-gather) completes them before the engine reads
 *     them, so the CUDA engine uploads them in the step's first forward;
 *   - gradients are read after the pipeline: engine_grads_fetch first (the CUDA engine downloads
 *     them; the CPU engine computes into the host buffer and has nothing to do).
 * Activations between stages are host fp32 buffers [B*T*C], as the pipeline runner sends them.
 *
 * The CPU engine is always there. The CUDA engines (fp32 and bf16) are linked only into the
 * CUDA build of holmes-node (`make cuda`); engine_available says whether this binary has one. */
#ifndef HOLMES_ENGINE_H
#define HOLMES_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gpt.h"
#include "names.h"

enum engine_kind { ENGINE_CPU = 0, ENGINE_CUDA = 1 };

struct engine_spec {
    enum engine_kind kind;
    enum dtype precision;     /* CUDA: fp32 or bf16 matrix products; CPU: fp32 only */
    int device;               /* CUDA device index */
    struct gpt_config model;
    int first, last;          /* layers [first, last) */
    int B, T, slots;          /* micro-batch shape, activation sets kept */
    int tp, tp_rank;          /* tensor-parallel group (1, 0: none) */
};

struct engine;

/* The operations each engine provides (engine_cpu.c, cuda/engine_cuda.c). */
struct engine_ops {
    const char *name; /* "cpu", "cuda-fp32", "cuda-bf16" */
    int (*create)(struct engine *en, const struct engine_spec *s, herr *e);
    void (*destroy)(struct engine *en);
    int (*init_params)(struct engine *en, uint64_t seed, herr *e);
    int (*forward)(struct engine *en, int slot, int t0, int t1, const int *tokens,
                   const float *in_act, const int *targets, float *out_act, float *loss);
    int (*backward)(struct engine *en, int slot, int t0, int t1, const float *dout, float *din,
                    float loss_scale);
    int (*zero_grads)(struct engine *en, herr *e);
    int (*grads_fetch)(struct engine *en, herr *e);
    void (*params_changed)(struct engine *en);
    /* the hooks in struct engine changed (an engine that runs them itself passes them on) */
    void (*hooks_changed)(struct engine *en);
    const char *(*error)(const struct engine *en);
};

struct engine {
    const struct engine_ops *ops;
    struct gpt_stage *host;   /* the host-side stage (CPU: the engine itself) */
    void *impl;               /* the engine's own state */
    int (*fwd_hook)(void *ctx, size_t lo, size_t hi);
    void *fwd_ctx;
    void (*bwd_hook)(void *ctx, int layer);
    void *bwd_ctx;
    int (*tp_sum)(void *ctx, float *buf, size_t n);
    void *tp_ctx;
    char err[512];
};

/* 1 when this binary has the engine of `kind` for `precision`; 0 with the reason in `why`. */
int engine_available(enum engine_kind kind, enum dtype precision, char *why, size_t why_len);
/* Creates the engine the spec names (parameters zero until engine_init_params or a load). */
int engine_create(struct engine **out, const struct engine_spec *s, herr *e);
void engine_free(struct engine *en);
const char *engine_name(const struct engine *en);
struct gpt_stage *engine_host(struct engine *en);

/* gpt_stage_init_params's values on every engine (same seed, same numbers). */
int engine_init_params(struct engine *en, uint64_t seed, herr *e);
/* As gpt_stage_forward_slice / gpt_stage_backward_slice (host buffers): tokens [t0, t1) of
 * the micro-batch in `slot`, (0, T) for all of it; -1 with engine_error. An engine without token
 * slices refuses any other range. */
int engine_forward(struct engine *en, int slot, int t0, int t1, const int *tokens,
                   const float *in_act, const int *targets, float *out_act, float *loss);
int engine_backward(struct engine *en, int slot, int t0, int t1, const float *dout, float *din,
                    float loss_scale);
int engine_zero_grads(struct engine *en, herr *e);
int engine_grads_fetch(struct engine *en, herr *e);
void engine_params_changed(struct engine *en);
const char *engine_error(const struct engine *en);

/* As gpt_stage_set_forward_hook / _set_backward_hook / _set_tp_sum. An engine that cannot report
 * per-block progress calls the forward hook once for all parameters before it reads any, and
 * never the backward hook (the trainer then reduces every bucket after the pipeline). */
void engine_set_forward_hook(struct engine *en, int (*fn)(void *ctx, size_t lo, size_t hi),
                             void *ctx);
void engine_set_backward_hook(struct engine *en, void (*fn)(void *ctx, int layer), void *ctx);
void engine_set_tp_sum(struct engine *en, int (*fn)(void *ctx, float *buf, size_t n), void *ctx);

/* For engines: records a message for engine_error and returns -1. */
int engine_fail(struct engine *en, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
