/* Flash attention's tiled algorithm (noderuntime/engine/cuda/flash.cu), checked on the CPU: the
 * same loops written in C with flash_plan.h's tiles and masks (the forward's query tiles, warps
 * and key tiles with the online softmax in base 2; the backward's key-tile loop for dK, dV and
 * query-tile loop for dQ, recomputing P from the log-sum-exp), against a plain causal attention,
 * for whole sequences and token slices' rectangles, at lengths that are and are not multiples of
 * the 64-row tiles; and every visible query-key pair visited exactly once by each loop. The
 * slices' keys' and values' gradients, added over the slices (last first, as the sliced backward
 * does), equal the whole sequence's. The mask is tested only where flash_needs_mask says (as
 * the kernels do, flash_mma_kernels.cuh): a tile it wrongly calls whole would visit invisible pairs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/flash_plan.h"
#include "test.h"

#define HS 16
#define W 16 /* rows a warp */

static uint64_t st = 42;
static float frand(void)
{
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(st >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

static float dot(const float *a, const float *b)
{
    float s = 0.0f;
    for (int d = 0; d < HS; d++)
        s += a[d] * b[d];
    return s;
}

/* plain attention over queries [q0, q1): y, and for dy (rows [q0, q1)) dq, and dk, dv added */
static void plain(int T, int q0, int q1, const float *q, const float *k, const float *v,
                  const float *dy, float *y, float *dq, float *dk, float *dv)
{
    float scale = 1.0f / sqrtf((float)HS);
    float *p = malloc((size_t)T * sizeof(float));
    for (int i = q0; i < q1; i++) {
        float mx = -INFINITY, sum = 0.0f;
        for (int j = 0; j <= i; j++) {
            p[j] = dot(q + i * HS, k + j * HS) * scale;
            mx = fmaxf(mx, p[j]);
        }
        for (int j = 0; j <= i; j++) {
            p[j] = expf(p[j] - mx);
            sum += p[j];
        }
        float dpp = 0.0f;
        for (int d = 0; d < HS; d++)
            y[i * HS + d] = 0.0f;
        for (int j = 0; j <= i; j++) {
            p[j] /= sum;
            for (int d = 0; d < HS; d++)
                y[i * HS + d] += p[j] * v[j * HS + d];
            dpp += p[j] * dot(dy + i * HS, v + j * HS);
        }
        for (int d = 0; d < HS; d++)
            dq[i * HS + d] = 0.0f;
        for (int j = 0; j <= i; j++) {
            float ds = p[j] * (dot(dy + i * HS, v + j * HS) - dpp);
            for (int d = 0; d < HS; d++) {
                dv[j * HS + d] += p[j] * dy[i * HS + d];
                dq[i * HS + d] += scale * ds * k[j * HS + d];
                dk[j * HS + d] += scale * ds * q[i * HS + d];
            }
        }
    }
    free(p);
}

/* flash.cu's loops. visits: [T][T] counts of the pairs each loop computed (forward, dkdv, dq
 * add 1, 100, 10000). */
static void tiled(int T, int q0, int q1, const float *q, const float *k, const float *v,
                  const float *dy, float *y, float *lse, float *dq, float *dk, float *dv,
                  int *visits)
{
    float scale = 1.0f / sqrtf((float)HS), sl2 = 1.4426950408889634f * scale;
    /* forward: a block per query tile, 4 warps of 16 rows, key tiles up to the tile's last query */
    for (int i = 0; i < flash_query_tiles(q0, q1); i++) {
        int qt0 = flash_query_tile(q0, q1, i), kend = flash_key_end(qt0, q1);
        for (int w = 0; w < FLASH_TILE / W; w++)
            for (int r = 0; r < W; r++) {
                int qq = qt0 + W * w + r;
                float m = -INFINITY, l = 0.0f, o[HS] = {0};
                for (int kt = 0; kt < kend; kt += FLASH_TILE) {
                    if (!flash_rows_see(qt0 + W * w, W, kt))
                        continue;
                    /* the mask where the kernels apply it (flash_needs_mask); else all */
                    int masked = flash_needs_mask(qt0 + W * w, W, kt, FLASH_TILE, q1);
                    float sv[FLASH_TILE], mx = m;
                    for (int c = 0; c < FLASH_TILE; c++) {
                        int key = kt + c;
                        sv[c] = !masked || (flash_visible(qq, key, q1) && key < kend)
                                    ? dot(q + qq * HS, k + key * HS) * sl2 : -INFINITY;
                        if (sv[c] > -INFINITY)
                            visits[qq * T + key] += 1;
                        mx = fmaxf(mx, sv[c]);
                    }
                    float mu = mx == -INFINITY ? 0.0f : mx, alpha = exp2f(m - mu), ps = 0.0f;
                    float pv[HS] = {0};
                    for (int c = 0; c < FLASH_TILE; c++) {
                        float pp = exp2f(sv[c] - mu);
                        ps += pp;
                        if (pp > 0.0f)
                            for (int d = 0; d < HS; d++)
                                pv[d] += pp * v[(kt + c) * HS + d];
                    }
                    l = l * alpha + ps;
                    m = mx;
                    for (int d = 0; d < HS; d++)
                        o[d] = o[d] * alpha + pv[d];
                }
                if (qq < q1) {
                    for (int d = 0; d < HS; d++)
                        y[qq * HS + d] = o[d] / l;
                    lse[qq] = m + log2f(l);
                }
            }
    }
    float *D = calloc((size_t)T, sizeof(float));
    for (int i = q0; i < q1; i++)
        D[i] = dot(dy + i * HS, y + i * HS);
    /* dK, dV: a block per key tile of [0, q1), warps of 16 keys, the query tiles that see them */
    for (int kt0 = 0; kt0 < flash_key_tiles(q1) * FLASH_TILE; kt0 += FLASH_TILE)
        for (int w = 0; w < FLASH_TILE / W; w++)
            for (int r = 0; r < W; r++) {
                int key = kt0 + W * w + r;
                float gk[HS] = {0}, gv[HS] = {0};
                for (int qt = flash_first_query(q0, kt0); qt < q1; qt += FLASH_TILE) {
                    if (!flash_rows_see(qt, FLASH_TILE, kt0 + W * w))
                        continue;
                    int masked = flash_needs_mask(qt, FLASH_TILE, kt0 + W * w, W, q1);
                    for (int c = 0; c < FLASH_TILE; c++) {
                        int qq = qt + c;
                        if (masked && !flash_visible(qq, key, q1))
                            continue;
                        visits[qq * T + key] += 100;
                        float p = exp2f(dot(k + key * HS, q + qq * HS) * sl2 - lse[qq]);
                        float ds = p * (dot(v + key * HS, dy + qq * HS) - D[qq]);
                        for (int d = 0; d < HS; d++) {
                            gv[d] += p * dy[qq * HS + d];
                            gk[d] += ds * q[qq * HS + d];
                        }
                    }
                }
                if (key < q1)
                    for (int d = 0; d < HS; d++) {
                        dk[key * HS + d] += gk[d] * scale;
                        dv[key * HS + d] += gv[d];
                    }
            }
    /* dQ: a block per query tile, warps of 16 queries, the key tiles up to the tile's end */
    for (int i = 0; i < flash_query_tiles(q0, q1); i++) {
        int qt0 = flash_query_tile(q0, q1, i), kend = flash_key_end(qt0, q1);
        for (int w = 0; w < FLASH_TILE / W; w++)
            for (int r = 0; r < W; r++) {
                int qq = qt0 + W * w + r;
                float g[HS] = {0};
                for (int kt = 0; kt < kend; kt += FLASH_TILE) {
                    if (!flash_rows_see(qt0 + W * w, W, kt))
                        continue;
                    int masked = flash_needs_mask(qt0 + W * w, W, kt, FLASH_TILE, q1);
                    for (int c = 0; c < FLASH_TILE; c++) {
                        int key = kt + c;
                        if (masked && !flash_visible(qq, key, q1))
                            continue;
                        visits[qq * T + key] += 10000;
                        float p = exp2f(dot(q + qq * HS, k + key * HS) * sl2 - lse[qq]);
                        float ds = p * (dot(dy + qq * HS, v + key * HS) - D[qq]);
                        for (int d = 0; d < HS; d++)
                            g[d] += ds * k[key * HS + d];
                    }
                }
                if (qq < q1)
                    for (int d = 0; d < HS; d++)
                        dq[qq * HS + d] = g[d] * scale;
            }
    }
    free(D);
}

static double maxrel(const float *a, const float *b, size_t n)
{
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs((double)b[i]));
    }
    return mr > 0 ? md / mr : md;
}

/* one pass [q0, q1) of a sequence of T: tiled = plain, and every visible pair visited once */
static void check_pass(int T, int q0, int q1)
{
    char name[96];
    size_t n = (size_t)T * HS;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *dy = calloc(n, 4);
    float *y1 = calloc(n, 4), *y2 = calloc(n, 4), *dq1 = calloc(n, 4), *dq2 = calloc(n, 4);
    float *dk1 = calloc(n, 4), *dk2 = calloc(n, 4), *dv1 = calloc(n, 4), *dv2 = calloc(n, 4);
    float *lse = calloc((size_t)T, 4);
    int *vis = calloc((size_t)T * T, sizeof(int));
    for (size_t i = 0; i < n; i++) {
        q[i] = 2.0f * frand();
        k[i] = 2.0f * frand();
        v[i] = frand();
        dy[i] = (int)(i / HS) >= q0 && (int)(i / HS) < q1 ? frand() : 0.0f;
    }
    plain(T, q0, q1, q, k, v, dy, y1, dq1, dk1, dv1);
    tiled(T, q0, q1, q, k, v, dy, y2, lse, dq2, dk2, dv2, vis);
    int bad = 0;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++)
            bad += vis[i * T + j] != (i >= q0 && i < q1 && j <= i ? 10101 : 0);
    snprintf(name, sizeof name, "flash.T%d.[%d,%d).every_pair_once", T, q0, q1);
    CHECK_INT(name, bad, 0);
    double e = fmax(fmax(maxrel(y2 + q0 * HS, y1 + q0 * HS, (size_t)(q1 - q0) * HS),
                         maxrel(dq2 + q0 * HS, dq1 + q0 * HS, (size_t)(q1 - q0) * HS)),
                    fmax(maxrel(dk2, dk1, (size_t)q1 * HS), maxrel(dv2, dv1, (size_t)q1 * HS)));
    snprintf(name, sizeof name, "flash.T%d.[%d,%d).equals_plain", T, q0, q1);
    if (e <= 1e-4)
        TEST_PASS(name);
    else
        TEST_FAIL(name, "relative difference %.3g > 1e-4", e);
    free(q);
    free(k);
    free(v);
    free(dy);
    free(y1);
    free(y2);
    free(dq1);
    free(dq2);
    free(dk1);
    free(dk2);
    free(dv1);
    free(dv2);
    free(lse);
    free(vis);
}

/* token slices: the rectangles' backward, last slice first, adding dK and dV; = the whole */
static void check_slices(int T, const int *cut, int ns)
{
    char name[96];
    size_t n = (size_t)T * HS;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *dy = malloc(n * 4);
    float *ys = calloc(n, 4), *yw = calloc(n, 4), *lse = calloc((size_t)T, 4);
    float *dqs = calloc(n, 4), *dqw = calloc(n, 4), *dks = calloc(n, 4), *dkw = calloc(n, 4);
    float *dvs = calloc(n, 4), *dvw = calloc(n, 4), *dys = calloc(n, 4);
    int *vis = calloc((size_t)T * T, sizeof(int));
    for (size_t i = 0; i < n; i++) {
        q[i] = 2.0f * frand();
        k[i] = 2.0f * frand();
        v[i] = frand();
        dy[i] = frand();
    }
    tiled(T, 0, T, q, k, v, dy, yw, lse, dqw, dkw, dvw, vis);
    memset(vis, 0, (size_t)T * T * sizeof(int));
    for (int j = ns - 1; j >= 0; j--) { /* backward order; each slice's forward is its own */
        int t0 = cut[j], t1 = cut[j + 1];
        memset(dys, 0, n * 4);
        memcpy(dys + t0 * HS, dy + t0 * HS, (size_t)(t1 - t0) * HS * 4);
        tiled(T, t0, t1, q, k, v, dys, ys, lse, dqs, dks, dvs, vis);
    }
    double e = fmax(maxrel(ys, yw, n), fmax(maxrel(dqs, dqw, n),
                                             fmax(maxrel(dks, dkw, n), maxrel(dvs, dvw, n))));
    snprintf(name, sizeof name, "flash.T%d.%d_slices.equal_the_whole", T, ns);
    if (e <= 1e-4)
        TEST_PASS(name);
    else
        TEST_FAIL(name, "relative difference %.3g > 1e-4", e);
    free(q);
    free(k);
    free(v);
    free(dy);
    free(ys);
    free(yw);
    free(lse);
    free(dqs);
    free(dqw);
    free(dks);
    free(dkw);
    free(dvs);
    free(dvw);
    free(dys);
    free(vis);
}

/* The stored dQ path's workspace (flash_mma_kernels.cuh): the dK/dV kernel's walk (key tiles of
 * 64, 4 warps of 16 keys, the query tiles from flash_first_query, a warp skipping a tile its keys
 * cannot see) writes dS^T[key][q - q0] for its keys below q1 and its queries below q1; the dQ
 * kernel's walk (query tiles of 64, 4 warps of 16 queries, key tiles up to flash_key_end) reads
 * whole 64 x 64 tiles, zero past kend, and zeroes the pairs flash_visible rejects where
 * flash_needs_mask says. Every pair it then uses must have been written, every read and write
 * must fall inside the row of flash_ds_cols(q1 - q0) columns, and every visible pair must be used
 * once. Over many passes [q0, q1) of T. Returns the violations. */
static long ds_cover(int T, int q0, int q1)
{
    int S = q1 - q0, ld = flash_ds_cols(S);
    unsigned char *wr = calloc((size_t)T * ld, 1), *used = calloc((size_t)T * T, 1);
    long bad = 0;
    if (!wr || !used) {
        free(wr);
        free(used);
        return 1;
    }
    for (int kb = 0; kb < flash_key_tiles(q1); kb++) {
        int kt0 = kb * FLASH_TILE, qfirst = flash_first_query(q0, kt0);
        for (int qt = qfirst; qt < q1; qt += FLASH_TILE)
            for (int w = 0; w < 4; w++) {
                if (!flash_rows_see(qt, FLASH_TILE, kt0 + W * w))
                    continue;
                for (int key = kt0 + W * w; key < kt0 + W * w + W && key < q1; key++)
                    for (int c = qt - q0; c < qt - q0 + FLASH_TILE && c < S; c++) {
                        bad += c < 0 || c >= ld;
                        if (c >= 0 && c < ld)
                            wr[(size_t)key * ld + c] = 1;
                    }
            }
    }
    for (int i = 0; i < flash_query_tiles(q0, q1); i++) {
        int qt0 = flash_query_tile(q0, q1, i), kend = flash_key_end(qt0, q1);
        bad += qt0 - q0 + FLASH_TILE > ld; /* the tile's 64 columns inside the row */
        for (int kt = 0; kt < kend; kt += FLASH_TILE)
            for (int w = 0; w < 4; w++) {
                int qw = qt0 + W * w;
                if (!flash_rows_see(qw, W, kt))
                    continue;
                int masked = flash_needs_mask(qw, W, kt, FLASH_TILE, q1);
                for (int q = qw; q < qw + W; q++)
                    for (int k = kt; k < kt + FLASH_TILE && k < kend; k++) {
                        if (masked && !flash_visible(q, k, q1))
                            continue;
                        bad += !flash_visible(q, k, q1) || !wr[(size_t)k * ld + (q - q0)];
                        if (flash_visible(q, k, q1))
                            bad += used[(size_t)q * T + k]++ != 0;
                    }
            }
    }
    for (int q = q0; q < q1; q++)
        for (int k = 0; k <= q; k++)
            bad += used[(size_t)q * T + k] != 1;
    free(wr);
    free(used);
    return bad;
}

static void check_ds_cover(void)
{
    long bad = 0, passes = 0;
    int Ts[] = {64, 130, 200, 257};
    for (int ti = 0; ti < 4; ti++) {
        int T = Ts[ti];
        for (int q0 = 0; q0 < T; q0++) {
            int ends[] = {q0 + 1, q0 + 15, q0 + 16, q0 + 63, q0 + 64, q0 + 65, q0 + 129, T};
            for (int e = 0; e < 8; e++)
                if (ends[e] <= T) {
                    bad += ds_cover(T, q0, ends[e]);
                    passes++;
                }
        }
    }
    if (bad == 0)
        TEST_PASS("flash.plan.ds_workspace_cover");
    else
        TEST_FAIL("flash.plan.ds_workspace_cover",
                  "%ld violations over %ld passes: a pair the dQ kernel uses unwritten, or an "
                  "access outside the row", bad, passes);
}

int main(void)
{
    int lens[] = {16, 37, 64, 80, 130, 200};
    for (int i = 0; i < 6; i++)
        check_pass(lens[i], 0, lens[i]);
    check_pass(80, 3, 12);
    check_pass(130, 12, 130);
    check_pass(130, 65, 100);
    check_pass(130, 49, 130); /* a warp whose last query is a key tile's first */
    check_pass(200, 70, 190); /* unmasked tiles (flash_needs_mask) inside a slice */
    check_pass(200, 46, 200); /* a warp's first query one before a key tile's last key */
    check_pass(130, 14, 100);
    int cut1[] = {0, 3, 12, 32};
    check_slices(32, cut1, 3);
    int cut2[] = {0, 50, 64, 101, 130};
    check_slices(130, cut2, 4);
    CHECK("flash.plan.tiles", flash_query_tiles(12, 130) == 2 && flash_query_tile(12, 130, 1) == 76 &&
                                  flash_key_end(76, 130) == 130 && flash_key_end(12, 130) == 76 &&
                                  flash_key_tiles(130) == 3 && flash_first_query(65, 64) == 65 &&
                                  flash_first_query(12, 64) == 64);
    CHECK("flash.plan.ds_cols", flash_ds_cols(1) == 64 && flash_ds_cols(64) == 64 &&
                                    flash_ds_cols(65) == 128 && flash_ds_cols(1024) == 1024);
    /* the workspace to its 1 GiB cap (GPT-2 124M at B 16: 403 MB), none past it */
    CHECK("flash.plan.ds_bytes", flash_ds_bytes(16, 12, 1024) == (size_t)16 * 12 * 1024 * 1024 * 2 &&
                                     flash_ds_bytes(1, 4, 11584) == (size_t)1073512448 &&
                                     flash_ds_bytes(1, 4, 11648) == 0 &&
                                     flash_ds_bytes(1, 1, 32768) == 0);
    check_ds_cover();
    TEST_MAIN_END();
}
