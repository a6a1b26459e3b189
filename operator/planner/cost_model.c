#include "cost_model.h"

#include "core_spread.h"
#include "json.h"
#include "plan_doc.h"
#include "pipe_order.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-stage arrays of one simulation (struct sim_view): SIM_STATE of state, SIM_IN of inputs. */
#define SIM_STATE 5
#define SIM_IN 13

void cost_links_default(struct cost_links *l)
{
    l->tcp_gbps = 25;
    l->gateway_gbps = 0;
    l->tcp_latency_us = 50;
    l->tcp_efficiency = 0.8;
    l->ib_latency_us = 3;
    l->roce_latency_us = 5;
    l->rdma_efficiency = 0.9;
    l->intra_node_gbps = 2400;
    l->intra_node_latency_us = 5;
    /* bench_comm 2 on the 2-core VM (2026-11-29): 1.3-1.6 GB/s send/recv from 16 MiB, a 1-4 KiB
     * message 146 us; docs/hetero.md's fit gave 110 us to emulated GPUs' loopback sums */
    l->loopback_gbps = 10;
    l->loopback_latency_us = 100;
    l->compute_efficiency = 0.6;
    l->memory_gbps = 1500;
    l->optimizer_bytes_per_param = 32; /* AdamW: p, g, m, v read, p, m, v written; the norm: g */
    l->overlap = 1.0;
    l->shared_cores = 0;
    l->pinned_cores = 0;
    l->op_overhead_us = 0;
    l->send_buffers = 2; /* noderuntime/train/pipeline.c: SEND_RING asynchronous sends */
}

struct link_field {
    const char *key;
    size_t off;
    double min, max;  /* allowed range; min exclusive when min_open */
    int min_open;     /* 2: a switch, exactly min or max; 3: an integer in [min, max] */
};

#define LF(k, lo, hi, open) {#k, offsetof(struct cost_links, k), lo, hi, open}
#define LF_SWITCH(k) {#k, offsetof(struct cost_links, k), 0, 1, 2}
#define LF_INT(k, lo, hi) {#k, offsetof(struct cost_links, k), lo, hi, 3}
static const struct link_field link_fields[] = {
    LF(tcp_gbps, 0, 1e6, 1),
    LF(gateway_gbps, 0, 1e6, 0),
    LF(tcp_latency_us, 0, 1e7, 0),
    LF(tcp_efficiency, 0, 1, 1),
    LF(ib_latency_us, 0, 1e7, 0),
    LF(roce_latency_us, 0, 1e7, 0),
    LF(rdma_efficiency, 0, 1, 1),
    LF(intra_node_gbps, 0, 1e7, 1),
    LF(intra_node_latency_us, 0, 1e7, 0),
    LF(loopback_gbps, 0, 1e7, 1),
    LF(loopback_latency_us, 0, 1e7, 0),
    LF(compute_efficiency, 0, 1, 1),
    LF(memory_gbps, 0, 1e7, 1),
    LF(optimizer_bytes_per_param, 0, 1e3, 0),
    LF(overlap, 0, 1, 0),
    LF(shared_cores, 0, 1e6, 0),
    LF_SWITCH(pinned_cores),
    LF(op_overhead_us, 0, 1e7, 0),
    LF_INT(send_buffers, 0, COST_SEND_BUFFERS_MAX),
};
#define N_LINK_FIELDS (sizeof link_fields / sizeof link_fields[0])

static const char *field_rule(const struct link_field *f, char *buf, size_t cap)
{
    if (f->min_open == 2)
        snprintf(buf, cap, "must be %g or %g", f->min, f->max);
    else if (f->min_open == 3)
        snprintf(buf, cap, "must be an integer in [%g, %g]", f->min, f->max);
    else
        snprintf(buf, cap, "must be a number in %s%g, %g]", f->min_open ? "(" : "[", f->min, f->max);
    return buf;
}

static int field_ok(const struct link_field *f, double v)
{
    if (!isfinite(v) || v > f->max)
        return 0;
    if (f->min_open == 2)
        return v == f->min || v == f->max;
    if (f->min_open == 3)
        return v >= f->min && v == floor(v);
    return f->min_open ? v > f->min : v >= f->min;
}

int cost_links_apply_json(struct cost_links *l, const cJSON *j, const char *where, herr *e)
{
    char rule[96];
    if (!j || cJSON_IsNull(j))
        return 0;
    if (!cJSON_IsObject(j))
        return herr_set(e, "%s: must be an object of link constants", where);
    for (const cJSON *it = j->child; it; it = it->next) {
        const struct link_field *f = NULL;
        for (size_t i = 0; i < N_LINK_FIELDS; i++)
            if (strcmp(link_fields[i].key, it->string) == 0)
                f = &link_fields[i];
        if (!f) {
            char path[256];
            json_key_path(path, sizeof path, where, it->string);
            return herr_set(e, "%s: unknown link constant (known: tcp_gbps, gateway_gbps, tcp_latency_us, "
                            "tcp_efficiency, ib_latency_us, roce_latency_us, rdma_efficiency, "
                            "intra_node_gbps, intra_node_latency_us, loopback_gbps, "
                            "loopback_latency_us, compute_efficiency, "
                            "memory_gbps, optimizer_bytes_per_param, overlap, shared_cores, pinned_cores, "
                            "op_overhead_us, send_buffers)", path);
        }
        if (!cJSON_IsNumber(it) || !field_ok(f, it->valuedouble))
            return herr_set(e, "%s.%s: %s", where, f->key, field_rule(f, rule, sizeof rule));
        *(double *)((char *)l + f->off) = it->valuedouble;
    }
    return 0;
}

int cost_links_check(const struct cost_links *l, herr *e)
{
    char rule[96];
    for (size_t i = 0; i < N_LINK_FIELDS; i++) {
        const struct link_field *f = &link_fields[i];
        double v = *(const double *)((const char *)l + f->off);
        if (!field_ok(f, v))
            return herr_set(e, "links.%s: %s", f->key, field_rule(f, rule, sizeof rule));
    }
    if (l->pinned_cores != 0 && l->shared_cores < 1)
        return herr_set(e, "links.pinned_cores: 1 needs links.shared_cores >= 1 (the cores the "
                        "ranks are pinned to; got %g)", l->shared_cores);
    return 0;
}

cJSON *cost_links_to_json(const struct cost_links *l)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    for (size_t i = 0; i < N_LINK_FIELDS; i++) {
        double v = *(const double *)((const char *)l + link_fields[i].off);
        if (!cJSON_AddNumberToObject(o, link_fields[i].key, v)) {
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

/* ---- formulas ---- */

double cost_layer_fwd_flops(const struct cost_job *j)
{
    double b = j->micro_batch_size, s = j->model.seq_len, h = j->model.hidden;
    return 24.0 * b * s * h * h + 4.0 * b * s * s * h;
}

double cost_head_fwd_flops(const struct cost_job *j)
{
    return 2.0 * j->micro_batch_size * (double)j->model.seq_len * j->model.hidden * (double)j->model.vocab;
}

double cost_layer_params(const struct cost_job *j)
{
    double h = j->model.hidden;
    return 12.0 * h * h + 13.0 * h;
}

double cost_embedding_params(const struct cost_job *j)
{
    return ((double)j->model.vocab + j->model.seq_len) * j->model.hidden;
}

/* The vocabulary as the engine pads it (gpt.c: a multiple of 128). */
static double padded_vocab(const struct cost_job *j)
{
    return ceil(j->model.vocab / 128.0) * 128.0;
}

double cost_rank_params(const struct cost_job *j, int layers, int first, int last)
{
    double t = j->tensor > 1 ? j->tensor : 1, C = j->model.hidden, V = padded_vocab(j);
    /* split: the blocks' matrices and column-parallel biases (qkv, fc), wte's vocabulary rows;
     * replicated: the blocks' LayerNorms and row-parallel biases (attn.proj, mlp.proj), wpe,
     * ln_f */
    double split = layers * (12.0 * C * C + 7.0 * C) + (first ? V * C : 0) +
                   (last && !first ? V * C : 0);
    double repl = layers * 6.0 * C + (first ? (double)j->model.seq_len * C : 0) +
                  (last ? 2.0 * C : 0);
    return split / t + repl;
}

double cost_activation_bytes(const struct cost_job *j)
{
    int b = j->act_elem_bytes > 0 ? j->act_elem_bytes : j->elem_bytes;
    return (double)j->micro_batch_size * j->model.seq_len * j->model.hidden * b;
}

double cost_link_bytes(const struct cost_job *j)
{
    return cost_activation_bytes(j) / (j->tensor > 1 ? j->tensor : 1);
}

struct cost_link cost_link_make(double gbps, double lat_us, double flows)
{
    struct cost_link k;
    k.bw = gbps * 1e9 / 8.0 / (flows > 1 ? flows : 1);
    k.lat = lat_us * 1e-6;
    return k;
}

/* The engine's workspace for cuBLASLt (cuda_common.cuh LT_WORKSPACE). */
#define MEM_LT_WORKSPACE (32.0 * 1048576.0)
/* The pipeline's send ring (pipeline.c SEND_RING). */
#define MEM_SEND_RING 2

/* The chunks the engine's column sums keep partial sums for (noderuntime/engine/cuda/
 * colsum_plan.h, colsum_max_chunks): 256, or BT/64 when more (at most 65,535), or BT/8 when
 * fewer. */
static double colsum_partial_rows(double BT)
{
    double t = ceil(BT / 64.0), few = ceil(BT / 8.0);
    return t < 256.0 ? fmin(256.0, few) : fmin(t, 65535.0);
}

/* Flash attention's dS workspace (flash_plan.h, flash_ds_bytes): NH heads of b sequences of sq,
 * bf16, none past 1 GiB (the dQ kernel then recomputes) */
static double mem_flash_ds(double NH, double b, double sq)
{
    double bytes = NH * b * sq * ceil(sq / 64.0) * 64.0 * 2.0;
    return bytes <= 1073741824.0 ? bytes : 0.0;
}

/* Whether the engine keeps no T x T scores: bf16 with flash attention's head sizes (flash.cu) */
static int mem_flash(const struct cost_job *j)
{
    int hs = j->model.heads > 0 ? j->model.hidden / j->model.heads : 0;
    return j->elem_bytes == 2 && (hs == 16 || hs == 32 || hs == 64 || hs == 128);
}

void cost_stage_memory_parts(const struct cost_job *j, int layers, int s, int n,
                             struct cost_memory *out)
{
    int first = s == 0, last = s == n - 1, t = j->tensor;
    double V = padded_vocab(j);
    double per_rank = cost_rank_params(j, layers, first, last);
    double X = j->elem_bytes; /* the engine's activation type: bf16 2, fp32 4 */
    memset(out, 0, sizeof *out);
    out->params = per_rank;
    /* fp32 parameters and gradients, plus the bf16 copy the products read */
    out->weights_grads = per_rank * (8.0 + (X == 2 ? 2.0 : 0.0));
    /* ZeRO-1: the two moments of this replica's shard; with a bf16 parameter gather, fp32
     * masters of the shard and the whole stage's bf16 wire */
    double shard = per_rank / j->data;
    out->optimizer = shard * 8.0;
    if (j->gather_masters)
        out->optimizer += shard * 4.0 + (j->data > 1 ? per_rank * 2.0 : 0.0);
    double b = j->micro_batch_size, sq = j->model.seq_len, C = j->model.hidden;
    double NH = (double)j->model.heads / t, BT = b * sq, BTC = BT * C;
    int flash = mem_flash(j);
    /* per layer and micro-batch: ln1, res2, ln2, res3 (C), qkv, attention out (4C/t), the MLP's
     * two 4C/t, the LayerNorm statistics, and flash's row statistics or the T x T scores */
    double act_layer = BTC * (4.0 + 12.0 / t) * X + 4.0 * BT * 4.0 +
                       (flash ? NH * BT * 4.0 : NH * b * sq * sq * X);
    /* token slices: the bounds' count once chosen, else the count the job asks for */
    int S = j->slices > 1 && j->slice_bounds ? j->slices : j->mem_slices > 1 ? j->mem_slices : 1;
    out->slots = pipe_slots(j->schedule, s, n, j->micro_batches, S, j->warmup_extra);
    /* per micro-batch besides the layers: the stage's input and the tokens; sliced, the fp32
     * accumulator of the q, k, v gradients and, on the first stage, the embeddings' gradient
     * (cuda/gpt_cuda_slices.cu and gpt_pass.c: a slot's, at its first sliced backward) */
    double sliced = S > 1 ? layers * 3.0 * BTC / t * 4.0 + (first ? BTC * X : 0) : 0;
    out->activations = out->slots * (layers * act_layer + BTC * X + 5.0 * BT * 4.0 + sliced);
    if (last) /* the final LayerNorm, the logits (padded vocabulary / t), the losses */
        out->logits = out->slots * (BTC * X + BT * V / t * X + 3.0 * BT * 4.0 +
                                    (t > 1 ? 2.0 * BT * 4.0 : 0.0));
    /* once: the workspace, backward's buffers (flash: the row sums and the dS its dQ kernel reads,
     * [b][NH][T][T rounded up to 64] bf16), the column sums' partials */
    out->scratch = MEM_LT_WORKSPACE + BTC * X * 2.0 + BTC * 4.0 / t * X + 3.0 * BTC / t * X +
                   (flash ? NH * BT * 4.0 + mem_flash_ds(NH, b, sq)
                          : 7.0 * BTC / t * X + NH * b * sq * sq * X) +
                   (t > 1 ? fmax(BTC, BT * (2.0 * t + 1.0)) * 4.0 : 0.0) +
                   colsum_partial_rows(BT) * 2.0 * 4.0 * C * 4.0;
    /* the pipeline (pipeline.c): a received activation per slot and the gradient send ring on
     * all but the first stage, the activation send ring and a received gradient on all but the
     * last; bf16 wire buffers when an fp32 engine sends bf16 */
    int convert = j->act_elem_bytes == 2 && X == 4 && n > 1;
    double unit = BTC * X, ring = MEM_SEND_RING * (unit + (convert ? BTC * 2.0 : 0.0));
    if (!first)
        out->pipeline += out->slots * unit + ring;
    if (!last)
        out->pipeline += unit + ring;
    if (convert)
        out->pipeline += BTC * 2.0;
    /* the tied embedding's exchange between the first and the last stage (trainer.c): the
     * rank's share of wte in fp32, out and in, and the last stage's sum */
    if (n > 1 && (first || last))
        out->pipeline += V * C / t * 4.0 * (last ? 3.0 : 2.0);
    out->total = out->weights_grads + out->optimizer + out->activations + out->logits +
                 out->scratch + out->pipeline;
}

double cost_stage_memory(const struct cost_job *j, int layers, int s, int n)
{
    struct cost_memory m;
    cost_stage_memory_parts(j, layers, s, n, &m);
    return m.total;
}

/* Ring all-reduce of `bytes` over `n` members. */
static double allreduce_time(double bytes, int n, struct cost_link k)
{
    if (n <= 1)
        return 0;
    return 2.0 * (n - 1) / n * bytes / k.bw + 2.0 * (n - 1) * k.lat;
}

/* Ring reduce-scatter (or all-gather) of `bytes` over `n` members. */
static double scatter_time(double bytes, int n, struct cost_link k)
{
    if (n <= 1)
        return 0;
    return (double)(n - 1) / n * bytes / k.bw + (n - 1) * k.lat;
}

/* The bytes of one element the trainer sums and gathers between ranks whatever the engine's
 * type: the tensor group's sums (engine.h's tp_sum takes fp32 buffers, both engines), the
 * gradients' reduce-scatter (zero.c: fp32 gradients), the parameters' all-gather without
 * paramGatherDtype bf16, and the tied embedding's gradient shards (trainer.c). */
#define WIRE_FP32 4.0

/* ZeRO's buckets (noderuntime/train/zero.c: at most PLAN_ZERO_BUCKET_FLOATS, never across a
 * block, the tied embedding or the other tensors outside the blocks): each is a collective of
 * its own, so each pays a ring's latency. */
static double buckets_of(double floats)
{
    return floats > 0 ? ceil(floats / (double)PLAN_ZERO_BUCKET_FLOATS) : 0;
}

/* The buckets of a stage's rank: its blocks, on the first stage the token and position
 * embeddings, on the last the final LayerNorm and (not also first) the head's copy of wte. */
static double stage_buckets(const struct cost_job *j, int layers, int first, int last)
{
    double t = j->tensor, h = j->model.hidden, V = padded_vocab(j);
    return layers * buckets_of(cost_rank_params(j, 1, 0, 0)) +
           (first ? buckets_of(V * h / t) + buckets_of(j->model.seq_len * h) : 0) +
           (last ? buckets_of(2.0 * h) + (!first ? buckets_of(V * h / t) : 0) : 0);
}

/* Ring reduce-scatter (or all-gather) of `bytes` over `n` members in `k` collectives. */
static double buckets_time(double bytes, int n, double k, struct cost_link l)
{
    if (n <= 1)
        return 0;
    return (double)(n - 1) / n * bytes / l.bw + k * (n - 1) * l.lat;
}

/* The share of a micro-batch's compute in its first token slice, which is what hides the
 * data-parallel traffic when slices run: the engine's backward hook fires (and a block's
 * reduce-scatter starts) at the slice that reaches t0 = 0, the last of a micro-batch's
 * backward, and the next step's forward needs a block's parameters in its first slice. 1
 * without slices. */
static double first_slice_share(const struct cost_job *j)
{
    if (j->slices > 1 && j->slice_bounds)
        return cost_slice_compute_share(j, j->slice_bounds[0], j->slice_bounds[1]);
    return 1.0;
}

void cost_stage_terms(const struct cost_job *j, const struct cost_links *l,
                      const struct cost_stage *st, int first, int last,
                      const struct cost_link *tie, struct cost_stage_terms *out)
{
    int t = j->tensor;
    double flops = st->layers * cost_layer_fwd_flops(j) + (last ? cost_head_fwd_flops(j) : 0);
    double rate = t * st->tflops * 1e12 * l->compute_efficiency;
    out->fwd = flops / rate;
    out->bwd = 2.0 * out->fwd;

    struct cost_link intra = cost_link_make(l->intra_node_gbps, l->intra_node_latency_us, 1);
    /* The tensor group's sums (noderuntime/engine/gpt_pass.c and cuda/: each over fp32
     * buffers): forward, two per block (the row-parallel projections), the first stage's
     * embedding, the last stage's loss statistics (each row's max and sum of exponentials per
     * rank and the target's logit: b s (2t + 1) floats); backward, two per block (the
     * column-parallel layers' input gradients) and the last stage's head input gradient. */
    double BT = (double)j->micro_batch_size * j->model.seq_len;
    double act = BT * j->model.hidden * WIRE_FP32;
    double loss_stats = BT * (2.0 * t + 1.0) * WIRE_FP32;
    int rows_f = 2 * st->layers + (first ? 1 : 0), rows_b = 2 * st->layers + (last ? 1 : 0);
    double ar_lat = t > 1 ? 2.0 * (t - 1) * intra.lat : 0; /* one ring all-reduce's latency */
    out->tp_fwd = rows_f * allreduce_time(act, t, intra) +
                  (last ? allreduce_time(loss_stats, t, intra) : 0);
    out->tp_bwd = rows_b * allreduce_time(act, t, intra);
    out->tp_fwd_lat = (rows_f + (last ? 1 : 0)) * ar_lat;
    out->tp_bwd_lat = rows_b * ar_lat;
    /* A token slice sums each sequence's rows apart (a slice is one row block per sequence):
     * the per-row sums pay their latency b times; the loss statistics (one launch over the
     * slice's rows) and the embedding (the whole micro-batch at its first slice) once. */
    double b = j->micro_batch_size;
    out->tp_fwd_slice_lat = (2.0 * st->layers * b + (first ? 1 : 0) + (last ? 1 : 0)) * ar_lat;
    out->tp_bwd_slice_lat = rows_b * b * ar_lat;
    /* scatter-gather (Megatron-LM; noderuntime/train/pipeline.c): each of the t tensor ranks
     * receives 1/t of a unit from its peer, then the group all-gathers the t chunks, in the
     * engine's activation type */
    double unit = BT * j->model.hidden * j->elem_bytes;
    out->gather = scatter_time(unit, t, intra);
    out->gather_lat = t > 1 ? (t - 1) * intra.lat : 0;

    double per_rank = cost_rank_params(j, st->layers, first, last);
    /* the gradients are reduce-scattered in fp32, the updated parameters all-gathered in
     * gather_elem_bytes (2 with paramGatherDtype bf16, else fp32), each bucket a ring of its own */
    double gb = j->gather_elem_bytes > 0 ? j->gather_elem_bytes : WIRE_FP32;
    double nbk = stage_buckets(j, st->layers, first, last);
    double rs = buckets_time(per_rank * WIRE_FP32, j->data, nbk, st->dp);
    double ag = buckets_time(per_rank * gb, j->data, nbk, st->dp);
    /* The engine's buckets are cut at blocks (noderuntime/train/trainer.c): a block's reduce-scatter
     * starts when its backward in the last micro-batch is done, and the next step's forward
     * reads a block once its all-gather is done. With n blocks, what the other n-1 blocks'
     * compute cannot hide is exposed: max(X/n, X - overlap * compute * (n-1)/n). With token
     * slices that compute is the first slice's (first_slice_share). */
    double nb = st->layers > 1 ? st->layers : 1, cw0 = first_slice_share(j);
    out->rs_exposed = fmax(rs / nb, rs - l->overlap * out->bwd * cw0 * (nb - 1) / nb);
    out->ag_exposed = fmax(ag / nb, ag - l->overlap * out->fwd * cw0 * (nb - 1) / nb);
    /* The embedding tie (noderuntime/train/trainer.c, "the tied embedding"): each replica's 1/d
     * shard of the head's fp32 gradient goes from the last stage to the first as the last
     * stage's backward ends; the first stage's goes back after the norm, for the last stage's
     * next forward. `tie` is one such transfer. */
    out->tie = 0;
    if (tie && (first || last) && !(first && last))
        out->tie = padded_vocab(j) * j->model.hidden / t * WIRE_FP32 / j->data / tie->bw +
                   tie->lat;
    out->dp_exposed = out->ag_exposed + fmax(out->rs_exposed, out->tie);
    /* The optimizer's pass over the rank's shard (norm + AdamW), then what the parameters'
     * update leads to on the whole stage before its products read them: a bf16 engine's copy
     * of them refreshed (cuda/gpt_cuda_host.cu refresh_wx: 4 bytes read, 2 written), and with
     * a bf16 all-gather the gathered bf16 widened to fp32 first (zero.c: 2 read, 4 written). */
    double membw = (st->memory_gbps > 0 ? st->memory_gbps : l->memory_gbps) * 1e9;
    double copies = (j->elem_bytes == 2 ? 6.0 : 0.0) +
                    (j->gather_masters && j->data > 1 ? 6.0 : 0.0);
    out->optimizer = per_rank / j->data * l->optimizer_bytes_per_param / membw;
    out->param_copies = per_rank * copies / membw;
}

/* ---- schedule simulation ---- */

int cost_sim_init(struct cost_sim *s, int stages, int micro_batches, herr *e)
{
    memset(s, 0, sizeof *s);
    if (stages < 1 || micro_batches < 1)
        return herr_set(e, "cost model: need at least one stage and one micro-batch");
    size_t pm = (size_t)stages * (size_t)micro_batches, P = (size_t)stages;
    /* farr, barr: P*m each; lastf: m; per stage: SIM_STATE state, SIM_IN inputs; the send
     * rings: 2 * P * COST_SEND_BUFFERS_MAX */
    s->buf = malloc(sizeof(double) * (2 * pm + (size_t)micro_batches + (SIM_STATE + SIM_IN) * P +
                                      2 * P * COST_SEND_BUFFERS_MAX));
    s->ibuf = malloc(sizeof(int) * 5 * P); /* idx, forward / backward sends, worklist, queued */
    if (!s->buf || !s->ibuf) {
        cost_sim_free(s);
        return herr_set(e, "cost model: out of memory for %d stages x %d micro-batches", stages,
                        micro_batches);
    }
    s->cap_stages = stages;
    s->cap_mb = micro_batches;
    return 0;
}

void cost_sim_free(struct cost_sim *s)
{
    free(s->buf);
    free(s->ibuf);
    free(s->cw);
    free(s->pin_first);
    free(s->pin_busy);
    free(s->rate);
    s->buf = NULL;
    s->ibuf = NULL;
    s->cw = s->tw = NULL;
    s->pin_first = s->pin_count = NULL;
    s->pin_busy = s->rate = NULL;
    s->cap_stages = s->cap_mb = s->cap_slices = 0;
    s->cap_ranks = s->cap_cores = s->cap_rate = 0;
}

double cost_slice_compute_share(const struct cost_job *j, int t0, int t1)
{
    double T = j->model.seq_len, h = j->model.hidden;
    double lin = 24.0 * h * T, att = 4.0 * T * T * h; /* cost_layer_fwd_flops per sequence */
    double pairs = T * (T + 1) / 2;
    double p = ((double)t1 * (t1 + 1) - (double)t0 * (t0 + 1)) / 2;
    return (lin * (t1 - t0) / T + att * p / pairs) / (lin + att);
}

/* The slices' compute and token shares into the sim (S = 1: the whole micro-batch). */
static int sim_slices(const struct cost_job *j, struct cost_sim *sim)
{
    int S = j->slices > 1 && j->slice_bounds ? j->slices : 1;
    if (S > sim->cap_slices) {
        double *w = realloc(sim->cw, 2 * (size_t)S * sizeof *w);
        if (!w)
            return -1;
        sim->cw = w;
        sim->cap_slices = S;
    }
    sim->tw = sim->cw + sim->cap_slices;
    sim->S = S;
    for (int k = 0; k < S; k++) {
        int t0 = S > 1 ? j->slice_bounds[k] : 0, t1 = S > 1 ? j->slice_bounds[k + 1] : j->model.seq_len;
        sim->cw[k] = S > 1 ? cost_slice_compute_share(j, t0, t1) : 1;
        sim->tw[k] = (double)(t1 - t0) / j->model.seq_len;
    }
    return 0;
}

/* One simulation's arrays, views into cost_sim's buffers. Inputs per stage: an op's compute
 * (fwd, bwd: per micro-batch, times the unit's compute share), the tensor group's all-reduces
 * inside it (tpf, tpb: their bytes' time per micro-batch, times the unit's token share; tplf,
 * tplb: their latency, once per unit: a token slice runs every all-reduce), the tensor group's all-gather of
 * a received unit before it (gf before a forward, gb before a backward: per micro-batch, times
 * the unit's token share, plus gfl / gbl once), the link to the next stage (xfer: one link's
 * transfer of a micro-batch's share, times the token share; lat: once per message) and the
 * stage's start. State: each stage's clock (t), when each direction of its link is free (lf to
 * the next stage, lb to the previous), when it may start its next op (freeat: a blocking send
 * holds it), its running op's remaining work (rem: shared cores), the arrival of every unit
 * (farr, barr), the last stage's forward ends (lastf), and per stage and direction the ends of
 * its last nbuf sends (ringf, ringb: an asynchronous send's buffer is free again then). */
struct sim_view {
    int P, U, S, nbuf;
    double *farr, *barr, *lastf;
    double *t, *lf, *lb, *freeat, *rem;
    double *fwd, *bwd, *tpf, *tpb, *tplf, *tplb, *gf, *gb, *gfl, *gbl, *xfer, *lat, *start;
    double *ringf, *ringb;
    int *idx, *nsf, *nsb;
};

static void sim_view(struct cost_sim *sim, int P, int U, int nbuf, struct sim_view *v)
{
    size_t pu = (size_t)P * (size_t)U;
    double *b = sim->buf;
    v->P = P;
    v->U = U;
    v->S = sim->S;
    v->nbuf = nbuf;
    v->farr = b;
    v->barr = b + pu;
    v->lastf = b + 2 * pu;
    double *ps = v->lastf + U;
    double **arr[] = {&v->t, &v->lf, &v->lb, &v->freeat, &v->rem, &v->fwd, &v->bwd, &v->tpf,
                      &v->tpb, &v->tplf, &v->tplb, &v->gf, &v->gb, &v->gfl, &v->gbl, &v->xfer,
                      &v->lat, &v->start};
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++)
        *arr[i] = ps + i * (size_t)P;
    v->ringf = ps + (SIM_STATE + SIM_IN) * (size_t)P;
    v->ringb = v->ringf + (size_t)P * COST_SEND_BUFFERS_MAX;
    v->idx = sim->ibuf;
    v->nsf = sim->ibuf + P;
    v->nsb = sim->ibuf + 2 * P;
}

/* Clears the state for a pass. */
static void sim_reset(struct sim_view *v)
{
    size_t pu = (size_t)v->P * (size_t)v->U;
    for (size_t i = 0; i < 2 * pu + (size_t)v->U; i++)
        v->farr[i] = -1;
    for (int s = 0; s < v->P; s++) {
        v->t[s] = v->freeat[s] = v->start[s];
        v->lf[s] = v->lb[s] = 0;
        v->rem[s] = -1;
        v->idx[s] = v->nsf[s] = v->nsb[s] = 0;
    }
    for (size_t i = 0; i < 2 * (size_t)v->P * COST_SEND_BUFFERS_MAX; i++)
        v->ringf[i] = 0;
}

/* Seconds of op (b, unit mb) on stage s: the all-gather of what it received (not on the first
 * stage's forwards nor the last stage's backwards), its compute, its tensor all-reduces, the
 * fixed overhead. */
static double op_time(const struct sim_view *v, const struct cost_sim *sim, int s, int b, int mb)
{
    int k = mb % v->S;
    double g = b ? (s < v->P - 1 ? v->gb[s] * sim->tw[k] + v->gbl[s] : 0)
                 : (s > 0 ? v->gf[s] * sim->tw[k] + v->gfl[s] : 0);
    double tp = b ? v->tpb[s] * sim->tw[k] + v->tplb[s] : v->tpf[s] * sim->tw[k] + v->tplf[s];
    return (b ? v->bwd[s] : v->fwd[s]) * sim->cw[k] + tp + g + sim->ovh;
}

/* Completes op (b, unit mb) of stage s at `fin`: sends its result (tw: the unit's share of the
 * activation) to the neighbour stage once that direction of the link is free. Returns when the
 * stage may go on: at once when sends are asynchronous (v->nbuf > 0; the send's end goes into the
 * direction's ring of buffers), at the message's arrival when they block (nbuf 0: the runtime's
 * comm_send carries the bytes on the stage's own thread). */
static double finish_op(struct sim_view *v, int s, int b, int mb, double fin, double tw)
{
    int P = v->P, U = v->U;
    if (!b && s == P - 1)
        v->lastf[mb] = fin;
    int to = !b && s < P - 1 ? s + 1 : b && s > 0 ? s - 1 : -1;
    if (to < 0)
        return fin;
    int ln = b ? s - 1 : s; /* the link between s and its neighbour */
    double *free_at = b ? &v->lb[s] : &v->lf[s];
    double go = fin > *free_at ? fin : *free_at;
    *free_at = go + v->xfer[ln] * tw;
    double arrive = *free_at + v->lat[ln];
    (b ? v->barr : v->farr)[(size_t)to * U + mb] = arrive;
    if (!v->nbuf)
        return arrive;
    int *n = b ? &v->nsb[s] : &v->nsf[s];
    (b ? v->ringb : v->ringf)[(size_t)s * COST_SEND_BUFFERS_MAX + (size_t)(*n % v->nbuf)] = arrive;
    (*n)++;
    return fin;
}

/* When the op at idx of stage s may start (-1: its input has not been produced yet): never
 * before the stage's start nor while a blocking send holds it, and, with asynchronous sends, not
 * before the send buffer it will write is free (the send nbuf before it has arrived). *b gets
 * forward 0 / backward 1, *mb the unit. */
static double op_ready(const struct cost_job *j, const struct sim_view *v, int s, int idx, int *b,
                       int *mb)
{
    int P = v->P, U = v->U;
    long unit;
    *b = pipe_op_at(j->schedule, s, P, idx, U, v->S, j->warmup_extra, &unit);
    *mb = (int)unit;
    double ready = !*b ? (s == 0 ? 0 : v->farr[(size_t)s * U + *mb])
                       : (s == P - 1 ? v->lastf[*mb] : v->barr[(size_t)s * U + *mb]);
    if (ready < 0)
        return -1;
    double low = v->freeat[s] > v->start[s] ? v->freeat[s] : v->start[s];
    int sends = !*b ? s < P - 1 : s > 0;
    if (v->nbuf && sends) {
        int n = !*b ? v->nsf[s] : v->nsb[s];
        double buf = (!*b ? v->ringf : v->ringb)[(size_t)s * COST_SEND_BUFFERS_MAX +
                                                 (size_t)(n % v->nbuf)];
        low = buf > low ? buf : low;
    }
    return ready > low ? ready : low;
}

/* Each stage's end: its last op, and its last sends' arrivals. */
static void sim_ends(const struct sim_view *v, double *end)
{
    for (int s = 0; s < v->P; s++) {
        end[s] = v->t[s];
        for (int i = 0; v->nbuf && i < v->nbuf; i++) {
            double a = v->ringf[(size_t)s * COST_SEND_BUFFERS_MAX + i];
            double b = v->ringb[(size_t)s * COST_SEND_BUFFERS_MAX + i];
            end[s] = a > end[s] ? a : end[s];
            end[s] = b > end[s] ? b : end[s];
        }
    }
}

/* One pass of the schedule; fills end[] with each stage's end. Each stage runs its ops in order
 * as far as their inputs allow; a stage is taken up again only when a neighbour has produced
 * something for it (a worklist: every op's times depend only on its inputs, its stage's clock
 * and the link directions that stage feeds, so the order stages are visited in is free). */
static int run_schedule(const struct cost_job *j, struct sim_view *v, struct cost_sim *sim,
                        double *end)
{
    int P = v->P, U = v->U;
    sim_reset(v);
    int *todo = v->idx + 3 * P, *queued = todo + P, n = 0; /* a stack of stages to visit */
    for (int s = P - 1; s >= 0; s--) {
        todo[n++] = s;
        queued[s] = 1;
    }
    long done = 0, total = 2L * U * P;
    while (n > 0) {
        int s = todo[--n];
        queued[s] = 0;
        while (v->idx[s] < 2 * U) {
            int mb, b;
            double ready = op_ready(j, v, s, v->idx[s], &b, &mb);
            if (ready < 0)
                break;
            double begin = v->t[s] > ready ? v->t[s] : ready;
            double fin = begin + op_time(v, sim, s, b, mb);
            v->t[s] = v->freeat[s] = finish_op(v, s, b, mb, fin, sim->tw[mb % v->S]);
            v->idx[s]++;
            done++;
            /* what it sent, or the last stage's forward, lets a neighbour go on */
            int to = !b ? (s < P - 1 ? s + 1 : s) : (s > 0 ? s - 1 : -1);
            if (to >= 0 && to != s && !queued[to]) {
                todo[n++] = to;
                queued[to] = 1;
            }
        }
    }
    sim_ends(v, end);
    return done == total ? 0 : -1;
}

/* links.pinned_cores: the core of every rank (tensor x data per stage, stage-major as the rank
 * table numbers them), as the workers pin themselves: cpu_spread with each stage's layers as its
 * ranks' load. 0, or -1 when out of memory or the spread fails. */
static int sim_pin(const struct cost_job *j, const struct cost_stage *st, int P, int ncpu,
                   struct cost_sim *sim)
{
    long per = (long)j->data * j->tensor, R = per * P;
    if (R < 1 || R > (1L << 24) || ncpu < 1)
        return -1;
    if (R > sim->cap_ranks) { /* first, count, stage: R ints each */
        int *f = realloc(sim->pin_first, 3 * (size_t)R * sizeof *f);
        if (!f)
            return -1;
        sim->pin_first = f;
        sim->cap_ranks = (int)R;
    }
    if (R + ncpu > sim->cap_cores) { /* load: R doubles; busy: ncpu doubles */
        double *b = realloc(sim->pin_busy, ((size_t)R + (size_t)ncpu) * sizeof *b);
        if (!b)
            return -1;
        sim->pin_busy = b;
        sim->cap_cores = (int)(R + ncpu);
    }
    sim->pin_count = sim->pin_first + sim->cap_ranks;
    int *stage = sim->pin_count + sim->cap_ranks;
    double *load = sim->pin_busy + ncpu;
    for (long r = 0; r < R; r++) {
        stage[r] = (int)(r / per);
        load[r] = st[r / per].layers;
    }
    herr e;
    return cpu_spread(load, stage, (int)R, ncpu, sim->pin_first, sim->pin_count, &e);
}

/* Each stage's progress rate now (running[s]: its op is running): shared cores, every running
 * device at min(1, cores / running devices); pinned, 1 / (running ranks on its busiest core). */
static void shared_rates(const struct cost_job *j, int P, double cores, int pinned,
                         const int *running, struct cost_sim *sim)
{
    int per = j->data * j->tensor, nrun = 0;
    for (int s = 0; s < P; s++)
        nrun += running[s] != 0;
    if (!pinned) {
        double r = nrun ? cores / ((double)per * nrun) : 0;
        for (int s = 0; s < P; s++)
            sim->rate[s] = r > 1 ? 1 : r;
        return;
    }
    int ncpu = (int)cores;
    double *busy = sim->pin_busy;
    for (int c = 0; c < ncpu; c++)
        busy[c] = 0;
    for (int s = 0; s < P; s++)
        for (int r = s * per; running[s] && r < (s + 1) * per; r++)
            busy[sim->pin_first[r]] += 1;
    for (int s = 0; s < P; s++) {
        double most = 1;
        for (int r = s * per; r < (s + 1) * per; r++)
            if (sim->pin_count[r] == 1 && busy[sim->pin_first[r]] > most)
                most = busy[sim->pin_first[r]];
        sim->rate[s] = 1 / most;
    }
}

/* run_schedule with processor sharing (shared_rates): every running op progresses at its
 * stage's rate; a stage waiting (for its input, a send buffer, a blocking send) runs nothing.
 * Event-driven: the next event is an op's completion or the moment an idle stage's next op may
 * start. */
static int run_schedule_shared(const struct cost_job *j, const struct cost_links *l,
                               const struct cost_stage *st, struct sim_view *v,
                               struct cost_sim *sim, double *end)
{
    int P = v->P, U = v->U, pinned = l->pinned_cores != 0;
    double cores = pinned ? floor(l->shared_cores) : l->shared_cores;
    if (pinned && (cores < 1 || sim_pin(j, st, P, (int)cores, sim) != 0))
        return -1;
    if (P > sim->cap_rate) { /* rate: P doubles; running: P ints (in ibuf's twin) */
        double *r = realloc(sim->rate, (size_t)P * (sizeof(double) + sizeof(int)));
        if (!r)
            return -1;
        sim->rate = r;
        sim->cap_rate = P;
    }
    int *running = (int *)(sim->rate + sim->cap_rate);
    sim_reset(v);
    double now = 0;
    for (long guard = 0; guard < 16L * U * P + 16; guard++) {
        int left = 0;
        for (int s = 0; s < P; s++) {
            running[s] = 0;
            if (v->idx[s] >= 2 * U)
                continue;
            left++;
            if (v->rem[s] < 0) {
                int mb, b;
                double ready = op_ready(j, v, s, v->idx[s], &b, &mb);
                if (ready >= 0 && ready <= now)
                    v->rem[s] = op_time(v, sim, s, b, mb);
            }
            running[s] = v->rem[s] >= 0;
        }
        if (!left) {
            sim_ends(v, end);
            return 0;
        }
        shared_rates(j, P, cores, pinned, running, sim);
        double dt = INFINITY;
        for (int s = 0; s < P; s++) {
            if (v->idx[s] >= 2 * U)
                continue;
            if (v->rem[s] >= 0) {
                if (v->rem[s] / sim->rate[s] < dt)
                    dt = v->rem[s] / sim->rate[s];
                continue;
            }
            int mb, b;
            double ready = op_ready(j, v, s, v->idx[s], &b, &mb);
            if (ready > now && ready - now < dt)
                dt = ready - now;
        }
        if (!isfinite(dt))
            return -1;
        now += dt;
        for (int s = 0; s < P; s++) {
            if (v->idx[s] >= 2 * U || v->rem[s] < 0)
                continue;
            v->rem[s] -= sim->rate[s] * dt;
            if (v->rem[s] > 1e-12 * (v->fwd[s] + v->bwd[s]) + 1e-15)
                continue;
            long unit;
            int b = pipe_op_at(j->schedule, s, P, v->idx[s], U, v->S, j->warmup_extra, &unit);
            int mb = (int)unit;
            v->t[s] = now;
            v->freeat[s] = finish_op(v, s, b, mb, now, sim->tw[mb % v->S]);
            v->rem[s] = -1;
            v->idx[s]++;
        }
    }
    return -1;
}

/* The schedule with or without shared cores (links.shared_cores). */
static int schedule(const struct cost_job *j, const struct cost_links *l,
                    const struct cost_stage *st, struct sim_view *v, struct cost_sim *sim,
                    double *end)
{
    sim->work += 2.0 * v->P * v->U;
    sim->runs++;
    return l->shared_cores > 0 ? run_schedule_shared(j, l, st, v, sim, end)
                               : run_schedule(j, v, sim, end);
}

double cost_simulate(const struct cost_job *j, const struct cost_links *l,
                     const struct cost_stage *st, int n, const struct cost_link *tie,
                     struct cost_sim *sim, struct cost_breakdown *br)
{
    int m = j->micro_batches;
    if (sim_slices(j, sim) != 0)
        return INFINITY;
    sim->ovh = l->op_overhead_us * 1e-6;
    if (n < 1 || n > sim->cap_stages || m < 1 || (long)m * sim->S > sim->cap_mb)
        return INFINITY;
    struct sim_view v;
    sim_view(sim, n, m * sim->S, (int)l->send_buffers, &v);
    double link_bytes = cost_link_bytes(j);
    struct cost_stage_terms terms[n];
    /* The step as a cycle from one gradient-norm all-reduce (every rank's only common point,
     * noderuntime/train/trainer.c) to the next: each stage runs its optimizer and starts its forward
     * as its parameters arrive (start), the schedule runs, then the reduce-scatter finishes and
     * the embedding tie follows the first stage's. */
    for (int s = 0; s < n; s++) {
        cost_stage_terms(j, l, &st[s], s == 0, s == n - 1, n > 1 ? tie : NULL, &terms[s]);
        v.fwd[s] = terms[s].fwd;
        v.bwd[s] = terms[s].bwd;
        v.tpf[s] = terms[s].tp_fwd - terms[s].tp_fwd_lat;
        v.tpb[s] = terms[s].tp_bwd - terms[s].tp_bwd_lat;
        /* a unit's latency: the whole micro-batch's, or a token slice's (each all-reduce per
         * sequence), what the bytes' share does not carry */
        v.tplf[s] = sim->S > 1 ? terms[s].tp_fwd_slice_lat : terms[s].tp_fwd_lat;
        v.tplb[s] = sim->S > 1 ? terms[s].tp_bwd_slice_lat : terms[s].tp_bwd_lat;
        v.gf[s] = v.gb[s] = terms[s].gather - terms[s].gather_lat;
        v.gfl[s] = v.gbl[s] = terms[s].gather_lat;
        v.xfer[s] = s < n - 1 ? link_bytes / st[s].next.bw : 0;
        v.lat[s] = s < n - 1 ? st[s].next.lat : 0;
        v.start[s] = terms[s].optimizer + terms[s].param_copies + terms[s].ag_exposed;
    }
    /* the last stage's first forward needs the first stage's gradient shard, sent after the
     * norm (its own embedding update comes first, the embedding's all-gather hides behind the
     * blocks) */
    if (terms[n - 1].tie > v.start[n - 1])
        v.start[n - 1] = terms[n - 1].tie;
    double end[n];
    if (schedule(j, l, st, &v, sim, end) != 0)
        return INFINITY;
    /* The norm's all-reduces of four floats (trainer.c global_sq_norm), one after another: the
     * tensor group's, the pipeline group's (TCP: rank_table.c), the data-parallel ring's (the
     * slowest stage's); every rank waits for them, so their latency is the step's. */
    double norm = 0;
    for (int s = 0; s < n; s++)
        if (j->data > 1 && 2.0 * (j->data - 1) * st[s].dp.lat > norm)
            norm = 2.0 * (j->data - 1) * st[s].dp.lat;
    norm += (j->tensor > 1 ? 2.0 * (j->tensor - 1) * l->intra_node_latency_us * 1e-6 : 0) +
            (n > 1 ? 2.0 * (n - 1) * l->tcp_latency_us * 1e-6 : 0);
    double best = -1;
    int crit = 0;
    for (int s = 0; s < n; s++) {
        double fin = end[s] + terms[s].rs_exposed + norm;
        /* the first stage adds the last stage's gradient shard before the norm */
        if (s == 0 && n > 1 && end[n - 1] + terms[s].tie + norm > fin)
            fin = end[n - 1] + terms[s].tie + norm;
        if (fin > best) {
            best = fin;
            crit = s;
        }
    }
    if (br) {
        const struct cost_stage_terms *ct = &terms[crit];
        double crit_end = end[crit], crit_start = v.start[crit];
        /* the same schedule without the pipeline's communication: transfers, their latency,
         * the receivers' all-gathers (and so no blocking sends) */
        for (int s = 0; s < n; s++)
            v.xfer[s] = v.lat[s] = v.gf[s] = v.gb[s] = v.gfl[s] = v.gbl[s] = 0;
        if (schedule(j, l, st, &v, sim, end) != 0)
            return INFINITY;
        br->critical_stage = crit;
        br->compute = m * (ct->fwd + ct->bwd);
        br->tp_comm = m * (ct->tp_fwd + ct->tp_bwd);
        br->pp_comm = crit_end - end[crit] > 0 ? crit_end - end[crit] : 0;
        br->bubble = crit_end - crit_start - br->pp_comm - br->compute - br->tp_comm;
        if (br->bubble < 0)
            br->bubble = 0;
        br->dp_comm = ct->ag_exposed + (best - crit_end);
        br->optimizer = ct->optimizer + ct->param_copies;
        br->total = best;
    }
    return best;
}
