#include "zero.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

struct bucket {
    size_t lo, hi;       /* range in the flat buffer */
    size_t ready;        /* floats reported final this step */
    size_t shard_lo, shard_hi, shard_off;
    struct comm_req *req;
    int started;
    int bf16;            /* req is a bf16 parameter all-gather: widen the wire into params */
};

struct zero {
    float *params, *grads;
    size_t n;
    struct comm *dp;
    int nb;
    struct bucket *b;
    size_t shard_total;
    float *master;       /* bf16 parameters: the owned shards in fp32, laid out like m and v */
    uint16_t *wire;      /* bf16 parameters, data > 1: the all-gather's buffer, n elements */
};

void zero_free(struct zero *z)
{
    if (!z)
        return;
    for (int i = 0; i < z->nb; i++)
        if (z->b[i].req)
            comm_wait(z->b[i].req, NULL);
    free(z->b);
    free(z->master);
    free(z->wire);
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

int zero_create(struct zero **out, float *params, float *grads, size_t n, const size_t *cuts,
                int ncuts, size_t bucket_floats, struct comm *dp, herr *e)
{
    *out = NULL;
    if (bucket_floats == 0)
        bucket_floats = (size_t)1 << 20;
    for (int c = 0; c < ncuts; c++)
        if (cuts[c] > n)
            return herr_set(e, "bucket cut %zu is outside the %zu parameters", cuts[c], n);
    int nb = 0;
    for (size_t hi = n; hi > 0; nb++)
        hi = bucket_lo(hi, bucket_floats, cuts, ncuts);
    struct zero *z = calloc(1, sizeof *z);
    if (!z)
        return herr_set(e, "out of memory for the distributed optimizer");
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
        k->shard_off = z->shard_total;
        z->shard_total += len;
    }
    *out = z;
    return 0;
}

static int start_bucket(struct zero *z, int i, herr *e)
{
    struct bucket *k = &z->b[i];
    k->started = 1;
    if (!z->dp || comm_size(z->dp) == 1)
        return 0;
    if (comm_ireduce_scatter(z->dp, z->grads + k->lo, k->hi - k->lo, &k->req, e) != 0)
        return herr_wrap(e, "gradient bucket %d", i);
    return 0;
}

int zero_grads_ready(struct zero *z, size_t lo, size_t hi, herr *e)
{
    if (lo > hi || hi > z->n)
        return herr_set(e, "gradient range [%zu, %zu) is outside the %zu parameters", lo, hi, z->n);
    for (int i = 0; i < z->nb; i++) {
        struct bucket *k = &z->b[i];
        size_t a = lo > k->lo ? lo : k->lo, b = hi < k->hi ? hi : k->hi;
        if (a >= b)
            continue;
        k->ready += b - a;
        if (k->ready > k->hi - k->lo)
            return herr_set(e, "gradients of bucket %d reported final twice in one step", i);
    }
    /* start every bucket that became complete; replicas of a stage report the same ranges in
     * the same order, so they issue the same sequence of reduce-scatters */
    for (int i = 0; i < z->nb; i++) {
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

double zero_shard_sq_norm(const struct zero *z, size_t skip_lo, size_t skip_hi)
{
    double s = 0;
    for (int i = 0; i < z->nb; i++) {
        const struct bucket *k = &z->b[i];
        for (size_t j = k->shard_lo; j < k->shard_hi; j++) {
            if (j >= skip_lo && j < skip_hi)
                continue;
            double g = z->grads[j];
            s += g * g;
        }
    }
    return s;
}

int zero_all_gather_params(struct zero *z, herr *e) { return zero_all_gather(z, z->params, e); }

/* Issues the all-gather of buf's buckets that lie inside [lo, hi), in forward order (from the
 * start of the buffer: bucket nb-1 first). bf16: buf is the parameters; each owned shard is first
 * rounded from its master copy, and the buckets travel as bf16. */
static int gather_part(struct zero *z, float *buf, size_t lo, size_t hi, int bf16, herr *e)
{
    int many = z->dp && comm_size(z->dp) > 1;
    for (int i = z->nb - 1; i >= 0; i--) {
        struct bucket *k = &z->b[i];
        if (k->lo < lo || k->hi > hi)
            continue;
        if (k->req)
            return herr_set(e, "bucket %d still has a collective in flight", i);
        if (bf16) {
            const float *ms = z->master + k->shard_off;
            size_t len = k->shard_hi - k->shard_lo;
            if (many) {
                bf16_pack(z->wire + k->shard_lo, ms, len);
                bf16_unpack(buf + k->shard_lo, z->wire + k->shard_lo, len);
            } else {
                for (size_t j = 0; j < len; j++)
                    buf[k->shard_lo + j] = bf16_round(ms[j]);
            }
        }
        if (!many)
            continue;
        int rc = bf16 ? comm_iall_gather(z->dp, z->wire + k->lo, k->hi - k->lo, sizeof *z->wire,
                                         &k->req, e)
                      : comm_iall_gather(z->dp, buf + k->lo, k->hi - k->lo, sizeof *buf, &k->req, e);
        if (rc != 0)
            return herr_wrap(e, "all-gather of bucket %d", i);
        k->bf16 = bf16;
    }
    return 0;
}

int zero_params_gather_part(struct zero *z, size_t lo, size_t hi, herr *e)
{
    return gather_part(z, z->params, lo, hi, z->master != NULL, e);
}

/* Waits for the requests of the buckets overlapping [lo, hi), in forward order; the first error
 * is kept (`what` names the collective). */
static int wait_range(struct zero *z, size_t lo, size_t hi, const char *what, herr *e)
{
    int rc = 0;
    for (int i = z->nb - 1; i >= 0; i--) {
        struct bucket *k = &z->b[i];
        if (!k->req || k->hi <= lo || k->lo >= hi)
            continue;
        herr e2;
        if (comm_wait(k->req, &e2) != 0 && rc == 0) {
            *e = e2;
            rc = herr_wrap(e, "%s of bucket %d", what, i);
        }
        k->req = NULL;
        if (k->bf16 && rc == 0) { /* the others' chunks; the own one is in place */
            bf16_unpack(z->params + k->lo, z->wire + k->lo, k->shard_lo - k->lo);
            bf16_unpack(z->params + k->shard_hi, z->wire + k->shard_hi, k->hi - k->shard_hi);
        }
        k->bf16 = 0;
    }
    return rc;
}

int zero_params_wait(struct zero *z, size_t lo, size_t hi, herr *e)
{
    return wait_range(z, lo, hi, "parameter all-gather", e);
}

int zero_params_gather_finish(struct zero *z, herr *e) { return zero_params_wait(z, 0, z->n, e); }

int zero_all_gather(struct zero *z, float *buf, herr *e)
{
    int rc = gather_part(z, buf, 0, z->n, 0, e);
    herr e2;
    if (wait_range(z, 0, z->n, "all-gather", &e2) != 0 && rc == 0) {
        *e = e2;
        rc = -1;
    }
    return rc;
}

int zero_params_bf16(struct zero *z, herr *e)
{
    if (z->master)
        return 0;
    int many = z->dp && comm_size(z->dp) > 1;
    z->master = malloc((z->shard_total ? z->shard_total : 1) * sizeof *z->master);
    if (many)
        z->wire = malloc((z->n ? z->n : 1) * sizeof *z->wire);
    if (!z->master || (many && !z->wire)) {
        free(z->master);
        free(z->wire);
        z->master = NULL;
        z->wire = NULL;
        return herr_set(e, "out of memory for the fp32 master parameters (%zu floats)",
                        z->shard_total);
    }
    zero_master_from_params(z);
    return 0;
}

float *zero_master(const struct zero *z) { return z->master; }

void zero_master_from_params(struct zero *z)
{
    if (!z->master)
        return;
    for (int i = 0; i < z->nb; i++) {
        const struct bucket *k = &z->b[i];
        memcpy(z->master + k->shard_off, z->params + k->shard_lo,
               (k->shard_hi - k->shard_lo) * sizeof *z->master);
    }
    for (size_t j = 0; j < z->n; j++)
        z->params[j] = bf16_round(z->params[j]);
}

int zero_master_gather(struct zero *z, float *out, herr *e)
{
    if (!z->master) {
        if (out != z->params)
            memcpy(out, z->params, z->n * sizeof *out);
        return 0;
    }
    for (int i = 0; i < z->nb; i++) {
        const struct bucket *k = &z->b[i];
        memcpy(out + k->shard_lo, z->master + k->shard_off,
               (k->shard_hi - k->shard_lo) * sizeof *out);
    }
    return zero_all_gather(z, out, e);
}
