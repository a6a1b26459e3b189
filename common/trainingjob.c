#include "trainingjob.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "version.h"
#include "yaml_json.h"

#define TJ_MAX_SAFE_INT 9007199254740992.0 /* 2^53: every integer below is exact in JSON */

/* ---------------------------------------------------------------- names and presets */

static const char *const lr_names[] = {"cosine", "constant"};
static const char *const format_names[] = {"llmc", "text"};
static const char *const class_names[] = {"infiniband", "roce", "ethernet"};

const char *tj_lr_schedule_name(enum tj_lr_schedule s) { return (unsigned)s < 2 ? lr_names[s] : "?"; }
const char *tj_data_format_name(enum tj_data_format f) { return (unsigned)f < 2 ? format_names[f] : "?"; }

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
    return -1;
}

/* ---------------------------------------------------------------- JSON field readers */

/* A string that reads as a number too large for any field (YAML keeps 1e400 as a string). */
static int is_overflowed_number(const cJSON *v)
{
    if (!cJSON_IsString(v) || !*v->valuestring)
        return 0;
    const char *s = v->valuestring;
    if (strspn(s, "0123456789.eE+-") != strlen(s) || !strpbrk(s, "0123456789"))
        return 0;
    char *end;
    double d = strtod(s, &end);
    return !*end && !isfinite(d);
}

static const char *json_type_name(const cJSON *v)
{
    if (cJSON_IsNumber(v)) return "a number";
    if (is_overflowed_number(v)) return "a number out of range";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "a list";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsNull(v)) return "null";
    return "invalid";
}

/* A member, or NULL when absent or null (the API server treats null as unset). */
static const cJSON *member(const cJSON *obj, const char *key)
{
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

static void join(char *out, size_t n, const char *path, const char *key)
{
    snprintf(out, n, "%s.%s", path, key);
}

/* Every key of `obj` must be listed in `allowed` (NULL-terminated). */
static void check_keys(const cJSON *obj, const char *path, const char *const *allowed, struct tj_errors *errs)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, obj) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (c->string && !strcmp(c->string, *a))
                ok = 1;
        if (!ok)
            tj_errors_add(errs, "%s.%.60s: unknown field", path, c->string ? c->string : "?");
    }
}

/* An object member; absent/null gives NULL silently, a wrong type gives NULL and an error. */
static const cJSON *get_object(const cJSON *obj, const char *path, const char *key, int required,
                               struct tj_errors *errs)
{
    const cJSON *v = member(obj, key);
    if (!v) {
        if (required)
            tj_errors_add(errs, "%s.%s: required", path, key);
        return NULL;
    }
    if (!cJSON_IsObject(v)) {
        tj_errors_add(errs, "%s.%s: must be an object, got %s", path, key, json_type_name(v));
        return NULL;
    }
    return v;
}

/* An integer in [min, max]. Returns 1 when present and valid, 0 when absent (out untouched),
 * -1 on error. */
static int get_int64(const cJSON *obj, const char *path, const char *key, long long min, long long max,
                     int required, long long *out, struct tj_errors *errs)
{
    const cJSON *v = member(obj, key);
    if (!v) {
        if (required)
            tj_errors_add(errs, "%s.%s: required", path, key);
        return required ? -1 : 0;
    }
    if (!cJSON_IsNumber(v)) {
        tj_errors_add(errs, "%s.%s: must be an integer, got %s", path, key, json_type_name(v));
        return -1;
    }
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d)) {
        tj_errors_add(errs, "%s.%s: must be an integer, got %g", path, key, d);
        return -1;
    }
    if (d < (double)min) {
        tj_errors_add(errs, "%s.%s: %.0f is below the minimum %lld", path, key, d, min);
        return -1;
    }
    if (d > (double)max) {
        tj_errors_add(errs, "%s.%s: %.0f exceeds the maximum %lld", path, key, d, max);
        return -1;
    }
    *out = (long long)d;
    return 1;
}

static int get_int(const cJSON *obj, const char *path, const char *key, int min, int max, int required,
                   int *out, struct tj_errors *errs)
{
    long long v;
    int r = get_int64(obj, path, key, min, max, required, &v, errs);
    if (r == 1)
        *out = (int)v;
    return r;
}

/* A number with min (inclusive unless min_excl) and max (inclusive unless max_excl). */
static int get_num(const cJSON *obj, const char *path, const char *key, double min, int min_excl,
                   double max, int max_excl, double *out, struct tj_errors *errs)
{
    const cJSON *v = member(obj, key);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v)) {
        tj_errors_add(errs, "%s.%s: must be a number, got %s", path, key, json_type_name(v));
        return -1;
    }
    double d = v->valuedouble;
    if (!isfinite(d)) {
        tj_errors_add(errs, "%s.%s: must be a finite number", path, key);
        return -1;
    }
    if (min_excl ? !(d > min) : !(d >= min)) {
        tj_errors_add(errs, "%s.%s: %g must be %s %g", path, key, d, min_excl ? "greater than" : "at least", min);
        return -1;
    }
    if (max_excl ? !(d < max) : !(d <= max)) {
        tj_errors_add(errs, "%s.%s: %g must be %s %g", path, key, d, max_excl ? "less than" : "at most", max);
        return -1;
    }
    *out = d;
    return 1;
}

static int get_bool(const cJSON *obj, const char *path, const char *key, int *out, struct tj_errors *errs)
{
    const cJSON *v = member(obj, key);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v)) {
        tj_errors_add(errs, "%s.%s: must be true or false, got %s", path, key, json_type_name(v));
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 1;
}

/* A string of 1..cap-1 bytes. */
static int get_str(const cJSON *obj, const char *path, const char *key, int required, char *out, size_t cap,
                   struct tj_errors *errs)
{
    const cJSON *v = member(obj, key);
    if (!v) {
        if (required)
            tj_errors_add(errs, "%s.%s: required", path, key);
        return required ? -1 : 0;
    }
    if (!cJSON_IsString(v)) {
        tj_errors_add(errs, "%s.%s: must be a string, got %s", path, key, json_type_name(v));
        return -1;
    }
    size_t len = strlen(v->valuestring);
    if (len == 0) {
        tj_errors_add(errs, "%s.%s: must not be empty", path, key);
        return -1;
    }
    if (len >= cap) {
        tj_errors_add(errs, "%s.%s: longer than %zu characters", path, key, cap - 1);
        return -1;
    }
    memcpy(out, v->valuestring, len + 1);
    return 1;
}

/* One of `names` (n of them); the index goes to *out. */
static int get_enum(const cJSON *obj, const char *path, const char *key, const char *const *names, int n,
                    int *out, struct tj_errors *errs)
{
    const cJSON *v = member(obj, key);
    if (!v)
        return 0;
    if (cJSON_IsString(v)) {
        for (int i = 0; i < n; i++) {
            if (!strcmp(v->valuestring, names[i])) {
                *out = i;
                return 1;
            }
        }
    }
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", names[i]);
    }
    if (cJSON_IsString(v))
        tj_errors_add(errs, "%s.%s: \"%.60s\" is not one of %s", path, key, v->valuestring, list);
    else
        tj_errors_add(errs, "%s.%s: must be one of %s, got %s", path, key, list, json_type_name(v));
    return -1;
}

/* A positive integer or "auto" (TJ_AUTO). */
static int get_int_or_auto(const cJSON *obj, const char *path, const char *key, int max, int *out,
                           struct tj_errors *errs)
{
    const cJSON *v = member(obj, key);
    if (!v)
        return 0;
    if (cJSON_IsString(v)) {
        if (!strcmp(v->valuestring, "auto")) {
            *out = TJ_AUTO;
            return 1;
        }
        tj_errors_add(errs, "%s.%s: must be a positive integer or \"auto\", got \"%.60s\"", path, key,
                      v->valuestring);
        return -1;
    }
    if (!cJSON_IsNumber(v)) {
        tj_errors_add(errs, "%s.%s: must be a positive integer or \"auto\", got %s", path, key, json_type_name(v));
        return -1;
    }
    return get_int(obj, path, key, 1, max, 0, out, errs);
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
    s->par.schedule = SCHED_1F1B;
    s->par.pipeline_dtype = DTYPE_FP32;
    s->par.param_gather_dtype = DTYPE_FP32;
    s->placement.policy = POLICY_HOLMES;
    struct tj_training *t = &s->training;
    t->opt.lr = 6.0e-4;
    t->opt.warmup_steps = 0;
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
    t->log_every_steps = 10;
    s->gang_timeout_seconds = 600;
    s->restart.max_restarts = 3;
    s->restart.backoff_seconds = 30;
    s->emulation.cross_fabric_gbps = 25;
    s->emulation.bandwidth_scale = 1.0;
}

/* ---------------------------------------------------------------- parsing */

static void parse_model(const cJSON *spec, const char *sp, struct tj_spec *s, struct tj_errors *errs)
{
    char p[256];
    join(p, sizeof p, sp, "model");
    const cJSON *m = get_object(spec, sp, "model", 1, errs);
    if (!m)
        return;
    static const char *const keys[] = {"preset", "layers", "hidden", "heads", "vocab", "seqLen", NULL};
    check_keys(m, p, keys, errs);
    struct tj_model *mo = &s->model;
    const cJSON *pv = member(m, "preset");
    if (pv) {
        if (!cJSON_IsString(pv))
            tj_errors_add(errs, "%s.preset: must be a string, got %s", p, json_type_name(pv));
        else if (tj_model_preset(pv->valuestring, mo))
            tj_errors_add(errs, "%s.preset: \"%.60s\" is not one of gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b",
                          p, pv->valuestring);
    }
    /* A preset gives every size; any size given beside it overrides the preset's. */
    get_int(m, p, "layers", 1, 1024, !pv, &mo->layers, errs);
    get_int(m, p, "hidden", 1, 65536, !pv, &mo->hidden, errs);
    get_int(m, p, "heads", 1, 1024, !pv, &mo->heads, errs);
    get_int(m, p, "vocab", 1, 1048576, !pv, &mo->vocab, errs);
    get_int(m, p, "seqLen", 1, 131072, !pv, &mo->seq_len, errs);
}

static void parse_parallelism(const cJSON *spec, const char *sp, struct tj_spec *s, struct tj_errors *errs)
{
    char p[256];
    join(p, sizeof p, sp, "parallelism");
    const cJSON *o = get_object(spec, sp, "parallelism", 0, errs);
    if (!o)
        return;
    static const char *const keys[] = {"tensor", "pipeline", "data", "microBatches", "microBatchSize",
                                       "schedule", "pipelineDtype", "paramGatherDtype", NULL};
    check_keys(o, p, keys, errs);
    get_int(o, p, "tensor", 1, 1024, 0, &s->par.tensor, errs);
    get_int_or_auto(o, p, "pipeline", 1024, &s->par.pipeline, errs);
    get_int_or_auto(o, p, "data", 1048576, &s->par.data, errs);
    get_int(o, p, "microBatches", 1, 65536, 0, &s->par.micro_batches, errs);
    get_int(o, p, "microBatchSize", 1, 65536, 0, &s->par.micro_batch_size, errs);
    int v;
    if (get_enum(o, p, "schedule", schedule_names, SCHED_COUNT, &v, errs) == 1)
        s->par.schedule = (enum schedule)v;
    if (get_enum(o, p, "pipelineDtype", dtype_names, DTYPE_API_COUNT, &v, errs) == 1)
        s->par.pipeline_dtype = (enum dtype)v;
    if (get_enum(o, p, "paramGatherDtype", dtype_names, DTYPE_API_COUNT, &v, errs) == 1)
        s->par.param_gather_dtype = (enum dtype)v;
}

static void parse_placement(const cJSON *spec, const char *sp, struct tj_spec *s, struct tj_errors *errs)
{
    char p[256];
    join(p, sizeof p, sp, "placement");
    const cJSON *o = get_object(spec, sp, "placement", 0, errs);
    if (!o)
        return;
    static const char *const keys[] = {"policy", "fabrics", "crossFabricGbps", NULL};
    check_keys(o, p, keys, errs);
    int v;
    if (get_enum(o, p, "policy", policy_names, POLICY_API_COUNT, &v, errs) == 1)
        s->placement.policy = (enum policy)v;
    get_num(o, p, "crossFabricGbps", 0, 1, 100000, 0, &s->placement.cross_fabric_gbps, errs);
    const cJSON *f = member(o, "fabrics");
    if (!f)
        return;
    if (!cJSON_IsArray(f)) {
        tj_errors_add(errs, "%s.fabrics: must be a list, got %s", p, json_type_name(f));
        return;
    }
    int n = cJSON_GetArraySize(f);
    if (n > TJ_MAX_FABRICS) {
        tj_errors_add(errs, "%s.fabrics: %d entries exceed the maximum %d", p, n, TJ_MAX_FABRICS);
        return;
    }
    static const char *const fkeys[] = {"fabric", "gbps", NULL};
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, f) {
        char ip[300];
        snprintf(ip, sizeof ip, "%s.fabrics[%d]", p, i);
        if (!cJSON_IsObject(it)) {
            tj_errors_add(errs, "%s: must be an object, got %s", ip, json_type_name(it));
            i++;
            continue;
        }
        check_keys(it, ip, fkeys, errs);
        struct tj_fabric_bw *fb = &s->placement.fabrics[i];
        get_str(it, ip, "fabric", 1, fb->fabric, sizeof fb->fabric, errs);
        if (!member(it, "gbps"))
            tj_errors_add(errs, "%s.gbps: required", ip);
        get_num(it, ip, "gbps", 0, 1, 100000, 0, &fb->gbps, errs);
        for (int k = 0; k < i; k++)
            if (fb->fabric[0] && !strcmp(fb->fabric, s->placement.fabrics[k].fabric))
                tj_errors_add(errs, "%s.fabric: \"%s\" is listed twice", ip, fb->fabric);
        i++;
    }
    s->placement.n_fabrics = n;
}

static void parse_training(const cJSON *spec, const char *sp, struct tj_spec *s, struct tj_errors *errs)
{
    char p[256];
    join(p, sizeof p, sp, "training");
    const cJSON *o = get_object(spec, sp, "training", 1, errs);
    if (!o)
        return;
    static const char *const keys[] = {"steps", "optimizer", "precision", "seed", "data", "checkpoint",
                                       "initFrom", "logEverySteps", NULL};
    check_keys(o, p, keys, errs);
    struct tj_training *t = &s->training;
    long long steps = 0;
    if (get_int64(o, p, "steps", 1, 1000000000, 1, &steps, errs) == 1)
        t->steps = (long)steps;
    int v;
    if (get_enum(o, p, "precision", dtype_names, DTYPE_API_COUNT, &v, errs) == 1)
        t->precision = (enum dtype)v;
    long long seed;
    if (get_int64(o, p, "seed", 0, (long long)TJ_MAX_SAFE_INT, 0, &seed, errs) == 1)
        t->seed = (unsigned long long)seed;
    get_str(o, p, "initFrom", 0, t->init_from, sizeof t->init_from, errs);
    get_int(o, p, "logEverySteps", 1, 1000000, 0, &t->log_every_steps, errs);

    char q[300];
    snprintf(q, sizeof q, "%s.optimizer", p);
    const cJSON *opt = get_object(o, p, "optimizer", 0, errs);
    if (opt) {
        static const char *const okeys[] = {"lr", "warmupSteps", "schedule", "minLrRatio", "beta1", "beta2",
                                            "eps", "weightDecay", "gradClip", NULL};
        check_keys(opt, q, okeys, errs);
        struct tj_optimizer *op = &t->opt;
        get_num(opt, q, "lr", 0, 1, 10, 0, &op->lr, errs);
        get_int(opt, q, "warmupSteps", 0, 1000000000, 0, &op->warmup_steps, errs);
        if (get_enum(opt, q, "schedule", lr_names, 2, &v, errs) == 1)
            op->schedule = (enum tj_lr_schedule)v;
        get_num(opt, q, "minLrRatio", 0, 0, 1, 0, &op->min_lr_ratio, errs);
        get_num(opt, q, "beta1", 0, 0, 1, 1, &op->beta1, errs);
        get_num(opt, q, "beta2", 0, 0, 1, 1, &op->beta2, errs);
        get_num(opt, q, "eps", 0, 1, 1, 0, &op->eps, errs);
        get_num(opt, q, "weightDecay", 0, 0, 10, 0, &op->weight_decay, errs);
        get_num(opt, q, "gradClip", 0, 0, 1e6, 0, &op->grad_clip, errs);
    }

    snprintf(q, sizeof q, "%s.data", p);
    const cJSON *d = get_object(o, p, "data", 0, errs);
    if (d) {
        static const char *const dkeys[] = {"path", "format", NULL};
        check_keys(d, q, dkeys, errs);
        t->data.is_demo = 0;
        t->data.path[0] = '\0';
        t->data.format = TJ_DATA_LLMC;
        get_str(d, q, "path", 1, t->data.path, sizeof t->data.path, errs);
        if (get_enum(d, q, "format", format_names, 2, &v, errs) == 1)
            t->data.format = (enum tj_data_format)v;
    }

    snprintf(q, sizeof q, "%s.checkpoint", p);
    const cJSON *c = get_object(o, p, "checkpoint", 0, errs);
    if (c) {
        static const char *const ckeys[] = {"path", "everySteps", "keep", NULL};
        check_keys(c, q, ckeys, errs);
        get_str(c, q, "path", 0, t->checkpoint.path, sizeof t->checkpoint.path, errs);
        get_int(c, q, "everySteps", 0, 1000000000, 0, &t->checkpoint.every_steps, errs);
        get_int(c, q, "keep", 1, 1000, 0, &t->checkpoint.keep, errs);
    }
}

static void parse_emulation(const cJSON *spec, const char *sp, struct tj_spec *s, struct tj_errors *errs)
{
    char p[256];
    join(p, sizeof p, sp, "emulation");
    const cJSON *o = get_object(spec, sp, "emulation", 0, errs);
    if (!o)
        return;
    static const char *const keys[] = {"nics", "crossFabricGbps", "bandwidthScale", NULL};
    check_keys(o, p, keys, errs);
    struct tj_emulation *em = &s->emulation;
    em->enabled = 1;
    get_num(o, p, "crossFabricGbps", 0, 1, 100000, 0, &em->cross_fabric_gbps, errs);
    get_num(o, p, "bandwidthScale", 0, 1, 1, 0, &em->bandwidth_scale, errs);
    const cJSON *nics = member(o, "nics");
    if (!nics) {
        tj_errors_add(errs, "%s.nics: required", p);
        return;
    }
    if (!cJSON_IsArray(nics)) {
        tj_errors_add(errs, "%s.nics: must be a list, got %s", p, json_type_name(nics));
        return;
    }
    int n = cJSON_GetArraySize(nics);
    if (n < 1) {
        tj_errors_add(errs, "%s.nics: needs at least one NIC group", p);
        return;
    }
    if (n > TJ_MAX_NIC_GROUPS) {
        tj_errors_add(errs, "%s.nics: %d groups exceed the maximum %d", p, n, TJ_MAX_NIC_GROUPS);
        return;
    }
    static const char *const gkeys[] = {"class", "fabric", "gbps", "count", NULL};
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, nics) {
        char ip[300];
        snprintf(ip, sizeof ip, "%s.nics[%d]", p, i);
        struct tj_nic_group *g = &em->groups[i++];
        if (!cJSON_IsObject(it)) {
            tj_errors_add(errs, "%s: must be an object, got %s", ip, json_type_name(it));
            continue;
        }
        check_keys(it, ip, gkeys, errs);
        int v;
        if (!member(it, "class"))
            tj_errors_add(errs, "%s.class: required", ip);
        else if (get_enum(it, ip, "class", class_names, 3, &v, errs) == 1)
            snprintf(g->cls, sizeof g->cls, "%s", class_names[v]);
        get_str(it, ip, "fabric", 1, g->fabric, sizeof g->fabric, errs);
        if (!member(it, "gbps"))
            tj_errors_add(errs, "%s.gbps: required", ip);
        get_num(it, ip, "gbps", 0, 1, 100000, 0, &g->gbps, errs);
        get_int(it, ip, "count", 1, 65536, 1, &g->count, errs);
    }
    em->n_groups = n;
}

static void parse_template(const cJSON *spec, const char *sp, struct tj_spec *s, struct tj_errors *errs)
{
    char p[256];
    join(p, sizeof p, sp, "template");
    const cJSON *t = get_object(spec, sp, "template", 0, errs);
    if (!t)
        return;
    static const char *const keys[] = {"metadata", "spec", NULL};
    check_keys(t, p, keys, errs);
    get_object(t, p, "metadata", 0, errs);
    char q[300];
    snprintf(q, sizeof q, "%s.spec", p);
    const cJSON *ps = get_object(t, p, "spec", 0, errs);
    if (ps) {
        const cJSON *cs = member(ps, "containers");
        if (cs && !cJSON_IsArray(cs)) {
            tj_errors_add(errs, "%s.containers: must be a list, got %s", q, json_type_name(cs));
        } else if (cs) {
            const cJSON *c;
            int i = 0;
            cJSON_ArrayForEach(c, cs) {
                if (!cJSON_IsObject(c))
                    tj_errors_add(errs, "%s.containers[%d]: must be an object, got %s", q, i, json_type_name(c));
                else {
                    char cp[340];
                    snprintf(cp, sizeof cp, "%s.containers[%d]", q, i);
                    char name[64];
                    get_str(c, cp, "name", 1, name, sizeof name, errs);
                }
                i++;
            }
        }
        const cJSON *ns = member(ps, "nodeSelector");
        if (ns && !cJSON_IsObject(ns))
            tj_errors_add(errs, "%s.nodeSelector: must be an object, got %s", q, json_type_name(ns));
        else if (ns) {
            const cJSON *kv;
            cJSON_ArrayForEach(kv, ns)
                if (!cJSON_IsString(kv))
                    tj_errors_add(errs, "%s.nodeSelector.%.60s: must be a string, got %s", q, kv->string,
                                  json_type_name(kv));
        }
        static const char *const lists[] = {"tolerations", "volumes", "imagePullSecrets", "initContainers", NULL};
        for (const char *const *l = lists; *l; l++) {
            const cJSON *v = member(ps, *l);
            if (v && !cJSON_IsArray(v))
                tj_errors_add(errs, "%s.%s: must be a list, got %s", q, *l, json_type_name(v));
        }
        static const char *const strs[] = {"priorityClassName", "serviceAccountName", "schedulerName", NULL};
        for (const char *const *l = strs; *l; l++) {
            const cJSON *v = member(ps, *l);
            if (v && !cJSON_IsString(v))
                tj_errors_add(errs, "%s.%s: must be a string, got %s", q, *l, json_type_name(v));
        }
        const cJSON *aff = member(ps, "affinity");
        if (aff && !cJSON_IsObject(aff))
            tj_errors_add(errs, "%s.affinity: must be an object, got %s", q, json_type_name(aff));
    }
    s->pod_template = cJSON_Duplicate(t, 1);
    if (!s->pod_template)
        tj_errors_add(errs, "%s: out of memory", p);
}

/* True when one of errs->msg[from..to-1] is about `path` or a field below it. */
static int errors_under(const struct tj_errors *errs, int from, int to, const char *path)
{
    size_t n = strlen(path);
    for (int i = from; i < to && i < TJ_MAX_ERRORS; i++)
        if (!strncmp(errs->msg[i], path, n) && (errs->msg[i][n] == ':' || errs->msg[i][n] == '.' ||
                                                 errs->msg[i][n] == '['))
            return 1;
    return 0;
}

/* Runs the cross-field rules and keeps each error unless a field it depends on already failed
 * to parse (its value is then a default, and the rule would report a consequence, not a cause):
 * the sizes every rule uses (workers, gpusPerWorker, model) and the error's own section. */
static void add_cross_field_errors(const struct tj_spec *s, const char *sp, int before, struct tj_errors *errs)
{
    char base[3][300];
    snprintf(base[0], sizeof base[0], "%s.workers", sp);
    snprintf(base[1], sizeof base[1], "%s.gpusPerWorker", sp);
    snprintf(base[2], sizeof base[2], "%s.model", sp);
    for (int i = 0; i < 3; i++)
        if (errors_under(errs, before, errs->count, base[i]))
            return;
    struct tj_errors *cross = calloc(1, sizeof *cross);
    if (!cross) {
        tj_errors_add(errs, "%s: out of memory", sp);
        return;
    }
    tj_spec_validate(s, sp, cross);
    size_t splen = strlen(sp);
    int parse_end = errs->count;
    for (int i = 0; i < cross->count && i < TJ_MAX_ERRORS; i++) {
        /* The section: "spec.parallelism" of "spec.parallelism.tensor: ..." */
        char section[300];
        const char *m = cross->msg[i];
        if (strncmp(m, sp, splen) || m[splen] != '.') {
            tj_errors_add(errs, "%s", m);
            continue;
        }
        size_t end = splen + 1;
        while (m[end] && m[end] != '.' && m[end] != ':' && m[end] != '[')
            end++;
        snprintf(section, sizeof section, "%.*s", (int)end, m);
        if (!errors_under(errs, before, parse_end, section))
            tj_errors_add(errs, "%s", m);
    }
    free(cross);
}

int tj_spec_from_json(const cJSON *spec, const char *path, struct tj_spec *out, struct tj_errors *errs)
{
    const char *sp = path ? path : "spec";
    int before = errs->count;
    tj_spec_defaults(out);
    if (!cJSON_IsObject(spec)) {
        tj_errors_add(errs, "%s: must be an object, got %s", sp, spec ? json_type_name(spec) : "nothing");
        return -1;
    }
    static const char *const keys[] = {"workers", "gpusPerWorker", "image", "model", "parallelism",
                                       "placement", "training", "gangTimeoutSeconds", "restartPolicy",
                                       "suspend", "emulation", "template", NULL};
    check_keys(spec, sp, keys, errs);
    get_int(spec, sp, "workers", 1, 4096, 1, &out->workers, errs);
    get_int(spec, sp, "gpusPerWorker", 0, 16, 1, &out->gpus_per_worker, errs);
    get_str(spec, sp, "image", 0, out->image, sizeof out->image, errs);
    parse_model(spec, sp, out, errs);
    parse_parallelism(spec, sp, out, errs);
    parse_placement(spec, sp, out, errs);
    parse_training(spec, sp, out, errs);
    get_int(spec, sp, "gangTimeoutSeconds", 1, 86400, 0, &out->gang_timeout_seconds, errs);
    char p[256];
    join(p, sizeof p, sp, "restartPolicy");
    const cJSON *rp = get_object(spec, sp, "restartPolicy", 0, errs);
    if (rp) {
        static const char *const rkeys[] = {"maxRestarts", "backoffSeconds", NULL};
        check_keys(rp, p, rkeys, errs);
        get_int(rp, p, "maxRestarts", 0, 100, 0, &out->restart.max_restarts, errs);
        get_int(rp, p, "backoffSeconds", 0, 3600, 0, &out->restart.backoff_seconds, errs);
    }
    get_bool(spec, sp, "suspend", &out->suspend, errs);
    parse_emulation(spec, sp, out, errs);
    parse_template(spec, sp, out, errs);
    add_cross_field_errors(out, sp, before, errs);
    return errs->count == before ? 0 : -1;
}

/* ---------------------------------------------------------------- validation */

int tj_spec_validate(const struct tj_spec *s, const char *path, struct tj_errors *errs)
{
    const char *sp = path ? path : "spec";
    int before = errs->count;
    const struct tj_model *m = &s->model;
    const struct tj_parallelism *par = &s->par;
    int ranks_w = tj_ranks_per_worker(s);
    long long world = (long long)s->workers * ranks_w;

    if (s->workers < 1)
        tj_errors_add(errs, "%s.workers: must be at least 1", sp);
    if (m->layers < 1 || m->hidden < 1 || m->heads < 1 || m->vocab < 1 || m->seq_len < 1)
        tj_errors_add(errs, "%s.model: layers, hidden, heads, vocab and seqLen must all be at least 1", sp);
    if (m->heads > 0 && m->hidden % m->heads)
        tj_errors_add(errs, "%s.model.hidden: %d is not divisible by heads %d", sp, m->hidden, m->heads);
    if (par->tensor < 1)
        tj_errors_add(errs, "%s.parallelism.tensor: must be at least 1", sp);
    else {
        if (s->gpus_per_worker == 0 && par->tensor != 1)
            tj_errors_add(errs, "%s.parallelism.tensor: %d needs GPU workers; a CPU worker (gpusPerWorker 0) "
                          "has one rank, so tensor must be 1", sp, par->tensor);
        else if (s->gpus_per_worker > 0 && s->gpus_per_worker % par->tensor)
            tj_errors_add(errs, "%s.parallelism.tensor: %d does not divide gpusPerWorker %d (a tensor group "
                          "stays inside one worker)", sp, par->tensor, s->gpus_per_worker);
        if (m->heads > 0 && m->heads % par->tensor)
            tj_errors_add(errs, "%s.parallelism.tensor: %d does not divide model heads %d", sp, par->tensor,
                          m->heads);
    }
    if (par->pipeline < 0 || par->data < 0)
        tj_errors_add(errs, "%s.parallelism: pipeline and data must be positive or auto", sp);
    if (par->pipeline > 0 && m->layers > 0 && par->pipeline > m->layers)
        tj_errors_add(errs, "%s.parallelism.pipeline: %d exceeds model layers %d", sp, par->pipeline, m->layers);
    if (par->tensor >= 1 && par->pipeline >= 0 && par->data >= 0 && s->workers >= 1) {
        long long known = par->tensor;
        if (par->pipeline > 0) known *= par->pipeline;
        if (par->data > 0) known *= par->data;
        if (par->pipeline > 0 && par->data > 0) {
            if (known != world)
                tj_errors_add(errs, "%s.parallelism: tensor %d x pipeline %d x data %d = %lld ranks, but workers %d "
                              "x %d ranks per worker = %lld", sp, par->tensor, par->pipeline, par->data, known,
                              s->workers, ranks_w, world);
        } else if (world % known) {
            tj_errors_add(errs, "%s.parallelism: %lld ranks (workers %d x %d per worker) cannot be split into "
                          "groups of %lld (tensor %d%s)", sp, world, s->workers, ranks_w, known, par->tensor,
                          par->pipeline > 0 ? " x pipeline" : par->data > 0 ? " x data" : "");
        } else if (par->pipeline == TJ_AUTO && par->data > 0 && m->layers > 0 && world / known > m->layers) {
            tj_errors_add(errs, "%s.parallelism.data: %d leaves %lld pipeline stages, more than model layers %d",
                          sp, par->data, world / known, m->layers);
        }
    }
    if (par->schedule == SCHED_1F1B && par->pipeline > 0 && par->micro_batches < par->pipeline)
        tj_errors_add(errs, "%s.parallelism.microBatches: %d is fewer than pipeline %d stages (1f1b needs at "
                      "least one micro-batch per stage)", sp, par->micro_batches, par->pipeline);

    const struct tj_training *t = &s->training;
    if (t->steps < 1)
        tj_errors_add(errs, "%s.training.steps: must be at least 1", sp);
    if (t->opt.warmup_steps > t->steps && t->steps >= 1)
        tj_errors_add(errs, "%s.training.optimizer.warmupSteps: %d exceeds training.steps %ld", sp,
                      t->opt.warmup_steps, t->steps);
    if (t->precision == DTYPE_BF16 && s->gpus_per_worker == 0)
        tj_errors_add(errs, "%s.training.precision: bf16 needs GPU workers (gpusPerWorker >= 1); CPU workers "
                      "train in fp32", sp);
    if (!t->data.path[0])
        tj_errors_add(errs, "%s.training.data.path: required", sp);
    if (t->data.format == TJ_DATA_TEXT && m->vocab > 0 && m->vocab < TJ_TEXT_VOCAB)
        tj_errors_add(errs, "%s.model.vocab: %d is below %d, the byte vocabulary of text data%s", sp, m->vocab,
                      TJ_TEXT_VOCAB, t->data.is_demo ? " (the demo corpus is used when training.data is omitted)" : "");
    if (t->checkpoint.every_steps > 0 && !t->checkpoint.path[0])
        tj_errors_add(errs, "%s.training.checkpoint.path: required when everySteps is set", sp);

    const struct tj_emulation *em = &s->emulation;
    if (em->enabled) {
        long long sum = 0;
        for (int i = 0; i < em->n_groups; i++) {
            sum += em->groups[i].count;
            for (int k = 0; k < i; k++)
                if (!strcmp(em->groups[i].fabric, em->groups[k].fabric) &&
                    strcmp(em->groups[i].cls, em->groups[k].cls))
                    tj_errors_add(errs, "%s.emulation.nics[%d].class: fabric \"%s\" is %s in nics[%d]; one fabric "
                                  "has one class", sp, i, em->groups[i].fabric, em->groups[k].cls, k);
        }
        if (sum != s->workers)
            tj_errors_add(errs, "%s.emulation.nics: counts sum to %lld, but workers is %d", sp, sum, s->workers);
    }
    return errs->count == before ? 0 : -1;
}

int tj_spec_runnable(const struct tj_spec *s, const char *path, struct tj_errors *errs)
{
    const char *sp = path ? path : "spec";
    int before = errs->count;
    if (s->gpus_per_worker > 1)
        tj_errors_add(errs, "%s.gpusPerWorker: %d: workers with several GPUs each are not supported by "
                      "the coordinator yet (one rank per worker); run one worker per GPU (gpusPerWorker 1)",
                      sp, s->gpus_per_worker);
    if (s->training.precision == DTYPE_BF16)
        tj_errors_add(errs, "%s.training.precision: bf16 is not supported by the workers yet: holmes-node "
                      "worker trains with the CPU engine in fp32 (the bf16 GPU engine is not wired into "
                      "it); use fp32", sp);
    return errs->count == before ? 0 : -1;
}

/* ---------------------------------------------------------------- whole objects */

static int is_dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 52)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
            return 0;
    return isalnum((unsigned char)s[0]) && isalnum((unsigned char)s[n - 1]);
}

int tj_job_from_json(const cJSON *obj, struct tj_job *out, struct tj_errors *errs)
{
    int before = errs->count;
    memset(out, 0, sizeof *out);
    tj_spec_defaults(&out->spec);
    if (!cJSON_IsObject(obj)) {
        tj_errors_add(errs, "document: must be an object, got %s", obj ? json_type_name(obj) : "nothing");
        return -1;
    }
    const cJSON *av = member(obj, "apiVersion"), *kind = member(obj, "kind");
    if (!av)
        tj_errors_add(errs, "apiVersion: required (%s)", HOLMES_API_VERSION);
    else if (!cJSON_IsString(av) || strcmp(av->valuestring, HOLMES_API_VERSION))
        tj_errors_add(errs, "apiVersion: must be %s", HOLMES_API_VERSION);
    if (!kind)
        tj_errors_add(errs, "kind: required (TrainingJob)");
    else if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "TrainingJob"))
        tj_errors_add(errs, "kind: must be TrainingJob");
    const cJSON *md = get_object(obj, "", "metadata", 1, errs);
    if (md) {
        const cJSON *name = member(md, "name");
        if (!name)
            tj_errors_add(errs, "metadata.name: required");
        else if (!cJSON_IsString(name))
            tj_errors_add(errs, "metadata.name: must be a string, got %s", json_type_name(name));
        else if (!is_dns_label(name->valuestring))
            tj_errors_add(errs, "metadata.name: \"%.60s\" must be 1-52 lowercase letters, digits or '-', starting "
                          "and ending with a letter or digit", name->valuestring);
        else
            snprintf(out->name, sizeof out->name, "%s", name->valuestring);
        const cJSON *ns = member(md, "namespace");
        if (ns && (!cJSON_IsString(ns) || strlen(ns->valuestring) >= sizeof out->namespace_))
            tj_errors_add(errs, "metadata.namespace: must be a string of at most %zu characters",
                          sizeof out->namespace_ - 1);
        else if (ns)
            snprintf(out->namespace_, sizeof out->namespace_, "%s", ns->valuestring);
        const cJSON *uid = member(md, "uid");
        if (cJSON_IsString(uid))
            snprintf(out->uid, sizeof out->uid, "%s", uid->valuestring);
        const cJSON *gen = member(md, "generation");
        if (cJSON_IsNumber(gen))
            out->generation = (long long)gen->valuedouble;
    }
    const cJSON *spec = member(obj, "spec");
    if (!spec)
        tj_errors_add(errs, "spec: required");
    else
        tj_spec_from_json(spec, "spec", &out->spec, errs);
    /* The "." that get_object put before top-level keys reads oddly; errors name "metadata" directly. */
    for (int i = before; i < errs->count && i < TJ_MAX_ERRORS; i++)
        if (errs->msg[i][0] == '.')
            memmove(errs->msg[i], errs->msg[i] + 1, strlen(errs->msg[i]));
    return errs->count == before ? 0 : -1;
}

/* ---------------------------------------------------------------- JSON out */

static cJSON *num(cJSON *o, const char *k, double v) { return cJSON_AddNumberToObject(o, k, v); }
static cJSON *str(cJSON *o, const char *k, const char *v) { return cJSON_AddStringToObject(o, k, v); }

cJSON *tj_spec_to_json(const struct tj_spec *s)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = 1;
    ok &= !!num(o, "workers", s->workers);
    ok &= !!num(o, "gpusPerWorker", s->gpus_per_worker);
    if (s->image[0])
        ok &= !!str(o, "image", s->image);

    cJSON *m = cJSON_AddObjectToObject(o, "model");
    ok &= !!m;
    if (m) {
        if (s->model.preset[0])
            ok &= !!str(m, "preset", s->model.preset);
        ok &= !!num(m, "layers", s->model.layers);
        ok &= !!num(m, "hidden", s->model.hidden);
        ok &= !!num(m, "heads", s->model.heads);
        ok &= !!num(m, "vocab", s->model.vocab);
        ok &= !!num(m, "seqLen", s->model.seq_len);
    }
    cJSON *p = cJSON_AddObjectToObject(o, "parallelism");
    ok &= !!p;
    if (p) {
        ok &= !!num(p, "tensor", s->par.tensor);
        ok &= s->par.pipeline == TJ_AUTO ? !!str(p, "pipeline", "auto") : !!num(p, "pipeline", s->par.pipeline);
        ok &= s->par.data == TJ_AUTO ? !!str(p, "data", "auto") : !!num(p, "data", s->par.data);
        ok &= !!num(p, "microBatches", s->par.micro_batches);
        ok &= !!num(p, "microBatchSize", s->par.micro_batch_size);
        ok &= !!str(p, "schedule", schedule_name(s->par.schedule));
        ok &= !!str(p, "pipelineDtype", dtype_name(s->par.pipeline_dtype));
        ok &= !!str(p, "paramGatherDtype", dtype_name(s->par.param_gather_dtype));
    }
    cJSON *pl = cJSON_AddObjectToObject(o, "placement");
    ok &= !!pl;
    if (pl) {
        ok &= !!str(pl, "policy", policy_name(s->placement.policy));
        if (s->placement.cross_fabric_gbps > 0)
            ok &= !!num(pl, "crossFabricGbps", s->placement.cross_fabric_gbps);
        if (s->placement.n_fabrics > 0) {
            cJSON *fa = cJSON_AddArrayToObject(pl, "fabrics");
            ok &= !!fa;
            for (int i = 0; fa && i < s->placement.n_fabrics; i++) {
                cJSON *f = cJSON_CreateObject();
                ok &= !!f;
                if (!f)
                    break;
                cJSON_AddItemToArray(fa, f);
                ok &= !!str(f, "fabric", s->placement.fabrics[i].fabric);
                ok &= !!num(f, "gbps", s->placement.fabrics[i].gbps);
            }
        }
    }
    const struct tj_training *t = &s->training;
    cJSON *tr = cJSON_AddObjectToObject(o, "training");
    ok &= !!tr;
    if (tr) {
        ok &= !!num(tr, "steps", (double)t->steps);
        cJSON *op = cJSON_AddObjectToObject(tr, "optimizer");
        ok &= !!op;
        if (op) {
            ok &= !!num(op, "lr", t->opt.lr);
            ok &= !!num(op, "warmupSteps", t->opt.warmup_steps);
            ok &= !!str(op, "schedule", tj_lr_schedule_name(t->opt.schedule));
            ok &= !!num(op, "minLrRatio", t->opt.min_lr_ratio);
            ok &= !!num(op, "beta1", t->opt.beta1);
            ok &= !!num(op, "beta2", t->opt.beta2);
            ok &= !!num(op, "eps", t->opt.eps);
            ok &= !!num(op, "weightDecay", t->opt.weight_decay);
            ok &= !!num(op, "gradClip", t->opt.grad_clip);
        }
        ok &= !!str(tr, "precision", dtype_name(t->precision));
        ok &= !!num(tr, "seed", (double)t->seed);
        if (!t->data.is_demo) {
            cJSON *d = cJSON_AddObjectToObject(tr, "data");
            ok &= d && str(d, "path", t->data.path) && str(d, "format", tj_data_format_name(t->data.format));
        }
        cJSON *c = cJSON_AddObjectToObject(tr, "checkpoint");
        ok &= !!c;
        if (c) {
            if (t->checkpoint.path[0])
                ok &= !!str(c, "path", t->checkpoint.path);
            ok &= !!num(c, "everySteps", t->checkpoint.every_steps);
            ok &= !!num(c, "keep", t->checkpoint.keep);
        }
        if (t->init_from[0])
            ok &= !!str(tr, "initFrom", t->init_from);
        ok &= !!num(tr, "logEverySteps", t->log_every_steps);
    }
    ok &= !!num(o, "gangTimeoutSeconds", s->gang_timeout_seconds);
    cJSON *rp = cJSON_AddObjectToObject(o, "restartPolicy");
    ok &= rp && num(rp, "maxRestarts", s->restart.max_restarts) && num(rp, "backoffSeconds", s->restart.backoff_seconds);
    ok &= !!cJSON_AddBoolToObject(o, "suspend", s->suspend);
    if (s->emulation.enabled) {
        const struct tj_emulation *em = &s->emulation;
        cJSON *e = cJSON_AddObjectToObject(o, "emulation");
        ok &= !!e;
        if (e) {
            cJSON *na = cJSON_AddArrayToObject(e, "nics");
            ok &= !!na;
            for (int i = 0; na && i < em->n_groups; i++) {
                cJSON *g = cJSON_CreateObject();
                ok &= !!g;
                if (!g)
                    break;
                cJSON_AddItemToArray(na, g);
                ok &= str(g, "class", em->groups[i].cls) && str(g, "fabric", em->groups[i].fabric) &&
                      num(g, "gbps", em->groups[i].gbps) && num(g, "count", em->groups[i].count);
            }
            ok &= num(e, "crossFabricGbps", em->cross_fabric_gbps) && num(e, "bandwidthScale", em->bandwidth_scale);
        }
    }
    if (s->pod_template) {
        cJSON *tp = cJSON_Duplicate(s->pod_template, 1);
        ok &= !!tp;
        if (tp)
            cJSON_AddItemToObject(o, "template", tp);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

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
