#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "pipe_order.h"

#define TAG_ACT 1u
#define TAG_GRAD 2u

/* Send buffers in flight per direction: a send's buffer is reused two sends later. */
#define SEND_RING 2

struct send_buf {
    void *act;               /* the activation (or gradient) as computed */
    uint16_t *wire;          /* its bf16 form (wire bf16 on fp32 activations) */
    struct comm_req *req;    /* the send in flight from it */
};

struct pipe_runner {
    struct pipe_config cfg;
    struct pipe_stage_ops ops;
    struct devmem *mem;
    size_t esz;      /* bytes of an activation element */
    int convert;     /* fp32 activations rounded to bf16 for the wire */
    int tp, tpr;     /* tensor group: size, this rank's place */
    int slots;
    void **in;       /* [slots] received activations, kept until the backward of their micro-batch */
    void *dout;      /* received gradient */
    uint16_t *rwire; /* a received unit's bf16 form (convert) */
    struct send_buf out[SEND_RING], din[SEND_RING];
    int out_at, din_at;
    float loss_sum;
    int S;          /* slices per micro-batch (>= 1) */
    int *bounds;    /* [S + 1] */
    double wait_s, send_s; /* this step: blocked receiving from, and sending to, the neighbours */
};

static void ring_free(struct pipe_runner *p, struct send_buf *r)
{
    for (int i = 0; i < SEND_RING; i++) {
        if (r[i].req)
            comm_wait(r[i].req, NULL);
        devmem_free(p->mem, r[i].act);
        devmem_free(p->mem, r[i].wire);
    }
}

void pipe_runner_free(struct pipe_runner *p)
{
    if (!p)
        return;
    ring_free(p, p->out);
    ring_free(p, p->din);
    for (int i = 0; p->in && i < p->slots; i++)
        devmem_free(p->mem, p->in[i]);
    free(p->in);
    devmem_free(p->mem, p->dout);
    devmem_free(p->mem, p->rwire);
    free(p->bounds);
    free(p);
}

static int ring_alloc(struct pipe_runner *p, struct send_buf *r, size_t n, herr *e)
{
    for (int i = 0; i < SEND_RING; i++) {
        if (devmem_alloc(p->mem, n * p->esz, &r[i].act, e) != 0)
            return -1;
        if (p->convert && devmem_alloc(p->mem, n * sizeof(uint16_t), (void **)&r[i].wire, e) != 0)
            return -1;
    }
    return 0;
}

static int link_check(const struct pipe_link *l, const char *which, herr *e)
{
    if (!l->fwd || !l->bwd)
        return herr_set(e, "pipeline: no link to the %s stage", which);
    if (l->peer < 0 || l->peer >= comm_size(l->fwd) || l->peer >= comm_size(l->bwd))
        return herr_set(e, "pipeline: the %s stage's index %d is outside its link", which, l->peer);
    return 0;
}

int pipe_runner_create(struct pipe_runner **out, const struct pipe_config *cfg,
                       const struct pipe_stage_ops *ops, herr *e)
{
    *out = NULL;
    if (cfg->stages < 1 || cfg->stage < 0 || cfg->stage >= cfg->stages)
        return herr_set(e, "pipeline stage %d is outside 0..%d", cfg->stage, cfg->stages - 1);
    if (cfg->micro_batches < 1)
        return herr_set(e, "pipeline micro-batches must be >= 1, got %d", cfg->micro_batches);
    int first = cfg->stage == 0, last = cfg->stage == cfg->stages - 1;
    if ((!first && link_check(&cfg->prev, "previous", e) != 0) ||
        (!last && link_check(&cfg->next, "next", e) != 0))
        return herr_wrap(e, "stage %d of %d", cfg->stage, cfg->stages);
    if (cfg->act_bytes != 0 && cfg->act_bytes != 2 && cfg->act_bytes != 4)
        return herr_set(e, "pipeline: activations of %zu bytes (2 or 4)", cfg->act_bytes);
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
    p->mem = cfg->mem ? cfg->mem : devmem_host();
    p->esz = cfg->act_bytes ? cfg->act_bytes : 4;
    p->convert = cfg->wire == DTYPE_BF16 && p->esz == 4 && cfg->stages > 1;
    p->tp = cfg->tp ? comm_size(cfg->tp) : 1;
    p->tpr = cfg->tp ? comm_rank(cfg->tp) : 0;
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
    p->slots = pipe_slots(cfg->schedule, cfg->stage, cfg->stages, cfg->micro_batches, S,
                          cfg->warmup_extra);
    size_t n = ops->act_count;
    int rc = 0;
    if (!first) {
        p->in = calloc((size_t)p->slots, sizeof *p->in);
        rc = p->in ? 0 : herr_set(e, "out of memory");
        for (int i = 0; rc == 0 && i < p->slots; i++)
            rc = devmem_alloc(p->mem, n * p->esz, &p->in[i], e);
        if (rc == 0)
            rc = ring_alloc(p, p->din, n, e);
    }
    if (rc == 0 && !last) {
        rc = devmem_alloc(p->mem, n * p->esz, &p->dout, e);
        if (rc == 0)
            rc = ring_alloc(p, p->out, n, e);
    }
    if (rc == 0 && p->convert)
        rc = devmem_alloc(p->mem, n * sizeof(uint16_t), (void **)&p->rwire, e);
    if (rc != 0) {
        pipe_runner_free(p);
        return herr_wrap(e, "%d pipeline activation slots of %zu elements", p->slots, n);
    }
    *out = p;
    return 0;
}

/* Elements of slice k's activation (the whole micro-batch's without slices). */
static size_t unit_count(const struct pipe_runner *p, int k)
{
    if (p->S == 1)
        return p->ops.act_count;
    size_t T = (size_t)p->bounds[p->S];
    return p->ops.act_count / T * (size_t)(p->bounds[k + 1] - p->bounds[k]);
}

/* This tensor rank's chunk of a unit of n elements: what it sends and receives. */
static void my_chunk(const struct pipe_runner *p, size_t n, size_t *off, size_t *len)
{
    tcp_chunk(n, p->tp, p->tpr, off, len);
}

/* Sends this rank's chunk of slice k's unit from `sb` (its act buffer written by the compute
 * lane) on `c` to `peer`, in the wire format; asynchronous. */
static int unit_send(struct pipe_runner *p, int k, struct comm *c, int peer, uint32_t tag,
                     struct send_buf *sb, herr *e)
{
    double t0 = clock_mono_s();
    size_t off, len;
    my_chunk(p, unit_count(p, k), &off, &len);
    int rc;
    if (p->convert) {
        const float *x = (const float *)sb->act + off;
        rc = devmem_pack_bf16(p->mem, NULL, sb->wire, x, len, e) ||
             comm_dev_isend(c, peer, tag, sb->wire, len * sizeof(uint16_t), &sb->req, e);
    } else {
        rc = comm_dev_isend(c, peer, tag, (unsigned char *)sb->act + off * p->esz, len * p->esz,
                            &sb->req, e);
    }
    p->send_s += clock_mono_s() - t0;
    return rc ? -1 : 0;
}

/* The next send buffer of a ring, once its last send is done. */
static struct send_buf *ring_next(struct pipe_runner *p, struct send_buf *ring, int *at, herr *e)
{
    struct send_buf *sb = &ring[*at];
    *at = (*at + 1) % SEND_RING;
    if (sb->req) {
        double t0 = clock_mono_s();
        struct comm_req *r = sb->req;
        sb->req = NULL;
        int rc = comm_wait(r, e);
        p->send_s += clock_mono_s() - t0;
        if (rc != 0)
            return NULL;
    }
    return sb;
}

/* Receives slice k's unit into x: this rank's chunk from `peer`, then the tensor group's
 * all-gather of the chunks (timed as waiting). */
static int unit_recv(struct pipe_runner *p, int k, struct comm *c, int peer, uint32_t tag, void *x,
                     herr *e)
{
    double t0 = clock_mono_s();
    size_t n = unit_count(p, k), off, len;
    my_chunk(p, n, &off, &len);
    int rc;
    if (p->convert)
        rc = comm_dev_recv(c, peer, tag, p->rwire, len * sizeof(uint16_t), e) ||
             devmem_unpack_bf16(p->mem, NULL, (float *)x + off, p->rwire, len, e);
    else
        rc = comm_dev_recv(c, peer, tag, (unsigned char *)x + off * p->esz, len * p->esz, e);
    if (rc == 0 && p->tp > 1 && comm_dev_all_gather(p->cfg.tp, x, n, p->esz, e) != 0)
        rc = herr_wrap(e, "the tensor group's all-gather of the received chunks");
    p->wait_s += clock_mono_s() - t0;
    return rc ? -1 : 0;
}

/* Unit u: micro-batch u / S, slice u % S (pipe_op_at gives backward units slices reversed). */
static void unit_of(const struct pipe_runner *p, long u, int *mb, int *k)
{
    *mb = (int)(u / p->S);
    *k = (int)(u % p->S);
}

static int do_forward(struct pipe_runner *p, long u, herr *e)
{
    int mb, k;
    unit_of(p, u, &mb, &k);
    int s = p->cfg.stage, slot = mb % p->slots;
    int first = s == 0, last = s == p->cfg.stages - 1;
    if (!first && unit_recv(p, k, p->cfg.prev.fwd, p->cfg.prev.peer, TAG_ACT, p->in[slot], e) != 0)
        return herr_wrap(e, "stage %d: receiving activations of micro-batch %d%s", s, mb,
                         p->S > 1 ? ", a token slice" : "");
    struct send_buf *sb = NULL;
    if (!last && !(sb = ring_next(p, p->out, &p->out_at, e)))
        return herr_wrap(e, "stage %d: sending activations", s);
    float loss = 0;
    if (p->ops.forward(p->ops.ctx, mb, slot, k, first ? NULL : p->in[slot],
                       last ? NULL : sb->act, &loss, e) != 0)
        return herr_wrap(e, "stage %d: forward of micro-batch %d", s, mb);
    if (last)
        p->loss_sum += loss;
    else if (unit_send(p, k, p->cfg.next.fwd, p->cfg.next.peer, TAG_ACT, sb, e) != 0)
        return herr_wrap(e, "stage %d: sending activations of micro-batch %d", s, mb);
    return 0;
}

static int do_backward(struct pipe_runner *p, long u, herr *e)
{
    int mb, k;
    unit_of(p, u, &mb, &k);
    int s = p->cfg.stage, slot = mb % p->slots;
    int first = s == 0, last = s == p->cfg.stages - 1;
    if (!last && unit_recv(p, k, p->cfg.next.bwd, p->cfg.next.peer, TAG_GRAD, p->dout, e) != 0)
        return herr_wrap(e, "stage %d: receiving gradients of micro-batch %d", s, mb);
    struct send_buf *sb = NULL;
    if (!first && !(sb = ring_next(p, p->din, &p->din_at, e)))
        return herr_wrap(e, "stage %d: sending gradients", s);
    if (p->ops.backward(p->ops.ctx, mb, slot, k, last ? NULL : p->dout, first ? NULL : sb->act,
                        e) != 0)
        return herr_wrap(e, "stage %d: backward of micro-batch %d", s, mb);
    if (!first && unit_send(p, k, p->cfg.prev.bwd, p->cfg.prev.peer, TAG_GRAD, sb, e) != 0)
        return herr_wrap(e, "stage %d: sending gradients of micro-batch %d", s, mb);
    return 0;
}

/* Every send of the step done (their buffers free, their bytes on the way). */
static int sends_wait(struct pipe_runner *p, herr *e)
{
    int rc = 0;
    struct send_buf *rings[2] = {p->out, p->din};
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < SEND_RING; i++) {
            struct send_buf *sb = &rings[r][i];
            if (!sb->req)
                continue;
            herr e2;
            if (comm_wait(sb->req, &e2) != 0 && rc == 0) {
                *e = e2;
                rc = -1;
            }
            sb->req = NULL;
        }
    return rc;
}

int pipe_run(struct pipe_runner *p, float *loss_sum, herr *e)
{
    long U = (long)p->cfg.micro_batches * p->S;
    p->loss_sum = 0;
    p->wait_s = p->send_s = 0;
    int rc = 0;
    for (long k = 0; k < 2 * U && rc == 0; k++) {
        long u;
        int b = pipe_op_at(p->cfg.schedule, p->cfg.stage, p->cfg.stages, k, U, p->S,
                           p->cfg.warmup_extra, &u);
        rc = b ? do_backward(p, u, e) : do_forward(p, u, e);
    }
    double t0 = clock_mono_s();
    herr e2;
    if (sends_wait(p, rc == 0 ? e : &e2) != 0 && rc == 0)
        rc = herr_wrap(e, "stage %d: the step's last sends", p->cfg.stage);
    p->send_s += clock_mono_s() - t0;
    if (rc != 0)
        return -1;
    if (loss_sum)
        *loss_sum = p->loss_sum;
    return 0;
}

int pipe_run_forward(struct pipe_runner *p, int micro_batches, float *loss_sum, herr *e)
{
    long U = (long)micro_batches * p->S;
    p->loss_sum = 0;
    p->wait_s = p->send_s = 0;
    int rc = 0;
    for (long u = 0; u < U && rc == 0; u++)
        rc = do_forward(p, u, e);
    herr e2;
    if (sends_wait(p, rc == 0 ? e : &e2) != 0 && rc == 0)
        rc = herr_wrap(e, "stage %d: the evaluation's last sends", p->cfg.stage);
    if (rc != 0)
        return -1;
    if (loss_sum)
        *loss_sum = p->loss_sum;
    return 0;
}

void pipe_run_times(const struct pipe_runner *p, double *wait_s, double *send_s)
{
    *wait_s = p->wait_s;
    *send_s = p->send_s;
}
