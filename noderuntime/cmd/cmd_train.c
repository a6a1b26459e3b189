/* holmes-node train: single-process training on this machine (one stage holding every layer). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "checkpoint.h"
#include "clock.h"
#include "commands.h"
#include "dataloader.h"
#include "gpt.h"
#include "optimizer.h"

struct train_opts {
    struct gpt_config c;
    int B, T, accum;
    long steps;
    struct lr_schedule lr;
    struct adamw_config adam;
    float clip;
    const char *data, *ckpt_dir, *init_from, *metrics_out;
    long ckpt_every;
    int keep, resume, log_every, have_vocab, have_max_seq;
    uint64_t seed;
};

struct trainer {
    struct train_opts o;
    struct gpt_stage *s;
    struct dataloader *dl;
    float *m, *v;
    int *inputs, *targets;
    long step;
    FILE *metrics;
};

static void usage(FILE *f)
{
    fprintf(f,
        "usage: holmes-node train --data FILE|GLOB [options]\n"
        "Trains a GPT-2 model in this process on the CPU (OpenBLAS + OpenMP; OMP_NUM_THREADS).\n"
        "Data: llm.c token shards (*.bin) or UTF-8 text (any other name; byte tokens, vocab 256).\n"
        "Model:\n"
        "  --layers N (4)  --channels N (128)  --heads N (4)\n"
        "  --vocab N (256 for text, 50257 for shards; padded to a multiple of 128)\n"
        "  --max-seq N (the sequence length)\n"
        "  --init-from FILE   start from llm.c GPT-2 weights (gpt2_124M.bin; sets the shape)\n"
        "Batch and schedule:\n"
        "  --batch B (4)  --seq T (64)  --grad-accum M (1 micro-batch per step)  --steps N (100)\n"
        "  --lr X (6e-4)  --warmup N (0)  --min-lr-ratio X (0.1)  --weight-decay X (0.1)\n"
        "  --beta1 X (0.9)  --beta2 X (0.95)  --eps X (1e-8)  --grad-clip X (1.0, 0 = off)\n"
        "  --seed N (1337)\n"
        "Checkpoints and output:\n"
        "  --checkpoint-dir DIR  --checkpoint-every N (0 = only at the end)  --keep K (3)\n"
        "  --resume            continue from the newest checkpoint in --checkpoint-dir\n"
        "  --metrics-out FILE  one JSON object per step (step, loss, lr, grad_norm, ms, tokens_s)\n"
        "  --log-every N (1)\n");
}

enum { O_LAYERS = 256, O_CHANNELS, O_HEADS, O_VOCAB, O_MAXSEQ, O_INIT, O_BATCH, O_SEQ, O_ACCUM,
       O_STEPS, O_LR, O_WARMUP, O_MINLR, O_WD, O_B1, O_B2, O_EPS, O_CLIP, O_SEED, O_DATA, O_CKDIR,
       O_CKEVERY, O_KEEP, O_RESUME, O_METRICS, O_LOGEVERY };

static int parse_args(int argc, char **argv, struct train_opts *o)
{
    static const struct option opts[] = {
        {"layers", 1, 0, O_LAYERS}, {"channels", 1, 0, O_CHANNELS}, {"heads", 1, 0, O_HEADS},
        {"vocab", 1, 0, O_VOCAB}, {"max-seq", 1, 0, O_MAXSEQ}, {"init-from", 1, 0, O_INIT},
        {"batch", 1, 0, O_BATCH}, {"seq", 1, 0, O_SEQ}, {"grad-accum", 1, 0, O_ACCUM},
        {"steps", 1, 0, O_STEPS}, {"lr", 1, 0, O_LR}, {"warmup", 1, 0, O_WARMUP},
        {"min-lr-ratio", 1, 0, O_MINLR}, {"weight-decay", 1, 0, O_WD}, {"beta1", 1, 0, O_B1},
        {"beta2", 1, 0, O_B2}, {"eps", 1, 0, O_EPS}, {"grad-clip", 1, 0, O_CLIP},
        {"seed", 1, 0, O_SEED}, {"data", 1, 0, O_DATA}, {"checkpoint-dir", 1, 0, O_CKDIR},
        {"checkpoint-every", 1, 0, O_CKEVERY}, {"keep", 1, 0, O_KEEP}, {"resume", 0, 0, O_RESUME},
        {"metrics-out", 1, 0, O_METRICS}, {"log-every", 1, 0, O_LOGEVERY}, {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    *o = (struct train_opts){.c = {4, 128, 4, 256, 0, 0}, .B = 4, .T = 64, .accum = 1,
                             .steps = 100, .lr = {6e-4f, 0, 100, 0.1f},
                             .adam = {0.9f, 0.95f, 1e-8f, 0.1f}, .clip = 1.0f, .keep = 3,
                             .log_every = 1, .seed = 1337};
    long v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case O_LAYERS: rc = cli_long("holmes-node train", "--layers", optarg, 1, 1000, &v); o->c.layers = (int)v; break;
        case O_CHANNELS: rc = cli_long("holmes-node train", "--channels", optarg, 1, 65536, &v); o->c.channels = (int)v; break;
        case O_HEADS: rc = cli_long("holmes-node train", "--heads", optarg, 1, 4096, &v); o->c.heads = (int)v; break;
        case O_VOCAB: rc = cli_long("holmes-node train", "--vocab", optarg, 2, 1 << 24, &v); o->c.vocab = (int)v; o->have_vocab = 1; break;
        case O_MAXSEQ: rc = cli_long("holmes-node train", "--max-seq", optarg, 1, 1 << 20, &v); o->c.max_seq = (int)v; o->have_max_seq = 1; break;
        case O_INIT: o->init_from = optarg; break;
        case O_BATCH: rc = cli_long("holmes-node train", "--batch", optarg, 1, 1 << 20, &v); o->B = (int)v; break;
        case O_SEQ: rc = cli_long("holmes-node train", "--seq", optarg, 1, 1 << 20, &v); o->T = (int)v; break;
        case O_ACCUM: rc = cli_long("holmes-node train", "--grad-accum", optarg, 1, 1 << 20, &v); o->accum = (int)v; break;
        case O_STEPS: rc = cli_long("holmes-node train", "--steps", optarg, 1, 1L << 40, &o->steps); break;
        case O_LR: rc = cli_float("holmes-node train", "--lr", optarg, 1e-12, 10, &o->lr.max_lr); break;
        case O_WARMUP: rc = cli_long("holmes-node train", "--warmup", optarg, 0, 1L << 40, &o->lr.warmup_steps); break;
        case O_MINLR: rc = cli_float("holmes-node train", "--min-lr-ratio", optarg, 0, 1, &o->lr.min_lr_ratio); break;
        case O_WD: rc = cli_float("holmes-node train", "--weight-decay", optarg, 0, 10, &o->adam.weight_decay); break;
        case O_B1: rc = cli_float("holmes-node train", "--beta1", optarg, 0, 0.999999, &o->adam.beta1); break;
        case O_B2: rc = cli_float("holmes-node train", "--beta2", optarg, 0, 0.999999999, &o->adam.beta2); break;
        case O_EPS: rc = cli_float("holmes-node train", "--eps", optarg, 0, 1, &o->adam.eps); break;
        case O_CLIP: rc = cli_float("holmes-node train", "--grad-clip", optarg, 0, 1e9, &o->clip); break;
        case O_SEED: rc = cli_long("holmes-node train", "--seed", optarg, 0, __LONG_MAX__, &v); o->seed = (uint64_t)v; break;
        case O_DATA: o->data = optarg; break;
        case O_CKDIR: o->ckpt_dir = optarg; break;
        case O_CKEVERY: rc = cli_long("holmes-node train", "--checkpoint-every", optarg, 0, 1L << 40, &o->ckpt_every); break;
        case O_KEEP: rc = cli_long("holmes-node train", "--keep", optarg, 1, 1000000, &v); o->keep = (int)v; break;
        case O_RESUME: o->resume = 1; break;
        case O_METRICS: o->metrics_out = optarg; break;
        case O_LOGEVERY: rc = cli_long("holmes-node train", "--log-every", optarg, 1, 1L << 40, &v); o->log_every = (int)v; break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
        if (rc < 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "holmes-node train: unexpected argument \"%s\"\n", argv[optind]);
        return -1;
    }
    if (!o->data) {
        fprintf(stderr, "holmes-node train: --data is required (a text file or llm.c shards)\n");
        return -1;
    }
    if (o->resume && !o->ckpt_dir) {
        fprintf(stderr, "holmes-node train: --resume needs --checkpoint-dir\n");
        return -1;
    }
    size_t n = strlen(o->data);
    int shards = n >= 4 && strcmp(o->data + n - 4, ".bin") == 0;
    if (!o->have_vocab)
        o->c.vocab = shards ? 50257 : DATALOADER_TEXT_VOCAB;
    if (!o->have_max_seq)
        o->c.max_seq = o->T;
    o->lr.total_steps = o->steps;
    return 0;
}

/* the model: from llm.c weights (which fix the shape) or GPT-2 initialisation */
static int setup_model(struct trainer *t, herr *e)
{
    struct train_opts *o = &t->o;
    if (o->init_from) {
        struct gpt_config fc;
        if (llmc_read_config(o->init_from, &fc, e) < 0)
            return -1;
        o->c = fc;
    } else if (gpt_config_check(&o->c, e) < 0) {
        return -1;
    }
    if (gpt_stage_create(&t->s, &o->c, 0, o->c.layers, o->B, o->T, 1, e) < 0)
        return -1;
    if (o->init_from)
        return llmc_load_stage(o->init_from, t->s, e);
    gpt_stage_init_params(t->s, o->seed);
    return 0;
}

static int resume_from_checkpoint(struct trainer *t, herr *e)
{
    char path[4096];
    int rc = ckpt_latest(t->o.ckpt_dir, 0, t->o.c.layers, path, sizeof path, e);
    if (rc != 0)
        return rc < 0 ? -1 : 0; /* none yet: a fresh start */
    struct ckpt_meta meta;
    size_t n = gpt_stage_num_params(t->s);
    if (ckpt_read_meta(path, &meta, e) < 0 ||
        ckpt_check_shape(path, &meta, gpt_stage_config(t->s), 0, t->o.c.layers, e) < 0 ||
        ckpt_read(path, &meta, gpt_stage_params(t->s), t->m, t->v, n, e) < 0)
        return -1;
    if (meta.rng[0] != t->o.seed)
        return herr_set(e, "checkpoint %s was written with --seed %" PRIu64 ", the job has %" PRIu64,
                        path, meta.rng[0], t->o.seed);
    t->step = meta.step;
    dataloader_seek(t->dl, meta.data_pos);
    printf("resumed from %s at step %ld\n", path, t->step);
    return 0;
}

static int setup(struct trainer *t, herr *e)
{
    if (setup_model(t, e) < 0)
        return -1;
    struct dataloader_config dc = {.pattern = t->o.data, .B = t->o.B, .T = t->o.T, .rank = 0,
                                   .world = 1, .seed = t->o.seed, .vocab = t->o.c.vocab};
    if (dataloader_open(&t->dl, &dc, e) < 0 || lr_schedule_check(&t->o.lr, e) < 0)
        return -1;
    size_t n = gpt_stage_num_params(t->s), bt = (size_t)t->o.B * t->o.T;
    t->m = calloc(n, sizeof(float));
    t->v = calloc(n, sizeof(float));
    t->inputs = malloc(bt * sizeof(int));
    t->targets = malloc(bt * sizeof(int));
    if (!t->m || !t->v || !t->inputs || !t->targets)
        return herr_set(e, "out of memory for the optimizer state (%zu parameters)", n);
    if (t->o.metrics_out) {
        t->metrics = fopen(t->o.metrics_out, t->o.resume ? "a" : "w");
        if (!t->metrics)
            return herr_set(e, "metrics file %s: cannot open: %s", t->o.metrics_out,
                            strerror(errno));
    }
    if (t->o.resume && resume_from_checkpoint(t, e) < 0)
        return -1;
    return 0;
}

static void teardown(struct trainer *t)
{
    gpt_stage_free(t->s);
    dataloader_free(t->dl);
    free(t->m);
    free(t->v);
    free(t->inputs);
    free(t->targets);
    if (t->metrics)
        fclose(t->metrics);
}

struct step_result {
    float loss, lr, grad_norm;
};

/* forward + backward over the micro-batches, clipping, AdamW */
static int train_step(struct trainer *t, struct step_result *r, herr *e)
{
    struct gpt_stage *s = t->s;
    gpt_stage_zero_grads(s);
    double loss_sum = 0.0;
    for (int k = 0; k < t->o.accum; k++) {
        float loss;
        dataloader_next(t->dl, t->inputs, t->targets);
        if (gpt_stage_forward(s, 0, t->inputs, NULL, t->targets, NULL, &loss) < 0 ||
            gpt_stage_backward(s, 0, NULL, NULL, 1.0f / (float)t->o.accum) < 0)
            return herr_set(e, "step %ld: %s", t->step + 1, gpt_stage_error(s));
        loss_sum += loss;
    }
    size_t n = gpt_stage_num_params(s);
    double sq = grad_sq_norm(gpt_stage_grads(s), 0, n);
    float scale = grad_clip_scale(sq, t->o.clip);
    r->loss = (float)(loss_sum / t->o.accum);
    r->lr = lr_at(&t->o.lr, t->step);
    r->grad_norm = (float)sqrt(sq);
    if (!isfinite(r->loss) || !isfinite(r->grad_norm))
        return herr_set(e, "step %ld: loss %g, gradient norm %g: training diverged (lower --lr?)",
                        t->step + 1, r->loss, r->grad_norm);
    const struct gpt_tensor *tt;
    int nt = gpt_stage_tensors(s, &tt);
    adamw_update(&t->o.adam, tt, nt, gpt_stage_params(s), gpt_stage_grads(s), t->m, t->v, 0, n,
                 r->lr, t->step + 1, scale);
    t->step++;
    return 0;
}

static int save(struct trainer *t, herr *e)
{
    struct ckpt_meta meta = {.c = *gpt_stage_config(t->s), .first = 0, .last = t->o.c.layers,
                             .step = t->step, .data_pos = dataloader_position(t->dl),
                             .rng = {t->o.seed, 0, 0, 0},
                             .nparams = gpt_stage_num_params(t->s), .has_moments = 1};
    char path[4096];
    if (ckpt_write(t->o.ckpt_dir, &meta, gpt_stage_params(t->s), t->m, t->v, t->o.keep, path,
                   sizeof path, e) < 0)
        return -1;
    printf("checkpoint %s\n", path);
    return 0;
}

static int run(struct trainer *t, herr *e)
{
    const struct gpt_config *c = gpt_stage_config(t->s);
    printf("model L%d C%d NH%d V%d (padded %d) max_seq %d: %.2fM parameters; B=%d T=%d x%d; "
           "%d threads; data %s: %d file(s), %" PRIu64 " tokens\n", c->layers, c->channels,
           c->heads, c->vocab, c->padded_vocab, c->max_seq, gpt_stage_num_params(t->s) / 1e6,
           t->o.B, t->o.T, t->o.accum, omp_get_max_threads(), t->o.data,
           dataloader_files(t->dl), dataloader_tokens(t->dl));
    fflush(stdout);
    double tokens = (double)t->o.B * t->o.T * t->o.accum;
    while (t->step < t->o.steps) {
        double t0 = clock_mono_s();
        struct step_result r = {0};
        if (train_step(t, &r, e) < 0)
            return -1;
        double ms = (clock_mono_s() - t0) * 1e3;
        if (t->step % t->o.log_every == 0 || t->step == t->o.steps) {
            printf("step %ld/%ld loss %.6f lr %.3e norm %.4f %.1f ms %.0f tok/s\n", t->step,
                   t->o.steps, r.loss, r.lr, r.grad_norm, ms, tokens / (ms / 1e3));
            fflush(stdout);
        }
        if (t->metrics) {
            fprintf(t->metrics, "{\"step\":%ld,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,"
                    "\"ms\":%.3f,\"tokens_s\":%.1f}\n", t->step, r.loss, r.lr, r.grad_norm, ms,
                    tokens / (ms / 1e3));
            fflush(t->metrics);
        }
        int due = t->o.ckpt_every > 0 && t->step % t->o.ckpt_every == 0;
        if (t->o.ckpt_dir && (due || t->step == t->o.steps) && save(t, e) < 0)
            return -1;
    }
    return 0;
}

int cmd_train(int argc, char **argv)
{
    struct trainer t = {0};
    int rc = parse_args(argc, argv, &t.o);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    herr e = {0};
    if (setup(&t, &e) < 0 || run(&t, &e) < 0) {
        fprintf(stderr, "holmes-node train: %s\n", e.msg);
        teardown(&t);
        return 1;
    }
    teardown(&t);
    return 0;
}
