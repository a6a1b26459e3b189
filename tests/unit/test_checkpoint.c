/* Checkpoints: round trip, keep-last-K, corrupt/truncated/foreign files, shape mismatch, a failed
 * write that leaves the previous checkpoint intact; llm.c GPT-2 import. */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint.h"
#include "fs_testutil.h"
#include "test.h"

static char dir[64];
static const struct gpt_config cfg = {2, 16, 2, 61, 128, 16};

static void fill(float *p, size_t n, float base)
{
    for (size_t i = 0; i < n; i++)
        p[i] = base + (float)i * 0.001f;
}

static struct ckpt_meta meta_for(size_t n, int64_t step)
{
    struct ckpt_meta m = {.c = cfg, .first = 0, .last = 2, .step = step, .data_pos = 77,
                          .rng = {1, 2, 3, 0xfedcba9876543210ULL}, .nparams = n,
                          .has_moments = 1};
    return m;
}

static int count_files(void)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static void corrupt(const char *path, long at, int truncate_to)
{
    if (truncate_to >= 0) {
        if (truncate(path, truncate_to) != 0)
            printf("truncate failed\n");
        return;
    }
    FILE *f = fopen(path, "r+b");
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void test_roundtrip_and_keep(void)
{
    enum { N = 1000 };
    static float p[N], m[N], v[N], p2[N], m2[N], v2[N];
    fill(p, N, 1.0f);
    fill(m, N, 2.0f);
    fill(v, N, 3.0f);
    herr e;
    char path[4096];
    struct ckpt_meta meta = meta_for(N, 5);
    if (ckpt_write(dir, &meta, p, m, v, 2, path, sizeof path, &e) < 0) {
        TEST_FAIL("ckpt.write", "%s", e.msg);
        return;
    }
    struct ckpt_meta got;
    CHECK_INT("ckpt.read", ckpt_read(path, &got, p2, m2, v2, N, &e), 0);
    CHECK("ckpt.roundtrip_params", memcmp(p, p2, sizeof p) == 0 && memcmp(m, m2, sizeof m) == 0 &&
          memcmp(v, v2, sizeof v) == 0);
    CHECK("ckpt.roundtrip_meta", got.step == 5 && got.data_pos == 77 &&
          got.rng[3] == 0xfedcba9876543210ULL && got.c.vocab == 61 && got.last == 2);
    CHECK_INT("ckpt.shape_ok", ckpt_check_shape(path, &got, &cfg, 0, 2, &e), 0);
    struct gpt_config other = cfg;
    other.channels = 32;
    CHECK("ckpt.shape_mismatch", ckpt_check_shape(path, &got, &other, 0, 2, &e) == -1 &&
          strstr(e.msg, "channels is 16 but the job has 32") && strstr(e.msg, path));
    CHECK("ckpt.range_mismatch", ckpt_check_shape(path, &got, &cfg, 0, 1, &e) == -1 &&
          strstr(e.msg, "last layer"));
    CHECK("ckpt.count_mismatch", ckpt_read(path, &got, p2, m2, v2, N - 1, &e) == -1 &&
          strstr(e.msg, "parameters"));

    for (int s = 6; s <= 9; s++) {
        meta.step = s;
        ckpt_write(dir, &meta, p, m, v, 2, NULL, 0, &e);
    }
    CHECK_INT("ckpt.keep_last_2", count_files(), 2);
    char latest[4096];
    CHECK("ckpt.latest", ckpt_latest(dir, 0, 2, latest, sizeof latest, &e) == 0 &&
          strstr(latest, "stage-0-2-step-000000009.ckpt"));
    CHECK_INT("ckpt.latest_other_stage_none", ckpt_latest(dir, 0, 1, latest, sizeof latest, &e), 1);
    CHECK_INT("ckpt.latest_missing_dir", ckpt_latest("/nonexistent/holmes", 0, 1, latest,
                                                     sizeof latest, &e), 1);

    /* a write that fails part-way (file size limit, as a full disk would) keeps the old files */
    ckpt_latest(dir, 0, 2, latest, sizeof latest, &e);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 2000;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    meta.step = 10;
    int rc = ckpt_write(dir, &meta, p, m, v, 1, NULL, 0, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK("ckpt.failed_write_reports", rc == -1 && strstr(e.msg, "write failed") &&
          strstr(e.msg, "step-000000010"));
    CHECK_INT("ckpt.failed_write_keeps_old", count_files(), 2);
    CHECK_INT("ckpt.old_still_reads", ckpt_read(latest, &got, p2, m2, v2, N, &e), 0);

    /* corruption */
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    char cmd[8500];
    snprintf(cmd, sizeof cmd, "cp %s %s", latest, bad);
    if (system(cmd) != 0)
        printf("cp failed\n");
    corrupt(bad, 256 + 4 * 500, -1);
    CHECK("ckpt.crc_mismatch", ckpt_read(bad, &got, p2, m2, v2, N, &e) == -1 &&
          strstr(e.msg, "payload CRC mismatch") && strstr(e.msg, "bad.ckpt"));
    corrupt(bad, 256 + 4 * 500, -1); /* restore */
    corrupt(bad, 50, -1);
    CHECK("ckpt.header_crc", ckpt_read(bad, &got, p2, m2, v2, N, &e) == -1 &&
          strstr(e.msg, "header CRC"));
    corrupt(bad, 50, -1);
    corrupt(bad, 0, 256 + 4 * N * 3 - 10);
    CHECK("ckpt.truncated", ckpt_read(bad, &got, p2, m2, v2, N, &e) == -1 &&
          strstr(e.msg, "truncated"));
    corrupt(bad, 0, 100);
    CHECK("ckpt.truncated_header", ckpt_read(bad, &got, p2, m2, v2, N, &e) == -1 &&
          strstr(e.msg, "truncated header"));
    /* a header whose CRC is right but whose parameter count makes the file's size wrap to 256
     * bytes (2^62 floats): refused for what it is, not read as an empty file's end */
    corrupt(bad, 0, 256);
    {
        unsigned char h[256];
        FILE *hf = fopen(bad, "r+b");
        int ok = hf && fread(h, 1, 256, hf) == 256;
        uint64_t big = (uint64_t)1 << 62;
        memcpy(h + 96, &big, 8);
        uint32_t crc = (uint32_t)crc32(crc32(0, Z_NULL, 0), h, 252);
        memcpy(h + 252, &crc, 4);
        ok = ok && fseek(hf, 0, SEEK_SET) == 0 && fwrite(h, 1, 256, hf) == 256;
        if (hf)
            fclose(hf);
        CHECK("ckpt.count_wraps", ok && ckpt_read_meta(bad, &got, &e) == -1 &&
              strstr(e.msg, "parameter count of 4611686018427387904") && strstr(e.msg, "bad.ckpt"));
    }
    FILE *f = fopen(bad, "w");
    for (int k = 0; k < 40; k++)
        fputs("not a checkpoint; ", f); /* longer than a header */
    fclose(f);
    CHECK("ckpt.foreign", ckpt_read(bad, &got, p2, m2, v2, N, &e) == -1 &&
          strstr(e.msg, "not a Holmes checkpoint"));
    unlink(bad);
    CHECK("ckpt.keep_zero", ckpt_write(dir, &meta, p, m, v, 0, NULL, 0, &e) == -1 &&
          strstr(e.msg, "keep"));
    /* parameters only: moments read back as zero */
    meta.has_moments = 0;
    meta.step = 11;
    ckpt_write(dir, &meta, p, NULL, NULL, 5, path, sizeof path, &e);
    m2[3] = 9.0f;
    CHECK("ckpt.params_only", ckpt_read(path, &got, p2, m2, v2, N, &e) == 0 && m2[3] == 0.0f &&
          memcmp(p, p2, sizeof p) == 0);
}

/* An llm.c file written here in llm.c's documented order; each value encodes (group, index). */
static void test_llmc(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/gpt2_tiny.bin", dir);
    size_t C = 16, L = 2, Vp = 128, maxT = 16;
    size_t sizes[16] = {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                        L * C, L * C, L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C};
    int32_t h[256] = {LLMC_MAGIC, 3, (int32_t)maxT, 61, (int32_t)L, 2, (int32_t)C, (int32_t)Vp};
    FILE *f = fopen(path, "wb");
    fwrite(h, sizeof h, 1, f);
    for (int g = 0; g < 16; g++)
        for (size_t i = 0; i < sizes[g]; i++) {
            float x = (float)g * 100000.0f + (float)i;
            fwrite(&x, 4, 1, f);
        }
    fclose(f);
    herr e;
    struct gpt_config c;
    CHECK("llmc.config", llmc_read_config(path, &c, &e) == 0 && c.layers == 2 && c.channels == 16 &&
          c.heads == 2 && c.vocab == 61 && c.padded_vocab == 128 && c.max_seq == 16);
    struct gpt_stage *s;
    if (gpt_stage_create(&s, &c, 1, 2, 1, 4, 1, &e) < 0) {
        TEST_FAIL("llmc.create", "%s", e.msg);
        return;
    }
    CHECK_INT("llmc.load", llmc_load_stage(path, s, &e), 0);
    const struct gpt_tensor *t;
    int nt = gpt_stage_tensors(s, &t);
    const float *p = gpt_stage_params(s);
    int ok = 1;
    for (int i = 0; i < nt; i++) {
        float first = p[t[i].offset];
        if (strcmp(t[i].name, "h1.attn.qkv.weight") == 0)
            ok &= first == 4 * 100000.0f + (float)(3 * C * C);   /* layer 1 of group 4 */
        if (strcmp(t[i].name, "h1.mlp.proj.bias") == 0)
            ok &= first == 13 * 100000.0f + (float)C;
        if (strcmp(t[i].name, "ln_f.bias") == 0)
            ok &= first == 15 * 100000.0f;
        if (strcmp(t[i].name, "wte") == 0)
            ok &= first == 0.0f && p[t[i].offset + 5] == 5.0f;
    }
    CHECK("llmc.values", ok && nt == 12 + 3);
    gpt_stage_free(s);
    struct gpt_config other = c;
    other.channels = 32;
    if (gpt_stage_create(&s, &other, 0, 2, 1, 4, 1, &e) == 0) {
        CHECK("llmc.shape_mismatch", llmc_load_stage(path, s, &e) == -1 &&
              strstr(e.msg, "channels is 16 but the job has 32"));
        gpt_stage_free(s);
    }
    corrupt(path, 0, 5000);
    CHECK("llmc.truncated", llmc_read_config(path, &c, &e) == -1 && strstr(e.msg, "truncated") &&
          strstr(e.msg, "gpt2_tiny.bin"));
    corrupt(path, 0, -1);
    CHECK("llmc.magic", llmc_read_config(path, &c, &e) == -1 && strstr(e.msg, "magic"));
    /* a shape whose parameter count wraps 64 bits (2^31 - 1 layers of 30,000 channels): refused
     * as too large, not compared with the file's size through the wrapped count */
    int32_t huge[256] = {LLMC_MAGIC, 3, 1024, 61, INT32_MAX, 2, 30000, 128};
    f = fopen(path, "wb");
    int ok2 = f && fwrite(huge, sizeof huge, 1, f) == 1;
    if (f)
        fclose(f);
    CHECK("llmc.count_wraps", ok2 && llmc_read_config(path, &c, &e) == -1 &&
          strstr(e.msg, "more parameters than a file can hold") && strstr(e.msg, "gpt2_tiny.bin"));
}

int main(void)
{
    if (test_in_tmpdir(dir, sizeof dir, "ck",
                       (void (*const[])(void)){test_roundtrip_and_keep, test_llmc, NULL}))
        return 1;
    TEST_MAIN_END();
}
