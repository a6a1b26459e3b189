#include "trainer.h"

#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "clock.h"
#include "log.h"
#include "trainer_impl.h"
#include "zero.h"


void trainer_config_defaults(struct trainer_config *c)
{
    memset(c, 0, sizeof *c);
    c->schedule = SCHED_1F1B;
    c->adamw = (struct adamw_config){0.9f, 0.95f, 1e-8f, 0.1f};
    c->lr = (struct lr_schedule){.max_lr = 3e-4f, .min_lr_ratio = 1.0f};
    c->grad_clip = 1.0f;
    c->max_nonfinite = 3;
    c->seed = 1337;
    c->checkpoint_keep = 2;
    c->micro_batches = 1;
}

void trainer_stage_layers(const struct plan_doc *rt, int layers, int s, int *first, int *last)
{
    if (rt->stage_first) {
        *first = rt->stage_first[s];
        *last = rt->stage_last[s];
        return;
    }
    int P = rt->pipeline, q = layers / P, r = layers % P;
    *first = s * q + (s < r ? s : r);
    *last = *first + q + (s < r ? 1 : 0);
}

/* Point-to-point tag on the embedding communicator (first <-> last stage of one replica): a
 * reduce-scattered gradient shard of the tied embedding. */
#define TAG_TIE_GRAD 1u

static int tie_head_update(struct worker *w, herr *e);
static int tie_sends_wait(struct worker *w, herr *e);

/* Forward hook: parameters [lo, hi) are about to be read; waits for their buckets' all-gather. */
static int params_needed(void *ctx, size_t lo, size_t hi)
{
    struct worker *w = ctx;
    if (!w->params_pending)
        return 0;
    double t0 = clock_mono_s();
    int rc = 0;
    /* at the first block already: the first stage's shard came right after the norm, and the
     * embedding's all-gather then runs while the blocks compute */
    if (w->tie_params_due)
        rc = tie_head_update(w, &w->hook_err);
    if (rc == 0)
        rc = zero_params_wait(w->z, lo, hi, &w->hook_err);
    w->param_wait += clock_mono_s() - t0;
    if (rc != 0)
        w->hook_failed = 1;
    return rc;
}

/* ZeRO's own work on the compute lane (the masters' rounding, the gathers' widening), timed as
 * such when the step is profiled. */
static void zero_work(void *ctx, int begin)
{
    struct worker *w = ctx;
    if (begin)
        engine_profile_enter(w->eng, ENGINE_PART_MASTERS);
    else
        engine_profile_leave(w->eng);
}

/* ZeRO wrote parameters [lo, hi) (a gather, a rounding from the masters): the engine refreshes
 * what it computes with before it reads them. */
static void params_written(void *ctx, size_t lo, size_t hi)
{
    struct worker *w = ctx;
    engine_params_changed(w->eng, lo, hi);
}

/* Every parameter gathered (before anything reads them all: a checkpoint, the end of training,
 * the next reduce-scatter). */
int tr_params_ready(struct worker *w, herr *e)
{
    if (!w->params_pending)
        return 0;
    w->params_pending = 0;
    double t0 = clock_mono_s();
    int rc = w->tie_params_due ? tie_head_update(w, e) : 0;
    if (rc == 0)
        rc = zero_params_gather_finish(w->z, e);
    w->param_wait += clock_mono_s() - t0;
    return rc;
}

/* Tokens [t0, t1) of slice k (all of them without slices). */
static void slice_range(const struct worker *w, int k, int *t0, int *t1)
{
    const struct trainer_config *c = w->cfg;
    *t0 = c->token_slices > 1 ? c->slice_bounds[k] : 0;
    *t1 = c->token_slices > 1 ? c->slice_bounds[k + 1] : c->T;
}

static int stage_forward(void *ctx, int mb, int slot, int k, const void *in, void *out,
                         float *loss, herr *e)
{
    struct worker *w = ctx;
    *loss = 0; /* the engine keeps the sum (engine_loss_take) */
    size_t bt = (size_t)w->cfg->B * (size_t)w->cfg->T;
    int *tok = w->tokens + (size_t)slot * bt, *tgt = w->targets + (size_t)slot * bt;
    int t0, t1;
    slice_range(w, k, &t0, &t1);
    if ((w->first || w->last) && k == 0 && w->evaluating) {
        if (w->data->eval_batch(w->data->eval_ctx, (uint64_t)mb, w->replica, w->D, tok, tgt, e))
            return herr_wrap(e, "evaluation data, micro-batch %d", mb);
    } else if ((w->first || w->last) && k == 0) { /* the micro-batch's data, at its first slice */
        uint64_t at = (uint64_t)w->step * (uint64_t)w->M + (uint64_t)mb;
        if (w->data->batch(w->data->ctx, at, w->replica, w->D, tok, tgt, e) != 0)
            return herr_wrap(e, "training data, micro-batch %llu", (unsigned long long)at);
    }
    if (engine_forward(w->eng, slot, t0, t1, tok, in, w->last ? tgt : NULL, out) != 0) {
        if (w->hook_failed) {
            *e = w->hook_err;
            return -1;
        }
        return herr_set(e, "%s", engine_error(w->eng));
    }
    return tr_params_ready(w, e);
}

static int report_tensor(struct worker *w, int t, herr *e)
{
    if (w->reported[t])
        return 0;
    w->reported[t] = 1;
    return zero_grads_ready(w->z, w->tens[t].offset, w->tens[t].offset + w->tens[t].size, e);
}

/* During the last micro-batch's backward: block `layer`'s gradients are final, so their buckets
 * can be reduce-scattered while backward goes on (and, on the last stage, the final LayerNorm's
 * and the head's, computed before the first block; on the first stage the tied embedding is
 * also the input embedding, final only at the end). */
static void on_layer_done(void *ctx, int layer)
{
    struct worker *w = ctx;
    /* the head's and final LayerNorm's first (their reduce-scatter is queued first: the head's
     * shard then goes on to the first stage), then the block's */
    for (int pass = 0; pass < 2; pass++)
        for (int t = w->ntens - 1; t >= 0 && !w->hook_failed; t--) {
            int head = w->last && !w->first && w->tens[t].offset == w->wte_off && w->has_wte;
            int lnf = w->tens_layer[t] < 0 && strncmp(w->tens[t].name, "ln_f.", 5) == 0;
            int fin = pass == 0 ? head || lnf : w->tens_layer[t] == layer;
            if (fin && report_tensor(w, t, &w->hook_err) != 0)
                w->hook_failed = 1;
        }
}

static int stage_backward(void *ctx, int mb, int slot, int k, const void *dout, void *din,
                          herr *e)
{
    struct worker *w = ctx;
    int last_unit = mb == w->M - 1 && k == 0; /* the step's last backward: gradients final */
    int t0, t1;
    slice_range(w, k, &t0, &t1);
    if (last_unit && w->dp)
        engine_set_backward_hook(w->eng, on_layer_done, w);
    int rc = engine_backward(w->eng, slot, t0, t1, dout, din, 1.0f / (float)w->M);
    engine_set_backward_hook(w->eng, NULL, NULL);
    if (rc != 0 && !w->hook_failed)
        return herr_set(e, "%s", engine_error(w->eng));
    if (w->hook_failed) {
        *e = w->hook_err;
        return -1;
    }
    return 0;
}

static void worker_free(struct worker *w)
{
    if (w->tie_sends) {
        herr e;
        tie_sends_wait(w, &e);
    }
    free(w->tie);
    free(w->tie_sends);
    zero_free(w->z);
    struct pipe_link *links[2] = {&w->prev, &w->next};
    for (int i = 0; i < 2; i++) {
        if (links[i]->bwd != links[i]->fwd)
            comm_free(links[i]->bwd);
        comm_free(links[i]->fwd);
    }
    comm_free(w->pp);
    comm_free(w->dp);
    comm_free(w->emb);
    comm_free(w->tp);
    if (w->eng) { /* engine memory goes before the engine */
        struct devmem *m = engine_mem(w->eng);
        devmem_free(m, w->tie_out);
        devmem_free(m, w->tie_in);
        devmem_free(m, w->tie_sum);
        devmem_free(m, w->m);
        devmem_free(m, w->v);
    }
    engine_free(w->eng);
    free(w->norm_lo);
    free(w->norm_hi);
    free(w->tokens);
    free(w->targets);
    free(w->reported);
    free(w->tens_layer);
}

/* Group g as a communicator for this rank: TCP, or for GPU ranks on a group the plan put on RDMA
 * (or inside one worker) NCCL bootstrapped over the TCP group; `second` makes another
 * communicator of the same members (its own connections: a link's other direction). Every
 * communicator takes the engine's buffers as they are (comm_dev_*). */
static int open_group(struct worker *w, struct tcp_listener *l, int g, int second,
                      struct comm **out, herr *e)
{
    struct rt_comm_spec cs;
    *out = NULL;
    if (rank_table_comm_spec(w->rt, g, w->rank, &cs, e) != 0)
        return -1;
    if (second) {
        cs.spec.group_id |= 0x40000000u;
        size_t n = strlen(cs.name);
        snprintf(cs.name + n, sizeof cs.name - n, "%s", " back");
        cs.spec.name = cs.name;
    }
    int rc = comm_create(out, l, &cs.spec, e);
    struct comm_nccl_params np;
    if (rc == 0 && w->cfg->engine == ENGINE_CUDA &&
        rank_table_nccl_params(w->rt, g, w->rank, w->cfg->device, &np)) {
        /* GPU ranks on an RDMA group: NCCL, bootstrapped over the TCP group just made */
        np.name = cs.name;
        struct comm *boot = *out;
        *out = NULL;
        rc = comm_create_nccl ? comm_create_nccl(out, boot, &np, e)
                              : (comm_free(boot), herr_set(e, "communicator %s: planned on "
                                 "NCCL, but this holmes-node has no NCCL backend", cs.name));
        if (rc == 0)
            log_info("communicator %s: NCCL over %s (planned %s)", cs.name,
                     comm_transport(*out)[0] ? comm_transport(*out) : "the node's links",
                     np.net_name[0] ? np.net_name : "inside one node");
    }
    rt_comm_spec_free(&cs);
    if (rc == 0 && comm_set_devmem(*out, engine_mem(w->eng), e) != 0)
        rc = -1;
    return rc;
}

/* A pipeline link (the link group g, this rank member `me` of [stage s, stage s + 1]): one
 * communicator for both directions on TCP (its reader threads never let one direction wait for
 * the other), one per direction on NCCL (a communicator's operations run in order, so a send
 * queued behind a receive could wait for a peer that waits for it). */
static int open_link(struct worker *w, struct tcp_listener *l, int g, struct pipe_link *link,
                     herr *e)
{
    const struct plan_doc_group *gr = &w->rt->groups[g];
    int me = gr->members[0] == w->rank ? 0 : 1;
    struct comm_nccl_params np;
    int two = w->cfg->engine == ENGINE_CUDA &&
              rank_table_nccl_params(w->rt, g, w->rank, w->cfg->device, &np);
    link->peer = 1 - me;
    if (open_group(w, l, g, 0, &link->fwd, e) != 0)
        return -1;
    if (!two) {
        link->bwd = link->fwd;
        return 0;
    }
    return open_group(w, l, g, 1, &link->bwd, e);
}

/* Creates this rank's communicators in group order (deadlock-free: see docs/comm.md). */
static int open_comms(struct worker *w, struct tcp_listener *l, herr *e)
{
    for (int g = 0; g < w->rt->ngroups; g++) {
        const struct plan_doc_group *gr = &w->rt->groups[g];
        int member = 0;
        for (int i = 0; i < gr->n; i++)
            member |= gr->members[i] == w->rank;
        if (!member || gr->n == 1)
            continue;
        if (gr->kind == GROUP_LINK) {
            struct pipe_link *link = gr->members[0] == w->rank ? &w->next : &w->prev;
            if (open_link(w, l, g, link, e) != 0)
                return -1;
            continue;
        }
        struct comm **slot = gr->kind == GROUP_DP ? &w->dp : gr->kind == GROUP_PP ? &w->pp
                           : gr->kind == GROUP_TP ? &w->tp : &w->emb;
        if (open_group(w, l, g, 0, slot, e) != 0)
            return -1;
    }
    return 0;
}

/* ---------- setup ---------- */

/* The engine's tensor-parallel sum: an all-reduce on the tensor group, on the engine's buffer. */
static int tp_sum(void *ctx, float *buf, size_t n)
{
    struct worker *w = ctx;
    if (comm_dev_all_reduce(w->tp, buf, n, &w->hook_err) == 0)
        return 0;
    w->hook_failed = 1;
    return -1;
}

static int worker_init(struct worker *w, const struct trainer_config *c, const struct plan_doc *rt,
                       int rank, const struct trainer_data *data, herr *e)
{
    memset(w, 0, sizeof *w);
    w->cfg = c;
    w->rt = rt;
    w->data = data;
    w->rank = rank;
    if (rank < 0 || rank >= rt->world)
        return herr_set(e, "rank %d is outside the rank table's 0..%d", rank, rt->world - 1);
    if (c->B < 1 || c->T < 1 || c->micro_batches < 1 || c->steps < 1)
        return herr_set(e, "batch size, sequence length, micro-batches and steps must be >= 1");
    if (rt->pipeline > c->model.layers)
        return herr_set(e, "pipeline of %d stages exceeds the model's %d layers", rt->pipeline,
                        c->model.layers);
    if (rt->stage_first && rt->stage_last[rt->pipeline - 1] != c->model.layers)
        return herr_set(e, "rank table stages cover %d layers, the model has %d",
                        rt->stage_last[rt->pipeline - 1], c->model.layers);
    if (!data || !data->batch)
        return herr_set(e, "no training data source");
    w->lr = c->lr;
    if (w->lr.total_steps <= 0)
        w->lr.total_steps = c->steps;
    if (lr_schedule_check(&w->lr, e) != 0)
        return -1;
    w->P = rt->pipeline;
    w->D = rt->data;
    w->M = c->micro_batches;
    w->stage = plan_doc_stage_of(rt, rank);
    w->replica = plan_doc_dp_of(rt, rank);
    w->TP = rt->tensor;
    w->tpr = plan_doc_tp_of(rt, rank);
    w->first = w->stage == 0;
    w->last = w->stage == w->P - 1;
    trainer_stage_layers(rt, c->model.layers, w->stage, &w->lo, &w->hi);
    int lo = w->lo, hi = w->hi;
    if (c->token_slices > 1 && (!c->slice_bounds || c->slice_bounds[0] != 0 ||
                                c->slice_bounds[c->token_slices] != c->T))
        return herr_set(e, "token slices: %d slices whose bounds do not tile [0, %d)",
                        c->token_slices, c->T);
    w->slots = pipe_slots(c->schedule, w->stage, w->P, w->M, c->token_slices, rt->warmup_extra);
    /* the checkpoint directory from the start: a GPU rank keeps its choices of algorithm there */
    char choices[4200] = "";
    if (c->checkpoint_dir) {
        if (ckpt_make_dir(c->checkpoint_dir, e) != 0)
            return -1;
        snprintf(choices, sizeof choices, "%s/gpu-algorithms.rank%d.txt", c->checkpoint_dir, rank);
    }
    struct engine_spec es = {.kind = c->engine, .precision = c->precision, .device = c->device,
                             .model = c->model, .first = lo, .last = hi, .B = c->B, .T = c->T,
                             .slots = w->slots, .tp = w->TP, .tp_rank = w->tpr,
                             .emulate_device = c->emulate_device, .timeout_s = rt->timeout_s,
                             .choices_file = choices[0] ? choices : NULL};
    if (engine_create(&w->eng, &es, e) != 0)
        return herr_wrap(e, "stage %d (layers %d..%d)", w->stage, lo, hi);
    w->gs = engine_host(w->eng);
    w->mem = engine_mem(w->eng);
    engine_set_tp_sum(w->eng, tp_sum, w);
    if (engine_init_params(w->eng, c->seed, e) != 0)
        return -1;
    w->has_wte = gpt_stage_wte(w->gs, &w->wte_off, &w->wte_n) == 0;
    w->ntens = gpt_stage_tensors(w->gs, &w->tens);
    w->reported = calloc((size_t)w->ntens, sizeof *w->reported);
    w->tens_layer = calloc((size_t)w->ntens, sizeof *w->tens_layer);
    if (!w->reported || !w->tens_layer)
        return herr_set(e, "out of memory for the tensor table");
    for (int t = 0; t < w->ntens; t++) {
        int l;
        w->tens_layer[t] = sscanf(w->tens[t].name, "h%d.", &l) == 1 ? l : -1;
    }
    size_t bt = (size_t)c->B * (size_t)c->T;
    w->tokens = calloc((size_t)w->slots * bt, sizeof *w->tokens);
    w->targets = calloc((size_t)w->slots * bt, sizeof *w->targets);
    if (!w->tokens || !w->targets)
        return herr_set(e, "out of memory for token buffers");
    return 0;
}

/* Bucket cuts: between transformer blocks (a block's reduce-scatter starts when its backward is
 * done) and around the tied embedding (exchanged with the other end of the pipeline on its own). */
static int tensor_group(const struct worker *w, int t)
{
    if (w->has_wte && w->tens[t].offset == w->wte_off)
        return -2;
    return w->tens_layer[t];
}

/* The ranges of the gradient buffer this rank's norm adds up: its ZeRO shards, without the tied
 * head of a last stage (counted on the first stage) and, on tensor ranks other than 0, without
 * the replicated tensors (the same on every tensor rank: counted once, by rank 0; the group's
 * all-reduce adds the split ones' parts). */
static int norm_ranges(struct worker *w, herr *e)
{
    int nx = 0, cap = w->ntens + 1;
    size_t *xlo = malloc((size_t)cap * sizeof *xlo), *xhi = malloc((size_t)cap * sizeof *xhi);
    if (!xlo || !xhi) {
        free(xlo);
        free(xhi);
        return herr_set(e, "out of memory for the norm's ranges");
    }
    if (w->last && !w->first && w->has_wte) {
        xlo[nx] = w->wte_off;
        xhi[nx++] = w->wte_off + w->wte_n;
    }
    for (int t = 0; w->tpr > 0 && t < w->ntens; t++)
        if (w->tens[t].split == GPT_REPLICATED) {
            xlo[nx] = w->tens[t].offset;
            xhi[nx++] = w->tens[t].offset + w->tens[t].size;
        }
    /* each shard cut at every excluded range's ends: pieces wholly inside one are left out */
    int nb = zero_num_buckets(w->z), rc = 0;
    size_t max = (size_t)nb * (size_t)(2 * nx + 1);
    w->norm_lo = malloc((max ? max : 1) * sizeof *w->norm_lo);
    w->norm_hi = malloc((max ? max : 1) * sizeof *w->norm_hi);
    if (!w->norm_lo || !w->norm_hi)
        rc = herr_set(e, "out of memory for the norm's ranges");
    /* in buffer order, pieces that meet merged: with one replica the whole stage is one range
     * (one pass over the gradients), as the engine's own norm of the stage */
    for (int b = nb - 1; b >= 0 && rc == 0; b--) {
        size_t lo, hi;
        zero_shard(w->z, b, &lo, &hi);
        while (lo < hi) {
            size_t end = hi;
            int inside = 0;
            for (int i = 0; i < nx; i++) {
                if (xlo[i] <= lo && lo < xhi[i]) {
                    inside = 1;
                    end = xhi[i] < end ? xhi[i] : end;
                } else if (xlo[i] > lo && xlo[i] < end) {
                    end = xlo[i];
                }
            }
            if (!inside && w->nnorm > 0 && w->norm_hi[w->nnorm - 1] == lo) {
                w->norm_hi[w->nnorm - 1] = end;
            } else if (!inside) {
                w->norm_lo[w->nnorm] = lo;
                w->norm_hi[w->nnorm++] = end;
            }
            lo = end;
        }
    }
    free(xlo);
    free(xhi);
    return rc;
}

static int worker_optim_init(struct worker *w, herr *e)
{
    size_t n = gpt_stage_num_params(w->gs);
    size_t *cuts = malloc((size_t)(w->ntens ? w->ntens : 1) * sizeof *cuts);
    if (!cuts)
        return herr_set(e, "out of memory for the gradient bucket cuts");
    int ncuts = 0;
    for (int t = 1; t < w->ntens; t++)
        if (tensor_group(w, t) != tensor_group(w, t - 1))
            cuts[ncuts++] = w->tens[t].offset;
    int rc = zero_create(&w->z, w->mem, engine_params(w->eng), engine_grads(w->eng), n, cuts,
                         ncuts, w->cfg->bucket_floats, w->dp, e);
    free(cuts);
    if (rc != 0)
        return -1;
    zero_set_params_written(w->z, params_written, w);
    zero_set_device_work(w->z, zero_work, w);
    engine_set_forward_hook(w->eng, params_needed, w);
    if (w->cfg->param_wire == DTYPE_BF16 && zero_params_bf16(w->z, e) != 0)
        return -1;
    w->tied = w->emb && w->has_wte;
    if (w->tied) {
        int nb = zero_num_buckets(w->z);
        w->tie = calloc((size_t)nb, sizeof *w->tie);
        w->tie_sends = calloc((size_t)nb, sizeof *w->tie_sends);
        size_t tb = (w->wte_n ? w->wte_n : 1) * sizeof(float);
        if (!w->tie || !w->tie_sends)
            return herr_set(e, "out of memory for the tied embedding exchange");
        if (devmem_alloc(w->mem, tb, (void **)&w->tie_out, e) != 0 ||
            devmem_alloc(w->mem, tb, (void **)&w->tie_in, e) != 0 ||
            (w->last && devmem_alloc(w->mem, tb, (void **)&w->tie_sum, e) != 0))
            return herr_wrap(e, "the tied embedding exchange");
        /* the embedding is cut off from its neighbours: each bucket is inside it or outside */
        for (size_t off = w->wte_off, at = 0; off < w->wte_off + w->wte_n; w->ntie++) {
            struct tie_shard *t = &w->tie[w->ntie];
            t->bucket = zero_bucket_at(w->z, off);
            zero_shard(w->z, t->bucket, &t->lo, &t->hi);
            t->at = at;
            at += t->hi - t->lo;
            off = zero_bucket_end(w->z, t->bucket);
        }
    }
    size_t sh = zero_shard_total(w->z);
    if (devmem_alloc(w->mem, (sh ? sh : 1) * sizeof(float), (void **)&w->m, e) != 0 ||
        devmem_alloc(w->mem, (sh ? sh : 1) * sizeof(float), (void **)&w->v, e) != 0)
        return herr_wrap(e, "the optimizer state (%zu floats)", sh);
    return norm_ranges(w, e);
}

/* ---------- one step ---------- */

struct step_times {
    double pipeline, grad_sync, optimizer, param_sync, pipe_wait, pipe_send;
    uint64_t dp_bytes;
    double dp_time;
};

/* AdamW's spans for one engine call, and the buckets whose all-gathers wait for them. */
struct shard_batch {
    struct adamw_span sp[ENGINE_ADAMW_SPANS];
    size_t glo[ENGINE_ADAMW_SPANS], ghi[ENGINE_ADAMW_SPANS];
    int nsp, ng;
};

/* The span of the owned shard [lo, hi) (at `off` in m and v; g: its gradient's first element): on
 * the parameters, or on their fp32 masters when the replicas compute with bf16 parameters
 * (zero_params_bf16; the all-gather then rounds the shard into the parameters). */
static struct adamw_span shard_span(struct worker *w, const float *g, size_t off, size_t lo,
                                    size_t hi)
{
    float *master = zero_master(w->z);
    struct adamw_span a = {lo, hi, master ? master + off : engine_params(w->eng) + lo, g,
                           w->m + off, w->v + off};
    return a;
}

/* The batch's AdamW (one engine call), then its buckets' gathers, in order. */
static int batch_flush(struct worker *w, struct shard_batch *b, float lr, long step, float scale,
                       herr *e)
{
    if (b->nsp && engine_adamw(w->eng, &w->cfg->adamw, b->sp, b->nsp, lr, step, scale, e) != 0)
        return -1;
    for (int i = 0; i < b->ng; i++)
        if (zero_params_gather_part(w->z, b->glo[i], b->ghi[i], e) != 0)
            return -1;
    b->nsp = b->ng = 0;
    return 0;
}

/* AdamW on every owned shard (but the last stage's embedding while its update waits for the
 * first stage's shard: tie_head_update), in forward order, the buckets' all-gathers issued as
 * their shards are updated. Shards that follow each other in the parameters and in m and v (every
 * one with one replica: zero.h lays the shards out in buffer order) are one span: one AdamW pass
 * over the stage, not one per bucket. With several replicas each bucket's shard is a span of its
 * own, and up to ENGINE_ADAMW_SPANS of them go in one call (one launch on a GPU), their buckets'
 * gathers after it. */
static int update_shards(struct worker *w, float lr, long step, float scale, herr *e)
{
    const float *g = engine_grads(w->eng);
    struct shard_batch bt;
    bt.nsp = bt.ng = 0;
    size_t rlo = 0, rhi = 0, roff = 0; /* the run of shards not yet in the batch */
    size_t glo = 0, ghi = 0;           /* the buckets whose gather waits for it */
    for (int b = zero_num_buckets(w->z) - 1; b >= -1; b--) {
        size_t blo = 0, bhi = 0, lo = 0, hi = 0, off = 0;
        int skip = b < 0;
        if (b >= 0) {
            zero_bucket_range(w->z, b, &blo, &bhi);
            zero_shard(w->z, b, &lo, &hi);
            off = zero_shard_offset(w->z, b);
            skip = w->tie_params_due && blo >= w->wte_off && blo < w->wte_off + w->wte_n;
        }
        int joins = !skip && ghi == blo && (hi == lo || rhi == rlo ||
                                            (lo == rhi && off == roff + (rhi - rlo)));
        if (!joins && ghi > glo) { /* the run so far into the batch */
            if (rhi > rlo)
                bt.sp[bt.nsp++] = shard_span(w, g + rlo, roff, rlo, rhi);
            bt.glo[bt.ng] = glo;
            bt.ghi[bt.ng++] = ghi;
            if ((bt.nsp == ENGINE_ADAMW_SPANS || bt.ng == ENGINE_ADAMW_SPANS) &&
                batch_flush(w, &bt, lr, step, scale, e) != 0)
                return -1;
            rlo = rhi = roff = 0;
            glo = ghi = 0;
        }
        if (skip)
            continue;
        if (ghi == glo)
            glo = blo;
        ghi = bhi;
        if (hi > lo && rhi == rlo) {
            rlo = lo;
            roff = off;
        }
        if (hi > lo)
            rhi = hi;
    }
    return batch_flush(w, &bt, lr, step, scale, e);
}

/* ---------- the tied embedding ----------
 * The first stage's input embedding and the last stage's head are one matrix; each stage keeps a
 * copy and both apply the same update. The embedding is its own set of buckets on both stages,
 * so replica r of each owns the same shards, and the two exchange only those (1/d of it):
 *   last stage, once its head's reduce-scatter is done (early in its last backward): sends its
 *     shard to the first stage, which is still computing;
 *   first stage, after its own reduce-scatter: adds the last stage's shard, and updates the
 *     embedding with the rest of its parameters; it sends its own shard after the norm;
 *   last stage, when its next forward starts (the first stage's shard has long arrived, as it
 *     waited for activations): adds it to its own, applies the same AdamW update with the step's
 *     learning rate and clipping, and all-gathers the embedding among its replicas while its
 *     blocks compute (tie_head_update).
 * Sums are a + b on one side, b + a on the other: the same floats, so the copies stay equal. */

static int tie_sends_wait(struct worker *w, herr *e)
{
    int rc = 0;
    for (int i = 0; i < w->ntie; i++) {
        herr e2;
        if (w->tie_sends[i] && comm_wait(w->tie_sends[i], &e2) != 0 && rc == 0) {
            *e = e2;
            rc = herr_wrap(e, "tied embedding exchange");
        }
        w->tie_sends[i] = NULL;
    }
    return rc;
}

/* Copies this replica's shards to tie_out once their reduce-scatter is done. */
static int tie_copy_out(struct worker *w, herr *e)
{
    const float *g = engine_grads(w->eng);
    if (tie_sends_wait(w, e) != 0) /* the last step's, from the same buffer */
        return -1;
    for (int i = 0; i < w->ntie; i++) {
        const struct tie_shard *t = &w->tie[i];
        if (zero_bucket_wait(w->z, t->bucket, e) != 0)
            return -1;
        engine_profile_enter(w->eng, ENGINE_PART_OTHER);
        int rc = devmem_copy(w->mem, NULL, w->tie_out + t->at, g + t->lo,
                             (t->hi - t->lo) * sizeof *g, e);
        engine_profile_leave(w->eng);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Sends tie_out's shards to the other end. */
static int tie_send(struct worker *w, herr *e)
{
    for (int i = 0; i < w->ntie; i++) {
        const struct tie_shard *t = &w->tie[i];
        size_t n = t->hi - t->lo;
        if (n && comm_dev_isend(w->emb, w->first ? 1 : 0, TAG_TIE_GRAD, w->tie_out + t->at,
                                n * sizeof(float), &w->tie_sends[i], e) != 0)
            return herr_wrap(e, "tied embedding: sending gradient shard %d", i);
    }
    return 0;
}

/* Receives the other end's shards into tie_in. */
static int tie_recv(struct worker *w, herr *e)
{
    for (int i = 0; i < w->ntie; i++) {
        const struct tie_shard *t = &w->tie[i];
        size_t n = t->hi - t->lo;
        if (n && comm_dev_recv(w->emb, w->first ? 1 : 0, TAG_TIE_GRAD, w->tie_in + t->at,
                               n * sizeof(float), e) != 0)
            return herr_wrap(e, "tied embedding: gradient shard %d from the %s stage", i,
                             w->first ? "last" : "first");
    }
    return 0;
}

/* The end of the run of tied-embedding shards from i: shards that follow each other in the
 * parameters, in tie_out / tie_in and in m and v (every one with one replica) are summed and
 * updated as one range. */
static int tie_run_end(const struct worker *w, int i)
{
    const struct tie_shard *t = w->tie;
    size_t off = zero_shard_offset(w->z, t[i].bucket);
    int j = i + 1;
    while (j < w->ntie && t[j].lo == t[j - 1].hi &&
           t[j].at == t[j - 1].at + (t[j - 1].hi - t[j - 1].lo) &&
           zero_shard_offset(w->z, t[j].bucket) == off + (t[j].at - t[i].at))
        j++;
    return j;
}

/* First stage, after its reduce-scatter: the last stage's shards added to its own (its own go
 * out after the norm: sent now, they would queue the norm's message to the last stage behind
 * them on the link between the stages, and the last stage needs them only in its next forward). */
static int tie_grads_in(struct worker *w, herr *e)
{
    float *g = engine_grads(w->eng);
    if (tie_copy_out(w, e) != 0 || tie_recv(w, e) != 0)
        return -1;
    for (int i = 0, j; i < w->ntie; i = j) {
        j = tie_run_end(w, i);
        const struct tie_shard *t = &w->tie[i];
        engine_profile_enter(w->eng, ENGINE_PART_OTHER);
        int rc = devmem_add_f32(w->mem, NULL, g + t->lo, w->tie_in + t->at,
                                w->tie[j - 1].hi - t->lo, e);
        engine_profile_leave(w->eng);
        if (rc != 0)
            return herr_wrap(e, "tied embedding");
    }
    return 0;
}

/* Last stage, during a forward: its shards plus the first stage's (tie_sum) make the gradient of
 * the AdamW update of its embedding copy; then the embedding buckets' all-gather starts. */
static int tie_head_update(struct worker *w, herr *e)
{
    w->tie_params_due = 0;
    if (tie_recv(w, e) != 0)
        return -1;
    struct shard_batch bt;
    bt.nsp = bt.ng = 0;
    for (int i = 0, j; i < w->ntie; i = j) {
        j = tie_run_end(w, i);
        const struct tie_shard *t = &w->tie[i];
        size_t off = zero_shard_offset(w->z, t->bucket), n = w->tie[j - 1].hi - t->lo;
        if (!n)
            continue;
        float *g = w->tie_sum + t->at;
        engine_profile_enter(w->eng, ENGINE_PART_OTHER);
        int rc = devmem_copy(w->mem, NULL, g, w->tie_out + t->at, n * sizeof *g, e) != 0 ||
                 devmem_add_f32(w->mem, NULL, g, w->tie_in + t->at, n, e) != 0;
        engine_profile_leave(w->eng);
        if (rc)
            return herr_wrap(e, "tied embedding update");
        bt.sp[bt.nsp++] = shard_span(w, g, off, t->lo, t->lo + n);
        if (bt.nsp == ENGINE_ADAMW_SPANS &&
            batch_flush(w, &bt, w->tie_lr, w->tie_step, w->tie_scale, e) != 0)
            return herr_wrap(e, "tied embedding update");
    }
    if (batch_flush(w, &bt, w->tie_lr, w->tie_step, w->tie_scale, e) != 0)
        return herr_wrap(e, "tied embedding update");
    return zero_params_gather_part(w->z, w->wte_off, w->wte_off + w->wte_n, e);
}

/* Gradients are final after the pipeline. The buckets the backward hook has not started yet
 * start now; the tied embedding's shards go to (last stage) or come from (first stage) the
 * other end while the other buckets' reduce-scatters go on. */
static int sync_grads(struct worker *w, struct step_times *t, herr *e)
{
    double t0 = clock_mono_s();
    uint64_t b0 = w->dp ? comm_bytes_sent(w->dp) : 0;
    for (int i = 0; i < w->ntens; i++)
        if (report_tensor(w, i, e) != 0)
            return -1;
    if (w->tied && w->last && (tie_copy_out(w, e) != 0 || tie_send(w, e) != 0))
        return -1;
    if (w->tied && w->first && tie_grads_in(w, e) != 0)
        return -1;
    if (zero_reduce_wait(w->z, e) != 0)
        return -1;
    memset(w->reported, 0, (size_t)w->ntens * sizeof *w->reported);
    t->grad_sync = clock_mono_s() - t0;
    t->dp_time += t->grad_sync;
    t->dp_bytes += w->dp ? comm_bytes_sent(w->dp) - b0 : 0;
    return 0;
}

/* Global gradient norm over all stages and replicas (the tied embedding counted once), and in
 * the same all-reduces the step's loss (last stage, averaged over replicas) and the stop vote:
 * the step's only synchronisation of every rank, so a stage starts its next step as soon as its
 * own parameters are gathered. */
static int global_sq_norm(struct worker *w, float loss, int stop_req, double *sq, float *loss_avg,
                          int *stop_all, herr *e)
{
    double local = 0;
    if (engine_sq_norm(w->eng, engine_grads(w->eng), w->norm_lo, w->norm_hi, w->nnorm, &local,
                       e) != 0)
        return herr_wrap(e, "gradient norm");
    /* as two floats (high and low part) to keep most of the double's precision */
    float v[4] = {(float)local, 0, w->last && w->tpr == 0 ? loss : 0.0f, stop_req ? 1.0f : 0.0f};
    v[1] = (float)(local - (double)v[0]);
    if (w->tp && comm_all_reduce(w->tp, v, 4, e) != 0)
        return herr_wrap(e, "gradient norm");
    /* pipeline first: once a rank's data-parallel all-reduce is done, every pipeline group's is
     * (its replicas' values went into it), so nothing a rank sends after the norm (the first
     * stage's embedding shard) can delay another replica's norm message between the fabrics */
    if (w->pp && comm_all_reduce(w->pp, v, 4, e) != 0)
        return herr_wrap(e, "gradient norm");
    if (w->dp && comm_all_reduce(w->dp, v, 4, e) != 0)
        return herr_wrap(e, "gradient norm");
    *sq = ((double)v[0] + (double)v[1]) / ((double)w->D * (double)w->D);
    *loss_avg = v[2] / (float)w->D;
    *stop_all = v[3] > 0;
    return 0;
}

/* Which of a step's loss and global gradient norm (its square sq) is not finite, in words. */
static void nonfinite_what(char *out, size_t cap, float loss, double sq)
{
    double norm = sqrt(sq);
    const char *ln = isnan(loss) ? "NaN" : "infinite", *nn = isnan(norm) ? "NaN" : "infinite";
    if (!isfinite(loss) && !isfinite(norm))
        snprintf(out, cap, "its loss is %s and its global gradient norm %s", ln, nn);
    else if (!isfinite(loss))
        snprintf(out, cap, "its loss is %s (global gradient norm %.4g)", ln, norm);
    else
        snprintf(out, cap, "its global gradient norm is %s (loss %.4g)", nn, (double)loss);
}

/* A step whose loss or global gradient norm is not finite: skipped (the caller makes no update:
 * the parameters and AdamW's moments stay those of the last update, every replica's the same,
 * so nothing is gathered; its data is not read again), unless max_nonfinite steps in a row
 * already were: then the run fails, as a configuration error (a resume from the last checkpoint
 * would take the same path), its checkpoints untouched. Rank 0 tells the user of each skip. */
static int nonfinite_step(struct worker *w, long step, float loss, double sq, herr *e)
{
    int most = w->cfg->max_nonfinite;
    char what[128];
    nonfinite_what(what, sizeof what, loss, sq);
    if (w->nonfinite_run >= most)
        return herr_set_kind(e, HERR_CONFIG, "training diverged: step %ld: %s, %d step%s in a "
                             "row (spec.training.maxNonFiniteSteps skips at most %d); the "
                             "parameters are those of step %ld, the last update, and no "
                             "checkpoint holds a non-finite value: lower "
                             "spec.training.optimizer.lr or check the data", step, what,
                             w->nonfinite_run + 1, w->nonfinite_run ? "s" : "", most,
                             w->last_update);
    w->nonfinite_run++;
    if (w->rank == 0) {
        char msg[320];
        snprintf(msg, sizeof msg, "step %ld skipped: %s; no parameter changed (%d in a row, at "
                 "most %d: spec.training.maxNonFiniteSteps)", step, what, w->nonfinite_run, most);
        log_warn("%s", msg);
        if (w->hooks && w->hooks->on_notice)
            w->hooks->on_notice(w->hooks->ctx, "NonFiniteStep", msg);
    }
    return 0;
}

static int run_step(struct worker *w, struct pipe_runner *pr, struct trainer_report *rep, int stop_req,
                    int *stop_all, herr *e)
{
    struct step_times t = {0};
    struct devmem_stats d0, d1;
    int profiled = w->cfg->profile_step == w->step + 1;
    if (profiled && engine_profile_begin(w->eng, e) != 0)
        return -1;
    devmem_read_stats(w->mem, &d0);
    double t0 = clock_mono_s();
    w->param_wait = 0;
    if (engine_zero_grads(w->eng, e) != 0)
        return -1;
    float loss_sum = 0;
    if (pipe_run(pr, &loss_sum, e) != 0 || tr_params_ready(w, e) != 0 ||
        (w->last && engine_loss_take(w->eng, &loss_sum, e) != 0))
        return -1;
    t.param_sync = w->param_wait;
    t.pipeline = clock_mono_s() - t0 - t.param_sync;
    pipe_run_times(pr, &t.pipe_wait, &t.pipe_send);
    int overlapped = zero_buckets_started(w->z);
    if (sync_grads(w, &t, e) != 0)
        return -1;
    if (w->hooks && w->hooks->grads_final)
        w->hooks->grads_final(w->hooks->ctx, w->step + 1, engine_params(w->eng),
                              engine_grads(w->eng), gpt_stage_num_params(w->gs));
    double t1 = clock_mono_s();
    double sq = 0;
    float loss = 0;
    if (global_sq_norm(w, loss_sum / (float)w->M, stop_req, &sq, &loss, stop_all, e) != 0)
        return -1;
    float lr = lr_at(&w->lr, w->step);
    long step = w->step + 1;
    /* every rank has the same norm and loss (NaN and infinity survive the sums): all skip */
    int skipped = !isfinite(sq) || !isfinite(loss);
    if (skipped && nonfinite_step(w, step, loss, sq, e) != 0)
        return -1;
    if (!skipped) {
        w->nonfinite_run = 0;
        w->last_update = step;
    }
    if (!skipped && w->tied && w->first && tie_send(w, e) != 0)
        return -1;
    float clip = grad_clip_scale(sq, w->cfg->grad_clip), scale = clip / (float)w->D;
    /* In forward order, each bucket's all-gather issued as soon as its shard is updated: the
     * next forward's first blocks arrive first, and the gather overlaps the rest of the update
     * and the next forward (params_needed). The last stage updates its embedding copy once the
     * first stage's shard is in (tie_head_update). */
    if (!skipped) {
        w->params_pending = 1;
        w->tie_params_due = w->tied && w->last;
        w->tie_lr = lr;
        w->tie_step = step;
        w->tie_scale = scale;
        if (update_shards(w, lr, step, scale, e) != 0)
            return -1;
    }
    t.optimizer = clock_mono_s() - t1;
    w->step++;
    double dt = clock_mono_s() - t0;
    devmem_read_stats(w->mem, &d1);
    *rep = (struct trainer_report){
        .step = w->step, .loss = loss, .lr = lr, .grad_norm = (float)sqrt(sq),
        .tokens_per_s = (double)w->D * w->M * w->cfg->B * w->cfg->T / (dt > 0 ? dt : 1e-9),
        .step_s = dt, .pipeline_s = t.pipeline, .pipe_wait_s = t.pipe_wait,
        .pipe_send_s = t.pipe_send, .grad_sync_s = t.grad_sync,
        .optimizer_s = t.optimizer, .param_sync_s = t.param_sync,
        .dp_link_bytes_per_s = t.dp_time > 0 ? (double)t.dp_bytes / t.dp_time : 0,
        .stage = w->stage, .replica = w->replica, .buckets_overlapped = overlapped,
        .buckets = zero_num_buckets(w->z), .host_syncs = d1.host_syncs - d0.host_syncs,
        .h2d_bytes = d1.bytes_h2d - d0.bytes_h2d, .d2h_bytes = d1.bytes_d2h - d0.bytes_d2h,
        .profiled = profiled, .skipped = skipped, .nonfinite_run = w->nonfinite_run};
    /* after the step's figures: its wait for the engine is the profile's, not the step's */
    if (profiled && engine_profile_end(w->eng, &rep->profile, e) != 0)
        return -1;
    return 0;
}

/* Whether an evaluation follows the step just done (the same answer on every rank). */
static int eval_due(const struct worker *w)
{
    const struct trainer_config *c = w->cfg;
    if (c->eval_batches <= 0 || !w->data->eval_batch)
        return 0;
    return w->step == c->steps || (c->eval_every > 0 && w->step % c->eval_every == 0);
}

/* The held-out loss: eval_batches micro-batches in all, shared among the replicas (replica r
 * takes global micro-batches k * D + r: the same set whatever the data degree), forwards only
 * through the pipeline; the last stages' sum over the replicas, over eval_batches. Every rank
 * gets it (the all-reduces run in the norm's order: tensor, pipeline, data). */
static int evaluate(struct worker *w, struct pipe_runner *pr, float *loss, herr *e)
{
    int G = w->cfg->eval_batches;
    int K = w->replica < G ? (G - w->replica + w->D - 1) / w->D : 0; /* this replica's share */
    float sum = 0;
    if (tr_params_ready(w, e) != 0)
        return -1;
    w->evaluating = 1;
    int rc = pipe_run_forward(pr, K, &sum, e);
    w->evaluating = 0;
    if (rc != 0 || (w->last && engine_loss_take(w->eng, &sum, e) != 0))
        return -1;
    float v = w->last && w->tpr == 0 ? sum : 0.0f;
    if ((w->tp && comm_all_reduce(w->tp, &v, 1, e) != 0) ||
        (w->pp && comm_all_reduce(w->pp, &v, 1, e) != 0) ||
        (w->dp && comm_all_reduce(w->dp, &v, 1, e) != 0))
        return herr_wrap(e, "the evaluation's loss");
    *loss = v / (float)G;
    return 0;
}

int trainer_run(const struct trainer_config *c, const struct plan_doc *rt, int rank,
                const struct trainer_data *data, const struct trainer_hooks *hooks, herr *e)
{
    struct worker w;
    struct tcp_listener *l = NULL;
    struct pipe_runner *pr = NULL;
    int rc = -1;
    if (worker_init(&w, c, rt, rank, data, e) != 0)
        goto out;
    if (!c->listener && tcp_listener_open(&l, c->listen_host, rt->ranks[rank].port, e) != 0)
        goto out;
    if (open_comms(&w, c->listener ? c->listener : l, e) != 0)
        goto out;
    if (worker_optim_init(&w, e) != 0)
        goto out;
    int resumed = 0;
    if (c->checkpoint_dir && tr_ckpt_resume(&w, hooks, &resumed, e) != 0)
        goto out;
    if (!resumed && c->init_from && c->init_from[0] && tr_init_from_llmc(&w, e) != 0)
        goto out;
    w.hooks = hooks;
    w.last_update = w.step;
    struct pipe_stage_ops ops = {&w, (size_t)c->B * (size_t)c->T * (size_t)c->model.channels,
                                 stage_forward, stage_backward};
    struct pipe_config pc = {.stage = w.stage, .stages = w.P, .micro_batches = w.M,
                             .schedule = c->schedule,
                             .prev = w.prev, .next = w.next,
                             .wire = c->pipe_wire, .slices = c->token_slices,
                             .bounds = c->slice_bounds, .mem = w.mem,
                             .act_bytes = engine_act_bytes(w.eng), .tp = w.tp,
                             .warmup_extra = rt->warmup_extra};
    if (pipe_runner_create(&pr, &pc, &ops, e) != 0)
        goto out;
    struct devmem_stats ds;
    devmem_read_stats(w.mem, &ds); /* the planner prices these (cost_stage_memory_parts) */
    log_info("rank %d: stage %d, layers [%d, %d): %llu bytes of %s memory beside the engine's "
             "stage (optimizer state, tied embedding, pipeline buffers)", rank, w.stage, w.lo, w.hi,
             (unsigned long long)ds.bytes_alloc, w.mem->name);
    if (rt->warmup_extra > 0 && c->schedule == SCHED_1F1B && w.stage < w.P - 1)
        log_info("rank %d: 1F1B warm-up %d micro-batches deeper (%d in flight)", rank,
                 rt->warmup_extra, w.slots);
    if (c->token_slices > 1) {
        char sl[512];
        plan_doc_slice_lengths(c->slice_bounds, c->token_slices, sl, sizeof sl);
        log_info("rank %d: TeraPipe: %d token slices of %s tokens of %d", rank, c->token_slices,
                 sl, c->T);
    }
    int stop = 0;
    while (w.step < c->steps && !stop) {
        int want_stop = hooks && hooks->should_stop ? hooks->should_stop(hooks->ctx) : 0;
        struct trainer_report rep;
        if (run_step(&w, pr, &rep, want_stop, &stop, e) != 0) {
            herr_wrap(e, "rank %d (stage %d, replica %d), step %ld", rank, w.stage, w.replica,
                      w.step + 1);
            goto out;
        }
        /* the step's checkpoint before its evaluation: an evaluation that fails (its data
         * gone) loses no step; a periodic one is not written at a skipped step: it would hold
         * the last update's parameters and push an older checkpoint out while the run may be
         * diverging */
        int every = c->checkpoint_every;
        if (c->checkpoint_dir && (stop || w.step == c->steps ||
                                  (every > 0 && w.step % every == 0 && !rep.skipped)) &&
            tr_ckpt_save(&w, e) != 0)
            goto out;
        if (!stop && eval_due(&w)) {
            double t0 = clock_mono_s();
            if (evaluate(&w, pr, &rep.eval_loss, e) != 0) {
                herr_wrap(e, "rank %d (stage %d, replica %d), evaluation after step %ld", rank,
                          w.stage, w.replica, w.step);
                goto out;
            }
            rep.evaluated = 1;
            rep.eval_s = clock_mono_s() - t0;
        }
        if (hooks && hooks->on_step && hooks->on_step(hooks->ctx, &rep) != 0) {
            herr_set(e, "training stopped by the progress hook at step %ld", w.step);
            goto out;
        }
    }
    /* the trained parameters in fp32 (bf16 parameters: every replica's masters) */
    if (tr_params_ready(&w, e) != 0 || zero_master_gather_host(w.z, gpt_stage_params(w.gs), e) != 0)
        goto out;
    if (hooks && hooks->on_end)
        hooks->on_end(hooks->ctx, w.gs, w.step);
    rc = 0;
out:
    pipe_runner_free(pr);
    worker_free(&w);
    tcp_listener_close(l);
    return rc;
}
