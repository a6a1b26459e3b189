/* The TrainingJob parser: JSON field readers that report "field.path: rule broken", the spec
 * section by section over tj_spec_defaults, the cross-field rules, and the whole object
 * (tj_spec_from_json, tj_job_from_json). */
#include "trainingjob_impl.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "version.h"

#define TJ_MAX_SAFE_INT 9007199254740992.0 /* 2^53: every integer below is exact in JSON */

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
        if (!ok) {
            char field[400];
            json_key_path(field, sizeof field, path, c->string);
            tj_errors_add(errs, "%s: unknown field", field);
        }
    }
}

/* The member key of obj, of the type `is` checks (`what` names the type): 1 with *out; 0 when
 * absent, or -1 when it is required (said); -1 when of another type (said). */
static int typed_member(const cJSON *obj, const char *path, const char *key, int required,
                        cJSON_bool (*is)(const cJSON *), const char *what, const cJSON **out,
                        struct tj_errors *errs)
{
    const cJSON *v = member(obj, key);
    if (!v) {
        if (required)
            tj_errors_add(errs, "%s.%s: required", path, key);
        return required ? -1 : 0;
    }
    if (!is(v)) {
        tj_errors_add(errs, "%s.%s: must be %s, got %s", path, key, what, json_type_name(v));
        return -1;
    }
    *out = v;
    return 1;
}

/* An object member; absent/null gives NULL silently, a wrong type gives NULL and an error. */
static const cJSON *get_object(const cJSON *obj, const char *path, const char *key, int required,
                               struct tj_errors *errs)
{
    const cJSON *v = NULL;
    typed_member(obj, path, key, required, cJSON_IsObject, "an object", &v, errs);
    return v;
}

/* An integer in [min, max]. Returns 1 when present and valid, 0 when absent (out untouched),
 * -1 on error. */
static int get_int64(const cJSON *obj, const char *path, const char *key, long long min, long long max,
                     int required, long long *out, struct tj_errors *errs)
{
    const cJSON *v;
    int rc = typed_member(obj, path, key, required, cJSON_IsNumber, "an integer", &v, errs);
    if (rc != 1)
        return rc;
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
    const cJSON *v;
    int rc = typed_member(obj, path, key, 0, cJSON_IsNumber, "a number", &v, errs);
    if (rc != 1)
        return rc;
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
    const cJSON *v;
    int rc = typed_member(obj, path, key, 0, cJSON_IsBool, "true or false", &v, errs);
    if (rc != 1)
        return rc;
    *out = cJSON_IsTrue(v);
    return 1;
}

/* A string of 1..cap-1 bytes. */
static int get_str(const cJSON *obj, const char *path, const char *key, int required, char *out, size_t cap,
                   struct tj_errors *errs)
{
    const cJSON *v;
    int rc = typed_member(obj, path, key, required, cJSON_IsString, "a string", &v, errs);
    if (rc != 1)
        return rc;
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

/* ---------------------------------------------------------------- parsing */

/* ---------------------------------------------------------------- the spec, section by section */

/* A section of the spec that is an object: its key, whether it must be there, the keys it may
 * hold (NULL: any), and how its fields are read (o: the object, p: its path). */
struct section {
    const char *key;
    int required;
    const char *const *keys;
    void (*parse)(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs);
};

/* The section sec of obj (at path), its keys checked, read into s when it is there. */
static void parse_section(const cJSON *obj, const char *path, const struct section *sec,
                          struct tj_spec *s, struct tj_errors *errs)
{
    char p[300];
    join(p, sizeof p, path, sec->key);
    const cJSON *o = get_object(obj, path, sec->key, sec->required, errs);
    if (!o)
        return;
    if (sec->keys)
        check_keys(o, p, sec->keys, errs);
    sec->parse(o, p, s, errs);
}

/* The list at path.key (p: its path, without the key): NULL when absent, or, said, not a list
 * or longer than max (`what`: its entries, for the message). */
static const cJSON *get_list(const cJSON *o, const char *p, const char *key, int max,
                             const char *what, struct tj_errors *errs)
{
    const cJSON *l = member(o, key);
    if (!l)
        return NULL;
    if (!cJSON_IsArray(l)) {
        tj_errors_add(errs, "%s.%s: must be a list, got %s", p, key, json_type_name(l));
        return NULL;
    }
    int n = cJSON_GetArraySize(l);
    if (n > max) {
        tj_errors_add(errs, "%s.%s: %d %s exceed the maximum %d", p, key, n, what, max);
        return NULL;
    }
    return l;
}

/* Entry i of the list path.key: its path into ip; 1 when it is an object (its keys checked),
 * else 0 (said). */
static int list_entry(const cJSON *it, const char *p, const char *key, int i,
                      const char *const *keys, char *ip, size_t cap, struct tj_errors *errs)
{
    snprintf(ip, cap, "%s.%s[%d]", p, key, i);
    if (!cJSON_IsObject(it)) {
        tj_errors_add(errs, "%s: must be an object, got %s", ip, json_type_name(it));
        return 0;
    }
    check_keys(it, ip, keys, errs);
    return 1;
}

static void parse_model(const cJSON *m, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
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

static void parse_parallelism(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    get_int(o, p, "tensor", 1, 1024, 0, &s->par.tensor, errs);
    get_int_or_auto(o, p, "pipeline", 1024, &s->par.pipeline, errs);
    get_int_or_auto(o, p, "data", 1048576, &s->par.data, errs);
    get_int(o, p, "microBatches", 1, 65536, 0, &s->par.micro_batches, errs);
    get_int(o, p, "microBatchSize", 1, 65536, 0, &s->par.micro_batch_size, errs);
    get_int_or_auto(o, p, "tokenSlices", 131072, &s->par.token_slices, errs);
    int v;
    if (get_enum(o, p, "schedule", schedule_names, SCHED_COUNT, &v, errs) == 1)
        s->par.schedule = (enum schedule)v;
    if (get_enum(o, p, "pipelineDtype", dtype_names, DTYPE_API_COUNT, &v, errs) == 1)
        s->par.pipeline_dtype = (enum dtype)v;
    if (get_enum(o, p, "paramGatherDtype", dtype_names, DTYPE_API_COUNT, &v, errs) == 1)
        s->par.param_gather_dtype = (enum dtype)v;
}

static void parse_placement(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    int v;
    if (get_enum(o, p, "policy", policy_names, POLICY_API_COUNT, &v, errs) == 1)
        s->placement.policy = (enum policy)v;
    get_num(o, p, "crossFabricGbps", 0, 1, 100000, 0, &s->placement.cross_fabric_gbps, errs);
    const cJSON *f = get_list(o, p, "fabrics", TJ_MAX_FABRICS, "entries", errs);
    if (!f)
        return;
    static const char *const fkeys[] = {"fabric", "gbps", NULL};
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, f) {
        char ip[300];
        struct tj_fabric_bw *fb = &s->placement.fabrics[i];
        if (!list_entry(it, p, "fabrics", i++, fkeys, ip, sizeof ip, errs))
            continue;
        get_str(it, ip, "fabric", 1, fb->fabric, sizeof fb->fabric, errs);
        if (!member(it, "gbps"))
            tj_errors_add(errs, "%s.gbps: required", ip);
        get_num(it, ip, "gbps", 0, 1, 100000, 0, &fb->gbps, errs);
        for (struct tj_fabric_bw *k = s->placement.fabrics; k < fb; k++)
            if (fb->fabric[0] && !strcmp(fb->fabric, k->fabric))
                tj_errors_add(errs, "%s.fabric: \"%s\" is listed twice", ip, fb->fabric);
    }
    s->placement.n_fabrics = i;
}

static void parse_optimizer(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    struct tj_optimizer *op = &s->training.opt;
    int v;
    get_num(o, p, "lr", 0, 1, 10, 0, &op->lr, errs);
    get_int(o, p, "warmupSteps", 0, 1000000000, 0, &op->warmup_steps, errs);
    if (get_enum(o, p, "schedule", tj_lr_names, 4, &v, errs) == 1)
        op->schedule = (enum tj_lr_schedule)v;
    get_int(o, p, "decaySteps", 0, 1000000000, 0, &op->decay_steps, errs);
    get_num(o, p, "minLrRatio", 0, 0, 1, 0, &op->min_lr_ratio, errs);
    get_num(o, p, "beta1", 0, 0, 1, 1, &op->beta1, errs);
    get_num(o, p, "beta2", 0, 0, 1, 1, &op->beta2, errs);
    get_num(o, p, "eps", 0, 1, 1, 0, &op->eps, errs);
    get_num(o, p, "weightDecay", 0, 0, 10, 0, &op->weight_decay, errs);
    get_num(o, p, "gradClip", 0, 0, 1e6, 0, &op->grad_clip, errs);
}

static void parse_data(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    struct tj_data *d = &s->training.data;
    d->is_demo = 0;
    d->path[0] = '\0';
    d->format = TJ_DATA_LLMC;
    d->n_sources = 0;
    get_str(o, p, "path", 0, d->path, sizeof d->path, errs);
    int v;
    if (get_enum(o, p, "format", tj_format_names, 2, &v, errs) == 1)
        d->format = (enum tj_data_format)v;
    const cJSON *l = get_list(o, p, "sources", TJ_MAX_SOURCES, "sources", errs);
    static const char *const keys[] = {"path", "weight", NULL};
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, l) {
        char ip[300];
        struct tj_data_source *src = &d->sources[i];
        if (!list_entry(it, p, "sources", i++, keys, ip, sizeof ip, errs))
            continue;
        get_str(it, ip, "path", 1, src->path, sizeof src->path, errs);
        if (!member(it, "weight"))
            tj_errors_add(errs, "%s.weight: required", ip);
        get_num(it, ip, "weight", 0, 1, 1e6, 0, &src->weight, errs);
    }
    d->n_sources = i;
    if (member(o, "path") && l)
        tj_errors_add(errs, "%s: give path or sources, not both", p);
    else if (!member(o, "path") && !l)
        tj_errors_add(errs, "%s.path: required (or sources)", p);
    else if (l && i == 0)
        tj_errors_add(errs, "%s.sources: at least one source", p);
}

static void parse_checkpoint(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    struct tj_checkpoint *c = &s->training.checkpoint;
    get_str(o, p, "path", 0, c->path, sizeof c->path, errs);
    get_int(o, p, "everySteps", 0, 1000000000, 0, &c->every_steps, errs);
    get_int(o, p, "keep", 1, 1000, 0, &c->keep, errs);
}

static void parse_eval(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    struct tj_eval *ev = &s->training.eval;
    get_str(o, p, "path", 0, ev->path, sizeof ev->path, errs);
    get_num(o, p, "holdout", 0, 1, TJ_MAX_HOLDOUT, 0, &ev->holdout, errs);
    if (member(o, "path") && member(o, "holdout"))
        tj_errors_add(errs, "%s: give path (held-out files) or holdout (a share of training.data "
                      "kept out of training), not both", p);
    else if (!member(o, "path") && !member(o, "holdout"))
        tj_errors_add(errs, "%s.path: required (or holdout: a share of training.data kept out of "
                      "training)", p);
    int v;
    if (get_enum(o, p, "format", tj_format_names, 2, &v, errs) == 1)
        ev->format = (enum tj_data_format)v;
    get_int(o, p, "everySteps", 0, 1000000000, 0, &ev->every_steps, errs);
    get_int(o, p, "batches", 1, 65536, 0, &ev->batches, errs);
}

static const struct section TRAINING_SECTIONS[] = {
    {"optimizer", 0, (const char *const[]){"lr", "warmupSteps", "schedule", "decaySteps",
                                           "minLrRatio", "beta1",
                                           "beta2", "eps", "weightDecay", "gradClip", NULL},
     parse_optimizer},
    {"data", 0, (const char *const[]){"path", "format", "sources", NULL}, parse_data},
    {"checkpoint", 0, (const char *const[]){"path", "everySteps", "keep", NULL}, parse_checkpoint},
    {"eval", 0, (const char *const[]){"path", "holdout", "format", "everySteps", "batches", NULL},
     parse_eval},
};

static void parse_training(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
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
    get_int(o, p, "maxNonFiniteSteps", 0, 1000000, 0, &t->max_nonfinite_steps, errs);
    for (size_t i = 0; i < sizeof TRAINING_SECTIONS / sizeof *TRAINING_SECTIONS; i++)
        parse_section(o, p, &TRAINING_SECTIONS[i], s, errs);
}

static void parse_restart(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    get_int(o, p, "maxRestarts", 0, 100, 0, &s->restart.max_restarts, errs);
    get_int(o, p, "backoffSeconds", 0, 3600, 0, &s->restart.backoff_seconds, errs);
}

static void parse_elastic(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    s->elastic.enabled = 1;
    get_int(o, p, "minWorkers", 1, 4096, 0, &s->elastic.min_workers, errs);
    get_int(o, p, "replaceTimeoutSeconds", 1, 86400, 0, &s->elastic.replace_timeout_seconds, errs);
    get_bool(o, p, "scaleUp", &s->elastic.scale_up, errs);
}

static void parse_emulation(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    struct tj_emulation *em = &s->emulation;
    em->enabled = 1;
    get_num(o, p, "crossFabricGbps", 0, 1, 100000, 0, &em->cross_fabric_gbps, errs);
    get_num(o, p, "bandwidthScale", 0, 1, 1, 0, &em->bandwidth_scale, errs);
    get_bool(o, p, "gpus", &em->gpus, errs);
    if (!member(o, "nics")) {
        tj_errors_add(errs, "%s.nics: required", p);
        return;
    }
    const cJSON *nics = get_list(o, p, "nics", TJ_MAX_NIC_GROUPS, "groups", errs);
    if (!nics)
        return;
    if (cJSON_GetArraySize(nics) < 1) {
        tj_errors_add(errs, "%s.nics: needs at least one NIC group", p);
        return;
    }
    static const char *const gkeys[] = {"class", "fabric", "gbps", "count", NULL};
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, nics) {
        char ip[300];
        struct tj_nic_group *g = &em->groups[i];
        if (!list_entry(it, p, "nics", i++, gkeys, ip, sizeof ip, errs))
            continue;
        int v;
        if (!member(it, "class"))
            tj_errors_add(errs, "%s.class: required", ip);
        else if (get_enum(it, ip, "class", tj_class_names, 3, &v, errs) == 1)
            snprintf(g->cls, sizeof g->cls, "%s", tj_class_names[v]);
        get_str(it, ip, "fabric", 1, g->fabric, sizeof g->fabric, errs);
        if (!member(it, "gbps"))
            tj_errors_add(errs, "%s.gbps: required", ip);
        get_num(it, ip, "gbps", 0, 1, 100000, 0, &g->gbps, errs);
        get_int(it, ip, "count", 1, 65536, 1, &g->count, errs);
    }
    em->n_groups = i;
}

/* A queue or scheduler name: a DNS-1123 subdomain short enough for a label value (Kueue puts
 * the queue in one): 1-63 lowercase letters, digits, '-' or '.', letters or digits at both ends. */
static int is_sched_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= TJ_SCHED_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-' || s[i] == '.'))
            return 0;
    return isalnum((unsigned char)s[0]) && isalnum((unsigned char)s[n - 1]);
}

static void get_sched_name(const cJSON *o, const char *p, const char *key, char *out, struct tj_errors *errs)
{
    char v[256];
    if (get_str(o, p, key, 0, v, sizeof v, errs) != 1)
        return;
    if (!is_sched_name(v))
        tj_errors_add(errs, "%s.%s: \"%.60s\" must be 1-63 lowercase letters, digits, '-' or '.', starting "
                      "and ending with a letter or digit", p, key, v);
    else
        snprintf(out, TJ_SCHED_NAME_MAX, "%.*s", TJ_SCHED_NAME_MAX - 1, v);
}

static void parse_scheduling(const cJSON *o, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    struct tj_scheduling *sc = &s->scheduling;
    int v;
    if (get_enum(o, p, "gang", tj_gang_names + 1, TJ_GANG_COUNT - 1, &v, errs) == 1)
        sc->gang = (enum tj_gang)(v + 1);
    get_sched_name(o, p, "queue", sc->queue, errs);
    get_sched_name(o, p, "schedulerName", sc->scheduler_name, errs);
    get_int(o, p, "scheduleTimeoutSeconds", 1, 86400, 0, &sc->schedule_timeout_seconds, errs);
}

/* spec.template.spec: the fields the operator reads or merges, of the types it needs. */
static void parse_pod_spec(const cJSON *ps, const char *q, struct tj_spec *s, struct tj_errors *errs)
{
    (void)s;
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

static void parse_template(const cJSON *t, const char *p, struct tj_spec *s, struct tj_errors *errs)
{
    get_object(t, p, "metadata", 0, errs);
    static const struct section pod_spec = {"spec", 0, NULL, parse_pod_spec};
    parse_section(t, p, &pod_spec, s, errs);
    s->pod_template = cJSON_Duplicate(t, 1);
    if (!s->pod_template)
        tj_errors_add(errs, "%s: out of memory", p);
}

/* The spec's sections that are objects, in the order they are read (with the scalar fields
 * between them: errors come in the spec's order). */
enum { SEC_MODEL, SEC_PARALLELISM, SEC_PLACEMENT, SEC_TRAINING, SEC_RESTART, SEC_ELASTIC,
       SEC_EMULATION, SEC_SCHEDULING, SEC_TEMPLATE, SEC_COUNT };
static const struct section SPEC_SECTIONS[SEC_COUNT] = {
    [SEC_MODEL] = {"model", 1, (const char *const[]){"preset", "layers", "hidden", "heads", "vocab",
                                                     "seqLen", NULL}, parse_model},
    [SEC_PARALLELISM] = {"parallelism", 0,
                         (const char *const[]){"tensor", "pipeline", "data", "microBatches",
                                               "microBatchSize", "tokenSlices", "schedule",
                                               "pipelineDtype", "paramGatherDtype", NULL},
                         parse_parallelism},
    [SEC_PLACEMENT] = {"placement", 0, (const char *const[]){"policy", "fabrics", "crossFabricGbps",
                                                             NULL}, parse_placement},
    [SEC_TRAINING] = {"training", 1, (const char *const[]){"steps", "optimizer", "precision", "seed",
                                                           "data", "checkpoint", "eval",
                                                           "initFrom", "logEverySteps",
                                                           "maxNonFiniteSteps", NULL},
                      parse_training},
    [SEC_RESTART] = {"restartPolicy", 0, (const char *const[]){"maxRestarts", "backoffSeconds", NULL},
                     parse_restart},
    [SEC_ELASTIC] = {"elastic", 0, (const char *const[]){"minWorkers", "replaceTimeoutSeconds",
                                                         "scaleUp", NULL}, parse_elastic},
    [SEC_EMULATION] = {"emulation", 0, (const char *const[]){"nics", "crossFabricGbps",
                                                             "bandwidthScale", "gpus", NULL},
                       parse_emulation},
    [SEC_SCHEDULING] = {"scheduling", 0, (const char *const[]){"gang", "queue", "schedulerName",
                                                               "scheduleTimeoutSeconds", NULL},
                        parse_scheduling},
    [SEC_TEMPLATE] = {"template", 0, (const char *const[]){"metadata", "spec", NULL}, parse_template},
};

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
                                       "suspend", "emulation", "scheduling", "template", "elastic",
                                       "ttlSecondsAfterFinished", "activeDeadlineSeconds", NULL};
    check_keys(spec, sp, keys, errs);
    get_int(spec, sp, "workers", 1, 4096, 1, &out->workers, errs);
    get_int(spec, sp, "gpusPerWorker", 0, 16, 1, &out->gpus_per_worker, errs);
    get_str(spec, sp, "image", 0, out->image, sizeof out->image, errs);
    for (int i = SEC_MODEL; i <= SEC_TRAINING; i++)
        parse_section(spec, sp, &SPEC_SECTIONS[i], out, errs);
    get_int(spec, sp, "gangTimeoutSeconds", 1, 86400, 0, &out->gang_timeout_seconds, errs);
    get_int(spec, sp, "ttlSecondsAfterFinished", 0, TJ_TTL_MAX_S, 0, &out->ttl_after_finished_s, errs);
    get_int(spec, sp, "activeDeadlineSeconds", 1, TJ_TTL_MAX_S, 0, &out->active_deadline_s, errs);
    parse_section(spec, sp, &SPEC_SECTIONS[SEC_RESTART], out, errs);
    get_bool(spec, sp, "suspend", &out->suspend, errs);
    out->elastic.min_workers = out->workers; /* not elastic unless said */
    for (int i = SEC_ELASTIC; i < SEC_COUNT; i++)
        parse_section(spec, sp, &SPEC_SECTIONS[i], out, errs);
    add_cross_field_errors(out, sp, before, errs);
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
