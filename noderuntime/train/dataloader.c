/* llm.c token shards and byte-level text, sampled deterministically per data-parallel rank. */
#include "dataloader.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_HEADER_BYTES (256 * 4)

struct data_file {
    void *map;
    size_t map_len;
    const uint16_t *tok16; /* shard tokens */
    const uint8_t *tok8;   /* text bytes */
    uint64_t ntok;
    uint64_t first_window; /* cumulative window index of this file's first window */
    uint64_t nwin;
};

struct dataloader {
    struct dataloader_config c;
    struct data_file *files;
    int nfiles;
    int text;
    uint64_t nwin, ntok, per_epoch; /* per_epoch: micro-batches per epoch for one rank */
    uint64_t pos;
    uint64_t *perm;
    uint64_t perm_epoch; /* the epoch perm holds, once perm_ready (any 64-bit epoch can occur: a
                          * checkpoint's position is read as it is) */
    int perm_ready;
};

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int map_file(struct data_file *f, const char *path, herr *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return herr_config(e, "data file %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int err = errno;
        close(fd);
        return herr_config(e, "data file %s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return herr_config(e, "data file %s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return herr_config(e, "data file %s: is empty", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED)
        return herr_config(e, "data file %s: cannot map: %s", path, strerror(err));
    f->map = p;
    f->map_len = (size_t)st.st_size;
    return 0;
}

static int check_shard(struct data_file *f, const char *path, int vocab, herr *e)
{
    if (f->map_len < SHARD_HEADER_BYTES)
        return herr_config(e, "data shard %s: %zu bytes, shorter than the %d-byte header (truncated?)",
                           path, f->map_len, SHARD_HEADER_BYTES);
    int32_t hdr[3];
    memcpy(hdr, f->map, sizeof hdr);
    if (hdr[0] != DATALOADER_SHARD_MAGIC)
        return herr_config(e, "data shard %s: magic %d is not the llm.c token shard magic %d", path,
                           hdr[0], DATALOADER_SHARD_MAGIC);
    if (hdr[1] != 1)
        return herr_config(e, "data shard %s: version %d is not supported (want 1)", path, hdr[1]);
    if (hdr[2] < 0)
        return herr_config(e, "data shard %s: negative token count %d", path, hdr[2]);
    uint64_t want = SHARD_HEADER_BYTES + 2 * (uint64_t)hdr[2];
    if (f->map_len != want)
        return herr_config(e, "data shard %s: header says %d tokens (%llu bytes) but the file has "
                           "%zu bytes (%s)", path, hdr[2], (unsigned long long)want, f->map_len,
                           f->map_len < want ? "truncated" : "trailing bytes");
    f->ntok = (uint64_t)hdr[2];
    f->tok16 = (const uint16_t *)((const char *)f->map + SHARD_HEADER_BYTES);
    for (uint64_t i = 0; i < f->ntok; i++)
        if (f->tok16[i] >= vocab)
            return herr_config(e, "data shard %s: token %u at index %llu is not below the model's "
                               "vocabulary %d", path, f->tok16[i], (unsigned long long)i, vocab);
    return 0;
}

static int check_text(struct data_file *f, const char *path, int vocab, herr *e)
{
    f->ntok = f->map_len;
    f->tok8 = f->map;
    if (vocab >= DATALOADER_TEXT_VOCAB)
        return 0;
    for (uint64_t i = 0; i < f->ntok; i++)
        if (f->tok8[i] >= vocab)
            return herr_config(e, "text file %s: byte %u at offset %llu is not below the model's "
                               "vocabulary %d (byte-level text needs vocab 256)", path, f->tok8[i],
                               (unsigned long long)i, vocab);
    return 0;
}

int dataloader_open(struct dataloader **out, const struct dataloader_config *c, herr *e)
{
    *out = NULL;
    if (!c->pattern || !*c->pattern)
        return herr_config(e, "data: no file or pattern given");
    if (c->B <= 0 || c->T <= 0)
        return herr_config(e, "data: batch B=%d and sequence T=%d must be positive", c->B, c->T);
    if (c->world <= 0 || c->rank < 0 || c->rank >= c->world)
        return herr_config(e, "data: rank %d is not in [0, world=%d)", c->rank, c->world);
    glob_t g;
    int gr = glob(c->pattern, GLOB_ERR, NULL, &g);
    if (gr == GLOB_NOMATCH)
        return herr_config(e, "data: no file matches %s", c->pattern);
    if (gr != 0) {
        globfree(&g);
        return herr_config(e, "data: cannot expand %s", c->pattern);
    }
    struct dataloader *d = calloc(1, sizeof *d);
    if (!d || !(d->files = calloc(g.gl_pathc, sizeof *d->files))) {
        free(d);
        globfree(&g);
        return herr_set(e, "data: out of memory");
    }
    d->c = *c;
    d->c.pattern = NULL; /* not kept: the caller's string */
    d->text = !ends_with(g.gl_pathv[0], ".bin");
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i];
        struct data_file *f = &d->files[d->nfiles];
        if ((!ends_with(path, ".bin")) != d->text) {
            herr_config(e, "data: %s mixes token shards (.bin) and text files (%s)", c->pattern,
                        path);
            goto fail;
        }
        if (map_file(f, path, e) < 0)
            goto fail;
        d->nfiles++;
        if ((d->text ? check_text(f, path, c->vocab, e) : check_shard(f, path, c->vocab, e)) < 0)
            goto fail;
        f->nwin = f->ntok >= (uint64_t)c->T + 1 ? (f->ntok - 1) / (uint64_t)c->T : 0;
        f->first_window = d->nwin;
        d->nwin += f->nwin;
        d->ntok += f->ntok;
    }
    d->per_epoch = d->nwin / ((uint64_t)c->B * (uint64_t)c->world);
    if (d->per_epoch == 0) {
        herr_config(e, "data: %s holds %llu windows of T+1=%d tokens, fewer than one micro-batch "
                    "(B=%d) for each of %d data-parallel ranks", c->pattern,
                    (unsigned long long)d->nwin, c->T + 1, c->B, c->world);
        goto fail;
    }
    d->perm = malloc(d->nwin * sizeof *d->perm);
    if (!d->perm) {
        herr_set(e, "data: out of memory for %llu windows", (unsigned long long)d->nwin);
        goto fail;
    }
    globfree(&g);
    *out = d;
    return 0;
fail:
    globfree(&g);
    dataloader_free(d);
    return -1;
}

void dataloader_free(struct dataloader *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->nfiles; i++)
        munmap(d->files[i].map, d->files[i].map_len);
    free(d->files);
    free(d->perm);
    free(d);
}

static uint64_t mix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void shuffle_epoch(struct dataloader *d, uint64_t epoch)
{
    uint64_t st = d->c.seed ^ (0xd1b54a32d192ed03ULL * (epoch + 1));
    for (uint64_t i = 0; i < d->nwin; i++)
        d->perm[i] = i;
    for (uint64_t i = d->nwin - 1; i > 0; i--) { /* Fisher-Yates */
        uint64_t j = mix64(&st) % (i + 1);
        uint64_t t = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = t;
    }
    d->perm_epoch = epoch;
    d->perm_ready = 1;
}

static void read_window(const struct dataloader *d, uint64_t w, int *inp, int *tgt)
{
    int lo = 0, hi = d->nfiles - 1; /* the file holding window w: last with first_window <= w */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->files[mid].first_window <= w)
            lo = mid;
        else
            hi = mid - 1;
    }
    const struct data_file *f = &d->files[lo];
    uint64_t start = (w - f->first_window) * (uint64_t)d->c.T;
    for (int t = 0; t < d->c.T; t++) {
        uint64_t k = start + (uint64_t)t;
        inp[t] = f->tok16 ? f->tok16[k] : f->tok8[k];
        tgt[t] = f->tok16 ? f->tok16[k + 1] : f->tok8[k + 1];
    }
}

void dataloader_next(struct dataloader *d, int *inputs, int *targets)
{
    uint64_t epoch, base;
    if (d->c.global_epochs) { /* the data degree does not move the epochs */
        uint64_t g = d->pos * (uint64_t)d->c.world + (uint64_t)d->c.rank;
        uint64_t per = d->nwin / (uint64_t)d->c.B;
        epoch = g / per;
        base = g % per * (uint64_t)d->c.B;
    } else {
        epoch = d->pos / d->per_epoch;
        uint64_t k = d->pos % d->per_epoch;
        base = (k * (uint64_t)d->c.world + (uint64_t)d->c.rank) * (uint64_t)d->c.B;
    }
    if (!d->perm_ready || epoch != d->perm_epoch)
        shuffle_epoch(d, epoch);
    for (int b = 0; b < d->c.B; b++)
        read_window(d, d->perm[base + (uint64_t)b], inputs + (size_t)b * d->c.T,
                    targets + (size_t)b * d->c.T);
    d->pos++;
}

uint64_t dataloader_position(const struct dataloader *d) { return d->pos; }
void dataloader_seek(struct dataloader *d, uint64_t position) { d->pos = position; }

int dataloader_batch_at(void *ctx, uint64_t k, int replica, int replicas, int *inputs, int *targets,
                        herr *e)
{
    (void)replica, (void)replicas, (void)e;
    struct dataloader *d = ctx;
    dataloader_seek(d, k);
    dataloader_next(d, inputs, targets);
    return 0;
}
uint64_t dataloader_windows(const struct dataloader *d) { return d->nwin; }
uint64_t dataloader_tokens(const struct dataloader *d) { return d->ntok; }
int dataloader_files(const struct dataloader *d) { return d->nfiles; }
int dataloader_is_text(const struct dataloader *d) { return d->text; }
