/* holmes-node tokenize: text into llm.c token shards with GPT-2's BPE (bpe.h), the data a
 * TrainingJob's `data.format: llmc` reads (shard_writer.h). Each document is the end-of-text
 * token and then its text's tokens, as llm.c's data scripts write them. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bpe.h"
#include "cli.h"
#include "commands.h"
#include "shard_writer.h"
#include "tokenizer.h"

#define CHUNK (1u << 20) /* text read at a time */

static const char *cmd = "holmes-node tokenize";

static void usage(FILE *f)
{
    fprintf(f,
        "usage: holmes-node tokenize --tokenizer FILE --out DIR/NAME [--jsonl [--field KEY]]\n"
        "                            [--shard-tokens N] [--val-tokens N] [--replace] INPUT...\n"
        "Writes UTF-8 text as llm.c token shards (uint16), encoded with GPT-2's byte-level BPE\n"
        "as tiktoken's encode_ordinary does; each document is the end-of-text token, then its\n"
        "tokens (llm.c's convention). The shards are a TrainingJob's data (`format: llmc`,\n"
        "`path: DIR/NAME_train_*.bin`; `eval.path: DIR/NAME_val_*.bin`):\n"
        "  --tokenizer FILE   llm.c's gpt2_tokenizer.bin (the vocabulary; ids are merge ranks)\n"
        "  --out DIR/NAME     writes DIR/NAME_val_000000.bin (with --val-tokens), then\n"
        "                     DIR/NAME_train_000001.bin, ... (from 000000 without a val shard)\n"
        "  INPUT              a text file, one document (- reads standard input)\n"
        "  --jsonl            each INPUT is JSON lines instead: each line an object whose string\n"
        "                     field KEY (--field, default \"text\") is one document\n"
        "  --shard-tokens N   tokens a shard (100000000, as llm.c's fineweb.py)\n"
        "  --val-tokens N     the first N tokens into the val shard (0: none)\n"
        "  --replace          remove DIR/NAME's shards of an earlier run first (else refused)\n"
        "A failed run leaves no shard of its own behind. Exit status: 0 written, 1 failed,\n"
        "2 usage.\n");
}

struct run {
    struct bpe *bpe;
    struct shard_writer *w;
    struct bpe_tokens toks;
    int eot;
    long documents;
    unsigned long long bytes;
};

/* The tokens gathered so far into the shards. */
static int drain(struct run *r, herr *e)
{
    int rc = shard_writer_put(r->w, r->toks.v, r->toks.n, e);
    r->toks.n = 0;
    return rc;
}

static int begin_document(struct run *r, herr *e)
{
    r->documents++;
    int eot = r->eot;
    return shard_writer_put(r->w, &eot, 1, e);
}

/* One text file (or standard input) as one document, read in chunks cut where GPT-2's pieces
 * are cut anyway (bpe_safe_cut), so the tokens are those of the whole text. */
static int text_document(struct run *r, const char *name, FILE *f, herr *e)
{
    size_t room = 2 * CHUNK, have = 0, origin = 0;
    char *buf = malloc(room);
    if (!buf)
        return herr_set(e, "out of memory");
    int rc = begin_document(r, e), eof = 0;
    while (rc == 0 && !eof) {
        if (room - have < CHUNK) {
            char *nb = realloc(buf, room * 2);
            if (!nb) {
                rc = herr_set(e, "%s: out of memory for a line of %zu bytes", name, have);
                break;
            }
            buf = nb;
            room *= 2;
        }
        size_t got = fread(buf + have, 1, CHUNK, f);
        have += got;
        r->bytes += got;
        if (got < CHUNK) {
            if (ferror(f)) {
                rc = herr_set_kind(e, herr_kind_of_errno(errno), "%s: cannot read: %s", name,
                                   strerror(errno));
                break;
            }
            eof = 1;
        }
        size_t cut = eof ? have : bpe_safe_cut(buf, have);
        if (cut == 0)
            continue; /* no place to cut yet: read on */
        if (bpe_encode(r->bpe, buf, cut, origin, &r->toks, e) != 0 || drain(r, e) != 0) {
            rc = herr_wrap(e, "%s", name);
            break;
        }
        memmove(buf, buf + cut, have - cut);
        have -= cut;
        origin += cut;
    }
    free(buf);
    return rc;
}

/* JSON lines: each line's string field `field` is a document; blank lines are skipped. */
static int jsonl_documents(struct run *r, const char *name, FILE *f, const char *field, herr *e)
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
        cJSON *o = cJSON_ParseWithLength(line, (size_t)n);
        const cJSON *t = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, field) : NULL;
        if (!cJSON_IsObject(o))
            rc = herr_config(e, "%s:%ld: %s", name, lineno, o ? "not a JSON object" : "not JSON");
        else if (!cJSON_IsString(t))
            rc = herr_config(e, "%s:%ld: %s \"%s\"%s", name, lineno, t ? "the field" : "no field",
                             field, t ? " is not a string" : "");
        if (rc == 0)
            rc = begin_document(r, e);
        if (rc == 0 && (bpe_encode(r->bpe, t->valuestring, strlen(t->valuestring), 0, &r->toks,
                                   e) != 0 || drain(r, e) != 0))
            rc = herr_wrap(e, "%s:%ld: the field %s", name, lineno, field);
        cJSON_Delete(o);
    }
    if (rc == 0 && ferror(f))
        rc = herr_set_kind(e, herr_kind_of_errno(errno), "%s: cannot read: %s", name,
                           strerror(errno));
    free(line);
    return rc;
}

static int tokenize_input(struct run *r, const char *path, int jsonl, const char *field, herr *e)
{
    int std = strcmp(path, "-") == 0;
    const char *name = std ? "standard input" : path;
    FILE *f = std ? stdin : fopen(path, "rb");
    if (!f)
        return herr_set_kind(e, herr_kind_of_errno(errno), "%s: cannot open: %s", path,
                             strerror(errno));
    int rc = jsonl ? jsonl_documents(r, name, f, field, e) : text_document(r, name, f, e);
    if (!std)
        fclose(f);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tokenizer", 1, 0, 'z'}, {"out", 1, 0, 'o'}, {"jsonl", 0, 0, 'j'},
        {"field", 1, 0, 'f'}, {"shard-tokens", 1, 0, 's'}, {"val-tokens", 1, 0, 'v'},
        {"replace", 0, 0, 'r'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *tokfile = NULL, *prefix = NULL, *field = NULL;
    long shard = 100000000, val = 0;
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
    if (tokenizer_open(&tk, tokfile, &e) != 0 || bpe_create(&r.bpe, tk, &e) != 0) {
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
        if (tokenize_input(&r, argv[i], jsonl, field ? field : "text", &e) != 0) {
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
           "shard%s: %s; %.2f s, %.1f MB/s\n", cmd, r.documents, r.bytes, tokens,
           (double)r.bytes / (double)tokens, shards, shards == 1 ? "" : "s", names, s,
           s > 0 ? (double)r.bytes / s / 1e6 : 0.0);
    rc = 0;
out:
    shard_writer_free(r.w);
    free(r.toks.v);
    bpe_free(r.bpe);
    tokenizer_free(tk);
    return rc;
}
