/* ZeRO-1 buckets over 1..4 forked replicas: readiness in backward order starts reduce-scatters,
 * shards hold the replica sum and tile the buffer, and the parameter all-gather restores every
 * replica's updated shard everywhere. Each case runs on host memory and on the emulated device
 * (devmem.h), whose buffers the communicator stages through host memory as it does a GPU's. */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "bf16.h"
#include "comm_testutil.h"
#include "plan_doc.h"
#include "zero.h"

#define N 10007
#define BUCKET 1000

static float gval(int r, size_t i) { return (float)((int)((i * 13 + (size_t)r * 7) % 19) - 9); }

/* zero_set_params_written: counts the parameters reported written */
static void count_written(void *ctx, size_t lo, size_t hi) { *(int *)ctx += (int)(hi - lo); }

/* zero_set_params_written: the calls and the span they cover */
struct span {
    int calls;
    size_t lo, hi;
};
static void note_span(void *ctx, size_t lo, size_t hi)
{
    struct span *s = ctx;
    if (s->calls++ == 0 || lo < s->lo)
        s->lo = lo;
    if (hi > s->hi)
        s->hi = hi;
}

/* The data-parallel group of n forked replicas (n > 1). */
static int dp_open(struct comm **c, int tag, int n, int rank, struct tcp_listener *l,
                   const struct tcp_endpoint *eps)
{
    herr e;
    struct tcp_group_spec s;
    group_spec(&s, "dp", tag, n, rank, eps, 20);
    if (comm_create(c, l, &s, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    return 0;
}

/* The memory a case runs in: arg NULL is the host's, else the emulated device's. */
static struct devmem *mem_of(void *arg) { return arg ? devmem_emulated() : devmem_host(); }

static int replica(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps, void *arg)
{
    herr e;
    struct comm *c = NULL;
    if (n > 1 && dp_open(&c, 31, n, rank, l, eps) != 0)
        return 1;
    if (c && comm_set_devmem(c, mem_of(arg), &e) != 0)
        return 1;
    float *p = malloc(N * sizeof *p), *g = malloc(N * sizeof *g);
    struct zero *z;
    int written = 0;
    if (!p || !g || zero_create(&z, mem_of(arg), p, g, N, NULL, 0, BUCKET, c, &e) != 0)
        return 1;
    zero_set_params_written(z, count_written, &written);
    int bad = 0;
    for (int step = 0; step < 2 && !bad; step++) {
        for (size_t i = 0; i < N; i++) {
            g[i] = gval(rank, i) + (float)step;
            p[i] = -1;
        }
        /* report in backward order, in uneven pieces */
        size_t hi = N;
        while (hi > 0 && !bad) {
            size_t lo = hi > 777 ? hi - 777 : 0;
            if (zero_grads_ready(z, lo, hi, &e) != 0)
                bad = 1;
            hi = lo;
        }
        if (bad || zero_reduce_wait(z, &e) != 0) {
            fprintf(stderr, "rank %d: %s\n", rank, e.msg);
            bad = 1;
            break;
        }
        /* the owned shards laid out in buffer order (the last bucket, the buffer's start,
         * first): with one replica exactly like the parameters */
        size_t owned = 0;
        for (int b = zero_num_buckets(z) - 1; b >= 0; b--) {
            size_t lo, h;
            zero_shard(z, b, &lo, &h);
            if (zero_shard_offset(z, b) != owned || (n == 1 && owned != lo)) {
                fprintf(stderr, "rank %d: bucket %d's shard at %zu, want %zu\n", rank, b,
                        zero_shard_offset(z, b), owned);
                bad = 1;
            }
            owned += h - lo;
            for (size_t i = lo; i < h; i++) {
                float want = 0;
                for (int r = 0; r < n; r++)
                    want += gval(r, i) + (float)step;
                if (g[i] != want) {
                    fprintf(stderr, "rank %d: grad %zu = %g, want %g\n", rank, i, g[i], want);
                    bad = 1;
                    break;
                }
                p[i] = (float)i * 0.5f + (float)step;
            }
        }
        if (owned != zero_shard_total(z))
            bad = 1;
        written = 0;
        if (!bad && zero_all_gather_params(z, &e) != 0) {
            fprintf(stderr, "rank %d: %s\n", rank, e.msg);
            bad = 1;
        }
        for (size_t i = 0; i < N && !bad; i++)
            if (p[i] != (float)i * 0.5f + (float)step) {
                fprintf(stderr, "rank %d: param %zu = %g\n", rank, i, p[i]);
                bad = 1;
            }
        /* the others' shards were written by the gather (and reported), the own ones not */
        if (!bad && written != (int)(N - zero_shard_total(z))) {
            fprintf(stderr, "rank %d: %d parameters reported written, want %zu\n", rank, written,
                    N - zero_shard_total(z));
            bad = 1;
        }
    }
    /* the emulated device's buffers went through the staging buffers, host memory's did not */
    if (c && !bad && (comm_bytes_staged(c) > 0) != (arg != NULL)) {
        fprintf(stderr, "rank %d: %llu bytes staged\n", rank, (unsigned long long)comm_bytes_staged(c));
        bad = 1;
    }
    /* the owned shards of all replicas tile the buffer exactly: sum of totals == N */
    float tot = (float)zero_shard_total(z);
    if (c && !bad && comm_all_reduce(c, &tot, 1, &e) != 0)
        bad = 1;
    if (tot != N) {
        fprintf(stderr, "rank %d: shards cover %g of %d\n", rank, tot, N);
        bad = 1;
    }
    zero_free(z);
    comm_free(c);
    free(p);
    free(g);
    return bad;
}

/* bf16 parameters: the working parameters are rounded, the masters keep fp32, the gather sends
 * each owner's rounded shard, and zero_master_gather_host returns every owner's exact fp32 values. */
static float pval(size_t i) { return 1.0f + (float)i * 1.2345e-4f; } /* not bf16 values */

static int replica_bf16(int rank, int n, struct tcp_listener *l, const struct tcp_endpoint *eps,
                        void *arg)
{
    herr e;
    struct comm *c = NULL;
    if (n > 1 && dp_open(&c, 32, n, rank, l, eps) != 0)
        return 1;
    if (c && comm_set_devmem(c, mem_of(arg), &e) != 0)
        return 1;
    float *p = malloc(N * sizeof *p), *g = calloc(N, sizeof *g), *out = malloc(N * sizeof *out);
    struct zero *z;
    if (!p || !g || !out || zero_create(&z, mem_of(arg), p, g, N, NULL, 0, BUCKET, c, &e) != 0)
        return 1;
    int bad = zero_master(z) != NULL;
    for (size_t i = 0; i < N; i++)
        p[i] = pval(i);
    if (zero_params_bf16(z, &e) != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, e.msg);
        return 1;
    }
    float *ms = zero_master(z);
    size_t moved = 0;
    for (size_t i = 0; i < N && !bad; i++) {
        moved += p[i] != pval(i);
        if (p[i] != bf16_round(pval(i))) {
            fprintf(stderr, "rank %d: param %zu = %.9g, not rounded from %.9g\n", rank, i, p[i], pval(i));
            bad = 1;
        }
    }
    if (moved < N / 2) {
        fprintf(stderr, "rank %d: only %zu of %d parameters changed by the rounding\n", rank, moved, N);
        bad = 1;
    }
    /* "the optimizer": each owner moves its shard's masters by a step of its own */
    for (int b = 0; b < zero_num_buckets(z) && !bad; b++) {
        size_t lo, hi, off = zero_shard_offset(z, b);
        zero_shard(z, b, &lo, &hi);
        for (size_t i = lo; i < hi; i++) {
            if (ms[off + i - lo] != pval(i))
                bad = 1;
            ms[off + i - lo] = pval(i) + 0.5f;
        }
    }
    uint64_t b0 = c ? comm_bytes_sent(c) : 0, b1 = 0, b2 = 0;
    if (bad || zero_params_gather_part(z, 0, N, &e) != 0 || zero_params_gather_finish(z, &e) != 0 ||
        (b1 = c ? comm_bytes_sent(c) : 0, zero_master_gather_host(z, out, &e) != 0)) {
        fprintf(stderr, "rank %d: %s\n", rank, bad ? "masters are not the parameters" : e.msg);
        bad = 1;
    }
    /* the parameters travelled in 2 bytes each, the masters (zero_master_gather_host) in 4 */
    b2 = c ? comm_bytes_sent(c) : 0;
    if (c && !bad && (b1 - b0 == 0 || 2 * (b1 - b0) != b2 - b1)) {
        fprintf(stderr, "rank %d: the bf16 gather sent %llu bytes, the fp32 one %llu\n", rank,
                (unsigned long long)(b1 - b0), (unsigned long long)(b2 - b1));
        bad = 1;
    }
    for (size_t i = 0; i < N && !bad; i++)
        if (p[i] != bf16_round(pval(i) + 0.5f) || out[i] != pval(i) + 0.5f) {
            fprintf(stderr, "rank %d: param %zu = %.9g, master %.9g after the gather\n", rank, i,
                    p[i], out[i]);
            bad = 1;
        }
    zero_free(z);
    comm_free(c);
    free(p);
    free(g);
    free(out);
    return bad;
}

int main(void)
{
    static int emulated = 1;
    for (int dev = 0; dev < 2; dev++) {
        void *arg = dev ? &emulated : NULL;
        const char *where = dev ? " (emulated device: staged)" : "";
        for (int n = 1; n <= 4; n++) {
            char name[128];
            snprintf(name, sizeof name, "zero-1 with %d replicas: shards, sums, all-gather%s", n, where);
            CHECK_INT(name, run_group(n, replica, arg, -1, 60), 0);
        }
        for (int n = 1; n <= 3; n++) {
            char name[128];
            snprintf(name, sizeof name, "bf16 parameters with %d replicas: rounded, gathered, fp32 "
                     "masters%s", n, where);
            CHECK_INT(name, run_group(n, replica_bf16, arg, -1, 60), 0);
        }
    }
    herr e;
    struct zero *z;
    float p[10], g[10];
    CHECK_INT("zero create small", zero_create(&z, devmem_host(), p, g, 10, NULL, 0, 4, NULL, &e), 0);
    CHECK_INT("three buckets", zero_num_buckets(z), 3);
    CHECK_INT("range outside rejected", zero_grads_ready(z, 5, 11, &e), -1);
    CHECK_INT("first report ok", zero_grads_ready(z, 6, 10, &e), 0);
    CHECK_INT("double report rejected", zero_grads_ready(z, 6, 10, &e), -1);
    CHECK("double report message", strstr(e.msg, "twice") != NULL);
    zero_free(z);
    /* the default size (0) is what the planner prices: PLAN_ZERO_BUCKET_FLOATS a bucket; the
     * buffers are not touched by zero_create (the size only cuts the range) */
    size_t nbig = (size_t)PLAN_ZERO_BUCKET_FLOATS * 2 + 5, bcut[] = {(size_t)PLAN_ZERO_BUCKET_FLOATS};
    CHECK_INT("zero create, default buckets", zero_create(&z, devmem_host(), p, g, nbig, bcut, 1, 0, NULL, &e), 0);
    CHECK_INT("default buckets: 32 Mi + 5 floats, a cut at 16 Mi: 3 buckets", zero_num_buckets(z), 3);
    CHECK_INT("default buckets: the last PLAN_ZERO_BUCKET_FLOATS floats are bucket 0",
              zero_bucket_at(z, nbig - PLAN_ZERO_BUCKET_FLOATS), 0);
    CHECK_INT("default buckets: the 5 above the cut are bucket 1", zero_bucket_at(z, PLAN_ZERO_BUCKET_FLOATS), 1);
    zero_free(z);
    /* cuts: no bucket spans one; sizes stay <= 4; order from the end of the buffer */
    size_t cuts[] = {7, 3};
    CHECK_INT("zero create with cuts", zero_create(&z, devmem_host(), p, g, 10, cuts, 2, 4, NULL, &e), 0);
    CHECK_INT("cut buckets", zero_num_buckets(z), 3);
    CHECK_INT("bucket of offset 9", zero_bucket_at(z, 9), 0);
    CHECK_INT("bucket of offset 7", zero_bucket_at(z, 7), 0);
    CHECK_INT("bucket of offset 6", zero_bucket_at(z, 6), 1);
    CHECK_INT("bucket of offset 2", zero_bucket_at(z, 2), 2);
    CHECK_INT("bucket of offset 10", zero_bucket_at(z, 10), -1);
    CHECK_INT("end of bucket 1", (int)zero_bucket_end(z, 1), 7);
    CHECK_INT("end of bucket 2", (int)zero_bucket_end(z, 2), 3);
    CHECK_INT("waiting on an unstarted bucket rejected", zero_bucket_wait(z, 1, &e), -1);
    CHECK_INT("bucket 1 complete", zero_grads_ready(z, 3, 7, &e), 0);
    CHECK_INT("then its wait returns", zero_bucket_wait(z, 1, &e), 0);
    CHECK_INT("and the rest finish", zero_reduce_wait(z, &e), 0);
    zero_free(z);
    size_t big[] = {2};
    CHECK_INT("long segment still split by size", zero_create(&z, devmem_host(), p, g, 10, big, 1, 4, NULL, &e), 0);
    CHECK_INT("[6,10) [2,6) [0,2)", zero_num_buckets(z), 3);
    CHECK_INT("end of bucket 2 at the cut", (int)zero_bucket_end(z, 2), 2);
    zero_free(z);
    /* a range over several buckets completes each it finishes, and only those */
    CHECK_INT("zero create for ranges", zero_create(&z, devmem_host(), p, g, 10, NULL, 0, 4, NULL, &e), 0);
    CHECK_INT("a range over two buckets", zero_grads_ready(z, 5, 10, &e), 0);
    CHECK_INT("completes the one it covers", zero_buckets_started(z), 1);
    CHECK_INT("the rest of the buffer", zero_grads_ready(z, 0, 5, &e), 0);
    CHECK_INT("completes the other two", zero_buckets_started(z), 3);
    CHECK_INT("a new step", zero_reduce_wait(z, &e), 0);
    CHECK_INT("starts none", zero_buckets_started(z), 0);
    zero_free(z);
    /* one replica, bf16 parameters: the masters of every bucket rounded into the parameters in
     * one piece (one copy and one rounding, not one per bucket) */
    struct span sp = {0, 0, 0};
    for (int i = 0; i < 10; i++)
        p[i] = pval((size_t)i);
    CHECK_INT("zero create, bf16", zero_create(&z, devmem_host(), p, g, 10, cuts, 2, 4, NULL, &e), 0);
    CHECK_INT("bf16 parameters", zero_params_bf16(z, &e), 0);
    for (int i = 0; i < 10; i++)
        zero_master(z)[i] = pval((size_t)i) + 1.0f; /* one replica: masters laid out as params */
    zero_set_params_written(z, note_span, &sp);
    CHECK_INT("gather with one replica", zero_params_gather_part(z, 0, 10, &e), 0);
    CHECK("the parameters rounded from the masters in one piece",
          sp.calls == 1 && sp.lo == 0 && sp.hi == 10 && p[0] == bf16_round(pval(0) + 1.0f) &&
              p[9] == bf16_round(pval(9) + 1.0f));
    zero_free(z);
    size_t bad[] = {11};
    CHECK_INT("cut outside rejected", zero_create(&z, devmem_host(), p, g, 10, bad, 1, 4, NULL, &e), -1);
    CHECK("cut message names it", strstr(e.msg, "cut 11") != NULL);
    TEST_MAIN_END();
}
