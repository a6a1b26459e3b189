/* GPT-2's BPE encoding (bpe.h) and llm.c shards written (shard_writer.h), on small vocabularies
 * whose tokens are known: GPT-2's pattern keeps merges inside its pieces (letters, digits,
 * symbols, whitespace, contractions); the lowest id merges first, the leftmost among equals; a
 * piece that is a token is that token; end-of-text is never a merge result; text that is not
 * UTF-8 and a vocabulary without a byte are refused, naming the byte; a megabyte of spaces is
 * merged right (the heap); cutting text where bpe_safe_cut says gives the tokens of the whole;
 * the shards hold the tokens under llm.c's header, split and named as fineweb.py names them,
 * refuse to overwrite an earlier run, and a run cut short leaves none. (Against an independent
 * Python encoder on a trained vocabulary: tests/integration/tokenize.sh.) */
#include "test.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bpe.h"
#include "dataloader.h"
#include "fs_testutil.h"
#include "shard_writer.h"
#include "tokenizer.h"
#include "vocab_testutil.h"

static char dir[256];

static struct tokenizer *vocab(const char *const *pieces, int n, int skip)
{
    return test_vocab(dir, pieces, n, skip);
}

/* text's tokens as "a|bc|d" (each token's bytes; ids >= 256 the same way), or the error. */
static const char *enc(struct bpe *b, const struct tokenizer *t, const char *text, size_t len)
{
    static char out[4096];
    struct bpe_tokens k = {0};
    herr e = {0};
    if (bpe_encode(b, text, len, 0, &k, &e) != 0) {
        snprintf(out, sizeof out, "error: %s", e.msg);
        free(k.v);
        return out;
    }
    size_t at = 0;
    out[0] = 0;
    for (size_t i = 0; i < k.n && at + 64 < sizeof out; i++) {
        size_t n;
        const char *p = tokenizer_piece(t, k.v[i], &n);
        if (i)
            out[at++] = '|';
        memcpy(out + at, p, n);
        at += n;
        out[at] = 0;
    }
    free(k.v);
    return out;
}

static void test_pieces(void)
{
    /* merges that would cross GPT-2's piece boundaries if the text were not cut first */
    static const char *const p[] = {"o ", " w", "ll", "he", "hell", "hello", " world", "or",
                                    "wor", "'s", "12", "d1", " 1", "!!", "\n\n", "  "};
    struct tokenizer *t = vocab(p, (int)(sizeof p / sizeof *p), -1);
    struct bpe *b = NULL;
    herr e = {0};
    if (!t || bpe_create(&b, t, &e) != 0) {
        TEST_FAIL("bpe: pieces", "no encoder: %s", e.msg);
        tokenizer_free(t);
        return;
    }
    CHECK_STR("bpe: a space begins the next word's piece, never ends one (no 'o ')",
              enc(b, t, "hello world", 11), "hello| world");
    CHECK_STR("bpe: letters and digits are apart ('d1' is not made); '12' (266) before ' 1'",
              enc(b, t, "word123 12", 10), "wor|d|12|3| |12");
    CHECK_STR("bpe: a contraction is its own piece",
              enc(b, t, "he's", 4), "he|'s");
    CHECK_STR("bpe: symbols are one piece with their space; letters end it",
              enc(b, t, "hi!!! x", 7), "h|i|!!|!| |x");
    /* "\n\n" followed by a word: the last whitespace goes with nothing (\s+(?!\S) leaves it) */
    CHECK_STR("bpe: whitespace before a word keeps its last space for the word",
              enc(b, t, "a   world", 9), "a|  | world");
    CHECK_STR("bpe: whitespace at the end of the text is one piece", enc(b, t, "a\n\n", 3),
              "a|\n\n");
    CHECK_STR("bpe: a newline run before a word: all but its last character together",
              enc(b, t, "a\n\n\nb", 5), "a|\n\n|\n|b");
    CHECK_STR("bpe: \"<|endoftext|>\" in the text is text, never the end-of-text token",
              enc(b, t, "<|endoftext|>", 13), "<|||e|n|d|o|f|t|e|x|t|||>");
    CHECK_STR("bpe: non-ASCII letters are letters (one piece with the space)",
              enc(b, t, " h\xc3\xa9llo", 7), " |h|\xc3|\xa9|ll|o");
    const char bad[] = "ok \xff\xfe no";
    const char *got = enc(b, t, bad, sizeof bad - 1);
    CHECK_MSG("bpe: text that is not UTF-8 refused, naming the byte",
              strstr(got, "error: not UTF-8 at byte 3"), "%s", got);
    CHECK_STR("bpe: empty text, no tokens", enc(b, t, "", 0), "");
    bpe_free(b);
    tokenizer_free(t);
}

static void test_merge_order(void)
{
    /* ids are ranks: "bc" (256) before "ab" (257); "xyz" only whole; "aa" and "aaaa" */
    static const char *const p[] = {"bc", "ab", "xyz", "aa", "aaaa", "  ", "    "};
    struct tokenizer *t = vocab(p, (int)(sizeof p / sizeof *p), -1);
    struct bpe *b = NULL;
    herr e = {0};
    if (!t || bpe_create(&b, t, &e) != 0) {
        TEST_FAIL("bpe: merge order", "no encoder: %s", e.msg);
        tokenizer_free(t);
        return;
    }
    CHECK_STR("bpe: the lower id merges first ('bc' before 'ab')", enc(b, t, "abcd", 4), "a|bc|d");
    CHECK_STR("bpe: a piece that is a token is that token, unmade by merges",
              enc(b, t, "xyz", 3), "xyz");
    CHECK_STR("bpe: no merge makes what only the whole piece is", enc(b, t, "xyzz", 4),
              "x|y|z|z");
    CHECK_STR("bpe: equal ranks: the leftmost first", enc(b, t, "aaa", 3), "aa|a");
    CHECK_STR("bpe: merged tokens merge again ('aa'+'aa')", enc(b, t, "aaaaa", 5), "aaaa|a");
    /* "q" and 2^20 - 1 spaces at the end (one piece): first every "  " from the left (524,287
     * and one space left), then "    " of those (262,143 and one "  " left) */
    size_t n = 1 << 20;
    char *sp = malloc(n);
    struct bpe_tokens k = {0};
    int rc = sp ? 0 : -1;
    if (sp) {
        memset(sp, ' ', n);
        sp[0] = 'q';
        rc = bpe_encode(b, sp, n, 0, &k, &e);
    }
    size_t want = 1 + (n - 1) / 4 + 2, fours = 0, len = 0;
    for (size_t i = 1; rc == 0 && i < k.n; i++)
        fours += tokenizer_piece(t, k.v[i], &len) && len == 4;
    CHECK_MSG("bpe: a megabyte of spaces merged by rank, then from the left (the heap's order)",
              rc == 0 && k.n == want && fours == (n - 1) / 4 && k.v[0] == 'q' &&
                  k.v[k.n - 2] == 256 + 5 && k.v[k.n - 1] == ' ',
              "rc %d, %zu tokens (want %zu), %zu of 4 spaces: %s", rc, k.n, want, fours, e.msg);
    free(k.v);
    free(sp);
    bpe_free(b);
    tokenizer_free(t);
}

static void test_refusals(void)
{
    struct tokenizer *t = vocab(NULL, 0, 0x80);
    struct bpe *b = NULL;
    herr e = {0};
    int rc = t ? bpe_create(&b, t, &e) : -1;
    CHECK_MSG("bpe: a vocabulary without a token for byte 0x80 refused, naming it",
              rc != 0 && strstr(e.msg, "byte 0x80") && strstr(e.msg, "not a byte-level"),
              "rc %d: %s", rc, e.msg);
    bpe_free(b);
    tokenizer_free(t);
}

/* Text cut where bpe_safe_cut says, each part encoded alone: the tokens of the whole. */
static void test_safe_cut(void)
{
    static const char *const p[] = {"\n\n", "  ", " a", "ab", "\n ", " \n", "a\n", ".\n"};
    struct tokenizer *t = vocab(p, (int)(sizeof p / sizeof *p), -1);
    struct bpe *b = NULL;
    herr e = {0};
    if (!t || bpe_create(&b, t, &e) != 0) {
        TEST_FAIL("bpe: safe cut", "no encoder: %s", e.msg);
        tokenizer_free(t);
        return;
    }
    static const char alphabet[] = "ab.\n \t";
    char text[400];
    int bad = 0, cuts = 0;
    unsigned seed = 12345;
    for (int trial = 0; trial < 2000 && !bad; trial++) {
        size_t n = 1 + (seed = seed * 1103515245u + 12345u) % (sizeof text - 1);
        for (size_t i = 0; i < n; i++)
            text[i] = alphabet[((seed = seed * 1103515245u + 12345u) >> 16) % 6];
        struct bpe_tokens whole = {0}, parts = {0};
        size_t at = 0;
        int rc = bpe_encode(b, text, n, 0, &whole, &e);
        while (rc == 0 && at < n) { /* the way cmd_tokenize reads: cut, encode, go on */
            size_t cut = bpe_safe_cut(text + at, n - at);
            size_t take = cut ? cut : n - at;
            cuts += cut != 0;
            rc = bpe_encode(b, text + at, take, at, &parts, &e);
            at += take;
        }
        bad = rc != 0 || whole.n != parts.n ||
              memcmp(whole.v, parts.v, whole.n * sizeof *whole.v) != 0;
        if (bad)
            printf("# trial %d: %zu tokens whole, %zu in parts: \"%.*s\"\n", trial, whole.n,
                   parts.n, (int)n, text);
        free(whole.v);
        free(parts.v);
    }
    CHECK_MSG("bpe: 2,000 random texts cut where bpe_safe_cut says: the tokens of the whole",
              !bad && cuts > 1000, "%d cuts", cuts);
    CHECK_INT("bpe: no cut before a newline that follows whitespace", bpe_safe_cut("a \nb", 4), 0);
    CHECK_INT("bpe: the cut after the last newline between visible characters",
              bpe_safe_cut("x\ny\nz \n w", 9), 4);
    bpe_free(b);
    tokenizer_free(t);
}

/* The tokens of one shard file, or -1 when its header is not llm.c's. */
static long read_shard(const char *path, uint16_t *out, long cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    int32_t h[256];
    long n = -1;
    if (fread(h, sizeof h, 1, f) == 1 && h[0] == DATALOADER_SHARD_MAGIC && h[1] == 1 &&
        h[2] <= cap && fread(out, 2, (size_t)h[2], f) == (size_t)h[2] && fgetc(f) == EOF)
        n = h[2];
    fclose(f);
    return n;
}

static int count_files(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += strstr(de->d_name, "corpus_") == de->d_name;
    if (d)
        closedir(d);
    return n;
}

static void test_shards(void)
{
    char prefix[300], path[400];
    snprintf(prefix, sizeof prefix, "%s/corpus", dir);
    int toks[10];
    for (int i = 0; i < 10; i++)
        toks[i] = 65535 - i * 1000;
    struct shard_writer_config c = {.prefix = prefix, .shard_tokens = 4, .val_tokens = 3};
    struct shard_writer *w = NULL;
    herr e = {0};
    int shards = 0;
    uint64_t total = 0;
    int rc = shard_writer_open(&w, &c, &e) || shard_writer_put(w, toks, 6, &e) ||
             shard_writer_put(w, toks + 6, 4, &e) || shard_writer_finish(w, &shards, &total, &e);
    shard_writer_free(w);
    uint16_t got[16];
    long n[3];
    const char *names[3] = {"val_000000", "train_000001", "train_000002"};
    int same = 1, at = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s_%s.bin", prefix, names[i]);
        n[i] = read_shard(path, got, 16);
        for (long j = 0; j < n[i]; j++)
            same &= got[j] == (uint16_t)toks[at++];
    }
    CHECK_MSG("shards: 3 val tokens, then train shards of 4 (the last 3), llm.c's header, the "
              "tokens in order",
              rc == 0 && shards == 3 && total == 10 && n[0] == 3 && n[1] == 4 && n[2] == 3 &&
                  same && at == 10 && count_files() == 3,
              "rc %d (%s), %d shards, %ld %ld %ld tokens, %d files", rc, e.msg, shards, n[0], n[1],
              n[2], count_files());

    w = NULL;
    rc = shard_writer_open(&w, &c, &e);
    snprintf(path, sizeof path, "%s_val_000000.bin", prefix);
    CHECK_MSG("shards: an earlier run's shards refused, naming one and --replace",
              rc != 0 && strstr(e.msg, "is there already") && strstr(e.msg, "--replace") &&
                  strstr(e.msg, "corpus_"), "rc %d: %s", rc, e.msg);
    shard_writer_free(w);

    /* replacing: the old set (3 files) is gone, the new one is one train shard */
    snprintf(path, sizeof path, "%s_train_000007.bin", prefix);
    test_write_file(path, "stale");
    struct shard_writer_config r = {.prefix = prefix, .shard_tokens = 100, .replace = 1};
    w = NULL;
    rc = shard_writer_open(&w, &r, &e) || shard_writer_put(w, toks, 10, &e) ||
         shard_writer_finish(w, &shards, &total, &e);
    shard_writer_free(w);
    snprintf(path, sizeof path, "%s_train_000000.bin", prefix);
    CHECK_MSG("shards: --replace removes every shard of the prefix, the new set alone is left",
              rc == 0 && shards == 1 && count_files() == 1 && read_shard(path, got, 16) == 10,
              "rc %d (%s), %d files", rc, e.msg, count_files());

    /* cut short, replacing: a token above 16 bits after two whole shards; nothing of this run is
     * left, and the old set is as it was (until 2026-11-29 --replace removed it first) */
    int bad[6] = {1, 2, 3, 4, 5, 70000};
    struct shard_writer_config s = {.prefix = prefix, .shard_tokens = 2, .replace = 1};
    w = NULL;
    rc = shard_writer_open(&w, &s, &e) || shard_writer_put(w, bad, 6, &e);
    int mid = count_files(); /* the two whole shards and the one begun, .tmp, beside the old one */
    shard_writer_free(w);
    uint16_t old[16];
    long nold = read_shard(path, old, 16);
    int kept = nold == 10;
    for (long j = 0; kept && j < nold; j++)
        kept = old[j] == (uint16_t)toks[j];
    CHECK_MSG("shards: a token of 17 bits refused, naming it; the run's shards removed, the old "
              "set kept whole",
              rc != 0 && strstr(e.msg, "token 70000") && count_files() == 1 && kept && mid == 4,
              "rc %d (%s), %d files left (%d midway), old shard %ld tokens", rc, e.msg,
              count_files(), mid, nold);
    /* until the set is whole, the old shards keep their names and the new ones are .tmp: a
     * reader globbing PREFIX_train_*.bin midway sees the old set only */
    w = NULL;
    rc = shard_writer_open(&w, &s, &e) || shard_writer_put(w, bad, 4, &e);
    snprintf(path, sizeof path, "%s_train_000000.bin", prefix);
    int hidden = rc == 0 && read_shard(path, old, 16) == 10; /* the old shard 0, still */
    snprintf(path, sizeof path, "%s_train_000001.bin", prefix);
    hidden = hidden && access(path, F_OK) != 0;
    snprintf(path, sizeof path, "%s_train_000001.bin.tmp", prefix);
    hidden = hidden && access(path, F_OK) == 0;
    rc = rc || shard_writer_finish(w, &shards, &total, &e);
    shard_writer_free(w);
    snprintf(path, sizeof path, "%s_train_000001.bin", prefix);
    CHECK_MSG("shards: replacing, the new shards are .tmp until the set is whole, then in place",
              hidden && rc == 0 && shards == 2 && count_files() == 2 && read_shard(path, got, 16) == 2,
              "rc %d (%s), %d files", rc, e.msg, count_files());
    struct shard_writer_config z = {.prefix = prefix, .shard_tokens = 0};
    w = NULL;
    rc = shard_writer_open(&w, &z, &e);
    CHECK("shards: a shard of 0 tokens refused", rc != 0 && !w);
    snprintf(path, sizeof path, "%s/no-such-dir/x", dir);
    struct shard_writer_config m = {.prefix = path, .shard_tokens = 5};
    rc = shard_writer_open(&w, &m, &e);
    CHECK_MSG("shards: a missing directory refused, naming it", rc != 0 &&
              strstr(e.msg, "no-such-dir"), "%s", e.msg);
}

/* transformers' vocab.json: bytes_to_unicode's characters back to bytes; bad ones refused. */
static void test_vocab_json(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    herr e = {0};
    struct tokenizer *t = NULL;
    test_write_file(path, "{\"a\": 0, \"\u0120the\": 1, \"\u010a\u010a\": 2, \"<|endoftext|>\": 4, "
                          "\"\u00e9\u0100\": 3}");
    int rc = tokenizer_open(&t, path, &e);
    size_t l1 = 0, l2 = 0, l3 = 0;
    const char *p1 = rc ? NULL : tokenizer_piece(t, 1, &l1), *p2 = rc ? NULL : tokenizer_piece(t, 2, &l2);
    const char *p3 = rc ? NULL : tokenizer_piece(t, 3, &l3);
    CHECK_MSG("vocab.json: \u0120 is a space, \u010a a newline, \u00e9 byte 0xe9, \u0100 byte 0; "
              "end-of-text by name",
              rc == 0 && tokenizer_vocab(t) == 5 && tokenizer_eot(t) == 4 && p1 && l1 == 4 &&
                  !memcmp(p1, " the", 4) && p2 && l2 == 2 && !memcmp(p2, "\n\n", 2) && p3 &&
                  l3 == 2 && !memcmp(p3, "\xe9\0", 2),
              "rc %d: %s", rc, e.msg);
    tokenizer_free(t);
    t = NULL;
    test_write_file(path, "{\"a\": 0, \"b\": 0}");
    rc = tokenizer_open(&t, path, &e);
    CHECK_MSG("vocab.json: an id given twice refused", rc != 0 && strstr(e.msg, "id 0 is given twice"),
              "%s", e.msg);
    test_write_file(path, "{\"a\": 0, \"b\": 5}");
    rc = tokenizer_open(&t, path, &e);
    CHECK_MSG("vocab.json: an id outside 0..n-1 refused, naming the token",
              rc != 0 && strstr(e.msg, "\"b\": its id is not one of 0 to 1"), "%s", e.msg);
    test_write_file(path, "{\"\u4e00\": 0}");
    rc = tokenizer_open(&t, path, &e);
    CHECK_MSG("vocab.json: a character that stands for no byte refused",
              rc != 0 && strstr(e.msg, "not one of GPT-2's byte characters"), "%s", e.msg);
    tokenizer_free(t);
}

int main(void)
{
    static void (*const tests[])(void) = {test_pieces, test_merge_order, test_refusals,
                                          test_safe_cut, test_shards, test_vocab_json, NULL};
    test_in_tmpdir(dir, sizeof dir, "bpe", tests);
    TEST_MAIN_END();
}
