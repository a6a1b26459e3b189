/* Multiple-choice evaluation (choice_eval.h): the two files in, the completions scored. */
#include "choice_eval.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "yaml_json.h"

#define CHOICE_FILE_MAX (1ull << 30) /* the largest file read (HellaSwag's train split: 70 MB) */

void choice_set_free(struct choice_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->ex[i].tok);
    free(s->ex);
    *s = (struct choice_set){0};
}

/* Room for one more example in s (capacity *cap). */
static struct choice_example *set_add(struct choice_set *s, size_t *cap, herr *e)
{
    if (s->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        struct choice_example *ne = realloc(s->ex, nc * sizeof *ne);
        if (!ne) {
            herr_set(e, "out of memory for %zu examples", nc);
            return NULL;
        }
        s->ex = ne;
        *cap = nc;
    }
    struct choice_example *x = &s->ex[s->n++];
    *x = (struct choice_example){0};
    return x;
}

/* ------------------------------------------------------------ llm.c's eval file */

static uint16_t u16_at(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static int32_t i32_at(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* One example at p (n uint16 left in the file) into x; *used the uint16 it took. */
static int llmc_example(const unsigned char *p, size_t n, size_t i, struct choice_example *x,
                        size_t *used, herr *e)
{
    if (n < 6)
        return herr_config(e, "example %zu: the file ends inside its header", i);
    if (u16_at(p) != 65535)
        return herr_config(e, "example %zu: starts with %u, not the delimiter 65535", i,
                           u16_at(p));
    size_t bytes = u16_at(p + 2);
    x->where = (long)i;
    x->label = u16_at(p + 6);
    x->n = u16_at(p + 8);
    if (x->n < 2 || x->n > CHOICE_MAX)
        return herr_config(e, "example %zu: %d completions (2 to %d)", i, x->n, CHOICE_MAX);
    if (x->label >= x->n)
        return herr_config(e, "example %zu: label %d is not one of its %d completions", i,
                           x->label, x->n);
    /* the lengths first, to size the tokens */
    size_t k = 5, total = 0;
    for (int c = -1; c < x->n; c++) {
        if (k >= n)
            return herr_config(e, "example %zu: the file ends inside it", i);
        size_t len = u16_at(p + 2 * k);
        if (len == 0)
            return herr_config(e, "example %zu: %s has no tokens", i,
                               c < 0 ? "the context" : "a completion");
        if (c < 0)
            x->ctx_len = (int)len;
        else
            x->len[c] = (int)len;
        total += len;
        k += 1 + len;
    }
    if (k > n)
        return herr_config(e, "example %zu: the file ends inside it", i);
    if (bytes != 2 * k)
        return herr_config(e, "example %zu: says %zu bytes but holds %zu", i, bytes, 2 * k);
    if (!(x->tok = malloc(total * sizeof *x->tok)))
        return herr_set(e, "example %zu: out of memory", i);
    size_t at = 0;
    k = 5;
    for (int c = -1; c < x->n; c++) {
        size_t len = u16_at(p + 2 * k);
        for (size_t j = 0; j < len; j++)
            x->tok[at++] = u16_at(p + 2 * (k + 1 + j));
        k += 1 + len;
    }
    *used = k;
    return 0;
}

static int read_llmc(struct choice_set *s, const unsigned char *d, size_t len, size_t limit,
                     herr *e)
{
    if (len < 1024)
        return herr_config(e, "an llm.c eval file starts with a header of 1024 bytes; this one "
                           "has %zu", len);
    if (i32_at(d + 4) != 1)
        return herr_config(e, "llm.c eval file version %d (only 1 is read)", i32_at(d + 4));
    int32_t count = i32_at(d + 8);
    if (count <= 0)
        return herr_config(e, "the header says %d examples", count);
    if ((len - 1024) % 2)
        return herr_config(e, "%zu bytes after the header: not whole uint16 tokens", len - 1024);
    size_t n = (len - 1024) / 2, at = 0, cap = 0;
    const unsigned char *p = d + 1024;
    for (size_t i = 0; i < (size_t)count && (!limit || i < limit); i++) {
        struct choice_example *x = set_add(s, &cap, e);
        size_t used = 0;
        if (!x || llmc_example(p + 2 * at, n - at, i, x, &used, e) != 0)
            return -1;
        at += used;
    }
    if (!limit && at != n)
        return herr_config(e, "%zu bytes after the %d examples the header says", 2 * (n - at),
                           count);
    return 0;
}

/* ------------------------------------------------------------ JSON lines */

/* text's tokens appended to *t: GPT-2's BPE with b, else its bytes. */
static int encode(struct bpe *b, const char *text, struct bpe_tokens *t, herr *e)
{
    size_t len = strlen(text);
    if (b)
        return bpe_encode(b, text, len, 0, t, e);
    if (t->n + len > t->cap) {
        size_t nc = (t->n + len) * 2;
        int *nv = realloc(t->v, nc * sizeof *nv);
        if (!nv)
            return herr_set(e, "out of memory for %zu tokens", nc);
        t->v = nv;
        t->cap = nc;
    }
    for (size_t i = 0; i < len; i++)
        t->v[t->n++] = (unsigned char)text[i];
    return 0;
}

/* The label: a number, or a string of digits (as some copies of HellaSwag keep it). */
static int json_label(const cJSON *o, int n, int *label, herr *e)
{
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "label");
    double v = -1;
    if (cJSON_IsNumber(l))
        v = l->valuedouble;
    else if (cJSON_IsString(l) && l->valuestring[0] && strlen(l->valuestring) < 4 &&
             strspn(l->valuestring, "0123456789") == strlen(l->valuestring))
        v = atoi(l->valuestring);
    else
        return herr_config(e, "\"label\" must be the right ending's index (a number)");
    if (v != floor(v) || v < 0 || v >= n)
        return herr_config(e, "\"label\" %g is not the index of one of its %d endings", v, n);
    *label = (int)v;
    return 0;
}

/* One JSON line's example into x. */
static int json_example(const cJSON *o, struct bpe *b, struct choice_example *x, herr *e)
{
    if (!cJSON_IsObject(o))
        return herr_config(e, "not a JSON object");
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(o, "ctx");
    const cJSON *ends = cJSON_GetObjectItemCaseSensitive(o, "endings");
    if (!cJSON_IsString(ctx) || !ctx->valuestring[0])
        return herr_config(e, "\"ctx\" must be a non-empty string (the context)");
    int n = cJSON_GetArraySize(ends);
    if (!cJSON_IsArray(ends) || n < 2 || n > CHOICE_MAX)
        return herr_config(e, "\"endings\" must be an array of 2 to %d strings", CHOICE_MAX);
    if (json_label(o, n, &x->label, e) != 0)
        return -1;
    struct bpe_tokens t = {0};
    int rc = encode(b, ctx->valuestring, &t, e);
    x->n = n;
    x->ctx_len = (int)t.n;
    for (int i = 0; rc == 0 && i < n; i++) {
        const cJSON *s = cJSON_GetArrayItem(ends, i);
        if (!cJSON_IsString(s)) {
            rc = herr_config(e, "\"endings\"[%d] is not a string", i);
            break;
        }
        size_t len = strlen(s->valuestring), before = t.n;
        char *sp = malloc(len + 2);
        if (!sp) {
            rc = herr_set(e, "out of memory");
            break;
        }
        sp[0] = ' ';
        memcpy(sp + 1, s->valuestring, len + 1);
        rc = encode(b, sp, &t, e);
        free(sp);
        if (rc != 0)
            herr_wrap(e, "\"endings\"[%d]", i);
        x->len[i] = (int)(t.n - before);
    }
    if (rc == 0 && x->ctx_len == 0)
        rc = herr_config(e, "\"ctx\" encodes to no token");
    if (rc != 0) {
        free(t.v);
        return -1;
    }
    x->tok = t.v;
    return 0;
}

static int read_jsonl(struct choice_set *s, const char *text, size_t len, struct bpe *b,
                      size_t limit, herr *e)
{
    size_t cap = 0;
    long line = 0;
    s->jsonl = 1;
    for (const char *p = text, *end = text + len; p < end && (!limit || s->n < limit);) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        line++;
        const char *q = p;
        p += n + (nl != NULL);
        while (n > 0 && (q[n - 1] == '\r' || q[n - 1] == ' ' || q[n - 1] == '\t'))
            n--;
        if (n == 0)
            continue; /* blank lines are passed over */
        cJSON *o = cJSON_ParseWithLength(q, n);
        struct choice_example *x = o ? set_add(s, &cap, e) : NULL;
        int rc = !o  ? herr_config(e, "not JSON")
                 : !x ? -1
                      : json_example(o, b, x, e);
        cJSON_Delete(o);
        if (rc != 0) {
            if (x)
                s->n--; /* nothing of it is kept */
            return herr_wrap(e, "line %ld", line);
        }
        x->where = line;
    }
    return 0;
}

int choice_set_read(struct choice_set *out, const char *path, struct bpe *b, size_t limit,
                    herr *e)
{
    *out = (struct choice_set){0};
    size_t len = 0;
    char *d = read_file_limited(path, CHOICE_FILE_MAX, &len, e);
    if (!d)
        return -1;
    int rc = len >= 4 && i32_at((const unsigned char *)d) == CHOICE_EVAL_MAGIC
                 ? read_llmc(out, (const unsigned char *)d, len, limit, e)
                 : read_jsonl(out, d, len, b, limit, e);
    free(d);
    if (rc == 0 && out->n == 0)
        rc = herr_config(e, "no example in it");
    if (rc != 0) {
        choice_set_free(out);
        return herr_wrap(e, "%s", path);
    }
    return 0;
}

int choice_set_max_completions(const struct choice_set *s)
{
    int m = 0;
    for (size_t i = 0; i < s->n; i++)
        m = s->ex[i].n > m ? s->ex[i].n : m;
    return m;
}

/* The positions x's rows need: the context and the longest completion, less one. */
static int positions(const struct choice_example *x)
{
    int m = 0;
    for (int i = 0; i < x->n; i++)
        m = x->len[i] > m ? x->len[i] : m;
    return x->ctx_len + m - 1;
}

int choice_set_max_positions(const struct choice_set *s)
{
    int m = 0;
    for (size_t i = 0; i < s->n; i++)
        m = positions(&s->ex[i]) > m ? positions(&s->ex[i]) : m;
    return m;
}

int choice_pick(const double *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] < v[best])
            best = i;
    return best;
}

/* The loss the last forward slices added, times T: their positions' summed cross-entropy (an
 * engine's slice adds its positions' sum over B*T, and B is 1). */
static int take_sum(struct engine *en, int T, double *out, herr *e)
{
    float l;
    if (engine_loss_take(en, &l, e) != 0)
        return -1;
    *out = (double)l * T;
    return 0;
}

int choice_score(struct engine *en, const struct choice_example *x, double *sum, double *mean,
                 int *dropped, herr *e)
{
    struct gpt_stage *hs = engine_host(en);
    const struct gpt_config *m = gpt_stage_config(hs);
    int first, last, B, T;
    gpt_stage_range(hs, &first, &last);
    gpt_stage_batch(hs, &B, &T);
    if (first != 0 || last != m->layers || gpt_stage_tp(hs) != 1 || B != 1)
        return herr_set(e, "scoring needs the whole model as one stage of one sequence");
    int P = positions(x), drop = P > T ? P - T : 0;
    if (drop >= x->ctx_len)
        return herr_config(e, "a completion of %d tokens and the context's last token exceed "
                           "the model's %d positions", P - x->ctx_len + 1, T);
    int total = x->ctx_len, c = x->ctx_len - drop;
    for (int i = 0; i < x->n; i++)
        total += x->len[i];
    for (int i = 0; i < total; i++)
        if (x->tok[i] < 0 || x->tok[i] >= m->vocab)
            return herr_config(e, "token %d is outside the model's vocabulary of %d", x->tok[i],
                               m->vocab);
    int *tok = calloc((size_t)T + 1, sizeof *tok), *tgt = calloc((size_t)T, sizeof *tgt);
    if (!tok || !tgt) {
        free(tok);
        free(tgt);
        return herr_set(e, "out of memory for %d positions", T);
    }
    const int *comp = x->tok + x->ctx_len;
    int rc = 0;
    for (int i = 0; i < x->n; i++) {
        /* the context's kept tokens, then completion i: positions [0, c - 1) forwarded first
         * (their loss read and passed over), then the completion's [c - 1, c - 1 + len), each
         * position predicting the next token */
        int len = x->len[i];
        memcpy(tok, x->tok + drop, (size_t)c * sizeof *tok);
        memcpy(tok + c, comp, (size_t)len * sizeof *tok);
        memcpy(tgt, tok + 1, (size_t)(c - 1 + len) * sizeof *tgt);
        double ignored;
        if (c > 1 && engine_forward(en, 0, 0, c - 1, tok, NULL, tgt, NULL) != 0)
            rc = herr_set(e, "forward of the context: %s", engine_error(en));
        else if (c > 1 && take_sum(en, T, &ignored, e) != 0)
            rc = -1;
        else if (engine_forward(en, 0, c - 1, c - 1 + len, tok, NULL, tgt, NULL) != 0)
            rc = herr_set(e, "forward of completion %d: %s", i, engine_error(en));
        else if (take_sum(en, T, &sum[i], e) != 0)
            rc = -1;
        if (rc != 0)
            break;
        mean[i] = sum[i] / len;
        comp += len;
    }
    free(tok);
    free(tgt);
    if (rc != 0)
        return -1;
    *dropped = drop;
    for (int i = 0; i < x->n; i++)
        if (!isfinite(sum[i]))
            return herr_config(e, "the model's loss of completion %d is not finite", i);
    return 0;
}
