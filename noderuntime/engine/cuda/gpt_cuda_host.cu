/* What crosses between the stage and the host: parameter, gradient and moment transfers, the
 * token staging of a slot, the loss, events, the hooks, the tensor group's sum, and the
 * profiling counters and events (bench_gpu's breakdown). */
#include "stage.cuh"
#include "token_groups.h"

namespace GPU_NS {

unsigned long long g_launches, g_syncs;

int sync_stream(cudaStream_t st, char *EB, size_t EN)
{
    COUNT_SYNC();
    CK(cudaStreamSynchronize(st));
    return 0;
}

int h2d(struct gpu_stage *s, void *dst, const void *src, size_t bytes)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    ENQ(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->x.stream));
    return sync_stream(s->x.stream, EB, EN);
}
int d2h(struct gpu_stage *s, void *dst, const void *src, size_t bytes)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    ENQ(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->x.stream));
    return sync_stream(s->x.stream, EB, EN);
}

int refresh_wx(struct gpu_stage *s, size_t lo, size_t hi)
{
#ifdef HOLMES_GPU_FP32
    (void)s; (void)lo; (void)hi;
    return 0;
#else
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (hi <= lo)
        return 0;
    PROF(&s->x, GPU_PART_BF16_COPY);
    return launch_cast(s->x.stream, s->wX + lo, s->params + lo, hi - lo, EB, EN);
#endif
}

/* Sums the device fp32 buf[n] across the tensor group (gpt_pass.c's gpt_tp_sum): through the
 * device function (gpu_stage_set_tp_sum_dev), stream-ordered; else down to the host staging
 * buffer, the group's sum (gpu_stage_set_tp_sum), back up, on the stream (which this
 * synchronises). `what` names the values for the error. */
int tp_sum_dev(struct gpu_stage *s, float *buf, size_t n, const char *what)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    PROF(&s->x, GPU_PART_OTHER);
    if (s->tp_sum_devfn) {
        if (s->tp_sum_devfn(s->tp_dev_ctx, buf, n) != 0)
            return stage_fail(s, "tensor parallelism: the group's sum of %s (%zu values, on the "
                              "device) failed", what, n);
        return 0;
    }
    if (!s->tp_sum)
        return stage_fail(s, "tensor parallelism: no group sum set for %s (gpu_stage_set_tp_sum)",
                          what);
    if (n > s->tp_n)
        return stage_fail(s, "tensor parallelism: %zu values of %s exceed the staging buffer's %zu",
                          n, what, s->tp_n);
    ENQ(cudaMemcpyAsync(s->tp_host, buf, n * sizeof(float), cudaMemcpyDeviceToHost, s->x.stream));
    OK(sync_stream(s->x.stream, EB, EN));
    if (s->tp_sum(s->tp_ctx, s->tp_host, n) != 0)
        return stage_fail(s, "tensor parallelism: the group's sum of %s (%zu values) failed", what, n);
    /* the next sum's download into tp_host is queued behind this upload on the same stream */
    ENQ(cudaMemcpyAsync(buf, s->tp_host, n * sizeof(float), cudaMemcpyHostToDevice, s->x.stream));
    return 0;
}

/* Positions of the micro-batch grouped by token (token_groups.h) into utok, ustart, upos; the
 * count of groups. With tensor parallelism only the tokens of this rank's wte rows
 * [v0, v0 + Vl), as rows of its wte (token - v0): every other token goes into one group past
 * them (Vl), the last one, which is dropped. */
static int group_tokens(struct gpu_stage *s, const int *tokens, int *utok, int *ustart, int *upos)
{
    size_t BT = (size_t)s->B * s->T;
    int *cnt = s->h_counts;
    if (s->tp == 1)
        return token_groups(tokens, BT, s->c.vocab, cnt, utok, ustart, upos);
    int *mine = cnt + s->ncount + 1, v0 = s->tpr * s->Vl;
    for (size_t i = 0; i < BT; i++) {
        int v = tokens[i] - v0;
        mine[i] = v >= 0 && v < s->Vl ? v : s->Vl;
    }
    int nu = token_groups(mine, BT, s->Vl + 1, cnt, utok, ustart, upos);
    if (nu > 0 && utok[nu - 1] == s->Vl)
        nu--;
    return nu;
}

int stage_upload_ids(struct gpu_stage *s, struct gslot *a, const int *tokens, const int *targets)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    size_t BT = (size_t)s->B * s->T;
    cudaStream_t st = s->x.stream;
    int *h = a->h_stage, *htok = h, *htgt = h + BT, *utok = h + 2 * BT, *ustart = h + 3 * BT;
    int *upos = ustart + BT + 1;
    int first = s->first == 0, want_tgt = s->last == s->c.layers && targets;
    if (!first && !want_tgt)
        return 0;
    /* the pinned buffer is rewritten only once its last copies are done (long since, normally:
     * the slot's previous micro-batch) */
    cudaError_t q = cudaEventQuery(a->up_done);
    if (q == cudaErrorNotReady) {
        COUNT_SYNC();
        CK(cudaEventSynchronize(a->up_done));
    } else {
        CK(q);
    }
    PROF(&s->x, GPU_PART_EMBEDDING);
    if (first) {
        memcpy(htok, tokens, BT * sizeof(int));
        int nu = group_tokens(s, htok, utok, ustart, upos);
        a->nuniq = nu;
        a->maxpos = 0;
        for (int u = 0; u < nu; u++)
            if (ustart[u + 1] - ustart[u] > a->maxpos)
                a->maxpos = ustart[u + 1] - ustart[u];
        ENQ(cudaMemcpyAsync(a->tokens, htok, BT * sizeof(int), cudaMemcpyHostToDevice, st));
        if (nu > 0)
            ENQ(cudaMemcpyAsync(a->utok, utok, (size_t)nu * sizeof(int), cudaMemcpyHostToDevice, st));
        ENQ(cudaMemcpyAsync(a->ustart, ustart, ((size_t)nu + 1) * sizeof(int),
                            cudaMemcpyHostToDevice, st));
        ENQ(cudaMemcpyAsync(a->upos, upos, BT * sizeof(int), cudaMemcpyHostToDevice, st));
    }
    if (want_tgt) {
        memcpy(htgt, targets, BT * sizeof(int));
        ENQ(cudaMemcpyAsync(a->targets, htgt, BT * sizeof(int), cudaMemcpyHostToDevice, st));
    }
    CK(cudaEventRecord(a->up_done, st));
    return 0;
}

int need_unit(struct gpu_stage *s, int u)
{
    size_t lo = s->unit_lo[u], hi = s->unit_hi[u];
    if (hi <= lo)
        return 0;
    if (s->fwd_hook && s->fwd_hook(s->fwd_ctx, lo, hi) != 0)
        return stage_fail(s, "forward stopped: parameters [%zu, %zu) are not available", lo, hi);
    if (s->wx_dirty[u]) {
        OK(refresh_wx(s, lo, hi));
        s->wx_dirty[u] = 0;
    }
    return 0;
}

void block_done(struct gpu_stage *s, int i)
{
    if (s->bwd_hook)
        s->bwd_hook(s->bwd_ctx, s->first + i);
}

int grads_materialise(struct gpu_stage *s)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    if (!s->grads_fresh)
        return 0;
    PROF(&s->x, GPU_PART_ZEROING);
    ENQ(cudaMemsetAsync(s->grads, 0, s->nparams * sizeof(float), s->x.stream));
    s->grads_fresh = 0;
    return 0;
}

int loss_collect(struct gpu_stage *s, struct gslot *a, int t0, int t1, float *loss)
{
    OK(loss_reduce(s, a, t0, t1, loss == NULL));
    if (loss) {
        double v = 0.0;
        OK(d2h(s, &v, s->loss_dev + 1, sizeof v));
        *loss = (float)v;
    }
    return 0;
}

} /* namespace GPU_NS */

using namespace GPU_NS;

/* ---------------------------------------------------------------- hooks, events, the loss */

void gpu_stage_set_tp_sum(struct gpu_stage *s, int (*fn)(void *ctx, float *buf, size_t n),
                          void *ctx)
{
    s->tp_sum = fn;
    s->tp_ctx = ctx;
}
void gpu_stage_set_tp_sum_dev(struct gpu_stage *s, int (*fn)(void *ctx, float *dev_buf, size_t n),
                              void *ctx)
{
    s->tp_sum_devfn = fn;
    s->tp_dev_ctx = ctx;
}
void gpu_stage_set_forward_hook(struct gpu_stage *s, int (*fn)(void *ctx, size_t lo, size_t hi),
                                void *ctx)
{
    s->fwd_hook = fn;
    s->fwd_ctx = ctx;
}
void gpu_stage_set_backward_hook(struct gpu_stage *s, void (*fn)(void *ctx, int layer), void *ctx)
{
    s->bwd_hook = fn;
    s->bwd_ctx = ctx;
}

void gpu_stage_params_changed(struct gpu_stage *s, size_t lo, size_t hi)
{
    for (int u = 0; u < s->nl + 2; u++)
        if (s->unit_lo[u] < s->unit_hi[u] && lo < s->unit_hi[u] && s->unit_lo[u] < hi)
            s->wx_dirty[u] = 1;
}

int gpu_stage_event_record(struct gpu_stage *s, void *cuda_event)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    CK(cudaEventRecord((cudaEvent_t)cuda_event, s->x.stream));
    return 0;
}
int gpu_stage_wait_event(struct gpu_stage *s, void *cuda_event)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    CK(cudaStreamWaitEvent(s->x.stream, (cudaEvent_t)cuda_event, 0));
    return 0;
}

int gpu_stage_loss_take(struct gpu_stage *s, float *sum)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    double v = 0.0;
    OK(d2h(s, &v, s->loss_dev, sizeof v));
    ENQ(cudaMemsetAsync(s->loss_dev, 0, sizeof(double), s->x.stream));
    *sum = (float)v;
    return 0;
}

int gpu_stage_sync(struct gpu_stage *s)
{
    return sync_stream(s->x.stream, s->err, sizeof s->err);
}

/* ---------------------------------------------------------------- transfers */

int gpu_stage_init_params(struct gpu_stage *s, uint64_t seed)
{
    gpt_stage_init_params(s->host, seed);
    return gpu_stage_set_params(s, gpt_stage_params(s->host));
}
int gpu_stage_set_params(struct gpu_stage *s, const float *host)
{
    OK(h2d(s, s->params, host, s->nparams * sizeof(float)));
    OK(refresh_wx(s, 0, s->nparams));
    memset(s->wx_dirty, 0, (size_t)s->nl + 2);
    return gpu_stage_sync(s);
}
int gpu_stage_get_params(struct gpu_stage *s, float *host)
{
    return d2h(s, host, s->params, s->nparams * sizeof(float));
}
float *gpu_stage_grads_dev(struct gpu_stage *s)
{
    if (grads_materialise(s) < 0)
        return NULL;
    return s->grads;
}
int gpu_stage_get_grads(struct gpu_stage *s, float *host)
{
    OK(grads_materialise(s));
    return d2h(s, host, s->grads, s->nparams * sizeof(float));
}
int gpu_stage_set_grads(struct gpu_stage *s, const float *host)
{
    s->grads_fresh = 0;
    return h2d(s, s->grads, host, s->nparams * sizeof(float));
}
static int have_moments(struct gpu_stage *s)
{
    return s->m ? 0 : stage_fail(s, "the stage was created with GPU_NO_MOMENTS: it keeps no AdamW "
                                 "moments");
}
int gpu_stage_set_moments(struct gpu_stage *s, const float *m, const float *v)
{
    OK(have_moments(s));
    OK(h2d(s, s->m, m, s->nparams * sizeof(float)));
    return h2d(s, s->v, v, s->nparams * sizeof(float));
}
int gpu_stage_get_moments(struct gpu_stage *s, float *m, float *v)
{
    OK(have_moments(s));
    OK(d2h(s, m, s->m, s->nparams * sizeof(float)));
    return d2h(s, v, s->v, s->nparams * sizeof(float));
}
int gpu_stage_zero_grads(struct gpu_stage *s)
{
    s->grads_fresh = 1; /* the next backward writes them: no memset */
    return 0;
}

/* ---------------------------------------------------------------- profiling */

void GPU_NS::prof_enter(struct gpu_prof *p, cudaStream_t st, int part)
{
    if (p->depth++ > 0)
        return;
    p->open = p->used < p->cap && cudaEventRecord(p->ev[2 * p->used], st) == cudaSuccess;
    if (p->open)
        p->part[p->used] = (unsigned char)part;
    else
        p->lost++;
}
void GPU_NS::prof_leave(struct gpu_prof *p, cudaStream_t st)
{
    if (--p->depth == 0 && p->open && cudaEventRecord(p->ev[2 * p->used + 1], st) == cudaSuccess)
        p->used++;
}

const char *gpu_part_name(int part)
{
    static const char *names[GPU_PARTS] = {"attention", "matmul", "layernorm", "classifier",
                                           "embedding", "optimizer", "norm", "bf16 copy",
                                           "zeroing", "masters", "other"};
    return part >= 0 && part < GPU_PARTS ? names[part] : "?";
}

int GPU_NS::prof_kernel_start(struct gpu_prof *p, cudaStream_t st, const struct kernel_rec *r)
{
    if (!p || !p->on)
        return -1;
    if (p->gused >= p->gcap || cudaEventRecord(p->gev[2 * p->gused], st) != cudaSuccess) {
        p->glost++;
        return -1;
    }
    p->grec[p->gused] = *r;
    return p->gused;
}
void GPU_NS::prof_kernel_end(struct gpu_prof *p, cudaStream_t st, int i)
{
    if (i < 0 || i != p->gused)
        return;
    if (cudaEventRecord(p->gev[2 * i + 1], st) == cudaSuccess)
        p->gused++; /* counted once both ends are recorded */
    else
        p->glost++;
}

void gpu_stage_profile_enter(struct gpu_stage *s, int part)
{
    if (s->prof.on && part >= 0 && part < GPU_PARTS)
        prof_enter(&s->prof, s->x.stream, part);
}

void gpu_stage_profile_leave(struct gpu_stage *s)
{
    if (s->prof.on && s->prof.depth > 0)
        prof_leave(&s->prof, s->x.stream);
}

void gpu_counters(unsigned long long *launches, unsigned long long *syncs)
{
    *launches = __atomic_load_n(&g_launches, __ATOMIC_RELAXED);
    *syncs = __atomic_load_n(&g_syncs, __ATOMIC_RELAXED);
}

/* The launches a profiled step can time alone: GPT-2 1.5B with 8 micro-batches makes about
 * 5,800 (48 layers x 15 products and flash kernels x 8, and the head's) */
#define PROF_LAUNCHES 8192

/* A pool of 2 n events (a start and an end per entry) and n records of rec_size bytes; 0, or -1
 * (EB): what was made is freed with the stage. */
static int events_pool(cudaEvent_t **ev, void **rec, size_t rec_size, int n, int *cap, char *EB,
                       size_t EN)
{
    *ev = (cudaEvent_t *)calloc(2 * (size_t)n, sizeof(cudaEvent_t));
    *rec = calloc((size_t)n, rec_size);
    if (!*ev || !*rec)
        return fail_msg(EB, EN, "out of memory for the profiling events");
    *cap = n;
    for (int i = 0; i < 2 * n; i++)
        CK(cudaEventCreate(&(*ev)[i]));
    return 0;
}

int gpu_stage_profile_begin(struct gpu_stage *s)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    struct gpu_prof *p = &s->prof;
    if (!p->ev) {
        OK(events_pool(&p->ev, (void **)&p->part, 1, 16384, &p->cap, EB, EN));
        CK(cudaEventCreate(&p->t0));
        CK(cudaEventCreate(&p->t1));
    }
    if (!p->gev)
        OK(events_pool(&p->gev, (void **)&p->grec, sizeof *p->grec, PROF_LAUNCHES, &p->gcap, EB,
                       EN));
    p->used = p->lost = p->depth = 0;
    p->gused = p->glost = 0;
    gpu_counters(&p->l0, &p->s0);
    CK(cudaEventRecord(p->t0, s->x.stream));
    p->on = 1;
    return 0;
}

int gpu_stage_profile_end(struct gpu_stage *s, struct gpu_profile *out)
{
    char *EB = s->err;
    size_t EN = sizeof s->err;
    struct gpu_prof *p = &s->prof;
    if (!p->on)
        return stage_fail(s, "gpu_stage_profile_end without gpu_stage_profile_begin");
    p->on = 0;
    unsigned long long l1, s1;
    gpu_counters(&l1, &s1);
    CK(cudaEventRecord(p->t1, s->x.stream));
    CK(cudaEventSynchronize(p->t1));
    memset(out, 0, sizeof *out);
    for (int i = 0; i < p->used; i++) {
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]));
        out->ms[p->part[i]] += ms;
    }
    float tot = 0.0f;
    CK(cudaEventElapsedTime(&tot, p->t0, p->t1));
    out->total_ms = tot;
    out->launches = l1 - p->l0;
    out->syncs = s1 - p->s0;
    out->events_lost = p->lost;
    out->kernels_lost = p->glost;
    for (int i = 0; i < p->gused; i++) {
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, p->gev[2 * i], p->gev[2 * i + 1]));
        if (kernel_times_add(out->kernels, &out->nkernels, GPU_PROF_KERNELS, &p->grec[i].what, ms,
                             p->grec[i].flop, p->grec[i].bytes) != 0)
            out->kernels_lost++;
    }
    kernel_times_sort(out->kernels, out->nkernels);
    return 0;
}
