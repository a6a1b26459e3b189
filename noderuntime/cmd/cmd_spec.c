#include "cmd_spec.h"

#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "model_import.h"
#include "cli.h"
#include "trainer_spec.h"
#include "yaml_json.h"

void cmd_spec_init(struct cmd_spec *cs, const char *cmd)
{
    memset(cs, 0, sizeof *cs);
    cs->cmd = cmd;
}

void cmd_spec_free(struct cmd_spec *cs)
{
    if (cs->resolved)
        tj_spec_free(&cs->spec);
    cs->resolved = 0;
}

static int set_int(const struct cmd_spec *cs, const char *f, const char *v, long lo, long hi,
                   int *out)
{
    long n;
    if (cli_long(cs->cmd, f, v, lo, hi, &n) != 0)
        return -1;
    *out = (int)n;
    return 0;
}

static int set_double(const struct cmd_spec *cs, const char *f, const char *v, double lo,
                      double hi, double *out)
{
    float x;
    if (cli_float(cs->cmd, f, v, lo, hi, &x) != 0)
        return -1;
    *out = x;
    return 0;
}

static int set_str(const struct cmd_spec *cs, const char *f, const char *v, char *out, size_t cap)
{
    if (!v[0] || strlen(v) >= cap) {
        fprintf(stderr, "%s: %s takes 1 to %zu characters\n", cs->cmd, f, cap - 1);
        return -1;
    }
    snprintf(out, cap, "%s", v);
    return 0;
}

static int bad_choice(const struct cmd_spec *cs, const char *f, const char *v, const char *choices)
{
    fprintf(stderr, "%s: %s: '%s' is not one of %s\n", cs->cmd, f, v, choices);
    return -1;
}

/* The data's format as the engine tells it: llm.c shards by name (*.bin), text otherwise. */
static enum tj_data_format format_of(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && strcmp(path + n - 4, ".bin") == 0 ? TJ_DATA_LLMC : TJ_DATA_TEXT;
}

/* --data-source PATH=WEIGHT: one more source of the blend (training.data.sources), in place of
 * a single path; its format the path's, as --data's. */
static int add_source(const struct cmd_spec *cs, const char *f, const char *v, struct tj_data *d)
{
    const char *eq = strrchr(v, '=');
    char *end = NULL;
    double w = eq ? strtod(eq + 1, &end) : 0;
    if (!eq || eq == v || !end || end == eq + 1 || *end || !(w > 0 && w <= 1e6)) {
        fprintf(stderr, "%s: %s '%s': PATH=WEIGHT, the weight a number above 0 (at most 1e6)\n",
                cs->cmd, f, v);
        return -1;
    }
    if ((size_t)(eq - v) >= sizeof d->sources[0].path || d->n_sources == TJ_MAX_SOURCES) {
        fprintf(stderr, "%s: %s '%s': %s\n", cs->cmd, f, v,
                d->n_sources == TJ_MAX_SOURCES ? "more sources than 16" : "too long a path");
        return -1;
    }
    struct tj_data_source *s = &d->sources[d->n_sources++];
    snprintf(s->path, sizeof s->path, "%.*s", (int)(eq - v), v);
    s->weight = w;
    d->path[0] = '\0';
    d->is_demo = 0;
    d->format = format_of(s->path);
    return 0;
}

/* Applies one flag to s (cs: the command's own settings). 1 applied, 0 not a spec flag, -1 bad
 * (printed). */
static int apply(struct cmd_spec *cs, struct tj_spec *s, const char *f, const char *v)
{
    struct tj_model *m = &s->model;
    struct tj_parallelism *p = &s->par;
    struct tj_training *t = &s->training;
    struct tj_optimizer *o = &t->opt;
    int rc;
    long n;
    if (!strcmp(f, "--data")) {
        rc = set_str(cs, f, v, t->data.path, sizeof t->data.path);
        t->data.format = format_of(v);
        t->data.is_demo = 0;
        t->data.n_sources = 0; /* the flag's data replaces a manifest's blend */
    } else if (!strcmp(f, "--data-source")) {
        rc = add_source(cs, f, v, &t->data);
    } else if (!strcmp(f, "--layers")) {
        rc = set_int(cs, f, v, 1, 1024, &m->layers);
        m->preset[0] = '\0';
    } else if (!strcmp(f, "--channels")) {
        rc = set_int(cs, f, v, 1, 65536, &m->hidden);
    } else if (!strcmp(f, "--heads")) {
        rc = set_int(cs, f, v, 1, 1024, &m->heads);
    } else if (!strcmp(f, "--vocab")) {
        rc = set_int(cs, f, v, 1, 1048576, &m->vocab);
    } else if (!strcmp(f, "--seq") || !strcmp(f, "--max-seq")) {
        rc = set_int(cs, f, v, 1, 131072, &m->seq_len); /* both: cmd_spec_resolve checks */
    } else if (!strcmp(f, "--init-from")) {
        rc = set_str(cs, f, v, t->init_from, sizeof t->init_from);
    } else if (!strcmp(f, "--batch")) {
        rc = set_int(cs, f, v, 1, 65536, &p->micro_batch_size);
    } else if (!strcmp(f, "--micro-batches") || !strcmp(f, "--grad-accum")) {
        rc = set_int(cs, f, v, 1, 65536, &p->micro_batches);
    } else if (!strcmp(f, "--token-slices")) {
        rc = set_int(cs, f, v, 1, 131072, &p->token_slices);
    } else if (!strcmp(f, "--schedule")) {
        rc = schedule_parse(v, &p->schedule) ? bad_choice(cs, f, v, "1f1b, gpipe") : 0;
    } else if (!strcmp(f, "--pipeline-dtype") || !strcmp(f, "--param-gather-dtype")) {
        enum dtype d;
        rc = dtype_parse(v, &d) || d == DTYPE_FP16 ? bad_choice(cs, f, v, "fp32, bf16") : 0;
        if (rc == 0)
            *(!strcmp(f, "--pipeline-dtype") ? &p->pipeline_dtype : &p->param_gather_dtype) = d;
    } else if (!strcmp(f, "--steps")) {
        rc = cli_long(cs->cmd, f, v, 1, 1000000000L, &t->steps);
    } else if (!strcmp(f, "--lr")) {
        rc = set_double(cs, f, v, 1e-12, 10, &o->lr);
    } else if (!strcmp(f, "--warmup")) {
        rc = set_int(cs, f, v, 0, 1000000000, &o->warmup_steps);
    } else if (!strcmp(f, "--lr-schedule")) {
        rc = !strcmp(v, "cosine") ? (o->schedule = TJ_LR_COSINE, 0)
           : !strcmp(v, "constant") ? (o->schedule = TJ_LR_CONSTANT, 0)
           : !strcmp(v, "linear")   ? (o->schedule = TJ_LR_LINEAR, 0)
           : !strcmp(v, "wsd")      ? (o->schedule = TJ_LR_WSD, 0)
                                    : bad_choice(cs, f, v, "cosine, constant, linear, wsd");
    } else if (!strcmp(f, "--decay-steps")) {
        rc = set_int(cs, f, v, 0, 1000000000, &o->decay_steps);
    } else if (!strcmp(f, "--min-lr-ratio")) {
        rc = set_double(cs, f, v, 0, 1, &o->min_lr_ratio);
    } else if (!strcmp(f, "--weight-decay")) {
        rc = set_double(cs, f, v, 0, 10, &o->weight_decay);
    } else if (!strcmp(f, "--beta1") || !strcmp(f, "--beta2")) {
        rc = set_double(cs, f, v, 0, 0.999999999, !strcmp(f, "--beta1") ? &o->beta1 : &o->beta2);
    } else if (!strcmp(f, "--eps")) {
        rc = set_double(cs, f, v, 1e-30, 1, &o->eps);
    } else if (!strcmp(f, "--clip") || !strcmp(f, "--grad-clip")) {
        rc = set_double(cs, f, v, 0, 1e6, &o->grad_clip);
    } else if (!strcmp(f, "--seed")) {
        rc = cli_long(cs->cmd, f, v, 0, 9007199254740991L, &n);
        t->seed = (unsigned long long)n;
    } else if (!strcmp(f, "--checkpoint-dir")) {
        rc = set_str(cs, f, v, t->checkpoint.path, sizeof t->checkpoint.path);
    } else if (!strcmp(f, "--checkpoint-every")) {
        rc = set_int(cs, f, v, 0, 1000000000, &t->checkpoint.every_steps);
    } else if (!strcmp(f, "--keep")) {
        rc = set_int(cs, f, v, 1, 1000, &t->checkpoint.keep);
    } else if (!strcmp(f, "--eval-data")) {
        rc = set_str(cs, f, v, t->eval.path, sizeof t->eval.path);
        t->eval.format = format_of(v);
        t->eval.holdout = 0;
    } else if (!strcmp(f, "--eval-holdout")) {
        rc = cli_double(cs->cmd, f, v, 0, TJ_MAX_HOLDOUT, &t->eval.holdout);
        t->eval.path[0] = '\0';
    } else if (!strcmp(f, "--eval-every")) {
        rc = set_int(cs, f, v, 0, 1000000000, &t->eval.every_steps);
    } else if (!strcmp(f, "--eval-batches")) {
        rc = set_int(cs, f, v, 1, 65536, &t->eval.batches);
    } else if (!strcmp(f, "--log-every")) {
        rc = set_int(cs, f, v, 1, 1000000, &t->log_every_steps);
    } else if (!strcmp(f, "--max-nonfinite-steps")) {
        rc = set_int(cs, f, v, 0, 1000000, &t->max_nonfinite_steps);
    } else if (!strcmp(f, "--engine")) {
        /* the command's: real GPUs (one per rank) in the spec's terms, and its precision */
        if (engine_by_name(v, &cs->engine, &t->precision) != 0)
            return bad_choice(cs, f, v, "cpu, cuda-fp32, cuda-bf16");
        char why[256];
        if (!engine_available(cs->engine, t->precision, why, sizeof why)) {
            fprintf(stderr, "%s: --engine %s: %s\n", cs->cmd, v, why);
            return -1;
        }
        cs->engine_set = 1;
        rc = 0;
    } else if (!strcmp(f, "--device")) {
        rc = set_int(cs, f, v, 0, 1024, &cs->device);
    } else if (!strcmp(f, "--bucket")) {
        rc = cli_long(cs->cmd, f, v, 1, 1L << 40, &n);
        cs->bucket = (size_t)n;
    } else {
        return 0;
    }
    return rc ? -1 : 1;
}

int cmd_spec_flag(struct cmd_spec *cs, const char *flag, const char *value)
{
    if (!strcmp(flag, "--job")) {
        cs->job = value;
        return 1;
    }
    /* the syntax now, on a scratch spec; applied in order by cmd_spec_resolve */
    struct tj_spec scratch;
    tj_spec_defaults(&scratch);
    struct cmd_spec keep = *cs;
    int rc = apply(cs, &scratch, flag, value);
    tj_spec_free(&scratch);
    if (rc <= 0) {
        *cs = keep;
        return rc;
    }
    if (cs->nflags == CMD_SPEC_MAX_FLAGS) {
        fprintf(stderr, "%s: more than %d options\n", cs->cmd, CMD_SPEC_MAX_FLAGS);
        return -1;
    }
    cs->flag[cs->nflags] = flag;
    cs->value[cs->nflags++] = value;
    return 1;
}

/* --job FILE: a TrainingJob manifest (or its spec alone), validated as the API validates it. */
static int load_job(struct cmd_spec *cs, herr *e)
{
    cJSON *doc = yaml_parse_file(cs->job, e);
    if (!doc)
        return herr_wrap(e, "--job %s", cs->job);
    const cJSON *obj = cJSON_IsArray(doc) ? cJSON_GetArrayItem(doc, 0) : doc;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    struct tj_errors errs = {0};
    tj_spec_free(&cs->spec);
    int rc = tj_spec_from_json(sp ? sp : obj, "spec", &cs->spec, &errs);
    cJSON_Delete(doc);
    if (rc != 0) {
        tj_errors_to_herr(&errs, e);
        return herr_wrap(e, "--job %s", cs->job);
    }
    return 0;
}

/* Whether flag f was given (the last of the flags wins, as apply reads them). */
static int given(const struct cmd_spec *cs, const char *f)
{
    for (int i = 0; i < cs->nflags; i++)
        if (!strcmp(cs->flag[i], f))
            return 1;
    return 0;
}

/* The model's shape from the --init-from file: each of layers, channels, heads and vocab taken
 * from it, or, where a flag or --job gave one, held to it (a different value refused, naming
 * the flag or field and the file's); the sequence length --seq's or the job's, else the file's
 * positions. */
static int init_from_shape(struct cmd_spec *cs, herr *e)
{
    struct tj_model *m = &cs->spec.model;
    const char *path = cs->spec.training.init_from;
    const char *from = cs->job && !given(cs, "--init-from") ? "spec.training.initFrom"
                                                            : "--init-from";
    struct gpt_config fc;
    if (model_import_config_said(path, &fc, e) < 0)
        return herr_wrap(e, "%s", from);
    if (!fc.heads) { /* the file does not say them: the flag's (or job's), else GPT-2's 64 a head */
        if (!m->heads && fc.channels % 64 != 0)
            return herr_config(e, "%s %s: does not say its heads, and its %d channels are not "
                               "GPT-2's 64 a head: give --heads", from, path, fc.channels);
        fc.heads = m->heads ? m->heads : fc.channels / 64;
    }
    struct {
        const char *flag, *field;
        int *v, file;
    } f[] = {{"--layers", "layers", &m->layers, fc.layers},
             {"--channels", "hidden", &m->hidden, fc.channels},
             {"--heads", "heads", &m->heads, fc.heads},
             {"--vocab", "vocab", &m->vocab, fc.vocab}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (*f[i].v && *f[i].v != f[i].file) {
            char name[64];
            if (given(cs, f[i].flag))
                snprintf(name, sizeof name, "%s", f[i].flag);
            else
                snprintf(name, sizeof name, "spec.model.%s", f[i].field);
            return herr_config(e, "%s %d: the model's shape comes from %s %s, whose %s is %d; "
                               "leave %s out (or give the file's)", name, *f[i].v, from, path,
                               f[i].field, f[i].file, name);
        }
        *f[i].v = f[i].file;
    }
    if (!m->seq_len) /* --seq (or the job) set it, else the file's positions */
        m->seq_len = fc.max_seq;
    return 0;
}

int cmd_spec_resolve(struct cmd_spec *cs, herr *e)
{
    cmd_spec_free(cs);
    tj_spec_defaults(&cs->spec);
    cs->resolved = 1;
    if (cs->job && load_job(cs, e) != 0)
        return -1;
    int seq = 0;
    for (int i = 0; i < cs->nflags; i++) {
        int s0 = cs->spec.model.seq_len;
        if (apply(cs, &cs->spec, cs->flag[i], cs->value[i]) < 0)
            return herr_set_kind(e, HERR_CONFIG, "%s %s", cs->flag[i], cs->value[i]);
        if (!strcmp(cs->flag[i], "--seq") || !strcmp(cs->flag[i], "--max-seq")) {
            if (seq && seq != cs->spec.model.seq_len)
                return herr_config(e, "%s %s differs from the sequence length %d given before: "
                                   "model.seqLen is both the sequence length and the model's "
                                   "positions", cs->flag[i], cs->value[i], s0);
            seq = cs->spec.model.seq_len;
        }
    }
    struct tj_model *m = &cs->spec.model;
    /* GPT-2 weights: the model's shape is the file's (its positions the sequence length unless
     * --seq says less); a field given otherwise must be the file's */
    if (cs->spec.training.init_from[0] && init_from_shape(cs, e) != 0)
        return -1;
    if (!m->layers || !m->hidden || !m->heads || !m->seq_len)
        return herr_config(e, "the model's shape is required: --layers, --channels, --heads and "
                           "--seq (spec.model), or --job FILE, or --init-from FILE");
    if (!m->vocab) /* as the engine reads the data: bytes for text, GPT-2's tokens for shards */
        m->vocab = cs->spec.training.data.format == TJ_DATA_TEXT ? TJ_TEXT_VOCAB : 50257;
    if (cs->spec.training.steps < 1)
        return herr_config(e, "the number of steps is required: --steps N (spec.training.steps)");
    struct tj_errors errs = {0};
    if (tj_schedule_check(&cs->spec.training, "spec", &errs) != 0) {
        tj_errors_to_herr(&errs, e);
        e->kind = HERR_CONFIG;
        return -1;
    }
    return 0;
}

int cmd_spec_config(struct cmd_spec *cs, struct trainer_config *c, herr *e)
{
    if (!cs->resolved && cmd_spec_resolve(cs, e) != 0)
        return -1;
    if (trainer_config_from_spec(&cs->spec, c, e) != 0)
        return -1;
    if (cs->engine_set)
        c->engine = cs->engine;
    c->device = cs->device;
    c->bucket_floats = cs->bucket;
    if (c->init_from && !cs->job)
        c->init_from_name = "--init-from";
    return 0;
}

void cmd_spec_usage(FILE *f)
{
    fprintf(f,
        "Training (each sets a TrainingJob spec field; defaults are the spec's, docs/api.md):\n"
        "  --job FILE            a TrainingJob manifest (YAML or JSON): its spec, then the flags\n"
        "  --data FILE|GLOB      training.data.path (*.bin: llm.c token shards, else text)\n"
        "  --data-source FILE|GLOB=WEIGHT  one more of training.data.sources (a blend: each\n"
        "                        its weight's share of the micro-batches), in place of --data\n"
        "  --layers N --channels N --heads N --vocab N --seq T   model (required, or --job,\n"
        "                        or --init-from); --max-seq T is --seq T\n"
        "  --init-from FILE      training.initFrom: GPT-2 weights, llm.c's or safetensors (their\n"
        "                        shape: a shape flag given beside it must say the same)\n"
        "  --batch B             parallelism.microBatchSize (1)\n"
        "  --micro-batches M     parallelism.microBatches per replica per step (8; --grad-accum)\n"
        "  --steps N             training.steps (required)\n"
        "  --schedule 1f1b|gpipe  --token-slices N  --pipeline-dtype / --param-gather-dtype fp32|bf16\n"
        "  --lr X (6e-4) --warmup N (0) --lr-schedule cosine|constant|linear|wsd (cosine)\n"
        "  --decay-steps N       wsd: the last N steps decay (a fifth of those after the warm-up)\n"
        "  --min-lr-ratio X (0.1) --weight-decay X (0.1) --beta1 X (0.9) --beta2 X (0.95)\n"
        "  --eps X (1e-8) --clip X (1.0, 0 = off; --grad-clip) --seed N (1337)\n"
        "  --checkpoint-dir DIR --checkpoint-every N (0: at the end) --keep K (3): a run resumes\n"
        "                        from DIR's newest checkpoint that verifies\n"
        "  --eval-data FILE|GLOB --eval-every N (0: after the last step) --eval-batches K (8):\n"
        "                        training.eval: the held-out loss of K micro-batches\n"
        "  --eval-holdout X      training.eval.holdout, in place of --eval-data: the last X\n"
        "                        (at most 0.5; 0: none) of the training data's windows held out\n"
        "  --log-every N (10)    a progress line every N steps and at the last\n"
        "  --max-nonfinite-steps N (3)  training.maxNonFiniteSteps: steps in a row skipped for a\n"
        "                        non-finite loss or gradient norm before the run fails\n"
        "  --engine cpu|cuda-fp32|cuda-bf16 (cpu)  --device N (0)  --bucket FLOATS (ZeRO bucket)\n");
}
