#include "zero.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan_doc.h"


struct bucket {
    size_t lo, hi;       /* range in the flat buffer */
    size_t ready;        /* floats reported final this step */
    size_t shard_lo, shard_hi, shard_off;
    struct comm_req *req;
    int started;
    int bf16;            /* req is a bf16 parameter all-gather: widen the wire into params */
};

struct zero {
    struct devmem *mem;
    float *params, *grads;
    size_t n;
    void (*written)(void *ctx, size_t lo, size_t hi);
    void *written_ctx;
    void (*work)(void *ctx, int begin);
    void *work_ctx;
    struct comm *dp;
    int nb;
    struct bucket *b;
    size_t shard_total;
    float *master;       /* bf16 parameters: the owned shards in fp32, laid out like m and v
                            (engine memory) */
    uint16_t *wire;      /* bf16 parameters, data > 1: the all-gather's buffer, n elements
                            (engine memory) */
};

void zero_free(struct zero *z)
{
    if (!z)
        return;
    for (int i = 0; i < z->nb; i++)
        if (z->b[i].req)
            comm_wait(z->b[i].req, NULL);
    free(z->b);
    devmem_free(z->mem, z->master);
    devmem_free(z->mem, z->wire);
    free(z);
}

/* The end of the bucket that ends at `hi`: at most `max` floats, never across a cut. */
static size_t bucket_lo(size_t hi, size_t max, const size_t *cuts, int ncuts)
{
    size_t lo = hi > max ? hi - max : 0;
    for (int c = 0; c < ncuts; c++)
        if (cuts[c] > lo && cuts[c] < hi)
            lo = cuts[c];
    return lo;
}

int zero_create(struct zero **out, struct devmem *m, float *params, float *grads, size_t n,
                const size_t *cuts, int ncuts, size_t bucket_floats, struct comm *dp, herr *e)
{
    *out = NULL;
    if (bucket_floats == 0)
        bucket_floats = PLAN_ZERO_BUCKET_FLOATS;
    for (int c = 0; c < ncuts; c++)
        if (cuts[c] > n)
            return herr_set(e, "bucket cut %zu is outside the %zu parameters", cuts[c], n);
    int nb = 0;
    for (size_t hi = n; hi > 0; nb++)
        hi = bucket_lo(hi, bucket_floats, cuts, ncuts);
    struct zero *z = calloc(1, sizeof *z);
    if (!z)
        return herr_set(e, "out of memory for the distributed optimizer");
    z->mem = m;
    z->params = params;
    z->grads = grads;
    z->n = n;
    z->dp = dp;
    z->nb = nb;
    z->b = calloc((size_t)(nb ? nb : 1), sizeof *z->b);
    if (!z->b) {
        free(z);
        return herr_set(e, "out of memory for %d gradient buckets", nb);
    }
    int D = dp ? comm_size(dp) : 1, r = dp ? comm_rank(dp) : 0;
    /* bucket 0 is the end of the buffer: the first to be complete in backward */
    size_t hi = n;
    for (int i = 0; i < z->nb; i++) {
        struct bucket *k = &z->b[i];
        k->hi = hi;
        k->lo = hi = bucket_lo(hi, bucket_floats, cuts, ncuts);
        size_t off, len;
        tcp_chunk(k->hi - k->lo, D, r, &off, &len);
        k->shard_lo = k->lo + off;
        k->shard_hi = k->shard_lo + len;
    }
    /* the owned shards in buffer order (from the start of the buffer: the last bucket first), so
     * that with one replica they are laid out like the parameters */
    for (int i = z->nb - 1; i >= 0; i--) {
        struct bucket *k = &z->b[i];
        k->shard_off = z->shard_total;
        z->shard_total += k->shard_hi - k->shard_lo;
    }
    *out = z;
    return 0;
}

/* The first bucket (lowest index) that starts below `hi`: buckets [0, that) lie at or above hi.
 * Buckets go down the buffer as their index goes up. nb when none. */
static int bucket_below(const struct zero *z, size_t hi)
{
    int a = 0, b = z->nb;
    while (a < b) {
        int mid = a + (b - a) / 2;
        if (z->b[mid].lo < hi)
            b = mid;
        else
            a = mid + 1;
    }
    return a;
}

/* The buckets overlapping [lo, hi): indices [*first, *last] (*first > *last when none). */
static void buckets_over(const struct zero *z, size_t lo, size_t hi, int *first, int *last)
{
    *first = bucket_below(z, hi);
    *last = lo < hi ? bucket_below(z, lo + 1) : *first - 1;
    if (*last >= z->nb)
        *last = z->nb - 1;
}

void zero_set_params_written(struct zero *z, void (*fn)(void *ctx, size_t lo, size_t hi),
                             void *ctx)
{
    z->written = fn;
    z->written_ctx = ctx;
}

void zero_set_device_work(struct zero *z, void (*fn)(void *ctx, int begin), void *ctx)
{
    z->work = fn;
    z->work_ctx = ctx;
}

/* Around zero's own work on the compute lane. */
static void work_begin(struct zero *z)
{
    if (z->work)
        z->work(z->work_ctx, 1);
}
static void work_end(struct zero *z)
{
    if (z->work)
        z->work(z->work_ctx, 0);
}

static void params_written(struct zero *z, size_t lo, size_t hi)
{
    if (z->written && hi > lo)
        z->written(z->written_ctx, lo, hi);
}

static int start_bucket(struct zero *z, int i, herr *e)
{
    struct bucket *k = &z->b[i];
    k->started = 1;
    if (!z->dp || comm_size(z->dp) == 1)
        return 0;
    if (comm_dev_ireduce_scatter(z->dp, z->grads + k->lo, k->hi - k->lo, &k->req, e) != 0)
        return herr_wrap(e, "gradient bucket %d", i);
    return 0;
}

int zero_grads_ready(struct zero *z, size_t lo, size_t hi, herr *e)
{
    if (lo > hi || hi > z->n)
        return herr_set(e, "gradient range [%zu, %zu) is outside the %zu parameters", lo, hi, z->n);
    int first, last;
    buckets_over(z, lo, hi, &first, &last);
    for (int i = first; i <= last; i++) {
        struct bucket *k = &z->b[i];
        size_t a = lo > k->lo ? lo : k->lo, b = hi < k->hi ? hi : k->hi;
        k->ready += b - a;
        if (k->ready > k->hi - k->lo)
            return herr_set(e, "gradients of bucket %d reported final twice in one step", i);
    }
    /* start every bucket that became complete (only these can have: every other was started
     * when its last range came); replicas of a stage report the same ranges in the same order,
     * so they issue the same sequence of reduce-scatters */
    for (int i = first; i <= last; i++) {
        struct bucket *k = &z->b[i];
        if (!k->started && k->ready == k->hi - k->lo && start_bucket(z, i, e) != 0)
            return -1;
    }
    return 0;
}

static int wait_bucket(struct zero *z, int i, herr *e)
{
    struct bucket *k = &z->b[i];
    if (!k->req)
        return 0;
    herr e2;
    int rc = comm_wait(k->req, &e2);
    k->req = NULL;
    if (rc != 0) {
        *e = e2;
        return herr_wrap(e, "reduce-scatter of gradient bucket %d", i);
    }
    return 0;
}

int zero_bucket_wait(struct zero *z, int b, herr *e)
{
    if (b < 0 || b >= z->nb)
        return herr_set(e, "gradient bucket %d is outside 0..%d", b, z->nb - 1);
    if (!z->b[b].started)
        return herr_set(e, "gradient bucket %d has not been reduce-scattered yet", b);
    return wait_bucket(z, b, e);
}

int zero_bucket_at(const struct zero *z, size_t off)
{
    for (int i = 0; i < z->nb; i++)
        if (off >= z->b[i].lo && off < z->b[i].hi)
            return i;
    return -1;
}

size_t zero_bucket_end(const struct zero *z, int b) { return z->b[b].hi; }

void zero_bucket_range(const struct zero *z, int b, size_t *lo, size_t *hi)
{
    *lo = z->b[b].lo;
    *hi = z->b[b].hi;
}

int zero_reduce_wait(struct zero *z, herr *e)
{
    int rc = 0;
    for (int i = 0; i < z->nb; i++)
        if (!z->b[i].started && rc == 0)
            rc = start_bucket(z, i, e);
    for (int i = 0; i < z->nb; i++) {
        herr e2;
        if (wait_bucket(z, i, &e2) != 0 && rc == 0) {
            *e = e2;
            rc = -1;
        }
        z->b[i].started = 0;
        z->b[i].ready = 0;
    }
    return rc;
}

int zero_num_buckets(const struct zero *z) { return z->nb; }

int zero_buckets_started(const struct zero *z)
{
    int n = 0;
    for (int i = 0; i < z->nb; i++)
        n += z->b[i].started;
    return n;
}

void zero_shard(const struct zero *z, int b, size_t *lo, size_t *hi)
{
    *lo = z->b[b].shard_lo;
    *hi = z->b[b].shard_hi;
}

size_t zero_shard_total(const struct zero *z) { return z->shard_total; }
size_t zero_shard_offset(const struct zero *z, int b) { return z->b[b].shard_off; }

/* Issues the all-gather of the parameter buckets that lie inside [lo, hi), in forward order
 * (from the start of the buffer: bucket nb-1 first). bf16: each owned shard is first rounded
 * from its master copy, and the buckets travel as bf16. */
/* One replica, bf16 parameters: the masters of buckets [first, last] rounded into the parameters,
 * the buckets in forward order (the last index first); shards that follow each other in both the
 * parameters and the masters (all of them, with one replica) in one copy and one rounding. */
static int round_masters(struct zero *z, int first, int last, herr *e)
{
    for (int i = last; i >= first;) {
        const struct bucket *k = &z->b[i];
        size_t lo = k->shard_lo, hi = k->shard_hi, off = k->shard_off;
        for (i--; i >= first && z->b[i].shard_lo == hi && z->b[i].shard_off == off + (hi - lo); i--)
            hi = z->b[i].shard_hi;
        if (hi == lo)
            continue;
        work_begin(z);
        int rc = devmem_copy(z->mem, NULL, z->params + lo, z->master + off,
                             (hi - lo) * sizeof(float), e) != 0 ||
                 devmem_round_bf16(z->mem, NULL, z->params + lo, hi - lo, e) != 0;
        work_end(z);
        if (rc)
            return herr_wrap(e, "rounding the parameters [%zu, %zu) from their masters", lo, hi);
        params_written(z, lo, hi);
    }
    return 0;
}

static int gather_params(struct zero *z, size_t lo, size_t hi, herr *e)
{
    int many = z->dp && comm_size(z->dp) > 1, bf16 = z->master != NULL;
    int first, last;
    buckets_over(z, lo, hi, &first, &last);
    /* only the buckets that lie inside [lo, hi) */
    if (first <= last && z->b[first].hi > hi)
        first++;
    if (first <= last && z->b[last].lo < lo)
        last--;
    for (int i = last; i >= first; i--)
        if (z->b[i].req)
            return herr_set(e, "bucket %d still has a collective in flight", i);
    if (!many)
        return bf16 ? round_masters(z, first, last, e) : 0;
    for (int i = last; i >= first; i--) {
        struct bucket *k = &z->b[i];
        size_t len = k->shard_hi - k->shard_lo;
        if (bf16) { /* own shard packed for the wire; the parameters take it with the rest of
                       * the bucket when the gather is waited for (one widening a bucket) */
            const float *ms = z->master + k->shard_off;
            work_begin(z);
            int rc = devmem_pack_bf16(z->mem, NULL, z->wire + k->shard_lo, ms, len, e);
            work_end(z);
            if (rc)
                return herr_wrap(e, "rounding bucket %d", i);
        }
        int rc = bf16 ? comm_dev_iall_gather(z->dp, z->wire + k->lo, k->hi - k->lo,
                                             sizeof *z->wire, &k->req, e)
                      : comm_dev_iall_gather(z->dp, z->params + k->lo, k->hi - k->lo,
                                             sizeof *z->params, &k->req, e);
        if (rc != 0)
            return herr_wrap(e, "all-gather of bucket %d", i);
        k->bf16 = bf16;
    }
    return 0;
}

int zero_params_gather_part(struct zero *z, size_t lo, size_t hi, herr *e)
{
    return gather_params(z, lo, hi, e);
}

/* Waits for the parameter gathers of the buckets overlapping [lo, hi), in forward order (the
 * compute lane's later work then reads them); the first error is kept. */
int zero_params_wait(struct zero *z, size_t lo, size_t hi, herr *e)
{
    int rc = 0, first, last;
    buckets_over(z, lo, hi, &first, &last);
    for (int i = last; i >= first; i--) {
        struct bucket *k = &z->b[i];
        if (!k->req)
            continue;
        herr e2;
        if (comm_wait(k->req, &e2) != 0 && rc == 0) {
            *e = e2;
            rc = herr_wrap(e, "parameter all-gather of bucket %d", i);
        }
        k->req = NULL;
        int wide = k->bf16;
        k->bf16 = 0;
        if (wide && rc == 0) { /* the whole bucket widened, the own chunk with the others */
            work_begin(z);
            if (devmem_unpack_bf16(z->mem, NULL, z->params + k->lo, z->wire + k->lo,
                                   k->hi - k->lo, e) != 0)
                rc = herr_wrap(e, "parameter all-gather of bucket %d", i);
            work_end(z);
        }
        if (rc == 0 && wide) {
            params_written(z, k->lo, k->hi);
        } else if (rc == 0) { /* fp32: the own chunk is what AdamW wrote */
            params_written(z, k->lo, k->shard_lo);
            params_written(z, k->shard_hi, k->hi);
        }
    }
    return rc;
}

int zero_params_gather_finish(struct zero *z, herr *e) { return zero_params_wait(z, 0, z->n, e); }

int zero_all_gather_params(struct zero *z, herr *e)
{
    int rc = gather_params(z, 0, z->n, e);
    herr e2;
    if (zero_params_wait(z, 0, z->n, &e2) != 0 && rc == 0) {
        *e = e2;
        rc = -1;
    }
    return rc;
}

int zero_all_gather_host(struct zero *z, float *buf, herr *e)
{
    if (!z->dp || comm_size(z->dp) == 1)
        return 0;
    for (int i = z->nb - 1; i >= 0; i--) {
        struct bucket *k = &z->b[i];
        if (comm_all_gather(z->dp, buf + k->lo, k->hi - k->lo, sizeof *buf, e) != 0)
            return herr_wrap(e, "all-gather of bucket %d", i);
    }
    return 0;
}

int zero_params_bf16(struct zero *z, herr *e)
{
    if (z->master)
        return 0;
    int many = z->dp && comm_size(z->dp) > 1;
    void *ms = NULL, *wire = NULL;
    if (devmem_alloc(z->mem, (z->shard_total ? z->shard_total : 1) * sizeof(float), &ms, e) != 0 ||
        (many && devmem_alloc(z->mem, (z->n ? z->n : 1) * sizeof(uint16_t), &wire, e) != 0)) {
        devmem_free(z->mem, ms);
        return herr_wrap(e, "the fp32 master parameters (%zu floats)", z->shard_total);
    }
    z->master = ms;
    z->wire = wire;
    return zero_master_from_params(z, e);
}

float *zero_master(const struct zero *z) { return z->master; }

int zero_master_from_params(struct zero *z, herr *e)
{
    if (!z->master)
        return 0;
    for (int i = 0; i < z->nb; i++) {
        const struct bucket *k = &z->b[i];
        if (devmem_copy(z->mem, NULL, z->master + k->shard_off, z->params + k->shard_lo,
                        (k->shard_hi - k->shard_lo) * sizeof *z->master, e) != 0)
            return herr_wrap(e, "fp32 master parameters");
    }
    if (devmem_round_bf16(z->mem, NULL, z->params, z->n, e) != 0)
        return herr_wrap(e, "rounding the parameters to bf16");
    params_written(z, 0, z->n);
    return 0;
}

int zero_master_gather_host(struct zero *z, float *out, herr *e)
{
    if (!z->master)
        return devmem_to_host(z->mem, out, z->params, z->n * sizeof *out, e);
    for (int i = 0; i < z->nb; i++) {
        const struct bucket *k = &z->b[i];
        if (devmem_to_host(z->mem, out + k->shard_lo, z->master + k->shard_off,
                           (k->shard_hi - k->shard_lo) * sizeof *out, e) != 0)
            return herr_wrap(e, "fp32 master parameters");
    }
    return zero_all_gather_host(z, out, e);
}
