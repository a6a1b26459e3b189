/* A blend of data sets (data_blend.h): each source's share of a cycle is its weight's (the
 * largest-remainder rounding, at least one), spread evenly; the map from a global micro-batch to
 * a source's micro-batch is one-to-one with no gaps; the micro-batches read are that source's,
 * the same for the same global micro-batch whatever the data degree. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_blend.h"
#include "fs_testutil.h"

enum { B = 2, T = 8 };

/* A text file of n copies of byte c (a source whose every token says which it is). */
static int text_file(const char *path, char c, int n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    for (int i = 0; i < n; i++)
        fputc(c, f);
    return fclose(f);
}

static struct dataloader *loader(const char *path, uint64_t seed)
{
    struct dataloader *d = NULL;
    herr e = {0};
    struct dataloader_config c = {.pattern = path, .B = B, .T = T, .rank = 0, .world = 1,
                                  .seed = seed, .vocab = 256, .global_epochs = 1};
    if (dataloader_open(&d, &c, &e) != 0)
        printf("# %s\n", e.msg);
    return d;
}

/* A blend of n sources of the given weights over the files dir/s<i>.txt (byte 'a' + i). */
static struct data_blend *blend(const char *dir, const double *w, int n)
{
    struct dataloader *src[8];
    for (int i = 0; i < n; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/s%d.txt", dir, i);
        if (text_file(path, (char)('a' + i), 40 * T + 1 + 13 * i) != 0 || !(src[i] = loader(path, 7 + i))) {
            for (int k = 0; k < i; k++)
                dataloader_free(src[k]);
            return NULL;
        }
    }
    struct data_blend *b = NULL;
    herr e = {0};
    if (data_blend_open(&b, src, w, n, &e) != 0)
        printf("# %s\n", e.msg);
    return b;
}

static void test_shares(const char *dir)
{
    double w2[] = {0.7, 0.3}, w3[] = {1, 1, 1}, wtiny[] = {1, 1e-9};
    struct data_blend *b = blend(dir, w2, 2);
    CHECK("0.7 : 0.3 -> 7000 and 3000 of a cycle",
          b && data_blend_share(b, 0) == 7000 && data_blend_share(b, 1) == 3000);
    /* evenly spread: every 10 consecutive micro-batches hold 3 of source 1, give or take 1 */
    int even = b != NULL;
    for (uint64_t g0 = 0; even && g0 < DATA_BLEND_CYCLE; g0++) {
        int n1 = 0, s;
        uint64_t j;
        for (uint64_t g = g0; g < g0 + 10; g++) {
            data_blend_locate(b, g, &s, &j);
            n1 += s == 1;
        }
        even = n1 >= 2 && n1 <= 4;
    }
    CHECK("spread evenly: any 10 consecutive micro-batches hold 2 to 4 of the 30 % source", even);
    /* one-to-one, no gaps: over 3 cycles each source's micro-batches 0 .. 3 x share - 1, once */
    int ok = b != NULL;
    for (int s = 0; ok && s < 2; s++) {
        int n = 3 * data_blend_share(b, s);
        char *seen = calloc((size_t)n, 1);
        ok = seen != NULL;
        for (uint64_t g = 0; ok && g < 3 * DATA_BLEND_CYCLE; g++) {
            int src;
            uint64_t j;
            data_blend_locate(b, g, &src, &j);
            if (src == s)
                ok = j < (uint64_t)n && !seen[j]++;
        }
        for (int j = 0; ok && j < n; j++)
            ok = seen[j] == 1;
        free(seen);
    }
    CHECK("each source's micro-batches taken once each over 3 cycles, none skipped", ok);
    data_blend_free(b);
    b = blend(dir, w3, 3);
    CHECK("three equal weights: 3334, 3333, 3333 (the largest remainder, the first on ties)",
          b && data_blend_share(b, 0) == 3334 && data_blend_share(b, 1) == 3333 &&
              data_blend_share(b, 2) == 3333);
    data_blend_free(b);
    b = blend(dir, wtiny, 2);
    CHECK("a tiny weight still gets one micro-batch a cycle",
          b && data_blend_share(b, 0) == DATA_BLEND_CYCLE - 1 && data_blend_share(b, 1) == 1);
    data_blend_free(b);
    double bad[] = {1, 0};
    struct dataloader *src[2] = {NULL, NULL};
    char path[256];
    herr e = {0};
    snprintf(path, sizeof path, "%s/s0.txt", dir);
    src[0] = loader(path, 1);
    src[1] = loader(path, 2);
    int rc = data_blend_open(&b, src, bad, 2, &e);
    CHECK_MSG("a weight of 0 refused", rc != 0 && strstr(e.msg, "weight 0"), "rc %d: %s", rc, e.msg);
}

/* The micro-batch read is the source's the map names, the same whatever the data degree. */
static void test_reads(const char *dir)
{
    double w[] = {0.5, 0.25, 0.25};
    struct data_blend *b = blend(dir, w, 3);
    int tok[B * T], tgt[B * T], tok2[B * T], tgt2[B * T], ok = b != NULL;
    herr e = {0};
    for (uint64_t g = 0; ok && g < 400; g++) {
        int s;
        uint64_t j;
        data_blend_locate(b, g, &s, &j);
        /* micro-batch g: replica 0 of 1 at k = g; replica g % 4 of 4 at k = g / 4 */
        ok = data_blend_batch_at(b, g, 0, 1, tok, tgt, &e) == 0 &&
             data_blend_batch_at(b, g / 4, (int)(g % 4), 4, tok2, tgt2, &e) == 0 &&
             !memcmp(tok, tok2, sizeof tok) && !memcmp(tgt, tgt2, sizeof tgt);
        for (int i = 0; ok && i < B * T; i++)
            ok = tok[i] == 'a' + s && tgt[i] == 'a' + s;
        if (!ok)
            printf("# micro-batch %llu (source %d): %s\n", (unsigned long long)g, s, e.msg);
    }
    CHECK("every micro-batch comes from its source, the same with 1 and 4 replicas", ok);
    data_blend_free(b);
}

int main(void)
{
    char dir[] = "/tmp/holmes-blend-XXXXXX";
    if (!mkdtemp(dir)) {
        TEST_FAIL("data blend", "mkdtemp");
        TEST_MAIN_END();
    }
    test_shares(dir);
    test_reads(dir);
    test_remove_tree(dir);
    TEST_MAIN_END();
}
