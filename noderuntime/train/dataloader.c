/* llm.c token shards and byte-level text, sampled deterministically per data-parallel rank. */
#include "dataloader.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_HEADER_BYTES (256 * 4)
#define SCAN_CHUNK (1 << 20)

/* A file is read with pread, not mapped: a file truncated while a worker trains on it then
 * gives a short read and a clear error instead of SIGBUS, and every token read is checked
 * against the vocabulary again (a file rewritten in place cannot feed a token outside it to the
 * embedding). The descriptor stays open, so the file read is the one checked at open even if
 * its name is replaced. */
struct data_file {
    int fd;
    char *path;
    uint64_t size;   /* bytes when opened */
    uint64_t offset; /* of the first token: the shard header, or 0 for text */
    uint64_t ntok;
    uint64_t first_window; /* cumulative window index of this file's first window */
    uint64_t nwin;
};

struct dataloader {
    struct dataloader_config c;
    struct data_file *files;
    int nfiles;
    int text;
    int tok_bytes; /* 2 (shard) or 1 (text) */
    int scanned;   /* every token checked at open (scan_files) */
    uint64_t nwin, ntok, per_epoch; /* per_epoch: micro-batches per epoch for one rank */
    uint64_t first;                 /* the part's first window (a held-out split) */
    uint64_t pos;
    uint64_t *perm;
    uint64_t perm_epoch; /* the epoch perm holds, once perm_ready (any 64-bit epoch can occur: a
                          * checkpoint's position is read as it is) */
    int perm_ready;
    unsigned char *window; /* one window of T+1 tokens as the file holds them */
};

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* n bytes at off, all of them: a short read means the file is shorter than when it was opened */
static int read_at(const struct data_file *f, void *buf, size_t n, uint64_t off, herr *e)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(f->fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return herr_set(e, "data file %s: cannot read %zu bytes at offset %llu: %s", f->path,
                            n, (unsigned long long)off, strerror(errno));
        if (r == 0)
            break;
        got += (size_t)r;
    }
    if (got == n)
        return 0;
    struct stat st;
    long long now = fstat(f->fd, &st) == 0 ? (long long)st.st_size : -1;
    return herr_config(e, "data file %s: %llu bytes when opened, %lld now: it was truncated while "
                       "training (read %zu of %zu bytes at offset %llu); restore it (the job's "
                       "checkpoints are kept)", f->path, (unsigned long long)f->size, now, got, n,
                       (unsigned long long)off);
}

static int open_file(struct data_file *f, const char *path, herr *e)
{
    if (!(f->path = strdup(path)))
        return herr_set(e, "data: out of memory");
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return herr_config(e, "data file %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(f->fd, &st) < 0)
        return herr_config(e, "data file %s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return herr_config(e, "data file %s: not a regular file", path);
    if (st.st_size == 0)
        return herr_config(e, "data file %s: is empty", path);
    f->size = (uint64_t)st.st_size;
    return 0;
}

/* Token i of buf, as the file holds it: uint16 (shards) or a byte (text) */
static unsigned token_at(const unsigned char *buf, int tok_bytes, size_t i)
{
    if (tok_bytes == 1)
        return buf[i];
    uint16_t t;
    memcpy(&t, buf + 2 * i, 2);
    return t;
}

/* Every token of the file below vocab, read in chunks; what names the unit in the message */
static int scan_tokens(const struct data_file *f, int tok_bytes, int vocab, const char *what,
                       const char *unit, const char *hint, herr *e)
{
    unsigned char *buf = malloc(SCAN_CHUNK);
    if (!buf)
        return herr_set(e, "data: out of memory");
    uint64_t per = SCAN_CHUNK / (uint64_t)tok_bytes;
    for (uint64_t i = 0; i < f->ntok; i += per) {
        uint64_t n = f->ntok - i < per ? f->ntok - i : per;
        if (read_at(f, buf, (size_t)(n * (uint64_t)tok_bytes), f->offset + i * (uint64_t)tok_bytes,
                    e) < 0) {
            free(buf);
            return -1;
        }
        for (uint64_t k = 0; k < n; k++) {
            unsigned v = token_at(buf, tok_bytes, (size_t)k);
            if (v >= (unsigned)vocab) {
                free(buf);
                return herr_config(e, "%s %s: %s %u at %s %llu is not below the model's "
                                   "vocabulary %d%s", what, f->path,
                                   tok_bytes == 2 ? "token" : "byte", v, unit,
                                   (unsigned long long)(i + k), vocab, hint);
            }
        }
    }
    free(buf);
    return 0;
}

static int check_shard(struct data_file *f, herr *e)
{
    if (f->size < SHARD_HEADER_BYTES)
        return herr_config(e, "data shard %s: %llu bytes, shorter than the %d-byte header "
                           "(truncated?)", f->path, (unsigned long long)f->size,
                           SHARD_HEADER_BYTES);
    int32_t hdr[3];
    if (read_at(f, hdr, sizeof hdr, 0, e) < 0)
        return -1;
    if (hdr[0] != DATALOADER_SHARD_MAGIC)
        return herr_config(e, "data shard %s: magic %d is not the llm.c token shard magic %d",
                           f->path, hdr[0], DATALOADER_SHARD_MAGIC);
    if (hdr[1] != 1)
        return herr_config(e, "data shard %s: version %d is not supported (want 1)", f->path,
                           hdr[1]);
    if (hdr[2] < 0)
        return herr_config(e, "data shard %s: negative token count %d", f->path, hdr[2]);
    uint64_t want = SHARD_HEADER_BYTES + 2 * (uint64_t)hdr[2];
    if (f->size != want)
        return herr_config(e, "data shard %s: header says %d tokens (%llu bytes) but the file has "
                           "%llu bytes (%s)", f->path, hdr[2], (unsigned long long)want,
                           (unsigned long long)f->size,
                           f->size < want ? "truncated" : "trailing bytes");
    f->ntok = (uint64_t)hdr[2];
    f->offset = SHARD_HEADER_BYTES;
    return 0;
}

static void check_text(struct data_file *f)
{
    f->ntok = f->size;
    f->offset = 0;
}

/* Every token of every file against the vocabulary, when they hold at most scan_max bytes of
 * tokens (a job's bad file then fails it at start); beyond, each window is checked as it is
 * read, and no rank reads the whole data set at every start. 1 when scanned. */
static int scan_files(struct dataloader *d, uint64_t scan_max, herr *e)
{
    if (d->text && d->c.vocab >= DATALOADER_TEXT_VOCAB)
        return 1; /* every byte is a token */
    if (d->ntok * (uint64_t)d->tok_bytes > scan_max)
        return 0;
    for (int i = 0; i < d->nfiles; i++)
        if ((d->text ? scan_tokens(&d->files[i], 1, d->c.vocab, "text file", "offset",
                                   " (byte-level text needs vocab 256)", e)
                     : scan_tokens(&d->files[i], 2, d->c.vocab, "data shard", "index", "", e)) < 0)
            return -1;
    return 1;
}

/* Room for one descriptor per file (and the worker's own): the soft limit is raised up to the
 * hard one if the files need it. */
static int fit_open_files(size_t nfiles, const char *pattern, herr *e)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return herr_set(e, "data: cannot read the open-file limit: %s", strerror(errno));
    rlim_t need = (rlim_t)nfiles + 256;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
            return herr_config(e, "data: %s matches %zu files, more than the open-file limit "
                               "(%llu, with 256 kept for the worker) allows; raise the limit "
                               "(ulimit -n) or merge the files", pattern, nfiles,
                               (unsigned long long)rl.rlim_max);
        rl.rlim_cur = need;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            return herr_set(e, "data: cannot raise the open-file limit to %llu: %s",
                            (unsigned long long)need, strerror(errno));
    }
    return 0;
}

/* A held-out split: the part's windows [first, first + nwin) of the files' */
static int split_windows(struct dataloader *d, const struct dataloader_config *c, herr *e)
{
    if (!(c->holdout >= 0 && c->holdout < 1))
        return herr_config(e, "data: the held-out share %g is not in [0, 1)", c->holdout);
    if (c->holdout == 0)
        return 0;
    /* rounded half up, a hair of slack so that a share written in decimal (0.3 of 15 windows:
     * 4.4999... in binary) rounds as it reads */
    double h = floor(c->holdout * (double)d->nwin + 0.5 + 1e-9);
    uint64_t held = h < 1 ? 1 : (uint64_t)h;
    if (held >= d->nwin)
        return herr_config(e, "data: %s holds %llu windows of T+1=%d tokens: holding out %g of "
                           "them (%llu) leaves none to train on", c->pattern,
                           (unsigned long long)d->nwin, c->T + 1, c->holdout,
                           (unsigned long long)held);
    if (c->held_out) {
        d->first = d->nwin - held;
        d->nwin = held;
    } else {
        d->nwin -= held;
    }
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
    d->tok_bytes = d->text ? 1 : 2;
    for (size_t i = 0; i < g.gl_pathc; i++)
        d->files[i].fd = -1;
    if (fit_open_files(g.gl_pathc, c->pattern, e) < 0)
        goto fail;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i];
        struct data_file *f = &d->files[d->nfiles];
        if ((!ends_with(path, ".bin")) != d->text) {
            herr_config(e, "data: %s mixes token shards (.bin) and text files (%s)", c->pattern,
                        path);
            goto fail;
        }
        d->nfiles++; /* freed from here on, whatever open_file leaves */
        if (open_file(f, path, e) < 0)
            goto fail;
        if (d->text)
            check_text(f);
        else if (check_shard(f, e) < 0)
            goto fail;
        f->nwin = f->ntok >= (uint64_t)c->T + 1 ? (f->ntok - 1) / (uint64_t)c->T : 0;
        f->first_window = d->nwin;
        d->nwin += f->nwin;
        d->ntok += f->ntok;
    }
    if ((d->scanned = scan_files(d, c->scan_max_bytes ? c->scan_max_bytes
                                                      : DATALOADER_SCAN_MAX_BYTES, e)) < 0)
        goto fail;
    if (split_windows(d, c, e) < 0)
        goto fail;
    d->per_epoch = d->nwin / ((uint64_t)c->B * (uint64_t)c->world);
    if (d->per_epoch == 0) {
        herr_config(e, "data: %s holds %llu windows of T+1=%d tokens%s, fewer than one "
                    "micro-batch (B=%d) for each of %d data-parallel ranks", c->pattern,
                    (unsigned long long)d->nwin, c->T + 1,
                    c->holdout == 0 ? "" : c->held_out ? " held out" : " after the held-out ones",
                    c->B, c->world);
        goto fail;
    }
    d->perm = malloc(d->nwin * sizeof *d->perm);
    d->window = malloc(((size_t)c->T + 1) * (size_t)d->tok_bytes);
    if (!d->perm || !d->window) {
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
    for (int i = 0; i < d->nfiles; i++) {
        if (d->files[i].fd >= 0)
            close(d->files[i].fd);
        free(d->files[i].path);
    }
    free(d->files);
    free(d->perm);
    free(d->window);
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

static int read_window(struct dataloader *d, uint64_t w, int *inp, int *tgt, herr *e)
{
    w += d->first;
    int lo = 0, hi = d->nfiles - 1; /* the file holding window w: last with first_window <= w */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->files[mid].first_window <= w)
            lo = mid;
        else
            hi = mid - 1;
    }
    const struct data_file *f = &d->files[lo];
    uint64_t start = (w - f->first_window) * (uint64_t)d->c.T, tb = (uint64_t)d->tok_bytes;
    if (read_at(f, d->window, ((size_t)d->c.T + 1) * (size_t)tb, f->offset + start * tb, e) < 0)
        return -1;
    for (int t = 0; t <= d->c.T; t++) {
        unsigned v = token_at(d->window, d->tok_bytes, (size_t)t);
        if (v >= (unsigned)d->c.vocab)
            return herr_config(e, "data file %s: token %u at index %llu is not below the model's "
                               "vocabulary %d%s", f->path, v,
                               (unsigned long long)(start + (uint64_t)t), d->c.vocab,
                               d->scanned ? ": the file changed after it was opened and checked"
                                          : "");
        if (t < d->c.T)
            inp[t] = (int)v;
        if (t > 0)
            tgt[t - 1] = (int)v;
    }
    return 0;
}

int dataloader_next(struct dataloader *d, int *inputs, int *targets, herr *e)
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
        if (read_window(d, d->perm[base + (uint64_t)b], inputs + (size_t)b * d->c.T,
                        targets + (size_t)b * d->c.T, e) < 0)
            return -1;
    d->pos++;
    return 0;
}

uint64_t dataloader_position(const struct dataloader *d) { return d->pos; }
void dataloader_seek(struct dataloader *d, uint64_t position) { d->pos = position; }

int dataloader_batch_at(void *ctx, uint64_t k, int replica, int replicas, int *inputs, int *targets,
                        herr *e)
{
    (void)replica, (void)replicas;
    struct dataloader *d = ctx;
    dataloader_seek(d, k);
    return dataloader_next(d, inputs, targets, e);
}
uint64_t dataloader_windows(const struct dataloader *d) { return d->nwin; }
uint64_t dataloader_tokens(const struct dataloader *d) { return d->ntok; }
int dataloader_files(const struct dataloader *d) { return d->nfiles; }
int dataloader_is_text(const struct dataloader *d) { return d->text; }
int dataloader_scanned(const struct dataloader *d) { return d->scanned; }
