/* holmes-node tokenize: text into llm.c token shards with GPT-2's BPE (bpe.h), the data a
 * TrainingJob's `data.format: llmc` reads (shard_writer.h). Each document is the end-of-text
 * token and then its text's tokens, as llm.c's data scripts write them. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bpe.h"
#include "cli.h"
#include "commands.h"
#include "shard_writer.h"
#include "tokenizer.h"

#define CHUNK (1u << 20) /* a segment: the text one thread encodes at a time */
#define SEGS_A_JOB 4      /* segments in a batch for each thread */
#define PROGRESS_S 10.0   /* a progress line on stderr this often */

static const char *cmd = "holmes-node tokenize";

static void usage(FILE *f)
{
    fprintf(f,
        "usage: holmes-node tokenize --tokenizer FILE --out DIR/NAME [--jsonl [--field KEY]]\n"
        "                            [--shard-tokens N] [--val-tokens N] [--replace] [--jobs N]\n"
        "                            INPUT...\n"
        "Writes UTF-8 text as llm.c token shards (uint16), encoded with GPT-2's byte-level BPE\n"
        "as tiktoken's encode_ordinary does; each document is the end-of-text token, then its\n"
        "tokens (llm.c's convention). The shards are a TrainingJob's data (`format: llmc`,\n"
        "`path: DIR/NAME_train_*.bin`; `eval.path: DIR/NAME_val_*.bin`):\n"
        "  --tokenizer FILE   the vocabulary (ids are merge ranks): llm.c's gpt2_tokenizer.bin,\n"
        "                     transformers' vocab.json, or a Hugging Face model directory\n"
        "  --out DIR/NAME     writes DIR/NAME_val_000000.bin (with --val-tokens), then\n"
        "                     DIR/NAME_train_000001.bin, ... (from 000000 without a val shard)\n"
        "  INPUT              a text file, one document (- reads standard input)\n"
        "  --jsonl            each INPUT is JSON lines instead: each line an object whose string\n"
        "                     field KEY (--field, default \"text\") is one document\n"
        "  --shard-tokens N   tokens a shard (100000000, as llm.c's fineweb.py)\n"
        "  --val-tokens N     the first N tokens into the val shard (0: none)\n"
        "  --replace          replace DIR/NAME's shards of an earlier run once the new set is\n"
        "                     written (else refused); a run that fails leaves them as they were\n"
        "  --jobs N           threads encoding (OMP_NUM_THREADS, else every core); the shards are\n"
        "                     the same whatever N\n"
        "A progress line goes to standard error every 10 s. A failed run leaves no shard of\n"
        "its own behind. Exit status: 0 written, 1 failed, 2 usage.\n");
}

/* A piece of the input one thread encodes: a whole document, or a part of one cut where
 * GPT-2's pieces are cut anyway (bpe_safe_cut), so the parts' tokens are the whole's. */
struct seg {
    const char *text, *name; /* name: the input, for errors */
    size_t len, origin;      /* origin: where text begins in its document */
    long line;               /* JSON lines: the line, else 0 */
    int starts_doc;          /* the end-of-text token goes before it */
    struct bpe_tokens toks;
    int rc;
    herr e;
};

struct run {
    struct bpe **enc; /* one encoder a thread */
    int jobs;
    struct shard_writer *w;
    int eot;
    const char *field;
    long documents;
    unsigned long long bytes;
    struct seg *segs; /* the batch */
    int nseg, cap;
    size_t batch_bytes;
    cJSON **objs;     /* JSON lines whose strings the batch points into */
    double t0, said;  /* the start, and the last progress line (every PROGRESS_S) */
};

static void add_seg(struct run *r, const char *text, size_t len, size_t origin, const char *name,
                    long line, int starts_doc)
{
    struct seg *s = &r->segs[r->nseg++];
    s->text = text;
    s->len = len;
    s->origin = origin;
    s->name = name;
    s->line = line;
    s->starts_doc = starts_doc;
    r->batch_bytes += len;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The batch encoded on r->jobs threads, then written in order; the first error in the input's
 * order is the one told. */
static int flush(struct run *r, herr *e)
{
    int n = r->nseg;
#pragma omp parallel for schedule(dynamic, 1) num_threads(r->jobs)
    for (int i = 0; i < n; i++) {
        struct seg *s = &r->segs[i];
        s->toks.n = 0;
        s->rc = bpe_encode(r->enc[omp_get_thread_num()], s->text, s->len, s->origin, &s->toks,
                           &s->e);
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        struct seg *s = &r->segs[i];
        if (s->rc != 0) {
            *e = s->e;
            rc = s->line ? herr_wrap(e, "%s:%ld: the field %s", s->name, s->line, r->field)
                         : herr_wrap(e, "%s", s->name);
            break;
        }
        if (s->starts_doc) {
            int eot = r->eot;
            r->documents++;
            rc = shard_writer_put(r->w, &eot, 1, e);
        }
        if (rc == 0)
            rc = shard_writer_put(r->w, s->toks.v, s->toks.n, e);
    }
    double t = now_s();
    if (rc == 0 && t - r->said >= PROGRESS_S) {
        r->said = t;
        fprintf(stderr, "%s: %.0f s: %ld documents, %.1f MB of text, %llu tokens, %.1f MB/s\n",
                cmd, t - r->t0, r->documents, (double)r->bytes / 1e6,
                (unsigned long long)shard_writer_tokens(r->w),
                (double)r->bytes / 1e6 / (t - r->t0));
    }
    for (int i = 0; i < n; i++)
        if (r->objs[i])
            cJSON_Delete(r->objs[i]);
    memset(r->objs, 0, (size_t)n * sizeof *r->objs);
    r->nseg = 0;
    r->batch_bytes = 0;
    return rc;
}

/* Fills buf[*have, room) from f; *eof when the input has ended. */
static int fill(struct run *r, const char *name, FILE *f, char *buf, size_t room, size_t *have,
                int *eof, herr *e)
{
    while (!*eof && *have < room) {
        size_t got = fread(buf + *have, 1, room - *have, f);
        *have += got;
        r->bytes += got;
        if (got == 0 || *have < room) {
            if (ferror(f))
                return herr_set_kind(e, herr_kind_of_errno(errno), "%s: cannot read: %s", name,
                                     strerror(errno));
            *eof = feof(f) != 0;
        }
    }
    return 0;
}

/* The next segment of buf[start, have): at most a chunk, cut where no piece is cut (a longer
 * one where a chunk has no such place); 0 when the rest must wait for more text. */
static size_t next_seg(const char *buf, size_t start, size_t have, int eof)
{
    size_t rest = have - start;
    if (eof && rest <= CHUNK)
        return rest;
    size_t cut = bpe_safe_cut(buf + start, rest < CHUNK ? rest : CHUNK);
    if (!cut && rest > CHUNK)
        cut = bpe_safe_cut(buf + start, rest);
    return cut ? cut : eof ? rest : 0;
}

/* One text file (or standard input) as one document, read a batch of segments at a time. */
static int text_document(struct run *r, const char *name, FILE *f, herr *e)
{
    size_t room = (size_t)r->cap * CHUNK, have = 0, origin = 0;
    char *buf = malloc(room);
    if (!buf)
        return herr_set(e, "out of memory");
    int rc = 0, eof = 0, first = 1;
    while (rc == 0 && (first || have > 0 || !eof)) {
        if ((rc = fill(r, name, f, buf, room, &have, &eof, e)) != 0)
            break;
        size_t start = 0, take;
        if (first && eof && have == 0)
            add_seg(r, buf, 0, 0, name, 0, 1); /* an empty document is its end-of-text token */
        while (start < have && r->nseg < r->cap && (take = next_seg(buf, start, have, eof))) {
            add_seg(r, buf + start, take, origin + start, name, 0, first);
            first = 0;
            start += take;
        }
        if (r->nseg == 0 && !eof) { /* a full buffer without a place to cut: a larger one */
            char *nb = room > SIZE_MAX / 2 ? NULL : realloc(buf, room * 2);
            if (!nb) {
                rc = herr_set(e, "%s: out of memory for %zu bytes without a place to cut", name,
                              have);
                break;
            }
            buf = nb;
            room *= 2;
            continue;
        }
        if ((rc = flush(r, e)) != 0)
            break;
        memmove(buf, buf + start, have - start);
        have -= start;
        origin += start;
    }
    free(buf);
    return rc;
}

/* Whether a JSON text holds a NUL: a raw byte, or a \u0000 escape (which cJSON decodes into
 * a string that then ends there, dropping the rest of the document unsaid). */
static int holds_nul(const char *s, size_t n)
{
    if (memchr(s, '\0', n))
        return 1;
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '\\') {
            if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4))
                return 1;
            i++; /* the escaped character */
        }
    return 0;
}

/* JSON lines: each line's string field is a document; blank lines are skipped. A line is one
 * JSON object and nothing after it but blanks. */
static int jsonl_documents(struct run *r, const char *name, FILE *f, herr *e)
{
    char *line = NULL;
    size_t room = 0;
    ssize_t n;
    long lineno = 0;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &room, f)) >= 0) {
        lineno++;
        r->bytes += (unsigned long long)n;
        if (strspn(line, " \t\r\n") == (size_t)n)
            continue;
        const char *end = NULL;
        cJSON *o = cJSON_ParseWithLengthOpts(line, (size_t)n, &end, 0);
        if (o && (strspn(end, " \t\r\n") != (size_t)(line + n - end) || holds_nul(line, (size_t)n))) {
            int nul = holds_nul(line, (size_t)n);
            cJSON_Delete(o);
            if ((rc = flush(r, e)) != 0)
                break;
            rc = herr_config(e, "%s:%ld: %s", name, lineno,
                             nul ? "a NUL character (a zero byte or \\u0000), which no document "
                                   "holds"
                                 : "characters after the JSON object (a line holds one object)");
            break;
        }
        const cJSON *t = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, r->field) : NULL;
        if (!cJSON_IsString(t)) {
            int object = cJSON_IsObject(o), json = o != NULL, field = t != NULL;
            cJSON_Delete(o);
            if ((rc = flush(r, e)) != 0) /* the documents before it first */
                break;
            if (!object)
                rc = herr_config(e, "%s:%ld: %s", name, lineno, json ? "not a JSON object" : "not JSON");
            else
                rc = herr_config(e, "%s:%ld: %s \"%s\"%s", name, lineno, field ? "the field" : "no field",
                                 r->field, field ? " is not a string" : "");
            break;
        }
        r->objs[r->nseg] = o;
        add_seg(r, t->valuestring, strlen(t->valuestring), 0, name, lineno, 1);
        if (r->nseg == r->cap || r->batch_bytes >= (size_t)r->cap * CHUNK)
            rc = flush(r, e);
    }
    if (rc == 0 && ferror(f))
        rc = herr_set_kind(e, herr_kind_of_errno(errno), "%s: cannot read: %s", name,
                           strerror(errno));
    if (rc == 0)
        rc = flush(r, e);
    free(line);
    return rc;
}

static int tokenize_input(struct run *r, const char *path, int jsonl, herr *e)
{
    int std = strcmp(path, "-") == 0;
    const char *name = std ? "standard input" : path;
    FILE *f = std ? stdin : fopen(path, "rb");
    if (!f)
        return herr_set_kind(e, herr_kind_of_errno(errno), "%s: cannot open: %s", path,
                             strerror(errno));
    int rc = jsonl ? jsonl_documents(r, name, f, e) : text_document(r, name, f, e);
    if (!std)
        fclose(f);
    return rc;
}


int cmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tokenizer", 1, 0, 'z'}, {"out", 1, 0, 'o'}, {"jsonl", 0, 0, 'j'},
        {"field", 1, 0, 'f'}, {"shard-tokens", 1, 0, 's'}, {"val-tokens", 1, 0, 'v'},
        {"replace", 0, 0, 'r'}, {"jobs", 1, 0, 'J'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *tokfile = NULL, *prefix = NULL, *field = NULL;
    long shard = 100000000, val = 0, jobs = omp_get_max_threads();
    int jsonl = 0, replace = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'z': tokfile = optarg; break;
        case 'o': prefix = optarg; break;
        case 'j': jsonl = 1; break;
        case 'f': field = optarg; break;
        case 'r': replace = 1; break;
        case 's': bad = cli_long(cmd, "--shard-tokens", optarg, 1, 2147483647L, &shard); break;
        case 'v': bad = cli_long(cmd, "--val-tokens", optarg, 0, 2147483647L, &val); break;
        case 'J': bad = cli_long(cmd, "--jobs", optarg, 1, 256, &jobs); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad)
            return 2;
    }
    const char *why = !tokfile               ? "--tokenizer is required"
                      : !prefix              ? "--out is required"
                      : optind >= argc       ? "no INPUT (a file, or - for standard input)"
                      : field && !jsonl      ? "--field goes with --jsonl"
                                             : NULL;
    if (why) {
        fprintf(stderr, "%s: %s\n", cmd, why);
        usage(stderr);
        return 2;
    }
    herr e = {0};
    struct tokenizer *tk = NULL;
    struct run r = {0};
    int rc = 1, shards = 0;
    unsigned long long tokens = 0;
    double t0 = now_s();
    r.t0 = r.said = t0;
    r.jobs = jobs < 1 ? 1 : jobs > 256 ? 256 : (int)jobs;
    r.cap = r.jobs * SEGS_A_JOB;
    r.field = field ? field : "text";
    r.enc = calloc((size_t)r.jobs, sizeof *r.enc);
    r.segs = calloc((size_t)r.cap, sizeof *r.segs);
    r.objs = calloc((size_t)r.cap, sizeof *r.objs);
    if (!r.enc || !r.segs || !r.objs) {
        fprintf(stderr, "%s: out of memory\n", cmd);
        goto out;
    }
    if (tokenizer_open(&tk, tokfile, &e) != 0) {
        fprintf(stderr, "%s: --tokenizer: %s\n", cmd, e.msg);
        goto out;
    }
    for (int i = 0; i < r.jobs; i++)
        if (bpe_create(&r.enc[i], tk, &e) != 0) {
            fprintf(stderr, "%s: --tokenizer: %s\n", cmd, e.msg);
            goto out;
        }
    if ((r.eot = tokenizer_eot(tk)) < 0 || tokenizer_vocab(tk) > 65536) {
        fprintf(stderr, "%s: --tokenizer %s: %s\n", cmd, tokfile, r.eot < 0
                ? "names no end-of-text token (a version 2 file, or GPT-2's 50257 tokens), "
                  "which begins each document"
                : "more than 65536 tokens: llm.c's shards hold 16-bit tokens");
        goto out;
    }
    struct shard_writer_config wc = {.prefix = prefix, .shard_tokens = (uint64_t)shard,
                                     .val_tokens = (uint64_t)val, .replace = replace};
    if (shard_writer_open(&r.w, &wc, &e) != 0) {
        fprintf(stderr, "%s: %s\n", cmd, e.msg);
        goto out;
    }
    for (int i = optind; i < argc; i++)
        if (tokenize_input(&r, argv[i], jsonl, &e) != 0) {
            fprintf(stderr, "%s: %s (no shard written)\n", cmd, e.msg);
            goto out;
        }
    if (r.documents == 0) {
        fprintf(stderr, "%s: no document in the input (every line blank)\n", cmd);
        goto out;
    }
    uint64_t written;
    if (shard_writer_finish(r.w, &shards, &written, &e) != 0) {
        fprintf(stderr, "%s: %s (no shard written)\n", cmd, e.msg);
        goto out;
    }
    tokens = written;
    double s = now_s() - t0;
    char names[2 * PATH_MAX + 64] = "";
    int ntrain = shards - (val > 0 && shards > 0), at = 0;
    if (val > 0 && shards > 0)
        at += snprintf(names, sizeof names, "%s_val_000000.bin", prefix);
    if (ntrain > 0 && at < (int)sizeof names)
        at += snprintf(names + at, sizeof names - at, "%s%s_train_%06d.bin", at ? ", " : "",
                       prefix, val > 0 ? 1 : 0);
    if (ntrain > 1 && at < (int)sizeof names)
        snprintf(names + at, sizeof names - at, " to _%06d", shards - 1);
    printf("%s: %ld documents, %llu bytes of text, %llu tokens (%.2f bytes a token) in %d "
           "shard%s: %s; %.2f s on %d thread%s, %.1f MB/s\n", cmd, r.documents, r.bytes, tokens,
           (double)r.bytes / (double)tokens, shards, shards == 1 ? "" : "s", names, s, r.jobs,
           r.jobs == 1 ? "" : "s", s > 0 ? (double)r.bytes / s / 1e6 : 0.0);
    rc = 0;
out:
    shard_writer_free(r.w);
    for (int i = 0; r.segs && i < r.cap; i++)
        free(r.segs[i].toks.v);
    for (int i = 0; r.objs && i < r.cap; i++)
        cJSON_Delete(r.objs[i]);
    for (int i = 0; r.enc && i < r.jobs; i++)
        bpe_free(r.enc[i]);
    free(r.segs);
    free(r.objs);
    free(r.enc);
    tokenizer_free(tk);
    return rc;
}
