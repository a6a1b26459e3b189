#include "bpe.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* GPT-2's pattern (OpenAI's encoder.py and tiktoken's r50k_base). */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* One candidate merge: parts l and r (adjacent when it was pushed, at versions vl and vr). */
struct pair {
    int rank, l, r;
    unsigned vl, vr;
};

struct bpe {
    const struct tokenizer *tok;
    int *slot;       /* [mask + 1]: a token id + 1, 0 empty (open addressing) */
    size_t mask;
    pcre2_code *re;
    pcre2_match_data *md;
    /* the merge's workspace, grown to the longest piece */
    size_t room;
    int *next, *prev, *end;
    unsigned *ver;
    struct pair *heap;
    size_t heap_room;
};

static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The id of the token whose bytes are p[0, n), or -1. */
static int lookup(const struct bpe *b, const unsigned char *p, size_t n)
{
    for (size_t i = hash_bytes(p, n) & b->mask;; i = (i + 1) & b->mask) {
        int id = b->slot[i] - 1;
        if (id < 0)
            return -1;
        size_t len;
        const char *q = tokenizer_piece(b->tok, id, &len);
        if (len == n && memcmp(q, p, n) == 0)
            return id;
    }
}

void bpe_free(struct bpe *b)
{
    if (!b)
        return;
    free(b->slot);
    pcre2_match_data_free(b->md);
    pcre2_code_free(b->re);
    free(b->next);
    free(b->prev);
    free(b->end);
    free(b->ver);
    free(b->heap);
    free(b);
}

/* Every token but end-of-text into the table; a piece twice keeps its lower id. */
static int fill_table(struct bpe *b, herr *e)
{
    int vocab = tokenizer_vocab(b->tok), eot = tokenizer_eot(b->tok);
    size_t cap = 1024;
    while (cap < (size_t)vocab * 2)
        cap *= 2;
    if (!(b->slot = calloc(cap, sizeof *b->slot)))
        return herr_set(e, "bpe: out of memory for %d tokens", vocab);
    b->mask = cap - 1;
    for (int id = 0; id < vocab; id++) {
        size_t len;
        const unsigned char *p = (const unsigned char *)tokenizer_piece(b->tok, id, &len);
        if (id == eot || lookup(b, p, len) >= 0)
            continue;
        size_t i = hash_bytes(p, len) & b->mask;
        while (b->slot[i])
            i = (i + 1) & b->mask;
        b->slot[i] = id + 1;
    }
    for (int c = 0; c < 256; c++) {
        unsigned char byte = (unsigned char)c;
        if (lookup(b, &byte, 1) < 0)
            return herr_config(e, "the tokenizer has no token for byte 0x%02x: not a byte-level "
                               "BPE vocabulary (GPT-2's has all 256 bytes)", c);
    }
    return 0;
}

int bpe_create(struct bpe **out, const struct tokenizer *t, herr *e)
{
    *out = NULL;
    struct bpe *b = calloc(1, sizeof *b);
    if (!b)
        return herr_set(e, "bpe: out of memory");
    b->tok = t;
    int rc = fill_table(b, e);
    if (rc == 0) {
        int code;
        PCRE2_SIZE at;
        b->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
        if (!b->re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(code, msg, sizeof msg);
            rc = herr_set(e, "bpe: GPT-2's pattern does not compile at %zu: %s", (size_t)at,
                          (const char *)msg);
        } else {
            (void)pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE); /* faster where it is there */
            if (!(b->md = pcre2_match_data_create_from_pattern(b->re, NULL)))
                rc = herr_set(e, "bpe: out of memory");
        }
    }
    if (rc != 0) {
        bpe_free(b);
        return -1;
    }
    *out = b;
    return 0;
}

static int push_token(struct bpe_tokens *out, int id, herr *e)
{
    if (out->n == out->cap) {
        size_t c = out->cap ? out->cap * 2 : 1024;
        int *t = realloc(out->v, c * sizeof *t);
        if (!t)
            return herr_set(e, "bpe: out of memory for %zu tokens", c);
        out->v = t;
        out->cap = c;
    }
    out->v[out->n++] = id;
    return 0;
}

/* The workspace for a piece of n bytes. */
static int make_room(struct bpe *b, size_t n, herr *e)
{
    if (n > (size_t)INT_MAX / 4)
        return herr_config(e, "a piece of %zu bytes (one run of letters, digits, symbols or "
                           "whitespace): more than %d", n, INT_MAX / 4);
    if (n <= b->room)
        return 0;
    size_t r = b->room ? b->room : 64;
    while (r < n)
        r *= 2;
    int *nx = realloc(b->next, r * sizeof *nx);
    if (nx)
        b->next = nx;
    int *pv = realloc(b->prev, r * sizeof *pv);
    if (pv)
        b->prev = pv;
    int *en = realloc(b->end, r * sizeof *en);
    if (en)
        b->end = en;
    unsigned *vr = realloc(b->ver, r * sizeof *vr);
    if (vr)
        b->ver = vr;
    struct pair *hp = realloc(b->heap, 3 * r * sizeof *hp);
    if (hp)
        b->heap = hp;
    if (!nx || !pv || !en || !vr || !hp)
        return herr_set(e, "bpe: out of memory for a piece of %zu bytes", n);
    b->room = r;
    b->heap_room = 3 * r;
    return 0;
}

/* The heap orders pairs by rank, then by position (the leftmost first). */
static int before(const struct pair *a, const struct pair *c)
{
    return a->rank != c->rank ? a->rank < c->rank : a->l < c->l;
}

static void heap_push(struct pair *h, size_t *n, struct pair p)
{
    size_t i = (*n)++;
    while (i > 0 && before(&p, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = p;
}

static struct pair heap_pop(struct pair *h, size_t *n)
{
    struct pair top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && before(&h[c + 1], &h[c]))
            c++;
        if (!before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* The pair (l, next part) into the heap when their concatenation is a token. */
static void consider(struct bpe *b, const unsigned char *p, int l, size_t *nh)
{
    int r = l >= 0 ? b->next[l] : -1;
    if (l < 0 || r < 0)
        return;
    int rank = lookup(b, p + l, (size_t)(b->end[r] - l));
    if (rank >= 0)
        heap_push(b->heap, nh, (struct pair){rank, l, r, b->ver[l], b->ver[r]});
}

/* One piece's tokens: parts are named by their first byte; merging (l, r) grows l over r. */
static int merge_piece(struct bpe *b, const unsigned char *p, size_t n, struct bpe_tokens *out,
                       herr *e)
{
    int whole = lookup(b, p, n);
    if (whole >= 0)
        return push_token(out, whole, e);
    if (make_room(b, n, e) != 0)
        return -1;
    int len = (int)n;
    for (int i = 0; i < len; i++) {
        b->next[i] = i + 1 < len ? i + 1 : -1;
        b->prev[i] = i - 1;
        b->end[i] = i + 1;
        b->ver[i] = 0;
    }
    size_t nh = 0;
    for (int i = 0; i + 1 < len; i++)
        consider(b, p, i, &nh);
    while (nh > 0) {
        struct pair m = heap_pop(b->heap, &nh);
        int l = m.l, r = m.r;
        /* stale: r already merged away, or either part grown since the pair was pushed */
        if (b->next[l] != r || b->ver[l] != m.vl || b->ver[r] != m.vr)
            continue;
        b->end[l] = b->end[r];
        b->next[l] = b->next[r];
        if (b->next[r] >= 0)
            b->prev[b->next[r]] = l;
        b->ver[l]++;
        b->ver[r] = UINT_MAX; /* gone */
        b->next[r] = -1;
        consider(b, p, b->prev[l], &nh);
        consider(b, p, l, &nh);
    }
    for (int i = 0; i >= 0; i = b->next[i]) {
        int id = lookup(b, p + i, (size_t)(b->end[i] - i));
        if (push_token(out, id, e) != 0) /* id >= 0: every part is a token */
            return -1;
    }
    return 0;
}

int bpe_encode(struct bpe *b, const char *text, size_t len, size_t origin, struct bpe_tokens *out,
               herr *e)
{
    PCRE2_SPTR s = (PCRE2_SPTR)text;
    uint32_t opts = 0; /* the first match checks the whole text's UTF-8; the others need not */
    for (size_t at = 0; at < len;) {
        int rc = pcre2_match(b->re, s, len, at, opts, b->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
                return herr_config(e, "not UTF-8 at byte %zu: %s",
                                   origin + (size_t)pcre2_get_startchar(b->md), (const char *)msg);
            return herr_set(e, "bpe: matching GPT-2's pattern at byte %zu: %s", origin + at,
                            (const char *)msg);
        }
        opts = PCRE2_NO_UTF_CHECK;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md);
        if (ov[1] <= ov[0]) /* no alternative matches empty text; never loop */
            return herr_set(e, "bpe: an empty piece at byte %zu", origin + (size_t)ov[0]);
        if (merge_piece(b, s + ov[0], ov[1] - ov[0], out, e) != 0)
            return -1;
        at = ov[1];
    }
    return 0;
}

static int visible(unsigned char c)
{
    return c > 0x20 && c < 0x7f;
}

size_t bpe_safe_cut(const char *text, size_t len)
{
    const unsigned char *t = (const unsigned char *)text;
    for (size_t i = len < 3 ? 0 : len - 1; i >= 2; i--)
        if (t[i - 1] == '\n' && visible(t[i]) && visible(t[i - 2]))
            return i;
    return 0;
}
