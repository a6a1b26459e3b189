/* Data loader: llm.c shards and text, determinism, rank disjointness, seek, bad input. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dataloader.h"
#include "fs_testutil.h"
#include "test.h"

static char dir[64];

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

/* a shard with tokens (i * 7 + salt) % mod; header fields overridable for bad-input tests */
static void write_shard(const char *name, int ntok, int salt, int mod, int magic, int version,
                        int claimed, int cut_bytes)
{
    char p[128];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    int32_t hdr[256] = {magic, version, claimed};
    fwrite(hdr, sizeof hdr, 1, f);
    for (int i = 0; i < ntok - cut_bytes / 2; i++) {
        uint16_t t = (uint16_t)((i * 7 + salt) % mod);
        fwrite(&t, 2, 1, f);
    }
    fclose(f);
}

static void test_shards(void)
{
    write_shard("a_000.bin", 401, 0, 1000, DATALOADER_SHARD_MAGIC, 1, 401, 0);
    write_shard("a_001.bin", 321, 3, 1000, DATALOADER_SHARD_MAGIC, 1, 321, 0);
    char pat[128];
    path_of(pat, sizeof pat, "a_*.bin");
    enum { B = 2, T = 16 };
    struct dataloader_config c = {.pattern = pat, .B = B, .T = T, .rank = 0, .world = 1,
                                  .seed = 9, .vocab = 1000};
    herr e;
    struct dataloader *d;
    if (dataloader_open(&d, &c, &e) < 0) {
        TEST_FAIL("shard.open", "%s", e.msg);
        return;
    }
    CHECK_INT("shard.files", dataloader_files(d), 2);
    CHECK_INT("shard.tokens", dataloader_tokens(d), 722);
    CHECK_INT("shard.windows", dataloader_windows(d), 400 / 16 + 320 / 16);
    CHECK("shard.not_text", !dataloader_is_text(d));
    int in[B * T], tg[B * T], ok = 1;
    dataloader_next(d, in, tg, &e);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            /* targets are the inputs shifted by one, and consecutive tokens step by 7 */
            int x = in[b * T + t], y = tg[b * T + t];
            if (y != (x + 7) % 1000 && !(t < T - 1 && y == in[b * T + t + 1]))
                ok = 0;
            if (t < T - 1 && y != in[b * T + t + 1])
                ok = 0;
        }
    CHECK("shard.targets_shifted", ok);
    dataloader_free(d);

    /* two ranks: disjoint windows; the same seed replays; seek replays */
    struct dataloader *r0, *r1, *again;
    c.world = 2;
    c.rank = 0;
    dataloader_open(&r0, &c, &e);
    c.rank = 1;
    dataloader_open(&r1, &c, &e);
    c.rank = 0;
    dataloader_open(&again, &c, &e);
    if (!r0 || !r1 || !again) {
        TEST_FAIL("shard.ranks_open", "%s", e.msg);
        return;
    }
    int per_epoch = 45 / (B * 2), overlap = 0, replay = 1;
    int a0[B * T], a1[B * T], t0[B * T], t1[B * T], x[B * T], y[B * T];
    for (int k = 0; k < per_epoch; k++) {
        dataloader_next(r0, a0, t0, &e);
        dataloader_next(r1, a1, t1, &e);
        dataloader_next(again, x, y, &e);
        if (memcmp(a0, x, sizeof x) || memcmp(t0, y, sizeof y))
            replay = 0;
        if (memcmp(a0, a1, sizeof a0) == 0)
            overlap++;
    }
    CHECK("shard.replay_same_seed", replay);
    CHECK_INT("shard.ranks_differ", overlap, 0);
    /* seek back to 2 and read again */
    int s2[B * T], s2t[B * T];
    dataloader_seek(again, 2);
    dataloader_next(again, s2, s2t, &e);
    dataloader_seek(r0, 2);
    dataloader_next(r0, x, y, &e);
    CHECK("shard.seek", memcmp(s2, x, sizeof x) == 0 && dataloader_position(r0) == 3);
    /* the next epoch is a different order */
    dataloader_seek(r0, 0);
    dataloader_next(r0, a0, t0, &e);
    dataloader_seek(r0, (uint64_t)per_epoch);
    dataloader_next(r0, a1, t1, &e);
    CHECK("shard.epochs_reshuffle", memcmp(a0, a1, sizeof a0) != 0);
    dataloader_free(r0);
    dataloader_free(r1);
    dataloader_free(again);
}

/* every window of an epoch is visited once across ranks */
static void test_coverage(void)
{
    write_shard("c.bin", 8 * 4 * 3 + 1, 0, 60000, DATALOADER_SHARD_MAGIC, 1, 97, 0);
    char pat[128];
    path_of(pat, sizeof pat, "c.bin");
    enum { B = 3, T = 4 };
    int hits[24] = {0};
    for (int r = 0; r < 2; r++) {
        struct dataloader_config c = {.pattern = pat, .B = B, .T = T, .rank = r, .world = 2,
                                      .seed = 5, .vocab = 60000};
        herr e;
        struct dataloader *d;
        if (dataloader_open(&d, &c, &e) < 0) {
            TEST_FAIL("cover.open", "%s", e.msg);
            return;
        }
        int in[B * T], tg[B * T];
        for (int k = 0; k < 4; k++) { /* 24 windows / (3 * 2) = 4 micro-batches each */
            dataloader_next(d, in, tg, &e);
            for (int b = 0; b < B; b++)
                hits[(in[b * T] / 7) / T]++;
        }
        dataloader_free(d);
    }
    int once = 1;
    for (int i = 0; i < 24; i++)
        if (hits[i] != 1)
            once = 0;
    CHECK("cover.each_window_once", once);
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* A re-planned job keeps its global batch (data degree x micro-batches per replica): step s then
 * takes the same windows whatever the layout, so its data resumes at the same sample; with
 * global_epochs (spec.elastic) across epoch boundaries too (62 windows: 31 micro-batches of 2 an
 * epoch, not a multiple of every data degree's share). */
static int replan_windows(const char *pat, int global, int steps, int got[3][12][12])
{
    enum { B = 2, T = 4, MG = 6 };
    const int degrees[3] = {2, 1, 3};
    for (int l = 0; l < 3; l++) {
        int D = degrees[l], M = MG / D;
        for (int r = 0; r < D; r++) {
            struct dataloader_config c = {.pattern = pat, .B = B, .T = T, .rank = r, .world = D,
                                          .seed = 11, .vocab = 60000, .global_epochs = global};
            herr e;
            struct dataloader *d;
            if (dataloader_open(&d, &c, &e) < 0)
                return -1;
            int in[B * T], tg[B * T];
            for (int s = 0; s < steps; s++)
                for (int mb = 0; mb < M; mb++) {
                    dataloader_batch_at(d, (uint64_t)(s * M + mb), r, D, in, tg, &e);
                    for (int b = 0; b < B; b++)
                        got[l][s][(r * M + mb) * B + b] = in[b * T] / T; /* the window */
                }
            dataloader_free(d);
        }
        for (int s = 0; s < steps; s++)
            qsort(got[l][s], MG * B, sizeof(int), cmp_int);
    }
    return 0;
}

static void test_replan_same_samples(void)
{
    enum { T = 4, W = 62, STEPS = 12 };
    write_shard("r.bin", W * T + 1, 0, 60000, DATALOADER_SHARD_MAGIC, 1, W * T + 1, 0);
    char pat[128];
    path_of(pat, sizeof pat, "r.bin");
    static int got[3][12][12], old[3][12][12];
    if (replan_windows(pat, 1, STEPS, got) || replan_windows(pat, 0, STEPS, old)) {
        TEST_FAIL("replan.open", "dataloader_open");
        return;
    }
    CHECK("replan.same_windows_each_step_data2x3_data1x6_data3x2_across_epochs",
          !memcmp(got[0], got[1], sizeof got[0]) && !memcmp(got[0], got[2], sizeof got[0]));
    int distinct = 1;
    for (int s = 1; s < 5; s++)
        distinct &= memcmp(got[0][0], got[0][s], sizeof got[0][0]) != 0;
    CHECK("replan.steps_differ", distinct);
    /* per-rank epochs (the default, jobs without spec.elastic): the first epoch agrees, a later
     * one does not (each degree skips its own leftover windows) */
    CHECK("replan.per_rank_epochs_agree_in_the_first_epoch",
          !memcmp(old[0], old[1], 5 * sizeof old[0][0]) && !memcmp(old[0], old[2], 5 * sizeof old[0][0]));
    CHECK("replan.per_rank_epochs_move_with_the_degree_after_it",
          memcmp(old[0], old[1], sizeof old[0]) != 0);
}

static void test_text(void)
{
    char p[128];
    path_of(p, sizeof p, "t.txt");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 50; i++)
        fputs("Hello, world! \xc3\xa9 ", f);
    fclose(f);
    struct dataloader_config c = {.pattern = p, .B = 2, .T = 8, .rank = 0, .world = 1, .seed = 1,
                                  .vocab = 256};
    herr e;
    struct dataloader *d;
    if (dataloader_open(&d, &c, &e) < 0) {
        TEST_FAIL("text.open", "%s", e.msg);
        return;
    }
    CHECK("text.is_text", dataloader_is_text(d));
    int in[16], tg[16], ok = 1, high = 0;
    for (int k = 0; k < 20; k++) {
        dataloader_next(d, in, tg, &e);
        for (int i = 0; i < 16; i++) {
            if (in[i] < 0 || in[i] > 255)
                ok = 0;
            if (in[i] == 0xc3)
                high = 1;
        }
    }
    CHECK("text.bytes", ok && high);
    dataloader_free(d);
    c.vocab = 128;
    CHECK("text.vocab_too_small", dataloader_open(&d, &c, &e) == -1 && strstr(e.msg, "t.txt") &&
          strstr(e.msg, "byte 195"));
}

/* A position read from a checkpoint is taken as it is: the last 64-bit one (whose epoch was the
 * unset permutation's mark, so the window was read through an unshuffled, unset permutation: a
 * crash that fuzz_train_files found) reads the file's one window, as position 0 does. */
static void test_far_position(void)
{
    write_shard("one.bin", 9, 3, 50, 20240520, 1, 9, 0); /* T 8: exactly one window */
    char p[128];
    path_of(p, sizeof p, "one.bin");
    for (int global = 0; global < 2; global++) {
        struct dataloader_config c = {.pattern = p, .B = 1, .T = 8, .rank = 0, .world = 1,
                                      .seed = 5, .vocab = 64, .global_epochs = global};
        herr e;
        struct dataloader *d;
        char name[64];
        snprintf(name, sizeof name, "far_position.%s", global ? "global_epochs" : "rank_epochs");
        if (dataloader_open(&d, &c, &e) < 0) {
            TEST_FAIL(name, "%s", e.msg);
            continue;
        }
        int in[8], tg[8], ok = 1;
        dataloader_seek(d, UINT64_MAX);
        dataloader_next(d, in, tg, &e);
        for (int t = 0; t < 8; t++)
            ok &= in[t] == (t * 7 + 3) % 50 && tg[t] == ((t + 1) * 7 + 3) % 50;
        CHECK(name, ok && dataloader_position(d) == 0);
        dataloader_free(d);
    }
}

/* Reads every micro-batch of one epoch (and a little more); 0, or -1 with e set by the first
 * refused one, at whose position the loader must have stayed. */
static int read_epoch(struct dataloader *d, int n, int *in, int *tg, herr *e)
{
    for (int k = 0; k < n; k++) {
        uint64_t at = dataloader_position(d);
        if (dataloader_next(d, in, tg, e) < 0)
            return dataloader_position(d) == at ? -1 : -2;
    }
    return 0;
}

/* A file that changes under a running worker: truncated (a mapped file gave SIGBUS here),
 * rewritten in place with tokens outside the vocabulary (they reached the embedding unchecked),
 * or replaced by a new file of the same name (the descriptor kept reads the file checked). */
static void test_changed_under_reader(void)
{
    enum { B = 2, T = 8, W = 64 };
    struct dataloader_config c = {.B = B, .T = T, .rank = 0, .world = 1, .seed = 3, .vocab = 1000};
    char p[128], q[128];
    herr e = {0};
    struct dataloader *d;
    int in[B * T], tg[B * T];

    write_shard("cut.bin", W * T + 1, 0, 1000, DATALOADER_SHARD_MAGIC, 1, W * T + 1, 0);
    path_of(p, sizeof p, "cut.bin");
    c.pattern = p;
    if (dataloader_open(&d, &c, &e) < 0) {
        TEST_FAIL("changed.open", "%s", e.msg);
        return;
    }
    int before = read_epoch(d, 2, in, tg, &e);
    if (truncate(p, 1024 + 2 * 3 * T) != 0) { /* the header and three windows' tokens */
        TEST_FAIL("changed.truncate", "truncate %s", p);
        dataloader_free(d);
        return;
    }
    int rc = read_epoch(d, W / B, in, tg, &e);
    CHECK_MSG("changed.truncated_while_training_is_an_error_naming_the_file",
              before == 0 && rc == -1 && strstr(e.msg, "cut.bin") &&
                  strstr(e.msg, "truncated while training"),
              "before %d, rc %d: %s", before, rc, e.msg);
    dataloader_free(d);

    write_shard("rw.bin", W * T + 1, 0, 1000, DATALOADER_SHARD_MAGIC, 1, W * T + 1, 0);
    path_of(p, sizeof p, "rw.bin");
    if (dataloader_open(&d, &c, &e) < 0) {
        TEST_FAIL("changed.open_rw", "%s", e.msg);
        return;
    }
    int fd = open(p, O_WRONLY);
    uint16_t big[W * T];
    for (int i = 0; i < W * T; i++)
        big[i] = 4000;
    int wrote = fd >= 0 && pwrite(fd, big, sizeof big, 1024) == (ssize_t)sizeof big;
    if (fd >= 0)
        close(fd);
    e.msg[0] = 0;
    rc = read_epoch(d, 1, in, tg, &e);
    CHECK_MSG("changed.rewritten_token_outside_the_vocabulary_is_an_error",
              wrote && rc == -1 && strstr(e.msg, "rw.bin") && strstr(e.msg, "token 4000") &&
                  strstr(e.msg, "changed after it was opened"),
              "wrote %d, rc %d: %s", wrote, rc, e.msg);
    dataloader_free(d);

    write_shard("swap.bin", W * T + 1, 0, 1000, DATALOADER_SHARD_MAGIC, 1, W * T + 1, 0);
    write_shard("swap.new", W * T + 1, 500, 1000, DATALOADER_SHARD_MAGIC, 1, W * T + 1, 0);
    path_of(p, sizeof p, "swap.bin");
    path_of(q, sizeof q, "swap.new");
    if (dataloader_open(&d, &c, &e) < 0) {
        TEST_FAIL("changed.open_swap", "%s", e.msg);
        return;
    }
    int first[B * T], again[B * T], fresh[B * T];
    dataloader_next(d, first, tg, &e);
    int renamed = rename(q, p) == 0;
    rc = read_epoch(d, W / B, in, tg, &e);
    dataloader_seek(d, 0);
    dataloader_next(d, again, tg, &e);
    struct dataloader *d2; /* the new file, opened by its name: other tokens (salt 500) */
    int differs = 0;
    if (dataloader_open(&d2, &c, &e) == 0) {
        differs = dataloader_next(d2, fresh, tg, &e) == 0 && memcmp(fresh, first, sizeof first);
        dataloader_free(d2);
    }
    CHECK_MSG("changed.replaced_by_name_reads_the_file_opened",
              renamed && rc == 0 && !memcmp(first, again, sizeof first) && differs,
              "renamed %d, rc %d, differs %d: %s", renamed, rc, differs, e.msg);
    dataloader_free(d);
}

/* A data set larger than the open-time scan's budget (here 1 byte): opened without reading every
 * token; a token outside the vocabulary is found when its window is read, naming the file. */
static void test_lazy_check(void)
{
    enum { T = 8, W = 16 };
    write_shard("lazy.bin", W * T + 1, 0, 300, DATALOADER_SHARD_MAGIC, 1, W * T + 1, 0);
    char p[128];
    path_of(p, sizeof p, "lazy.bin");
    struct dataloader_config c = {.pattern = p, .B = 1, .T = T, .rank = 0, .world = 1, .seed = 2,
                                  .vocab = 256, .scan_max_bytes = 1};
    herr e = {0};
    struct dataloader *d;
    if (dataloader_open(&d, &c, &e) < 0) {
        TEST_FAIL("lazy.open_beyond_the_scan", "%s", e.msg);
        return;
    }
    CHECK("lazy.not_scanned", !dataloader_scanned(d));
    int in[T], tg[T], rc = 0, k;
    for (k = 0; k < W && rc == 0; k++)
        rc = dataloader_next(d, in, tg, &e);
    CHECK_MSG("lazy.bad_token_found_when_read", rc == -1 && strstr(e.msg, "lazy.bin") &&
                                                    strstr(e.msg, "not below the model's vocabulary 256") &&
                                                    !strstr(e.msg, "changed"),
              "rc %d after %d reads: %s", rc, k, e.msg);
    dataloader_free(d);
    c.scan_max_bytes = 0; /* the default budget: the same file is refused at open */
    rc = dataloader_open(&d, &c, &e);
    CHECK_MSG("lazy.within_the_scan_refused_at_open", rc == -1 && strstr(e.msg, "lazy.bin"),
              "rc %d: %s", rc, e.msg);
    if (rc == 0)
        dataloader_free(d);
}

/* One descriptor per file: the soft open-file limit is raised (up to the hard one) when a
 * pattern matches more files than it allows, and an error names the pattern when even the hard
 * limit is too low. In a child, whose limits are its own. */
static int open_many_with_limits(const char *pat, rlim_t soft, rlim_t hard, char *msg, size_t n)
{
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return -3;
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        struct rlimit rl = {soft, hard};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(3);
        struct dataloader_config c = {.pattern = pat, .B = 1, .T = 8, .rank = 0, .world = 1,
                                      .seed = 1, .vocab = 1000};
        herr e = {0};
        struct dataloader *d;
        int rc = dataloader_open(&d, &c, &e);
        if (write(pipefd[1], e.msg, strlen(e.msg)) < 0)
            _exit(4);
        if (rc == 0) {
            int in[8], tg[8];
            rc = dataloader_next(d, in, tg, &e);
            dataloader_free(d);
        }
        _exit(rc == 0 ? 0 : 1);
    }
    close(pipefd[1]);
    ssize_t got = pid > 0 ? read(pipefd[0], msg, n - 1) : -1;
    msg[got > 0 ? got : 0] = 0;
    close(pipefd[0]);
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -3;
    return WEXITSTATUS(st) == 0 ? 0 : -(int)WEXITSTATUS(st);
}

static void test_open_file_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 1024)) {
        TEST_SKIP("open_files", "the hard open-file limit here is below 1024");
        return;
    }
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "many_%03d.bin", i);
        write_shard(name, 17, i, 1000, DATALOADER_SHARD_MAGIC, 1, 17, 0);
    }
    char pat[128], msg[512];
    path_of(pat, sizeof pat, "many_*.bin");
    int rc = open_many_with_limits(pat, 100, 1024, msg, sizeof msg);
    CHECK_MSG("open_files.soft_limit_raised_for_300_files", rc == 0, "rc %d: %s", rc, msg);
    rc = open_many_with_limits(pat, 100, 200, msg, sizeof msg);
    CHECK_MSG("open_files.hard_limit_too_low_is_an_error_naming_the_pattern",
              rc == -1 && strstr(msg, "many_*.bin") && strstr(msg, "300 files") &&
                  strstr(msg, "open-file limit"),
              "rc %d: %s", rc, msg);
}

/* Every window one epoch of this loader reads (world 1, B 1), as (file, window in the file):
 * file 0's tokens are 7i, file 1's 7i + 3 (below 65536), so a window's first token names it. */
static int epoch_windows(const struct dataloader_config *base, double holdout, int held_out,
                         int *out, int max, herr *e)
{
    struct dataloader_config c = *base;
    c.holdout = holdout;
    c.held_out = held_out;
    struct dataloader *d;
    if (dataloader_open(&d, &c, e) < 0)
        return -1;
    int n = (int)dataloader_windows(d), in[16], tg[16];
    for (int k = 0; k < n && k < max; k++) {
        if (dataloader_next(d, in, tg, e) < 0) {
            dataloader_free(d);
            return -1;
        }
        int file = in[0] % 7 == 3, start = (in[0] - 3 * file) / 7;
        out[k] = file * 1000 + start / 16;
    }
    dataloader_free(d);
    return n;
}

/* A held-out split: the last windows in file order, the training part the others; together
 * every window once; each part replays; too large a share is refused, naming the data */
static void test_holdout(void)
{
    write_shard("h_000.bin", 401, 0, 65536, DATALOADER_SHARD_MAGIC, 1, 401, 0); /* 25 windows */
    write_shard("h_001.bin", 321, 3, 65536, DATALOADER_SHARD_MAGIC, 1, 321, 0); /* 20 windows */
    char pat[128];
    path_of(pat, sizeof pat, "h_*.bin");
    struct dataloader_config c = {.pattern = pat, .B = 1, .T = 16, .rank = 0, .world = 1,
                                  .seed = 4, .vocab = 65536};
    herr e;
    int train[64], held[64], again[64];
    int nt = epoch_windows(&c, 0.1, 0, train, 64, &e);
    int nh = epoch_windows(&c, 0.1, 1, held, 64, &e);
    if (nt < 0 || nh < 0) {
        TEST_FAIL("holdout.open", "%s", e.msg);
        return;
    }
    /* 45 windows, 0.1 of them 4.5, rounded to 5: file 1's last five */
    CHECK_INT("holdout.train_windows", nt, 40);
    CHECK_INT("holdout.held_windows", nh, 5);
    int seen[2][25] = {{0}}, ok = 1;
    for (int k = 0; k < nt; k++) {
        int f = train[k] / 1000, w = train[k] % 1000;
        seen[f][w]++;
        if (f == 1 && w >= 15)
            ok = 0;
    }
    for (int k = 0; k < nh; k++) {
        int f = held[k] / 1000, w = held[k] % 1000;
        seen[f][w]++;
        if (f != 1 || w < 15)
            ok = 0;
    }
    CHECK("holdout.held_are_the_last", ok);
    int once = 1;
    for (int w = 0; w < 25; w++)
        once &= seen[0][w] == 1 && (w >= 20 || seen[1][w] == 1);
    CHECK("holdout.together_every_window_once", once);
    int n2 = epoch_windows(&c, 0.1, 1, again, 64, &e);
    CHECK("holdout.replays", n2 == nh && memcmp(again, held, sizeof(int) * (size_t)nh) == 0);
    /* a small share still holds out one window */
    CHECK_INT("holdout.at_least_one", epoch_windows(&c, 0.001, 1, again, 64, &e), 1);

    struct dataloader *d = NULL;
    c.holdout = 0.99; /* 44.55: 45 windows held, none left */
    int rc = dataloader_open(&d, &c, &e);
    CHECK("holdout.none_left", rc == -1 && !d && strstr(e.msg, "leaves none to train on") &&
                                   strstr(e.msg, "h_*.bin"));
    c.holdout = 1;
    rc = dataloader_open(&d, &c, &e);
    CHECK("holdout.share_range", rc == -1 && !d && strstr(e.msg, "not in [0, 1)"));
    c.holdout = 0.1;
    c.held_out = 1;
    c.B = 6; /* 5 windows held out: fewer than one micro-batch */
    rc = dataloader_open(&d, &c, &e);
    CHECK("holdout.held_too_few", rc == -1 && !d && strstr(e.msg, "held out, fewer than one"));
    dataloader_free(d);
}

static void expect_error(const char *name, const char *file, int vocab, const char *needle)
{
    char p[128];
    path_of(p, sizeof p, file);
    struct dataloader_config c = {.pattern = p, .B = 1, .T = 8, .rank = 0, .world = 1, .seed = 1,
                                  .vocab = vocab};
    herr e = {0};
    struct dataloader *d = NULL;
    int rc = dataloader_open(&d, &c, &e);
    if (rc == -1 && !d && strstr(e.msg, needle) && strstr(e.msg, file))
        TEST_PASS(name);
    else
        TEST_FAIL(name, "rc %d, message \"%s\", want it to name %s and say \"%s\"", rc, e.msg,
                  file, needle);
    dataloader_free(d);
}

static void test_bad(void)
{
    write_shard("magic.bin", 100, 0, 50, 12345, 1, 100, 0);
    expect_error("bad.magic", "magic.bin", 50257, "magic 12345");
    write_shard("version.bin", 100, 0, 50, DATALOADER_SHARD_MAGIC, 7, 100, 0);
    expect_error("bad.version", "version.bin", 50257, "version 7");
    write_shard("trunc.bin", 100, 0, 50, DATALOADER_SHARD_MAGIC, 1, 100, 10);
    expect_error("bad.truncated", "trunc.bin", 50257, "truncated");
    write_shard("big.bin", 100, 0, 300, DATALOADER_SHARD_MAGIC, 1, 100, 0);
    expect_error("bad.token_range", "big.bin", 256, "not below the model's vocabulary 256");
    char p[128];
    path_of(p, sizeof p, "short.bin");
    FILE *f = fopen(p, "wb");
    fputs("hello", f);
    fclose(f);
    expect_error("bad.header_short", "short.bin", 256, "header");
    path_of(p, sizeof p, "empty.txt");
    f = fopen(p, "w");
    fclose(f);
    expect_error("bad.empty", "empty.txt", 256, "empty");
    path_of(p, sizeof p, "tiny.txt");
    f = fopen(p, "w");
    fputs("abc", f);
    fclose(f);
    expect_error("bad.too_small", "tiny.txt", 256, "fewer than one micro-batch");
    expect_error("bad.no_match", "nothing-*.bin", 256, "no file matches");
}

int main(void)
{
    if (test_in_tmpdir(dir, sizeof dir, "dl",
                       (void (*const[])(void)){test_shards, test_coverage, test_replan_same_samples,
                                               test_text, test_far_position, test_bad,
                                               test_changed_under_reader, test_lazy_check,
                                               test_open_file_limit, test_holdout,
                                               NULL}))
        return 1;
    TEST_MAIN_END();
}
