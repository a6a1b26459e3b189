#include "tokenizer.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

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

/* GPT-2's bytes_to_unicode: the code point that stands for byte b in vocab.json (the printable
 * bytes themselves, the others 256 and up in byte order); its inverse into byte_of. */
static void byte_table(int byte_of[324])
{
    for (int u = 0; u < 324; u++)
        byte_of[u] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        byte_of[printable ? b : 256 + extra++] = b;
    }
}

/* One UTF-8 character of s (at most n bytes): its code point, its length in *len; -1 bad. */
static int utf8_char(const unsigned char *s, size_t n, size_t *len)
{
    *len = 1;
    if (n >= 1 && s[0] < 0x80) {
        *len = 1;
        return s[0];
    }
    if (n >= 2 && (s[0] & 0xe0) == 0xc0 && (s[1] & 0xc0) == 0x80 && s[0] >= 0xc2) {
        *len = 2;
        return (s[0] & 0x1f) << 6 | (s[1] & 0x3f);
    }
    return -1; /* GPT-2's byte characters are all below U+0800 */
}

/* transformers' vocab.json of a byte-level BPE (GPT-2's): {"token": id, ...}, each token's
 * bytes written as bytes_to_unicode's characters; the ids 0..n-1 once each. */
static int parse_vocab_json(struct tokenizer *t, const char *path, const unsigned char *b,
                            size_t n, herr *e)
{
    cJSON *j = cJSON_ParseWithLength((const char *)b, n);
    int rc = 0, count = cJSON_IsObject(j) ? cJSON_GetArraySize(j) : 0;
    if (count < 1)
        rc = herr_config(e, "tokenizer %s: not a JSON object of tokens and ids (vocab.json)", path);
    int byte_of[324];
    byte_table(byte_of);
    size_t total = 0;
    const cJSON *x;
    if (rc == 0)
        cJSON_ArrayForEach(x, j) {
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= count ||
                x->valuedouble != (int)x->valuedouble) {
                rc = herr_config(e, "tokenizer %s: \"%.64s\": its id is not one of 0 to %d", path,
                                 x->string, count - 1);
                break;
            }
            total += strlen(x->string);
        }
    if (rc == 0) {
        t->vocab = count;
        t->eot = -1;
        t->off = calloc((size_t)count + 1, sizeof *t->off);
        t->bytes = malloc(total ? total : 1);
        size_t *len = calloc((size_t)count, sizeof *len);
        char **at = calloc((size_t)count, sizeof *at);
        char *scratch = malloc(total ? total : 1);
        if (!t->off || !t->bytes || !len || !at || !scratch)
            rc = herr_set(e, "tokenizer %s: out of memory for %d tokens", path, count);
        size_t used = 0;
        cJSON_ArrayForEach(x, j) {
            if (rc != 0)
                break;
            int id = (int)x->valuedouble;
            const unsigned char *s = (const unsigned char *)x->string;
            size_t sn = strlen(x->string), k = 0, cl = 1;
            if (at[id]) {
                rc = herr_config(e, "tokenizer %s: id %d is given twice", path, id);
                break;
            }
            at[id] = scratch + used;
            for (; k < sn && rc == 0; k += cl) {
                int u = utf8_char(s + k, sn - k, &cl);
                if (u < 0 || u >= 324 || byte_of[u] < 0)
                    rc = herr_config(e, "tokenizer %s: token \"%.64s\" holds a character that is "
                                     "not one of GPT-2's byte characters (bytes_to_unicode)",
                                     path, x->string);
                else
                    scratch[used + len[id]++] = (char)byte_of[u];
            }
            if (rc == 0 && len[id] == 0)
                rc = herr_config(e, "tokenizer %s: an empty token (id %d)", path, id);
            if (rc == 0 && !strcmp(x->string, "<|endoftext|>"))
                t->eot = id;
            used += len[id];
        }
        for (int i = 0, o = 0; rc == 0 && i < count; i++) { /* every id was given: in id order */
            t->off[i] = (size_t)o;
            memcpy(t->bytes + o, at[i], len[i]);
            o += (int)len[i];
            t->off[i + 1] = (size_t)o;
        }
        free(len);
        free(at);
        free(scratch);
    }
    cJSON_Delete(j);
    return rc;
}

int tokenizer_open(struct tokenizer **out, const char *given, herr *e)
{
    *out = NULL;
    unsigned char *buf;
    size_t n;
    char dir_vocab[4096];
    struct stat st;
    const char *path = given;
    if (stat(given, &st) == 0 && S_ISDIR(st.st_mode) &&
        snprintf(dir_vocab, sizeof dir_vocab, "%s/vocab.json", given) < (int)sizeof dir_vocab)
        path = dir_vocab; /* a Hugging Face model directory */
    if (slurp(path, &buf, &n, e) != 0)
        return -1;
    struct tokenizer *t = calloc(1, sizeof *t);
    size_t lead = 0;
    while (lead < n && (buf[lead] == ' ' || buf[lead] == '\n' || buf[lead] == '\t' ||
                        buf[lead] == '\r'))
        lead++;
    int rc = !t ? herr_set(e, "tokenizer %s: out of memory", path)
             : lead < n && buf[lead] == '{' ? parse_vocab_json(t, path, buf, n, e)
                                            : parse(t, path, buf, n, e);
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
