/* The TrainingJob API's names, model presets, errors, defaults and lifetime, and the loading of
 * a YAML/JSON file. The parser is trainingjob_parse.c, the rules trainingjob_validate.c, the
 * JSON out trainingjob_to_json.c (trainingjob_impl.h lists them). */
#include "trainingjob_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "yaml_json.h"

/* ---------------------------------------------------------------- names and presets */

const char *const tj_lr_names[4] = {"cosine", "constant", "linear", "wsd"};
const char *const tj_format_names[2] = {"llmc", "text"};
const char *const tj_class_names[3] = {"infiniband", "roce", "ethernet"};

const char *tj_lr_schedule_name(enum tj_lr_schedule s) { return (unsigned)s < 4 ? tj_lr_names[s] : "?"; }

long tj_lr_decay_steps(const struct tj_training *t)
{
    if (t->opt.schedule != TJ_LR_WSD)
        return 0;
    if (t->opt.decay_steps >= 0)
        return t->opt.decay_steps;
    long after = t->steps - t->opt.warmup_steps;
    return after > 0 ? after / 5 : 0;
}
const char *tj_data_format_name(enum tj_data_format f) { return (unsigned)f < 2 ? tj_format_names[f] : "?"; }

const char *const tj_gang_names[TJ_GANG_COUNT] = {"", "none", "kueue", "volcano", "coscheduling"};
const char *tj_gang_name(enum tj_gang g) { return (unsigned)g < TJ_GANG_COUNT ? tj_gang_names[g] : "?"; }

int tj_gang_parse(const char *name, enum tj_gang *out)
{
    for (int i = 1; i < TJ_GANG_COUNT; i++)
        if (!strcmp(name, tj_gang_names[i])) {
            *out = (enum tj_gang)i;
            return 0;
        }
    return -1;
}

static const struct tj_model presets[] = {
    {"gpt2-124m", 12, 768, 12, 50257, 1024},
    {"gpt2-350m", 24, 1024, 16, 50257, 1024},
    {"gpt2-774m", 36, 1280, 20, 50257, 1024},
    {"gpt2-1.5b", 48, 1600, 25, 50257, 1024},
};

int tj_model_preset(const char *name, struct tj_model *m)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (!strcmp(name, presets[i].preset)) {
            *m = presets[i];
            return 0;
        }
    }
    return -1;
}

int tj_worker_pod_name(char *out, size_t cap, const char *job, int index)
{
    return snprintf(out, cap, "%s-worker-%d", job, index);
}

long long tj_model_params(const struct tj_model *m)
{
    long long L = m->layers, C = m->hidden, V = m->vocab, T = m->seq_len;
    /* wte + wpe + per layer (2 LN, qkv, proj, fc, fcproj) + final LN */
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

int tj_ranks_per_worker(const struct tj_spec *s) { return s->gpus_per_worker > 0 ? s->gpus_per_worker : 1; }
int tj_world_size(const struct tj_spec *s) { return s->workers * tj_ranks_per_worker(s); }
int tj_real_gpus(const struct tj_spec *s) { return s->gpus_per_worker > 0 && !s->emulation.gpus; }

void tj_spec_describe(const struct tj_spec *s, char *buf, size_t n)
{
    char pipe[16], data[16], params[32];
    snprintf(pipe, sizeof pipe, s->par.pipeline == TJ_AUTO ? "auto" : "%d", s->par.pipeline);
    snprintf(data, sizeof data, s->par.data == TJ_AUTO ? "auto" : "%d", s->par.data);
    double p = (double)tj_model_params(&s->model);
    if (p >= 1e9)
        snprintf(params, sizeof params, "%.2fB", p / 1e9);
    else
        snprintf(params, sizeof params, "%.1fM", p / 1e6);
    char who[64];
    if (s->gpus_per_worker > 0)
        snprintf(who, sizeof who, "%d worker%s x %d GPU%s", s->workers, s->workers == 1 ? "" : "s",
                 s->gpus_per_worker, s->gpus_per_worker == 1 ? "" : "s");
    else
        snprintf(who, sizeof who, "%d CPU worker%s", s->workers, s->workers == 1 ? "" : "s");
    snprintf(buf, n, "%s, %s (L%d C%d NH%d V%d T%d, %s params), tensor %d pipeline %s data %s, "
             "%d x %d micro-batches %s, %s, %ld steps", who, s->model.preset[0] ? s->model.preset : "custom",
             s->model.layers, s->model.hidden, s->model.heads, s->model.vocab, s->model.seq_len, params,
             s->par.tensor, pipe, data, s->par.micro_batches, s->par.micro_batch_size,
             schedule_name(s->par.schedule), dtype_name(s->training.precision), s->training.steps);
}

/* ---------------------------------------------------------------- errors */

void tj_errors_add(struct tj_errors *errs, const char *fmt, ...)
{
    if (!errs)
        return;
    if (errs->count < TJ_MAX_ERRORS) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errs->msg[errs->count], sizeof errs->msg[0], fmt, ap);
        va_end(ap);
        herr_clean(errs->msg[errs->count]); /* an unknown key is quoted as it came */
    }
    errs->count++;
}

int tj_errors_to_herr(const struct tj_errors *errs, herr *e)
{
    if (!e)
        return -1;
    size_t off = 0;
    e->msg[0] = '\0';
    int kept = errs->count < TJ_MAX_ERRORS ? errs->count : TJ_MAX_ERRORS;
    for (int i = 0; i < kept && off < sizeof e->msg - 1; i++) {
        int n = snprintf(e->msg + off, sizeof e->msg - off, "%s%s", i ? "; " : "", errs->msg[i]);
        if (n < 0)
            break;
        off += (size_t)n;
    }
    if (errs->count > kept && off < sizeof e->msg - 1)
        snprintf(e->msg + off, sizeof e->msg - off, "; and %d more", errs->count - kept);
    herr_clean(e->msg); /* a cut inside a character: its bytes become '?', as herr_set's do */
    return -1;
}

/* ---------------------------------------------------------------- defaults */

void tj_spec_defaults(struct tj_spec *s)
{
    memset(s, 0, sizeof *s);
    s->par.tensor = 1;
    s->par.pipeline = TJ_AUTO;
    s->par.data = TJ_AUTO;
    s->par.micro_batches = 8;
    s->par.micro_batch_size = 1;
    s->par.token_slices = 1;
    s->par.schedule = SCHED_1F1B;
    s->par.pipeline_dtype = DTYPE_FP32;
    s->par.param_gather_dtype = DTYPE_FP32;
    s->placement.policy = POLICY_HOLMES;
    struct tj_training *t = &s->training;
    t->opt.lr = 6.0e-4;
    t->opt.warmup_steps = 0;
    t->opt.decay_steps = -1;
    t->opt.schedule = TJ_LR_COSINE;
    t->opt.min_lr_ratio = 0.1;
    t->opt.beta1 = 0.9;
    t->opt.beta2 = 0.95;
    t->opt.eps = 1.0e-8;
    t->opt.weight_decay = 0.1;
    t->opt.grad_clip = 1.0;
    t->precision = DTYPE_FP32;
    t->seed = 1337;
    snprintf(t->data.path, sizeof t->data.path, "%s", TJ_DEMO_CORPUS);
    t->data.format = TJ_DATA_TEXT;
    t->data.is_demo = 1;
    t->checkpoint.keep = 3;
    t->eval.format = TJ_DATA_LLMC;
    t->eval.batches = 8;
    t->log_every_steps = 10;
    t->max_nonfinite_steps = 3;
    s->gang_timeout_seconds = 600;
    s->ttl_after_finished_s = -1;
    s->active_deadline_s = -1;
    s->restart.max_restarts = 3;
    s->restart.backoff_seconds = 30;
    s->elastic.replace_timeout_seconds = 300;
    s->elastic.scale_up = 1;
    s->emulation.cross_fabric_gbps = 25;
    s->emulation.bandwidth_scale = 1.0;
}

int tj_is_elastic(const struct tj_spec *s)
{
    return s->elastic.enabled && s->elastic.min_workers >= 1 && s->elastic.min_workers < s->workers;
}

int tj_eval_on(const struct tj_eval *ev) { return ev->path[0] || ev->holdout > 0; }

/* ---------------------------------------------------------------- lifetime */

int tj_spec_copy(struct tj_spec *dst, const struct tj_spec *src)
{
    *dst = *src;
    dst->pod_template = NULL;
    if (src->pod_template) {
        dst->pod_template = cJSON_Duplicate(src->pod_template, 1);
        if (!dst->pod_template)
            return -1;
    }
    return 0;
}

void tj_spec_free(struct tj_spec *s)
{
    if (!s)
        return;
    cJSON_Delete(s->pod_template);
    s->pod_template = NULL;
}

void tj_job_free(struct tj_job *j)
{
    if (j)
        tj_spec_free(&j->spec);
}

/* Replaces each List / TrainingJobList document (as `kubectl get tj -o yaml` prints) by its
 * items, in place. Returns -1 when out of memory. */
static int expand_lists(cJSON *docs)
{
    cJSON *out = cJSON_CreateArray();
    if (!out)
        return -1;
    cJSON *d;
    while ((d = cJSON_DetachItemFromArray(docs, 0))) {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(d, "kind");
        cJSON *items = cJSON_GetObjectItemCaseSensitive(d, "items");
        if (cJSON_IsString(kind) && (!strcmp(kind->valuestring, "List") ||
                                     !strcmp(kind->valuestring, "TrainingJobList")) && cJSON_IsArray(items)) {
            cJSON *it;
            while ((it = cJSON_DetachItemFromArray(items, 0)))
                cJSON_AddItemToArray(out, it);
            cJSON_Delete(d);
        } else {
            cJSON_AddItemToArray(out, d);
        }
    }
    while ((d = cJSON_DetachItemFromArray(out, 0)))
        cJSON_AddItemToArray(docs, d);
    cJSON_Delete(out);
    return 0;
}

int tj_load_file(const char *path, struct tj_job **jobs, int *n, struct tj_errors *errs)
{
    *jobs = NULL;
    *n = 0;
    herr e;
    int is_stdin = !strcmp(path, "-");
    cJSON *docs;
    if (is_stdin) {
        path = "<stdin>";
        docs = yaml_parse_file("/dev/stdin", &e);
    } else {
        docs = yaml_parse_file(path, &e);
    }
    if (!docs) {
        tj_errors_add(errs, "%s", e.msg);
        return -1;
    }
    if (expand_lists(docs)) {
        tj_errors_add(errs, "%s: out of memory", path);
        cJSON_Delete(docs);
        return -1;
    }
    int nd = cJSON_GetArraySize(docs);
    if (nd == 0) {
        tj_errors_add(errs, "%s: no TrainingJob document", path);
        cJSON_Delete(docs);
        return -1;
    }
    struct tj_job *out = calloc((size_t)nd, sizeof *out);
    if (!out) {
        tj_errors_add(errs, "%s: out of memory", path);
        cJSON_Delete(docs);
        return -1;
    }
    int bad = 0, i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, docs) {
        struct tj_errors de = {0};
        if (tj_job_from_json(d, &out[i], &de))
            bad = 1;
        int kept = de.count < TJ_MAX_ERRORS ? de.count : TJ_MAX_ERRORS;
        for (int k = 0; k < kept; k++) {
            if (nd > 1)
                tj_errors_add(errs, "%s[%d]: %s", path, i, de.msg[k]);
            else
                tj_errors_add(errs, "%s: %s", path, de.msg[k]);
        }
        if (de.count > kept)
            tj_errors_add(errs, "%s: and %d more errors", path, de.count - kept);
        i++;
    }
    cJSON_Delete(docs);
    if (bad) {
        for (int k = 0; k < nd; k++)
            tj_job_free(&out[k]);
        free(out);
        return -1;
    }
    *jobs = out;
    *n = nd;
    return 0;
}
