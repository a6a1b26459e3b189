#include "shard_writer.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataloader.h"

#define HEADER_INTS 256

struct shard_writer {
    struct shard_writer_config c;
    char dir[PATH_MAX], base[NAME_MAX + 1];
    FILE *f;                  /* the shard being written, or NULL */
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    uint64_t in_shard, limit; /* tokens written to it, and its size */
    int index;                /* its number: the shards finished before it (each NAME.tmp until
                                 shard_writer_finish puts the set in place) */
    int renamed;              /* of those, put in place under their names */
    int finished;
    uint64_t tokens;
    uint16_t buf[4096];
    size_t nbuf;
};

/* NAME is PREFIX's shard: base_val_DIGITS.bin or base_train_DIGITS.bin. */
static int is_shard(const char *name, const char *base)
{
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0)
        return 0;
    const char *p = name + n;
    if (strncmp(p, "_val_", 5) == 0)
        p += 5;
    else if (strncmp(p, "_train_", 7) == 0)
        p += 7;
    else
        return 0;
    const char *d = p;
    while (*p >= '0' && *p <= '9')
        p++;
    return p > d && strcmp(p, ".bin") == 0;
}

/* Refuses the shards already under the prefix, or, replacing (`remove`), removes them. */
static int clear_old(struct shard_writer *w, int remove, herr *e)
{
    DIR *d = opendir(w->dir);
    if (!d)
        return herr_set_kind(e, herr_kind_of_errno(errno), "--out %s: directory %s: %s",
                             w->c.prefix, w->dir, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (!is_shard(de->d_name, w->base))
            continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", w->dir, de->d_name) >= (int)sizeof p)
            rc = herr_config(e, "--out %s: a path longer than %d bytes", w->c.prefix, PATH_MAX);
        else if (!w->c.replace)
            rc = herr_config(e, "--out %s: %s is there already (shards of an earlier run; "
                             "--replace replaces them all once the new set is written)",
                             w->c.prefix, p);
        else if (remove && unlink(p) != 0)
            rc = herr_set_kind(e, herr_kind_of_errno(errno), "--out %s: cannot remove %s: %s",
                               w->c.prefix, p, strerror(errno));
    }
    closedir(d);
    return rc;
}

int shard_writer_open(struct shard_writer **out, const struct shard_writer_config *c, herr *e)
{
    *out = NULL;
    if (!c->prefix || !*c->prefix || c->shard_tokens == 0 || c->shard_tokens > INT32_MAX ||
        c->val_tokens > INT32_MAX)
        return herr_config(e, "shard writer: a prefix and shard sizes of 1 to %d tokens are "
                           "needed (llm.c's header counts them in an int32)", INT32_MAX);
    struct shard_writer *w = calloc(1, sizeof *w);
    if (!w)
        return herr_set(e, "shard writer: out of memory");
    w->c = *c;
    const char *slash = strrchr(c->prefix, '/');
    const char *base = slash ? slash + 1 : c->prefix;
    size_t dlen = slash ? (size_t)(slash - c->prefix) : 1;
    int rc = 0;
    if (!*base || strlen(base) > NAME_MAX - 24 || dlen >= sizeof w->dir - 1)
        rc = herr_config(e, "--out %s: give DIR/NAME (NAME the shards' prefix, at most %d "
                         "bytes)", c->prefix, NAME_MAX - 24);
    else {
        if (slash)
            memcpy(w->dir, c->prefix, dlen ? dlen : 1); /* "/name": the root */
        else
            w->dir[0] = '.';
        strcpy(w->base, base);
        rc = clear_old(w, 0, e); /* replacing: only that the directory reads; the old set goes
                                    when the new one is whole (shard_writer_finish) */
    }
    if (rc != 0) {
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

static int write_all(struct shard_writer *w, const void *p, size_t n, herr *e)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return herr_set_kind(e, herr_kind_of_errno(errno), "%s: cannot write: %s", w->tmp,
                             strerror(errno));
    return 0;
}

static int flush_buf(struct shard_writer *w, herr *e)
{
    int rc = write_all(w, w->buf, w->nbuf * sizeof w->buf[0], e);
    w->nbuf = 0;
    return rc;
}

/* Shard i's final name. */
static int shard_name(const struct shard_writer *w, int i, char *p, size_t n)
{
    int val = i == 0 && w->c.val_tokens > 0;
    return snprintf(p, n, "%s/%s_%s_%06d.bin", w->dir, w->base, val ? "val" : "train", i) < (int)n
               ? 0 : -1;
}

/* Shard i's name while it is written and until the set is whole. */
static int tmp_name(const struct shard_writer *w, int i, char *p, size_t n)
{
    char f[PATH_MAX];
    if (shard_name(w, i, f, sizeof f) != 0)
        return -1;
    return snprintf(p, n, "%s.tmp", f) < (int)n ? 0 : -1;
}

static int start_shard(struct shard_writer *w, herr *e)
{
    w->limit = w->index == 0 && w->c.val_tokens > 0 ? w->c.val_tokens : w->c.shard_tokens;
    if (shard_name(w, w->index, w->path, sizeof w->path) != 0)
        return herr_config(e, "--out %s: a path longer than %d bytes", w->c.prefix, PATH_MAX);
    if (tmp_name(w, w->index, w->tmp, sizeof w->tmp) != 0)
        return herr_config(e, "--out %s: a path longer than %d bytes", w->c.prefix, PATH_MAX);
    if (!(w->f = fopen(w->tmp, "wb")))
        return herr_set_kind(e, herr_kind_of_errno(errno), "%s: cannot create: %s", w->tmp,
                             strerror(errno));
    int32_t h[HEADER_INTS] = {DATALOADER_SHARD_MAGIC, 1, 0};
    w->in_shard = 0;
    return write_all(w, h, sizeof h, e);
}


/* The header's count, the bytes on disk; the shard stays NAME.tmp until the set is whole. */
static int end_shard(struct shard_writer *w, herr *e)
{
    int32_t h[3] = {DATALOADER_SHARD_MAGIC, 1, (int32_t)w->in_shard};
    int rc = flush_buf(w, e);
    if (rc == 0 && (fflush(w->f) != 0 || fseek(w->f, 0, SEEK_SET) != 0 ||
                    fwrite(h, sizeof h, 1, w->f) != 1 || fflush(w->f) != 0 ||
                    fsync(fileno(w->f)) != 0))
        rc = herr_set_kind(e, herr_kind_of_errno(errno), "%s: cannot write: %s", w->tmp,
                           strerror(errno));
    if (fclose(w->f) != 0 && rc == 0)
        rc = herr_set_kind(e, herr_kind_of_errno(errno), "%s: cannot write: %s", w->tmp,
                           strerror(errno));
    w->f = NULL;
    if (rc != 0) {
        unlink(w->tmp);
        return -1;
    }
    w->index++;
    return 0;
}

int shard_writer_put(struct shard_writer *w, const int *toks, size_t n, herr *e)
{
    for (size_t i = 0; i < n; i++) {
        if (toks[i] < 0 || toks[i] > 65535)
            return herr_config(e, "token %d: llm.c's shards hold tokens of 16 bits (below 65536)",
                               toks[i]);
        if (!w->f && start_shard(w, e) != 0)
            return -1;
        w->buf[w->nbuf++] = (uint16_t)toks[i];
        w->in_shard++;
        w->tokens++;
        if (w->nbuf == sizeof w->buf / sizeof w->buf[0] && flush_buf(w, e) != 0)
            return -1;
        if (w->in_shard == w->limit && end_shard(w, e) != 0)
            return -1;
    }
    return 0;
}

uint64_t shard_writer_tokens(const struct shard_writer *w) { return w->tokens; }

/* The directory's entries on disk (the renames). */
static int sync_dir(struct shard_writer *w, herr *e)
{
    DIR *d = opendir(w->dir);
    if (!d)
        return herr_set_kind(e, herr_kind_of_errno(errno), "--out %s: directory %s: %s",
                             w->c.prefix, w->dir, strerror(errno));
    int rc = fsync(dirfd(d)) == 0 || errno == EINVAL
                 ? 0
                 : herr_set_kind(e, herr_kind_of_errno(errno), "--out %s: directory %s: %s",
                                 w->c.prefix, w->dir, strerror(errno));
    closedir(d);
    return rc;
}

int shard_writer_finish(struct shard_writer *w, int *shards, uint64_t *tokens, herr *e)
{
    if (w->f && end_shard(w, e) != 0)
        return -1;
    /* the new set is whole on disk: now the old one goes (replacing), and the new shards take
     * their names (a failed run before this point leaves the old set as it was) */
    if (w->c.replace && clear_old(w, 1, e) != 0)
        return -1;
    for (; w->renamed < w->index; w->renamed++) {
        char from[PATH_MAX + 8], to[PATH_MAX];
        if (tmp_name(w, w->renamed, from, sizeof from) != 0 ||
            shard_name(w, w->renamed, to, sizeof to) != 0)
            return herr_config(e, "--out %s: a path longer than %d bytes", w->c.prefix, PATH_MAX);
        if (rename(from, to) != 0)
            return herr_set_kind(e, herr_kind_of_errno(errno), "cannot rename %s to %s: %s", from,
                                 to, strerror(errno));
    }
    if (sync_dir(w, e) != 0)
        return -1;
    w->finished = 1;
    *shards = w->index;
    *tokens = w->tokens;
    return 0;
}

void shard_writer_free(struct shard_writer *w)
{
    if (!w)
        return;
    if (w->f) {
        fclose(w->f);
        unlink(w->tmp);
    }
    for (int i = 0; !w->finished && i < w->index; i++) {
        char p[PATH_MAX + 8];
        if ((i < w->renamed ? shard_name(w, i, p, sizeof p) : tmp_name(w, i, p, sizeof p)) == 0)
            unlink(p);
    }
    free(w);
}
