/* holmes-node eval: how good a trained model is, on the CPU engine: its loss and perplexity on
 * held-out token data (the windows a job's training.eval reads, dataloader.h), and its accuracy
 * on a multiple-choice set such as HellaSwag (choice_eval.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bpe.h"
#include "choice_eval.h"
#include "cli.h"
#include "clock.h"
#include "commands.h"
#include "dataloader.h"
#include "engine.h"
#include "model_import.h"
#include "output_target.h"
#include "tokenizer.h"
#include "trainingjob.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: holmes-node eval (--checkpoint-dir DIR [--step N] | --init-from FILE | --job FILE)\n"
        "                        [--data FILE|GLOB [--holdout X] [--batch B] [--seq T]\n"
        "                         [--batches N] [--seed N]]\n"
        "                        [--choices FILE [--tokenizer FILE] [--examples N]\n"
        "                         [--scores-out FILE]]\n"
        "                        [--engine cpu|cuda-fp32|cuda-bf16 [--device N]] [--json]\n"
        "Evaluates a trained model, on the CPU (OpenMP threads: OMP_NUM_THREADS) unless --engine:\n"
        "  --checkpoint-dir DIR  a job's checkpoints (whatever plan wrote them); --step N: that\n"
        "                        set (default: the step DIR/latest-step names)\n"
        "  --init-from FILE      GPT-2 weights instead: llm.c's, Hugging Face's safetensors or\n"
        "                        model directory\n"
        "  --job FILE            a TrainingJob manifest: its checkpoints (training.checkpoint.path);\n"
        "                        without --data and --choices, its held-out data\n"
        "                        (training.eval.path, or training.data.path with\n"
        "                        eval.holdout; eval.batches); and unless given, --batch\n"
        "                        (microBatchSize), --seq (model.seqLen) and --seed\n"
        "                        (training.seed): the job's last held-out loss again (paths as\n"
        "                        the job gives them, from this directory)\n"
        "  --engine E            the engine of the forwards: cpu (the default), or in a CUDA build\n"
        "                        cuda-fp32 or cuda-bf16 on GPU --device N (0)\n"
        "Held-out loss (--data):\n"
        "  --data FILE|GLOB      llm.c token shards (*.bin) or text (byte tokens): the mean\n"
        "                        cross-entropy and its perplexity over windows of T + 1 tokens,\n"
        "                        taken as a job's training.eval takes them: with the job's\n"
        "                        --batch, --seq and --seed and --batches its eval.batches, the\n"
        "                        loss the job reported after its last step\n"
        "  --holdout X           only the data's last windows, X of them (at most 0.5; a job's\n"
        "                        training.eval.holdout: the part its training did not read)\n"
        "  --batch B             sequences a forward (1)\n"
        "  --seq T               positions a sequence (the model's maximum)\n"
        "  --batches N           forwards (default: every window of the data, once)\n"
        "  --seed N              the windows' order (1337, a job's default training.seed)\n"
        "Multiple choice (--choices):\n"
        "  --choices FILE        HellaSwag's JSON lines (ctx, endings, label) or llm.c's eval file\n"
        "                        (hellaswag_val.bin): each ending appended to its context, the\n"
        "                        model's choice the ending of the least loss, summed (acc) and\n"
        "                        per token (acc_norm, llm.c's figure); --hellaswag is the same\n"
        "  --tokenizer FILE      for JSON lines: llm.c's gpt2_tokenizer.bin, transformers'\n"
        "                        vocab.json or a model directory (GPT-2's BPE); without it each\n"
        "                        byte is a token (a model trained on text data)\n"
        "  --examples N          the first N examples only (default: all)\n"
        "  --scores-out FILE     each example's losses and choices, a JSON line each (FILE.tmp\n"
        "                        until every example is scored)\n"
        "Output:\n"
        "  --json                one JSON object on standard output instead of lines of text\n"
        "Exit status: 0 evaluated, 1 failed, 2 usage.\n");
}

struct opts {
    const char *dir, *init_from, *data, *choices, *tokfile, *scores, *job;
    long step, B, T, batches, seed, examples, device;
    double holdout;
    char job_dir[TJ_PATH_MAX], job_data[TJ_PATH_MAX]; /* --job's, where the flags left them */
    int shape;                                        /* --batch, --seq, --batches or --seed */
    enum engine_kind engine;
    enum dtype precision;
    int json;
};

struct data_result {
    long batches;
    int B, T;
    uint64_t windows; /* the data's (the held-out part's, with --holdout) */
    double loss;
    const char *engine; /* engine_name's (a static string) */
};

struct choice_result {
    long examples, correct, correct_norm, shortened;
};

static const char *cmd = "holmes-node eval";

/* Progress on stderr every 10 s of a long evaluation. */
static void progress(double *next, const char *what, long done, long total)
{
    double now = clock_mono_s();
    if (now < *next)
        return;
    if (*next > 0)
        fprintf(stderr, "%s: %s %ld/%ld\n", cmd, what, done, total);
    *next = now + 10.0;
}

/* The model in the engine --engine names, of B sequences and T positions (T <= 0: the model's
 * maximum; above it: the maximum with `tflag` NULL, else refused naming tflag): its shape and
 * parameters read from the set or the file into the engine's host stage, uploaded once. */
static int open_engine(const struct opts *o, int B, int T, const char *tflag,
                       struct engine **out, int64_t *used, herr *e)
{
    struct model_source m;
    *out = NULL;
    int rc = model_source_open(&m, o->dir, o->step, o->init_from, e);
    *used = m.step;
    if (rc != 0)
        return -1;
    const struct gpt_config *c = &m.config;
    rc = -1;
    if (T > c->max_seq && tflag) {
        herr_config(e, "%s %d: the model has %d positions", tflag, T, c->max_seq);
        goto out;
    }
    struct engine_spec es = {.kind = o->engine, .precision = o->precision,
                             .device = (int)o->device, .model = *c, .first = 0,
                             .last = c->layers, .B = B,
                             .T = T > 0 && T < c->max_seq ? T : c->max_seq, .slots = 1, .tp = 1,
                             .tp_rank = 0, .forward_only = 1};
    if (engine_create(out, &es, e) == 0 && model_source_load(&m, engine_host(*out), e) == 0)
        rc = engine_params_upload(*out, e);
out:
    model_source_close(&m);
    if (rc != 0) {
        engine_free(*out);
        *out = NULL;
    }
    return rc;
}

/* The held-out loss through the engine seam (engine.h): the CPU engine, or a GPU's with
 * --engine; one loss read a batch. */
static int eval_data(const struct opts *o, struct data_result *r, int64_t *used, herr *e)
{
    struct engine *en = NULL;
    struct dataloader *d = NULL;
    int *in = NULL, *tg = NULL, rc = -1;
    if (open_engine(o, (int)o->B, (int)o->T, "--seq", &en, used, e) != 0)
        return -1;
    const struct gpt_config *c = gpt_stage_config(engine_host(en));
    gpt_stage_batch(engine_host(en), &r->B, &r->T);
    /* as trainer_spec's evaluation set: rank 0 of 1, global epochs, the job's seed */
    struct dataloader_config dc = {.pattern = o->data, .B = r->B, .T = r->T, .rank = 0,
                                   .world = 1, .seed = (uint64_t)o->seed, .vocab = c->vocab,
                                   .global_epochs = 1, .holdout = o->holdout, .held_out = 1};
    if (dataloader_open(&d, &dc, e) != 0) {
        herr_wrap(e, o->holdout > 0 ? "--data with --holdout" : "--data");
        goto out;
    }
    r->windows = dataloader_windows(d);
    long all = (long)(r->windows / (uint64_t)r->B);
    r->batches = o->batches > 0 ? o->batches : all;
    if (r->batches == 0) {
        herr_config(e, "--data %s: %" PRIu64 " windows of %d tokens, fewer than a batch of %d",
                    o->data, dataloader_windows(d), r->T + 1, r->B);
        goto out;
    }
    in = malloc((size_t)r->B * r->T * sizeof *in);
    tg = malloc((size_t)r->B * r->T * sizeof *tg);
    if (!in || !tg) {
        herr_set(e, "out of memory for a batch of %d x %d", r->B, r->T);
        goto out;
    }
    double sum = 0.0, next = 0.0;
    for (long k = 0; k < r->batches; k++) {
        float loss;
        if (dataloader_batch_at(d, (uint64_t)k, 0, 1, in, tg, e) != 0) {
            herr_wrap(e, "--data, batch %ld", k);
            goto out;
        }
        if (engine_forward(en, 0, 0, r->T, in, NULL, tg, NULL) != 0) {
            herr_set(e, "batch %ld: %s", k, engine_error(en));
            goto out;
        }
        if (engine_loss_take(en, &loss, e) != 0)
            goto out;
        sum += loss;
        progress(&next, "batches", k + 1, r->batches);
    }
    r->loss = sum / (double)r->batches;
    r->engine = engine_name(en);
    rc = 0;
out:
    free(in);
    free(tg);
    dataloader_free(d);
    engine_free(en);
    return rc;
}

/* One example's line for --scores-out. */
static void score_line(FILE *f, const struct choice_example *x, const double *sum,
                       const double *mean, int dropped)
{
    fprintf(f, "{\"example\":%ld,\"label\":%d,\"pred\":%d,\"pred_norm\":%d,\"dropped\":%d,"
            "\"sum\":[", x->where, x->label, choice_pick(sum, x->n), choice_pick(mean, x->n),
            dropped);
    for (int i = 0; i < x->n; i++)
        fprintf(f, "%s%.9g", i ? "," : "", sum[i]);
    fprintf(f, "],\"mean\":[");
    for (int i = 0; i < x->n; i++)
        fprintf(f, "%s%.9g", i ? "," : "", mean[i]);
    fprintf(f, "]}\n");
}

static int eval_choices(const struct opts *o, struct choice_result *r, int64_t *used, herr *e)
{
    struct tokenizer *tk = NULL;
    struct bpe *b = NULL;
    struct choice_set set = {0};
    struct engine *en = NULL;
    FILE *sf = NULL;
    char tmp[4200] = "";
    int rc = -1;
    if (o->tokfile && (tokenizer_open(&tk, o->tokfile, e) != 0 || bpe_create(&b, tk, e) != 0)) {
        herr_wrap(e, "--tokenizer");
        goto out;
    }
    if (choice_set_read(&set, o->choices, b, (size_t)o->examples, e) != 0) {
        herr_wrap(e, "--choices");
        goto out;
    }
    /* one sequence of the longest example's positions (at most the model's: longer contexts
     * are shortened) */
    if (open_engine(o, 1, choice_set_max_positions(&set), NULL, &en, used, e) != 0)
        goto out;
    /* written as FILE.tmp, renamed over FILE when every example is scored: a failed run
     * leaves an earlier FILE as it was */
    if (o->scores) {
        if (snprintf(tmp, sizeof tmp, "%s.tmp", o->scores) >= (int)sizeof tmp) {
            herr_config(e, "--scores-out %s: the path is too long", o->scores);
            goto out;
        }
        if (!(sf = fopen(tmp, "w"))) {
            herr_set(e, "--scores-out %s: %s", tmp, strerror(errno));
            goto out;
        }
    }
    double next = 0.0;
    for (size_t i = 0; i < set.n; i++) {
        const struct choice_example *x = &set.ex[i];
        double sum[CHOICE_MAX], mean[CHOICE_MAX];
        int dropped;
        if (choice_score(en, x, sum, mean, &dropped, e) != 0) {
            herr_wrap(e, "--choices %s, %s %ld", o->choices, set.jsonl ? "line" : "example",
                      x->where);
            goto out;
        }
        r->examples++;
        r->correct += choice_pick(sum, x->n) == x->label;
        r->correct_norm += choice_pick(mean, x->n) == x->label;
        r->shortened += dropped > 0;
        if (sf)
            score_line(sf, x, sum, mean, dropped);
        progress(&next, "examples", (long)i + 1, (long)set.n);
    }
    if (sf) {
        int bad = fflush(sf) != 0 || ferror(sf) || fsync(fileno(sf)) != 0;
        bad = fclose(sf) != 0 || bad;
        sf = NULL;
        if (bad || rename(tmp, o->scores) != 0) {
            herr_set(e, "--scores-out %s: %s", o->scores, bad ? "write failed" : strerror(errno));
            goto out;
        }
    }
    rc = 0;
out:
    if (sf)
        fclose(sf);
    if (rc != 0 && tmp[0])
        unlink(tmp);
    engine_free(en);
    choice_set_free(&set);
    bpe_free(b);
    tokenizer_free(tk);
    return rc;
}

static void print_data(const struct opts *o, const struct data_result *dr, double ppl)
{
    char part[96] = "";
    if (o->holdout > 0)
        snprintf(part, sizeof part, " (held out: its last %" PRIu64 " windows, %g)", dr->windows,
                 o->holdout);
    printf("data: %ld batches of %d x %d tokens (%ld tokens) of %s%s: loss %.6f, perplexity %.4g "
           "(engine %s)\n", dr->batches, dr->B, dr->T, dr->batches * dr->B * dr->T, o->data, part,
           dr->loss, ppl, dr->engine);
}

static void report(const struct opts *o, int64_t step, const struct data_result *dr,
                   const struct choice_result *cr)
{
    double ppl = dr ? exp(dr->loss) : 0.0;
    double n = cr ? (double)cr->examples : 1.0;
    if (!o->json) {
        if (o->dir)
            printf("model: step %" PRId64 " of %s\n", step, o->dir);
        else
            printf("model: %s\n", o->init_from);
        if (dr)
            print_data(o, dr, ppl);
        if (cr)
            printf("choices: %ld examples of %s: acc %.4f (%ld right), acc_norm %.4f (%ld right)"
                   "%s\n", cr->examples, o->choices, cr->correct / n, cr->correct,
                   cr->correct_norm / n, cr->correct_norm,
                   cr->shortened ? " (contexts shortened to fit: see --scores-out)" : "");
        return;
    }
    cJSON *j = cJSON_CreateObject(), *d = NULL, *c = NULL;
    if (!j) {
        fprintf(stderr, "%s: out of memory for the JSON report\n", cmd);
        return;
    }
    if (o->dir) {
        cJSON_AddStringToObject(j, "checkpoint_dir", o->dir);
        cJSON_AddNumberToObject(j, "step", (double)step);
    } else {
        cJSON_AddStringToObject(j, "init_from", o->init_from);
    }
    if (dr && (d = cJSON_AddObjectToObject(j, "data"))) {
        cJSON_AddStringToObject(d, "path", o->data);
        if (o->holdout > 0)
            cJSON_AddNumberToObject(d, "holdout", o->holdout);
        cJSON_AddNumberToObject(d, "windows", (double)dr->windows);
        cJSON_AddNumberToObject(d, "batches", (double)dr->batches);
        cJSON_AddNumberToObject(d, "batch", dr->B);
        cJSON_AddNumberToObject(d, "seq", dr->T);
        cJSON_AddNumberToObject(d, "tokens", (double)dr->batches * dr->B * dr->T);
        cJSON_AddNumberToObject(d, "loss", dr->loss);
        cJSON_AddNumberToObject(d, "perplexity", ppl);
        cJSON_AddStringToObject(d, "engine", dr->engine);
    }
    if (cr && (c = cJSON_AddObjectToObject(j, "choices"))) {
        cJSON_AddStringToObject(c, "path", o->choices);
        cJSON_AddNumberToObject(c, "examples", (double)cr->examples);
        cJSON_AddNumberToObject(c, "correct", (double)cr->correct);
        cJSON_AddNumberToObject(c, "correct_norm", (double)cr->correct_norm);
        cJSON_AddNumberToObject(c, "acc", cr->correct / n);
        cJSON_AddNumberToObject(c, "acc_norm", cr->correct_norm / n);
        cJSON_AddNumberToObject(c, "shortened", (double)cr->shortened);
    }
    char *txt = cJSON_PrintUnformatted(j);
    if (txt)
        printf("%s\n", txt);
    else
        fprintf(stderr, "%s: out of memory for the JSON report\n", cmd);
    free(txt);
    cJSON_Delete(j);
}

/* --engine NAME into o: 0, or 1 with the reason on stderr (unknown, or not in this binary). */
static int parse_engine(const char *v, struct opts *o)
{
    if (engine_by_name(v, &o->engine, &o->precision) != 0) {
        fprintf(stderr, "%s: --engine: \"%s\" is not one of cpu, cuda-fp32, cuda-bf16\n", cmd, v);
        return 1;
    }
    char why[256];
    if (!engine_available(o->engine, o->precision, why, sizeof why)) {
        fprintf(stderr, "%s: --engine %s: %s\n", cmd, v, why);
        return 1;
    }
    return 0;
}

/* The options into o: 0, or 2 (usage, said on stderr), or 1 (--help, said on stdout). */
static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lopts[] = {
        {"checkpoint-dir", 1, 0, 'd'}, {"step", 1, 0, 's'}, {"init-from", 1, 0, 'i'},
        {"data", 1, 0, 'D'}, {"batch", 1, 0, 'b'}, {"seq", 1, 0, 'T'}, {"batches", 1, 0, 'n'},
        {"seed", 1, 0, 'S'}, {"choices", 1, 0, 'c'}, {"hellaswag", 1, 0, 'c'},
        {"tokenizer", 1, 0, 'z'}, {"examples", 1, 0, 'x'}, {"scores-out", 1, 0, 'o'},
        {"json", 0, 0, 'j'}, {"engine", 1, 0, 'E'}, {"device", 1, 0, 'G'}, {"job", 1, 0, 'J'},
        {"holdout", 1, 0, 'H'}, {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    *o = (struct opts){.step = -1, .B = -1, .T = -1, .batches = -1, .seed = -1,
                       .engine = ENGINE_CPU, .precision = DTYPE_FP32};
    int c, shape = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'd': o->dir = optarg; break;
        case 'i': o->init_from = optarg; break;
        case 'D': o->data = optarg; break;
        case 'c': o->choices = optarg; break;
        case 'z': o->tokfile = optarg; break;
        case 'o': o->scores = optarg; break;
        case 'j': o->json = 1; break;
        case 'J': o->job = optarg; break;
        case 's': bad = cli_long(cmd, "--step", optarg, 0, __LONG_MAX__, &o->step); break;
        case 'b': shape = 1; bad = cli_long(cmd, "--batch", optarg, 1, 1 << 16, &o->B); break;
        case 'T': shape = 1; bad = cli_long(cmd, "--seq", optarg, 1, 1 << 20, &o->T); break;
        case 'n': shape = 1; bad = cli_long(cmd, "--batches", optarg, 1, 1L << 40, &o->batches); break;
        case 'S': shape = 1; bad = cli_long(cmd, "--seed", optarg, 0, __LONG_MAX__, &o->seed); break;
        case 'H':
            shape = 1;
            bad = cli_double(cmd, "--holdout", optarg, 0, TJ_MAX_HOLDOUT, &o->holdout);
            break;
        case 'x': bad = cli_long(cmd, "--examples", optarg, 1, 1L << 40, &o->examples); break;
        case 'G': bad = cli_long(cmd, "--device", optarg, 0, 1024, &o->device); break;
        case 'E': bad = parse_engine(optarg, o); break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return 2;
        }
        if (bad)
            return 2;
    }
    const char *why = optind < argc                    ? "unexpected argument"
                      : !!o->dir + !!o->init_from + !!o->job != 1
                          ? "give one of --checkpoint-dir, --init-from and --job"
                      : o->step >= 0 && o->init_from    ? "--step goes with --checkpoint-dir or --job"
                      : !o->data && !o->choices && !o->job ? "nothing to evaluate: give --data, --choices or both"
                      : shape && !o->data && !o->job    ? "--holdout, --batch, --seq, --batches and --seed go with --data"
                      : (o->tokfile || o->examples || o->scores) && !o->choices
                          ? "--tokenizer, --examples and --scores-out go with --choices"
                          : NULL;
    if (why) {
        fprintf(stderr, "%s: %s\n", cmd, why);
        usage(stderr);
        return 2;
    }
    o->shape = shape;
    return 0;
}

/* --job FILE: the job's checkpoints, and what the flags left unset of its evaluation. */
static int from_job(struct opts *o, herr *e)
{
    struct tj_job *jobs = NULL;
    struct tj_errors errs = {0};
    int n = 0;
    if (tj_load_file(o->job, &jobs, &n, &errs) != 0) {
        tj_errors_to_herr(&errs, e);
        return herr_wrap(e, "--job");
    }
    int rc = 0;
    const struct tj_spec *sp = n > 0 ? &jobs[0].spec : NULL;
    if (n != 1)
        rc = herr_config(e, "--job %s: %d TrainingJobs; give a file of one", o->job, n);
    else if (!sp->training.checkpoint.path[0])
        rc = herr_config(e, "--job %s: spec.training.checkpoint.path is not set: the job keeps no "
                         "checkpoint to evaluate", o->job);
    else if (!o->data && !o->choices && !tj_eval_on(&sp->training.eval))
        rc = herr_config(e, "--job %s: spec.training.eval is not set: give --data or --choices",
                         o->job);
    else if (!o->data && !o->choices && !sp->training.eval.path[0] &&
             sp->training.data.n_sources > 0)
        rc = herr_config(e, "--job %s: spec.training.eval.holdout holds out a share of each of "
                         "spec.training.data.sources; eval reads one data set: give --data "
                         "SOURCE --holdout %g for each", o->job, sp->training.eval.holdout);
    if (rc == 0) {
        snprintf(o->job_dir, sizeof o->job_dir, "%s", sp->training.checkpoint.path);
        o->dir = o->job_dir;
        if (!o->data && !o->choices) {
            const struct tj_eval *ev = &sp->training.eval;
            snprintf(o->job_data, sizeof o->job_data, "%s",
                     ev->path[0] ? ev->path : sp->training.data.path);
            o->data = o->job_data;
            if (!ev->path[0] && o->holdout == 0)
                o->holdout = ev->holdout;
        }
        if (o->B < 0)
            o->B = sp->par.micro_batch_size;
        if (o->T < 0)
            o->T = sp->model.seq_len;
        if (o->batches < 0 && tj_eval_on(&sp->training.eval) && o->data == o->job_data)
            o->batches = sp->training.eval.batches;
        if (o->seed < 0)
            o->seed = (long)sp->training.seed;
    }
    for (int i = 0; i < n; i++)
        tj_job_free(&jobs[i]);
    free(jobs);
    return rc;
}

/* The defaults of what neither the flags nor --job set. */
static void defaults(struct opts *o)
{
    if (o->B < 0)
        o->B = 1;
    if (o->T < 0)
        o->T = 0; /* the model's */
    if (o->batches < 0)
        o->batches = 0; /* every window */
    if (o->seed < 0)
        o->seed = 1337;
}

static int is_dir(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* --scores-out is written whole and renamed over its path: never over what is read (the
 * choices, the tokenizer, the model, the job, the data's files), nor onto a non-regular file. */
static int check_scores_out(const struct opts *o, herr *e)
{
    if (!o->scores)
        return 0;
    glob_t g = {0};
    int matched = o->data && glob(o->data, 0, NULL, &g) == 0;
    size_t n = 5 + (matched ? g.gl_pathc : 0);
    struct output_input *in = calloc(n, sizeof *in);
    if (!in) {
        if (matched)
            globfree(&g);
        return herr_set(e, "out of memory");
    }
    in[0] = (struct output_input){"--choices", o->choices, 0};
    in[1] = (struct output_input){"--tokenizer", o->tokfile, is_dir(o->tokfile)};
    in[2] = (struct output_input){"--checkpoint-dir", o->dir, 1};
    in[3] = (struct output_input){"--init-from", o->init_from, is_dir(o->init_from)};
    in[4] = (struct output_input){"--job", o->job, 0};
    for (size_t i = 0; matched && i < g.gl_pathc; i++)
        in[5 + i] = (struct output_input){"--data", g.gl_pathv[i], 0};
    const struct output_target out = {"--scores-out", o->scores};
    int rc = output_targets_check(&out, 1, in, (int)n, e);
    free(in);
    if (matched)
        globfree(&g);
    return rc;
}

int cmd_eval(int argc, char **argv)
{
    struct opts o;
    int p = parse(argc, argv, &o);
    if (p)
        return p == 1 ? 0 : 2;
    herr e = {0};
    if (o.job && from_job(&o, &e) != 0) {
        fprintf(stderr, "%s: %s\n", cmd, e.msg);
        return 2;
    }
    if (o.shape && !o.data) { /* --job with --choices: its held-out data not taken */
        fprintf(stderr, "%s: --holdout, --batch, --seq, --batches and --seed go with --data\n", cmd);
        return 2;
    }
    if (check_scores_out(&o, &e) != 0) {
        fprintf(stderr, "%s: %s\n", cmd, e.msg);
        return 2;
    }
    defaults(&o);
    struct data_result dr = {0};
    struct choice_result cr = {0};
    int64_t used = -1;
    if (o.data && eval_data(&o, &dr, &used, &e) != 0) {
        fprintf(stderr, "%s: %s\n", cmd, e.msg);
        return 1;
    }
    if (o.choices && eval_choices(&o, &cr, &used, &e) != 0) {
        fprintf(stderr, "%s: %s\n", cmd, e.msg);
        return 1;
    }
    report(&o, used, o.data ? &dr : NULL, o.choices ? &cr : NULL);
    return 0;
}
