#include "tokenizer.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKENIZER_MAGIC 20240328u
#define TOKENIZER_HEADER 256 /* uint32 */

struct tokenizer {
    int vocab, eot;
    size_t *off;   /* [vocab + 1]: token i is bytes[off[i], off[i + 1]) */
    char *bytes;
};

void tokenizer_free(struct tokenizer *t)
{
    if (!t)
        return;
    free(t->off);
    free(t->bytes);
    free(t);
}

int tokenizer_open(struct tokenizer **out, const char *path, herr *e)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return herr_set_kind(e, herr_kind_of_errno(errno), "tokenizer %s: cannot open: %s", path,
                             strerror(errno));
    uint32_t h[TOKENIZER_HEADER];
    struct tokenizer *t = calloc(1, sizeof *t);
    int rc = -1;
    if (!t) {
        herr_set(e, "tokenizer %s: out of memory", path);
        goto out;
    }
    if (fread(h, sizeof h[0], TOKENIZER_HEADER, f) != TOKENIZER_HEADER) {
        herr_config(e, "tokenizer %s: shorter than its %d-byte header", path,
                    (int)sizeof h);
        goto out;
    }
    if (h[0] != TOKENIZER_MAGIC) {
        herr_config(e, "tokenizer %s: magic %u, not llm.c's tokenizer file (%u)", path, h[0],
                    TOKENIZER_MAGIC);
        goto out;
    }
    if (h[1] != 1 && h[1] != 2) {
        herr_config(e, "tokenizer %s: version %u (1 and 2 are read)", path, h[1]);
        goto out;
    }
    if (h[2] < 1 || h[2] > (1u << 24)) {
        herr_config(e, "tokenizer %s: vocabulary of %u tokens (1 to %u)", path, h[2], 1u << 24);
        goto out;
    }
    t->vocab = (int)h[2];
    t->eot = h[1] == 2 ? (int)h[3] : t->vocab == 50257 ? 50256 : -1;
    if (t->eot >= t->vocab)
        t->eot = -1;
    t->off = malloc(((size_t)t->vocab + 1) * sizeof *t->off);
    t->bytes = malloc((size_t)t->vocab * 255);
    if (!t->off || !t->bytes) {
        herr_set(e, "tokenizer %s: out of memory for %d tokens", path, t->vocab);
        goto out;
    }
    size_t at = 0;
    for (int i = 0; i < t->vocab; i++) {
        unsigned char len = 0;
        t->off[i] = at;
        int got = fread(&len, 1, 1, f) == 1;
        if (!got || len == 0 || fread(t->bytes + at, 1, len, f) != len) {
            herr_config(e, "tokenizer %s: token %d of %d is %s", path, i, t->vocab,
                        ferror(f)         ? "unreadable"
                        : got && len == 0 ? "empty"
                                          : "cut short (the file is truncated)");
            goto out;
        }
        at += len;
    }
    t->off[t->vocab] = at;
    *out = t;
    t = NULL;
    rc = 0;
out:
    tokenizer_free(t);
    fclose(f);
    return rc;
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
