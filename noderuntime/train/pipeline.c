#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "clock.h"

#define TAG_ACT 1u
#define TAG_GRAD 2u

/* 1F1B's warm-up forwards (units) on a stage. */
static long warm_units(int stage, int stages, int slices, long units)
{
    long w = (long)(stages - stage - 1) + (slices - 1);
    return w < units ? w : units;
}

int pipe_slots_needed(enum schedule s, int stage, int stages, int micro_batches, int slices)
{
    if (s == SCHED_GPIPE)
        return micro_batches;
    int S = slices > 1 ? slices : 1;
    /* the forward of unit f = (m + slots) S reuses m's slot: m's last backward (unit m S + S - 1)
     * is done by then, as 1F1B has done f - warm backwards */
    long n = (warm_units(stage, stages, S, (long)micro_batches * S) + 2L * S - 1) / S;
    return n < micro_batches ? (int)n : micro_batches;
}

struct pipe_runner {
    struct pipe_config cfg;
    struct pipe_stage_ops ops;
    int slots;
    float **in;    /* [slots] received activations, kept until the backward of their micro-batch */
    float *out;    /* activation to send */
    float *dout;   /* received gradient */
    float *din;    /* gradient to send */
    uint16_t *wire; /* DTYPE_BF16: one activation as sent or received */
    float loss_sum;
    int S;          /* slices per micro-batch (>= 1) */
    int *bounds;    /* [S + 1] */
    double wait_s, send_s; /* this step: blocked receiving from, and sending to, the neighbours */
};

void pipe_runner_free(struct pipe_runner *p)
{
    if (!p)
        return;
    for (int i = 0; p->in && i < p->slots; i++)
        free(p->in[i]);
    free(p->in);
    free(p->out);
    free(p->dout);
    free(p->din);
    free(p->wire);
    free(p->bounds);
    free(p);
}

int pipe_runner_create(struct pipe_runner **out, const struct pipe_config *cfg,
                       const struct pipe_stage_ops *ops, herr *e)
{
    *out = NULL;
    if (cfg->stages < 1 || cfg->stage < 0 || cfg->stage >= cfg->stages)
        return herr_set(e, "pipeline stage %d is outside 0..%d", cfg->stage, cfg->stages - 1);
    if (cfg->micro_batches < 1)
        return herr_set(e, "pipeline micro-batches must be >= 1, got %d", cfg->micro_batches);
    if (cfg->stages > 1 && (!cfg->comm || comm_size(cfg->comm) != cfg->stages ||
                            comm_rank(cfg->comm) != cfg->stage))
        return herr_set(e, "pipeline communicator does not match stage %d of %d", cfg->stage,
                        cfg->stages);
    int S = cfg->slices > 1 ? cfg->slices : 1;
    if (S > 1 && !cfg->bounds)
        return herr_set(e, "pipeline: %d token slices without their bounds", S);
    for (int k = 0; S > 1 && k < S; k++)
        if (cfg->bounds[k] >= cfg->bounds[k + 1] || (k == 0 && cfg->bounds[0] != 0))
            return herr_set(e, "pipeline: token slice %d [%d, %d) is empty or out of order", k,
                            cfg->bounds[k], cfg->bounds[k + 1]);
    struct pipe_runner *p = calloc(1, sizeof *p);
    if (!p)
        return herr_set(e, "out of memory for the pipeline");
    p->cfg = *cfg;
    p->ops = *ops;
    p->S = S;
    p->bounds = malloc(((size_t)S + 1) * sizeof *p->bounds);
    if (!p->bounds) {
        free(p);
        return herr_set(e, "out of memory for the pipeline");
    }
    p->bounds[0] = 0;
    p->bounds[1] = 1;
    for (int k = 0; S > 1 && k <= S; k++)
        p->bounds[k] = cfg->bounds[k];
    p->cfg.bounds = p->bounds;
    p->slots = pipe_slots_needed(cfg->schedule, cfg->stage, cfg->stages, cfg->micro_batches, S);
    size_t bytes = ops->act_count * sizeof(float);
    int first = cfg->stage == 0, last = cfg->stage == cfg->stages - 1;
    int ok = 1;
    if (!first) {
        p->in = calloc((size_t)p->slots, sizeof *p->in);
        ok = p->in != NULL;
        for (int i = 0; ok && i < p->slots; i++)
            ok = (p->in[i] = malloc(bytes ? bytes : 1)) != NULL;
        ok = ok && (p->din = malloc(bytes ? bytes : 1)) != NULL;
    }
    if (ok && !last) {
        ok = (p->out = malloc(bytes ? bytes : 1)) != NULL;
        ok = ok && (p->dout = malloc(bytes ? bytes : 1)) != NULL;
    }
    if (ok && cfg->wire == DTYPE_BF16 && cfg->stages > 1)
        ok = (p->wire = malloc(ops->act_count ? ops->act_count * sizeof *p->wire : 1)) != NULL;
    if (!ok) {
        pipe_runner_free(p);
        return herr_set(e, "out of memory for %d pipeline activation slots of %zu bytes", p->slots,
                        bytes);
    }
    *out = p;
    return 0;
}

/* Floats of slice k's activation (the whole micro-batch's without slices). */
static size_t unit_count(const struct pipe_runner *p, int k)
{
    if (p->S == 1)
        return p->ops.act_count;
    size_t T = (size_t)p->bounds[p->S];
    return p->ops.act_count / T * (size_t)(p->bounds[k + 1] - p->bounds[k]);
}

/* One activation (or its gradient) of slice k to / from the neighbour stage in the configured
 * wire format. */
static int wire_send_raw(struct pipe_runner *p, int k, int peer, uint32_t tag, const float *x,
                         herr *e);

/* wire_send, timed (send_s). */
static int wire_send(struct pipe_runner *p, int k, int peer, uint32_t tag, const float *x, herr *e)
{
    double t0 = clock_mono_s();
    int rc = wire_send_raw(p, k, peer, tag, x, e);
    p->send_s += clock_mono_s() - t0;
    return rc;
}

static int wire_send_raw(struct pipe_runner *p, int k, int peer, uint32_t tag, const float *x,
                         herr *e)
{
    size_t n = unit_count(p, k);
    if (p->cfg.wire != DTYPE_BF16)
        return comm_send(p->cfg.comm, peer, tag, x, n * sizeof *x, e);
    bf16_pack(p->wire, x, n);
    return comm_send(p->cfg.comm, peer, tag, p->wire, n * sizeof *p->wire, e);
}

static int wire_recv_raw(struct pipe_runner *p, int k, int peer, uint32_t tag, float *x, herr *e);

/* wire_recv, timed (wait_s: the neighbour's work not done yet, and the message's transfer). */
static int wire_recv(struct pipe_runner *p, int k, int peer, uint32_t tag, float *x, herr *e)
{
    double t0 = clock_mono_s();
    int rc = wire_recv_raw(p, k, peer, tag, x, e);
    p->wait_s += clock_mono_s() - t0;
    return rc;
}

static int wire_recv_raw(struct pipe_runner *p, int k, int peer, uint32_t tag, float *x, herr *e)
{
    size_t n = unit_count(p, k);
    if (p->cfg.wire != DTYPE_BF16)
        return comm_recv(p->cfg.comm, peer, tag, x, n * sizeof *x, e);
    if (comm_recv(p->cfg.comm, peer, tag, p->wire, n * sizeof *p->wire, e) != 0)
        return -1;
    bf16_unpack(x, p->wire, n);
    return 0;
}

/* Unit u of the forward order: micro-batch u / S, slice u % S. */
static void forward_unit(const struct pipe_runner *p, long u, int *mb, int *k)
{
    *mb = (int)(u / p->S);
    *k = (int)(u % p->S);
}

/* Unit u of the backward order: micro-batch u / S, slices in reverse. */
static void backward_unit(const struct pipe_runner *p, long u, int *mb, int *k)
{
    *mb = (int)(u / p->S);
    *k = p->S - 1 - (int)(u % p->S);
}

static int do_forward(struct pipe_runner *p, long u, herr *e)
{
    int mb, k;
    forward_unit(p, u, &mb, &k);
    int s = p->cfg.stage, slot = mb % p->slots;
    int first = s == 0, last = s == p->cfg.stages - 1;
    if (!first && wire_recv(p, k, s - 1, TAG_ACT, p->in[slot], e) != 0)
        return herr_wrap(e, "stage %d: receiving activations of micro-batch %d%s", s, mb,
                         p->S > 1 ? ", a token slice" : "");
    float loss = 0;
    if (p->ops.forward(p->ops.ctx, mb, slot, k, first ? NULL : p->in[slot], last ? NULL : p->out,
                       &loss, e) != 0)
        return herr_wrap(e, "stage %d: forward of micro-batch %d", s, mb);
    if (last)
        p->loss_sum += loss;
    else if (wire_send(p, k, s + 1, TAG_ACT, p->out, e) != 0)
        return herr_wrap(e, "stage %d: sending activations of micro-batch %d", s, mb);
    return 0;
}

static int do_backward(struct pipe_runner *p, long u, herr *e)
{
    int mb, k;
    backward_unit(p, u, &mb, &k);
    int s = p->cfg.stage, slot = mb % p->slots;
    int first = s == 0, last = s == p->cfg.stages - 1;
    if (!last && wire_recv(p, k, s + 1, TAG_GRAD, p->dout, e) != 0)
        return herr_wrap(e, "stage %d: receiving gradients of micro-batch %d", s, mb);
    if (p->ops.backward(p->ops.ctx, mb, slot, k, last ? NULL : p->dout, first ? NULL : p->din,
                        e) != 0)
        return herr_wrap(e, "stage %d: backward of micro-batch %d", s, mb);
    if (!first && wire_send(p, k, s - 1, TAG_GRAD, p->din, e) != 0)
        return herr_wrap(e, "stage %d: sending gradients of micro-batch %d", s, mb);
    return 0;
}

int pipe_run(struct pipe_runner *p, float *loss_sum, herr *e)
{
    long U = (long)p->cfg.micro_batches * p->S;
    p->loss_sum = 0;
    p->wait_s = p->send_s = 0;
    if (p->cfg.schedule == SCHED_GPIPE) {
        for (long u = 0; u < U; u++)
            if (do_forward(p, u, e) != 0)
                return -1;
        for (long u = 0; u < U; u++)
            if (do_backward(p, u, e) != 0)
                return -1;
    } else {
        long warm = warm_units(p->cfg.stage, p->cfg.stages, p->S, U);
        for (long u = 0; u < warm; u++)
            if (do_forward(p, u, e) != 0)
                return -1;
        for (long j = 0; j < U - warm; j++)
            if (do_forward(p, warm + j, e) != 0 || do_backward(p, j, e) != 0)
                return -1;
        for (long j = U - warm; j < U; j++)
            if (do_backward(p, j, e) != 0)
                return -1;
    }
    if (loss_sum)
        *loss_sum = p->loss_sum;
    return 0;
}

void pipe_run_times(const struct pipe_runner *p, double *wait_s, double *send_s)
{
    *wait_s = p->wait_s;
    *send_s = p->send_s;
}
