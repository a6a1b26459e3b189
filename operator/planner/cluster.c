#include "cluster.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "planner_job.h"
#include "yaml_json.h"

#define CLUSTER_MAX_WORKERS (1 << 20)

static const char *const worker_keys[] = {"name", "node", "gpus", "gpu_tflops", "tflops", "nic",
                                          "count", "gpu_memory_gb", "memory_gbps", "nics", NULL};

static int check_keys(const cJSON *obj, const char *const *keys, const char *where, herr *e)
{
    for (const cJSON *it = obj->child; it; it = it->next) {
        int known = 0;
        for (int i = 0; keys[i] && !known; i++)
            known = !strcmp(keys[i], it->string);
        if (!known) {
            char path[256];
            json_key_path(path, sizeof path, where, it->string);
            return herr_set(e, "%s: unknown field", path);
        }
    }
    return 0;
}

static int parse_worker(const cJSON *wj, const char *where, struct plan_worker *w, int *count,
                        herr *e)
{
    if (!cJSON_IsObject(wj))
        return herr_set(e, "%s: must be an object {name, gpus, gpu_tflops, nic}", where);
    if (check_keys(wj, worker_keys, where, e))
        return -1;
    memset(w, 0, sizeof *w);
    *count = 1;
    /* Names leave room for the "-<index>" a count adds. */
    if (json_str(wj, where, "name", JSON_REQUIRED, w->name, sizeof w->name - 8, e) ||
        json_str(wj, where, "node", JSON_OPTIONAL, w->node, sizeof w->node - 8, e) ||
        json_int32(wj, where, "gpus", JSON_OPTIONAL, 0, 1024, &w->gpus, e) ||
        json_int32(wj, where, "nics", JSON_OPTIONAL, 1, 1024, &w->nics, e) ||
        json_int32(wj, where, "count", JSON_OPTIONAL, 1, CLUSTER_MAX_WORKERS, count, e))
        return -1;
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(wj, "gpu_tflops");
    if (!tf)
        tf = cJSON_GetObjectItemCaseSensitive(wj, "tflops");
    if (!tf)
        return herr_set(e, "%s.gpu_tflops: required (TFLOPS per device, declared or measured)",
                        where);
    if (!cJSON_IsNumber(tf) || !isfinite(tf->valuedouble) || tf->valuedouble <= 0 ||
        tf->valuedouble > 1e6)
        return herr_set(e, "%s.gpu_tflops: must be a number in (0, 1000000]", where);
    w->tflops = tf->valuedouble;
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(wj, "gpu_memory_gb");
    if (mem && (!cJSON_IsNumber(mem) || !isfinite(mem->valuedouble) || mem->valuedouble <= 0 ||
                mem->valuedouble > 1e6))
        return herr_set(e, "%s.gpu_memory_gb: must be a number in (0, 1000000]", where);
    w->memory_gb = mem ? mem->valuedouble : 0;
    const cJSON *bw = cJSON_GetObjectItemCaseSensitive(wj, "memory_gbps");
    if (bw && (!cJSON_IsNumber(bw) || !isfinite(bw->valuedouble) || bw->valuedouble <= 0 ||
               bw->valuedouble > 1e6))
        return herr_set(e, "%s.memory_gbps: must be a number in (0, 1000000] (GB/s)", where);
    w->memory_gbps = bw ? bw->valuedouble : 0;
    const cJSON *nic = cJSON_GetObjectItemCaseSensitive(wj, "nic");
    char nw[256];
    snprintf(nw, sizeof nw, "%s.nic", where);
    if (!nic)
        return herr_set(e, "%s: required: every worker needs its NIC report (as `holmes-node nic "
                        "--json` prints it, or {class, fabric, gbps})", nw);
    return nic_summary_from_json(nic, nw, &w->nic, e);
}

int cluster_from_json(const cJSON *doc, const char *where, struct cluster *out, herr *e)
{
    memset(out, 0, sizeof *out);
    cost_links_default(&out->links);
    if (!cJSON_IsObject(doc))
        return herr_set(e, "%s: must be an object with `workers`", where);
    static const char *const top_keys[] = {"workers", "links", "apiVersion", "kind", "metadata",
                                           NULL};
    if (check_keys(doc, top_keys, where, e))
        return -1;
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(doc, "workers");
    if (!ws)
        return herr_set(e, "%s.workers: required (a list of workers)", where);
    if (!cJSON_IsArray(ws) || !cJSON_GetArraySize(ws))
        return herr_set(e, "%s.workers: must be a non-empty list", where);
    char lw[300];
    snprintf(lw, sizeof lw, "%s.links", where);
    if (cost_links_apply_json(&out->links, cJSON_GetObjectItemCaseSensitive(doc, "links"), lw, e))
        return -1;
    /* first pass: validate and count */
    long total = 0;
    int i = 0;
    struct plan_worker w;
    for (const cJSON *wj = ws->child; wj; wj = wj->next, i++) {
        char ww[300];
        int count;
        snprintf(ww, sizeof ww, "%s.workers[%d]", where, i);
        if (parse_worker(wj, ww, &w, &count, e))
            return -1;
        total += count;
        if (total > CLUSTER_MAX_WORKERS)
            return herr_set(e, "%s.workers: more than %d workers", where, CLUSTER_MAX_WORKERS);
    }
    out->workers = calloc((size_t)total, sizeof *out->workers);
    if (!out->workers)
        return herr_set(e, "%s: out of memory for %ld workers", where, total);
    i = 0;
    for (const cJSON *wj = ws->child; wj; wj = wj->next, i++) {
        char ww[300];
        int count;
        snprintf(ww, sizeof ww, "%s.workers[%d]", where, i);
        if (parse_worker(wj, ww, &w, &count, e)) {
            cluster_free(out);
            return -1;
        }
        for (int k = 0; k < count; k++) {
            struct plan_worker *d = &out->workers[out->n_workers++];
            *d = w;
            if (count > 1) {
                /* names are at most 55 characters, so "-k" always fits */
                int a = snprintf(d->name, sizeof d->name, "%s-%d", w.name, k);
                int b = w.node[0] ? snprintf(d->node, sizeof d->node, "%s-%d", w.node, k) : 0;
                if (a >= (int)sizeof d->name || b >= (int)sizeof d->node) {
                    cluster_free(out);
                    return herr_set(e, "%s.workers[%d]: name or node too long for count", where,
                                    i);
                }
            }
        }
    }
    return 0;
}

/* The single document of a YAML/JSON file. Caller deletes the returned array. */
static const cJSON *one_doc(const char *path, cJSON **all, herr *e)
{
    *all = yaml_parse_file(path, e);
    if (!*all)
        return NULL;
    if (cJSON_GetArraySize(*all) != 1) {
        herr_set(e, "%s: must hold exactly one document (found %d)", path,
                 cJSON_GetArraySize(*all));
        cJSON_Delete(*all);
        *all = NULL;
        return NULL;
    }
    return cJSON_GetArrayItem(*all, 0);
}

int cluster_load(const char *path, struct cluster *out, herr *e)
{
    memset(out, 0, sizeof *out);
    cJSON *all;
    const cJSON *doc = one_doc(path, &all, e);
    if (!doc)
        return -1;
    int rc = cluster_from_json(doc, path, out, e);
    cJSON_Delete(all);
    return rc;
}

int cluster_load_calibration(const char *path, struct cost_links *links, herr *e)
{
    cJSON *all;
    const cJSON *doc = one_doc(path, &all, e);
    if (!doc)
        return -1;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(doc, "links");
    char where[300];
    snprintf(where, sizeof where, "%s%s", path, l ? ".links" : "");
    int rc = cost_links_apply_json(links, l ? l : doc, where, e);
    cJSON_Delete(all);
    return rc;
}

int cluster_from_emulation(const struct tj_spec *s, double tflops, struct cluster *out, herr *e)
{
    memset(out, 0, sizeof *out);
    planner_links_from_spec(s, &out->links);
    const struct tj_emulation *em = &s->emulation;
    if (!em->enabled || em->n_groups < 1)
        return herr_set(e, "spec.emulation: absent; give --cluster FILE with the workers' NICs");
    long total = 0;
    for (int g = 0; g < em->n_groups; g++)
        total += em->groups[g].count;
    if (total < 1 || total > CLUSTER_MAX_WORKERS)
        return herr_set(e, "spec.emulation.nics: counts must sum to 1..%d workers",
                        CLUSTER_MAX_WORKERS);
    out->workers = calloc((size_t)total, sizeof *out->workers);
    if (!out->workers)
        return herr_set(e, "spec.emulation: out of memory");
    if (tflops <= 0)
        tflops = s->gpus_per_worker > 0 ? 100 : 0.05;
    for (int g = 0; g < em->n_groups; g++) {
        const struct tj_nic_group *ng = &em->groups[g];
        for (int k = 0; k < ng->count; k++) {
            struct plan_worker *w = &out->workers[out->n_workers];
            snprintf(w->name, sizeof w->name, "worker-%d", out->n_workers);
            out->n_workers++;
            w->gpus = s->gpus_per_worker;
            w->tflops = tflops;
            w->memory_gbps = s->gpus_per_worker > 0 && !em->gpus ? 0 : PLAN_CPU_MEMORY_GBPS;
            w->nic.gid_index = -1;
            if (nic_class_parse(ng->cls, &w->nic.cls)) {
                cluster_free(out);
                return herr_set(e, "spec.emulation.nics[%d].class: must be infiniband, roce or "
                                "ethernet", g);
            }
            snprintf(w->nic.fabric, sizeof w->nic.fabric, "%s", ng->fabric);
            w->nic.gbps = ng->gbps;
            if (w->nic.cls == NIC_ROCE)
                w->nic.gid_index = 3;
        }
    }
    return 0;
}

void cluster_free(struct cluster *c)
{
    free(c->workers);
    c->workers = NULL;
    c->n_workers = 0;
}
