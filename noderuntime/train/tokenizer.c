#include "tokenizer.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOKENIZER_MAGIC 20240328u
#define TOKENIZER_HEADER 256              /* uint32 */
#define TOKENIZER_MAX_BYTES (64u << 20)   /* GPT-2's is 0.3 MB */

struct tokenizer {
    int vocab, eot;
    size_t *off;   /* [vocab + 1]: token i is bytes[off[i], off[i + 1]) */
    char *bytes;   /* the pieces, back to back */
};

void tokenizer_free(struct tokenizer *t)
{
    if (!t)
        return;
    free(t->off);
    free(t->bytes);
    free(t);
}

/* The whole file into *buf (at most TOKENIZER_MAX_BYTES), its size into *n. */
static int slurp(const char *path, unsigned char **buf, size_t *n, herr *e)
{
    *buf = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return herr_set_kind(e, herr_kind_of_errno(errno), "tokenizer %s: cannot open: %s", path,
                             strerror(errno));
    struct stat st = {0};
    int rc = 0;
    if (fstat(fileno(f), &st) != 0)
        rc = herr_set_kind(e, herr_kind_of_errno(errno), "tokenizer %s: cannot stat: %s", path,
                           strerror(errno));
    else if (!S_ISREG(st.st_mode) || st.st_size > (off_t)TOKENIZER_MAX_BYTES)
        rc = herr_config(e, "tokenizer %s: %s", path, S_ISREG(st.st_mode)
                             ? "larger than 64 MiB: not a tokenizer file" : "not a regular file");
    else if (!(*buf = malloc(st.st_size ? (size_t)st.st_size : 1)))
        rc = herr_set(e, "tokenizer %s: out of memory", path);
    else if (fread(*buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
        rc = herr_config(e, "tokenizer %s: %s", path,
                         ferror(f) ? "unreadable" : "shorter than when it was opened");
    fclose(f);
    if (rc) {
        free(*buf);
        *buf = NULL;
    }
    *n = rc ? 0 : (size_t)st.st_size;
    return rc;
}

/* The header and the pieces of the file's bytes b[0, n) into t. */
static int parse(struct tokenizer *t, const char *path, const unsigned char *b, size_t n, herr *e)
{
    uint32_t h[TOKENIZER_HEADER];
    if (n < sizeof h)
        return herr_config(e, "tokenizer %s: shorter than its %zu-byte header", path, sizeof h);
    memcpy(h, b, sizeof h);
    if (h[0] != TOKENIZER_MAGIC)
        return herr_config(e, "tokenizer %s: magic %u, not llm.c's tokenizer file (%u)", path,
                           h[0], TOKENIZER_MAGIC);
    if (h[1] != 1 && h[1] != 2)
        return herr_config(e, "tokenizer %s: version %u (1 and 2 are read)", path, h[1]);
    size_t body = n - sizeof h;
    if (h[2] < 1 || h[2] > body / 2) /* a token is a length and at least one byte */
        return herr_config(e, "tokenizer %s: a vocabulary of %u tokens in %zu bytes of pieces",
                           path, h[2], body);
    t->vocab = (int)h[2];
    /* version 2 names it (a token outside the vocabulary: none); GPT-2's is its last */
    t->eot = h[1] == 2 ? (h[3] < h[2] ? (int)h[3] : -1) : t->vocab == 50257 ? 50256 : -1;
    t->off = malloc(((size_t)t->vocab + 1) * sizeof *t->off);
    t->bytes = malloc(body);
    if (!t->off || !t->bytes)
        return herr_set(e, "tokenizer %s: out of memory for %d tokens", path, t->vocab);
    const unsigned char *p = b + sizeof h, *end = b + n;
    size_t at = 0;
    for (int i = 0; i < t->vocab; i++) {
        t->off[i] = at;
        unsigned len = p < end ? *p : 0;
        if (p >= end || len == 0 || (size_t)(end - p - 1) < len)
            return herr_config(e, "tokenizer %s: token %d of %d is %s", path, i, t->vocab,
                               p < end && len == 0 ? "empty" : "cut short (the file is truncated)");
        memcpy(t->bytes + at, p + 1, len);
        at += len;
        p += 1 + len;
    }
    t->off[t->vocab] = at;
    return 0;
}

int tokenizer_open(struct tokenizer **out, const char *path, herr *e)
{
    *out = NULL;
    unsigned char *buf;
    size_t n;
    if (slurp(path, &buf, &n, e) != 0)
        return -1;
    struct tokenizer *t = calloc(1, sizeof *t);
    int rc = t ? parse(t, path, buf, n, e) : herr_set(e, "tokenizer %s: out of memory", path);
    free(buf);
    if (rc != 0) {
        tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int tokenizer_vocab(const struct tokenizer *t) { return t->vocab; }
int tokenizer_eot(const struct tokenizer *t) { return t->eot; }

const char *tokenizer_piece(const struct tokenizer *t, int tok, size_t *len)
{
    if (tok < 0 || tok >= t->vocab)
        return NULL;
    *len = t->off[tok + 1] - t->off[tok];
    return t->bytes + t->off[tok];
}
