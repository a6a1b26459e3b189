/* holmes-node sample: text from a trained model (a checkpoint set of any plan, or llm.c GPT-2
 * weights), on the CPU engine (sampler.h). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "cli.h"
#include "commands.h"
#include "model_import.h"
#include "sampler.h"
#include "tokenizer.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: holmes-node sample (--checkpoint-dir DIR [--step N] | --init-from FILE)\n"
        "                          [--prompt TEXT | --prompt-tokens N,N,...] [--tokenizer FILE]\n"
        "                          [--tokens N] [--temperature X] [--top-k K] [--top-p P]\n"
        "                          [--seed N]\n"
        "Continues a prompt with a trained model, one token at a time, on the CPU:\n"
        "  --checkpoint-dir DIR  a job's checkpoints (whatever plan wrote them); --step N: that\n"
        "                        set (default: the step DIR/latest-step names)\n"
        "  --init-from FILE      GPT-2 weights instead: llm.c's (gpt2_124M.bin), Hugging Face's\n"
        "                        safetensors (model.safetensors) or model directory\n"
        "  --prompt TEXT         the text to continue: with --tokenizer, encoded with GPT-2's BPE\n"
        "                        (as holmes-node tokenize writes shards); without, each byte a\n"
        "                        token (a model trained on text data)\n"
        "  --prompt-tokens LIST  token ids, comma-separated (a model of llm.c token shards);\n"
        "                        default: the tokenizer's end-of-text token, else a newline byte\n"
        "  --tokenizer FILE      llm.c's gpt2_tokenizer.bin, transformers' vocab.json or a Hugging\n"
        "                        Face model directory: encodes --prompt and prints the tokens\n"
        "                        as text (without it, tokens below 256 print as bytes, the\n"
        "                        others as <id>)\n"
        "  --tokens N            tokens to generate (64); it stops early at end-of-text\n"
        "  --temperature X       1.0; 0 takes the most likely token each time\n"
        "  --top-k K             draw among the K most likely (0: all; 40 by default)\n"
        "  --top-p P             and of those among the fewest most likely whose probabilities\n"
        "                        add up to P (nucleus sampling; 1, the default: all of them)\n"
        "  --seed N              the draws' seed (1337): the same seed, the same text\n"
        "Exit status: 0 written, 1 failed, 2 usage.\n");
}

struct out {
    const struct tokenizer *tok;
};

static void put_token(const struct out *o, int t)
{
    size_t len;
    const char *p = o->tok ? tokenizer_piece(o->tok, t, &len) : NULL;
    if (p)
        fwrite(p, 1, len, stdout);
    else if (!o->tok && t >= 0 && t < 256)
        putchar(t);
    else
        printf("<%d>", t);
}

static void emit(void *ctx, int t)
{
    put_token(ctx, t);
    fflush(stdout);
}

/* "1,2,3" into toks (at most cap); the count, or -1 with the reason on stderr. */
static int parse_tokens(const char *s, int *toks, int cap)
{
    int n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1 << 24 || (*end && *end != ',')) {
            fprintf(stderr, "holmes-node sample: --prompt-tokens '%s': a comma-separated list of "
                    "token ids (0 to %d)\n", s, 1 << 24);
            return -1;
        }
        if (n == cap) {
            fprintf(stderr, "holmes-node sample: --prompt-tokens: more than %d tokens\n", cap);
            return -1;
        }
        toks[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* GPT-2's BPE tokens of text into toks (at most cap): the count, or -1 with the reason. */
static int encode_prompt(const struct tokenizer *tk, const char *text, int *toks, int cap, herr *e)
{
    struct bpe *b = NULL;
    struct bpe_tokens k = {0};
    int n = -1;
    if (bpe_create(&b, tk, e) == 0 && bpe_encode(b, text, strlen(text), 0, &k, e) == 0) {
        if (k.n > (size_t)cap)
            herr_config(e, "%zu tokens: more than %d", k.n, cap);
        else if ((n = (int)k.n) > 0)
            memcpy(toks, k.v, k.n * sizeof *toks);
    }
    free(k.v);
    bpe_free(b);
    return n;
}

/* The whole model for forwards (gpt_stage_create_forward_only), of one sequence of T positions
 * (at most the model's), from the checkpoint set or the GPT-2 file. */
static int load_model(const char *dir, long step, const char *file, int T,
                      struct gpt_stage **out, int64_t *used, herr *e)
{
    struct model_source m;
    *out = NULL;
    int rc = model_source_open(&m, dir, step, file, e);
    *used = m.step;
    if (rc == 0) {
        const struct gpt_config *c = &m.config;
        rc = gpt_stage_create_forward_only(out, c, 0, c->layers, 1,
                                           T > 0 && T < c->max_seq ? T : c->max_seq, 1, e);
        if (rc == 0 && (rc = model_source_load(&m, *out, e)) != 0) {
            gpt_stage_free(*out);
            *out = NULL;
        }
    }
    model_source_close(&m);
    return rc;
}

int cmd_sample(int argc, char **argv)
{
    static const struct option opts[] = {
        {"checkpoint-dir", 1, 0, 'd'}, {"step", 1, 0, 's'}, {"init-from", 1, 0, 'i'},
        {"prompt", 1, 0, 'p'}, {"prompt-tokens", 1, 0, 'P'}, {"tokenizer", 1, 0, 'z'},
        {"tokens", 1, 0, 'n'}, {"temperature", 1, 0, 't'}, {"top-k", 1, 0, 'k'},
        {"seed", 1, 0, 'S'}, {"top-p", 1, 0, 'p' + 256}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *dir = NULL, *init_from = NULL, *prompt = NULL, *ptoks = NULL, *tokfile = NULL;
    long step = -1, ntok = 64, topk = 40, seed = 1337;
    float temp = 1.0f, topp = 1.0f;
    const char *cmd = "holmes-node sample";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'd': dir = optarg; break;
        case 'i': init_from = optarg; break;
        case 'p': prompt = optarg; break;
        case 'P': ptoks = optarg; break;
        case 'z': tokfile = optarg; break;
        case 's': bad = cli_long(cmd, "--step", optarg, 0, __LONG_MAX__, &step); break;
        case 'n': bad = cli_long(cmd, "--tokens", optarg, 0, 1 << 20, &ntok); break;
        case 'k': bad = cli_long(cmd, "--top-k", optarg, 0, 1 << 24, &topk); break;
        case 'S': bad = cli_long(cmd, "--seed", optarg, 0, __LONG_MAX__, &seed); break;
        case 't': bad = cli_float(cmd, "--temperature", optarg, 0, 100, &temp); break;
        case 'p' + 256: bad = cli_float(cmd, "--top-p", optarg, 1e-6, 1, &topp); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad)
            return 2;
    }
    const char *why = optind < argc            ? "unexpected argument"
                      : !dir == !init_from      ? "give one of --checkpoint-dir and --init-from"
                      : prompt && ptoks         ? "give --prompt or --prompt-tokens, not both"
                      : step >= 0 && !dir       ? "--step goes with --checkpoint-dir"
                                                : NULL;
    if (why) {
        fprintf(stderr, "%s: %s\n", cmd, why);
        usage(stderr);
        return 2;
    }
    herr e = {0};
    struct tokenizer *tk = NULL;
    if (tokfile && tokenizer_open(&tk, tokfile, &e) != 0) {
        fprintf(stderr, "%s: --tokenizer: %s\n", cmd, e.msg);
        return 1;
    }
    int cap = 1 << 16, np = 0, rc = 1, n = 0;
    int *ptok = malloc((size_t)cap * sizeof *ptok);
    struct gpt_stage *s = NULL;
    int *text = NULL;
    int64_t used = -1;
    if (!ptok) {
        fprintf(stderr, "%s: out of memory\n", cmd);
        goto out;
    }
    if (ptoks && (np = parse_tokens(ptoks, ptok, cap)) < 0) {
        rc = 2;
        goto out;
    } else if (prompt && tk) {
        if ((np = encode_prompt(tk, prompt, ptok, cap, &e)) < 0) {
            fprintf(stderr, "%s: --prompt: %s\n", cmd, e.msg);
            rc = 2;
            goto out;
        }
    } else if (prompt) {
        for (const unsigned char *p = (const unsigned char *)prompt; *p && np < cap; p++)
            ptok[np++] = *p;
    } else if (!ptoks) {
        ptok[np++] = tk && tokenizer_eot(tk) >= 0 ? tokenizer_eot(tk) : '\n';
    }
    if (load_model(dir, step, init_from, np + (int)ntok, &s, &used, &e) != 0) {
        fprintf(stderr, "%s: %s\n", cmd, e.msg);
        goto out;
    }
    const struct gpt_config *m = gpt_stage_config(s);
    if (tk && tokenizer_vocab(tk) != m->vocab)
        fprintf(stderr, "%s: warning: the tokenizer's %d tokens are not the model's %d\n", cmd,
                tokenizer_vocab(tk), m->vocab);
    if (prompt && !tk && m->vocab < 256) {
        fprintf(stderr, "%s: --prompt: the model's vocabulary of %d is not byte-level (256 or "
                "more)\n", cmd, m->vocab);
        rc = 2;
        goto out;
    }
    /* usage the sampler would refuse only once started */
    if (np == 0) {
        fprintf(stderr, "%s: %s is empty: the prompt needs at least one token\n", cmd,
                ptoks ? "--prompt-tokens" : "--prompt");
        rc = 2;
        goto out;
    }
    if ((long)np + ntok > m->max_seq) {
        fprintf(stderr, "%s: --tokens %ld: a prompt of %d tokens and %ld more exceed the %d "
                "positions of the model (at most --tokens %ld)\n", cmd, ntok, np, ntok,
                m->max_seq, m->max_seq - np > 0 ? (long)(m->max_seq - np) : 0L);
        rc = 2;
        goto out;
    }
    for (int i = 0; i < np; i++)
        if (ptok[i] >= m->vocab) {
            fprintf(stderr, "%s: prompt token %d is outside the model's vocabulary of %d\n", cmd,
                    ptok[i], m->vocab);
            rc = 2;
            goto out;
        }
    text = malloc(((size_t)np + (size_t)ntok) * sizeof *text);
    if (!text) {
        fprintf(stderr, "%s: out of memory\n", cmd);
        goto out;
    }
    struct out o = {tk};
    struct sampler_config sc = {.tokens = (int)ntok, .temperature = temp, .top_k = (int)topk,
                                .top_p = topp,
                                .seed = (uint64_t)seed,
                                .stop_token = tk ? tokenizer_eot(tk) : -1,
                                .emit = emit, .ctx = &o};
    if (dir)
        fprintf(stderr, "%s: step %" PRId64 " of %s (%d layers, %d channels, vocab %d)\n", cmd,
                used, dir, m->layers, m->channels, m->vocab);
    for (int i = 0; i < np; i++)
        put_token(&o, ptok[i]);
    fflush(stdout);
    if (sampler_run(s, ptok, np, &sc, text, &n, &e) != 0) {
        printf("\n");
        fprintf(stderr, "%s: %s\n", cmd, e.msg);
        goto out;
    }
    printf("\n");
    rc = 0;
out:
    free(text);
    free(ptok);
    gpt_stage_free(s);
    tokenizer_free(tk);
    return rc;
}
