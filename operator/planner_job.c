#include "planner_job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "yaml_json.h"

int planner_model_preset(const char *name, struct plan_model *m)
{
    static const struct {
        const char *name;
        struct plan_model m;
    } presets[] = {
        {"gpt2-124m", {12, 768, 12, 50257, 1024}},
        {"gpt2-350m", {24, 1024, 16, 50257, 1024}},
        {"gpt2-774m", {36, 1280, 20, 50257, 1024}},
        {"gpt2-1.5b", {48, 1600, 25, 50257, 1024}},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name)) {
            *m = presets[i].m;
            return 0;
        }
    return -1;
}

/* Integer member; `auto_ok`: the string "auto" gives 0. Absent: leaves *out unchanged. */
static int get_int(const cJSON *obj, const char *key, const char *where, int lo, int hi,
                   int auto_ok, int *out, herr *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (auto_ok && cJSON_IsString(v) && !strcmp(v->valuestring, "auto")) {
        *out = 0;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return herr_set(e, "%s.%s: must be an integer in [%d, %d]%s", where, key, lo, hi,
                        auto_ok ? " or auto" : "");
    *out = (int)v->valuedouble;
    return 0;
}

static const char *get_str(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int parse_model(const cJSON *mj, const char *where, struct plan_model *m, herr *e)
{
    if (!cJSON_IsObject(mj))
        return herr_set(e, "%s: required object (preset, or layers/hidden/heads/vocab/seqLen)",
                        where);
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(mj, "preset");
    memset(m, 0, sizeof *m);
    if (pv) {
        if (!cJSON_IsString(pv) || planner_model_preset(pv->valuestring, m))
            return herr_set(e, "%s.preset: must be one of gpt2-124m, gpt2-350m, gpt2-774m, "
                            "gpt2-1.5b", where);
    } else {
        m->vocab = 50257;
        m->seq = 1024;
    }
    if (get_int(mj, "layers", where, 1, 100000, 0, &m->layers, e) ||
        get_int(mj, "hidden", where, 1, 1 << 20, 0, &m->hidden, e) ||
        get_int(mj, "heads", where, 1, 1 << 16, 0, &m->heads, e) ||
        get_int(mj, "vocab", where, 1, 1 << 24, 0, &m->vocab, e) ||
        get_int(mj, "seqLen", where, 1, 1 << 24, 0, &m->seq, e))
        return -1;
    if (!m->layers || !m->hidden || !m->heads)
        return herr_set(e, "%s: give a preset or layers, hidden and heads", where);
    return 0;
}

int planner_job_from_json(const cJSON *doc, const char *where, struct planner_job *out, herr *e)
{
    char w[300];
    memset(out, 0, sizeof *out);
    plan_job_init(&out->job);
    if (!cJSON_IsObject(doc))
        return herr_set(e, "%s: must be a TrainingJob object", where);
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(doc, "spec");
    if (!cJSON_IsObject(spec))
        return herr_set(e, "%s.spec: required object", where);
    snprintf(w, sizeof w, "%s.spec", where);
    if (get_int(spec, "workers", w, 1, 1 << 20, 0, &out->workers, e) ||
        get_int(spec, "gpusPerWorker", w, 0, 1024, 0, &out->gpus_per_worker, e))
        return -1;
    snprintf(w, sizeof w, "%s.spec.model", where);
    if (parse_model(cJSON_GetObjectItemCaseSensitive(spec, "model"), w, &out->job.model, e))
        return -1;
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(spec, "parallelism");
    snprintf(w, sizeof w, "%s.spec.parallelism", where);
    if (par && !cJSON_IsObject(par))
        return herr_set(e, "%s: must be an object", w);
    if (par) {
        if (get_int(par, "tensor", w, 1, 1024, 0, &out->job.tensor, e) ||
            get_int(par, "pipeline", w, 1, 100000, 1, &out->job.pipeline, e) ||
            get_int(par, "data", w, 1, 1 << 20, 1, &out->job.data, e) ||
            get_int(par, "microBatches", w, 1, 65536, 0, &out->job.micro_batches, e) ||
            get_int(par, "microBatchSize", w, 1, 65536, 0, &out->job.micro_batch_size, e))
            return -1;
        const char *sch = get_str(par, "schedule");
        if (sch && !strcmp(sch, "gpipe"))
            out->job.schedule = COST_GPIPE;
        else if (sch && strcmp(sch, "1f1b"))
            return herr_set(e, "%s.schedule: must be 1f1b or gpipe", w);
    }
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(spec, "placement");
    snprintf(w, sizeof w, "%s.spec.placement", where);
    if (pl && !cJSON_IsObject(pl))
        return herr_set(e, "%s: must be an object", w);
    if (pl) {
        const char *pol = get_str(pl, "policy");
        if (cJSON_GetObjectItemCaseSensitive(pl, "policy") &&
            (!pol || plan_policy_parse(pol, &out->job.policy)))
            return herr_set(e, "%s.policy: must be holmes, naive or ethernet", w);
        const cJSON *part = cJSON_GetObjectItemCaseSensitive(pl, "partition");
        if (part) {
            int n = cJSON_GetArraySize(part);
            if (!cJSON_IsArray(part) || n < 1)
                return herr_set(e, "%s.partition: must be a non-empty list of layers per stage", w);
            out->pinned = malloc(sizeof(int) * (size_t)n);
            if (!out->pinned)
                return herr_set(e, "%s: out of memory", w);
            int i = 0;
            for (const cJSON *it = part->child; it; it = it->next, i++) {
                if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
                    it->valuedouble < 1 || it->valuedouble > 100000) {
                    planner_job_free(out);
                    return herr_set(e, "%s.partition[%d]: must be an integer in [1, 100000]", w,
                                    i);
                }
                out->pinned[i] = (int)it->valuedouble;
            }
            out->job.pinned = out->pinned;
            out->job.n_pinned = n;
        }
    }
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(spec, "training");
    const char *prec = cJSON_IsObject(tr) ? get_str(tr, "precision") : NULL;
    if (prec && plan_precision_parse(prec, &out->job.precision))
        return herr_set(e, "%s.spec.training.precision: must be fp32, bf16 or fp16", where);
    return 0;
}

int planner_job_load(const char *path, struct planner_job *out, herr *e)
{
    memset(out, 0, sizeof *out);
    cJSON *all = yaml_parse_file(path, e);
    if (!all)
        return -1;
    if (cJSON_GetArraySize(all) != 1) {
        herr_set(e, "%s: must hold exactly one TrainingJob (found %d documents)", path,
                 cJSON_GetArraySize(all));
        cJSON_Delete(all);
        return -1;
    }
    int rc = planner_job_from_json(cJSON_GetArrayItem(all, 0), path, out, e);
    cJSON_Delete(all);
    return rc;
}

void planner_job_free(struct planner_job *j)
{
    free(j->pinned);
    j->pinned = NULL;
    j->job.pinned = NULL;
}
