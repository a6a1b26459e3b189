/* The planner's output: plan_to_json, the `holmes-operator plan --json` report (docs/planner.md),
 * and plan_to_doc, the plan document both binaries speak (common/plan_doc.h). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

static cJSON *breakdown_json(const struct cost_breakdown *b)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = cJSON_AddNumberToObject(o, "compute", b->compute) &&
             cJSON_AddNumberToObject(o, "tp_comm", b->tp_comm) &&
             cJSON_AddNumberToObject(o, "pp_comm", b->pp_comm) &&
             cJSON_AddNumberToObject(o, "bubble", b->bubble) &&
             cJSON_AddNumberToObject(o, "dp_comm", b->dp_comm) &&
             cJSON_AddNumberToObject(o, "optimizer", b->optimizer);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int add_str(cJSON *o, const char *k, const char *v)
{
    return cJSON_AddStringToObject(o, k, v) != NULL;
}

static int add_num(cJSON *o, const char *k, double v)
{
    return cJSON_AddNumberToObject(o, k, v) != NULL;
}

/* "stages": each stage's layers, fabric, times, memory and workers. 1, or 0 out of memory. */
static int add_stages(cJSON *o, const struct plan *p)
{
    cJSON *stages = cJSON_AddArrayToObject(o, "stages");
    int ok = stages != NULL;
    for (int s = 0; ok && s < p->n_stages; s++) {
        const struct plan_stage *st = &p->stages[s];
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(stages, x);
        if (!ok) {
            cJSON_Delete(x);
            break;
        }
        cJSON *ly = cJSON_AddArrayToObject(x, "layers");
        cJSON *ws = cJSON_AddArrayToObject(x, "workers");
        ok = add_num(x, "stage", s) && ly && ws &&
             cJSON_AddItemToArray(ly, cJSON_CreateNumber(st->first_layer)) &&
             cJSON_AddItemToArray(ly, cJSON_CreateNumber(st->last_layer)) &&
             add_str(x, "fabric", st->fabric) && add_num(x, "tflops", st->tflops) &&
             add_num(x, "forward_seconds", st->fwd_s) && add_num(x, "backward_seconds", st->bwd_s) &&
             add_num(x, "data_parallel_seconds", st->dp_s) &&
             add_num(x, "memory_gbps", st->memory_gbps) &&
             add_num(x, "optimizer_seconds", st->optimizer_s) &&
             add_num(x, "memory_gb", st->memory_gb) &&
             add_num(x, "link_seconds", st->link_s) && add_num(x, "gather_seconds", st->gather_s);
        cJSON *mp = ok ? cJSON_AddObjectToObject(x, "memory_bytes") : NULL;
        ok = ok && mp && add_num(mp, "weights_grads", st->memory.weights_grads) &&
             add_num(mp, "optimizer", st->memory.optimizer) &&
             add_num(mp, "activations", st->memory.activations) &&
             add_num(mp, "logits", st->memory.logits) && add_num(mp, "scratch", st->memory.scratch) &&
             add_num(mp, "pipeline", st->memory.pipeline) && add_num(mp, "slots", st->memory.slots);
        /* workers of the stage, each once, in rank order */
        int prev = -1;
        for (int d = 0; ok && d < p->data; d++)
            for (int r = 0; ok && r < p->tensor; r++) {
                int w = p->ranks[plan_rank_of(p, s, d, r)].worker;
                if (w == prev)
                    continue;
                prev = w;
                ok = cJSON_AddItemToArray(ws, cJSON_CreateString(p->workers[w].name));
            }
    }
    return ok;
}

/* "workers": each rank's worker, place in the plan and NIC. 1, or 0 out of memory. */
static int add_workers(cJSON *o, const struct plan *p)
{
    cJSON *wk = cJSON_AddArrayToObject(o, "workers");
    int ok = wk != NULL;
    for (int r = 0; ok && r < p->n_ranks; r++) {
        const struct plan_rank *rk = &p->ranks[r];
        const struct plan_worker *w = &p->workers[rk->worker];
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(wk, x);
        if (!ok) {
            cJSON_Delete(x);
            break;
        }
        const struct plan_stage *st = &p->stages[rk->stage];
        cJSON *ly = cJSON_AddArrayToObject(x, "layers");
        ok = add_str(x, "name", w->name) && add_num(x, "rank", r) &&
             add_num(x, "local_rank", rk->local) && add_num(x, "stage", rk->stage) &&
             add_num(x, "dp_rank", rk->dp_rank) && add_num(x, "tp_rank", rk->tp_rank) && ly &&
             cJSON_AddItemToArray(ly, cJSON_CreateNumber(st->first_layer)) &&
             cJSON_AddItemToArray(ly, cJSON_CreateNumber(st->last_layer)) &&
             add_str(x, "fabric", w->nic.fabric);
        cJSON *nic = ok ? nic_summary_to_json(&w->nic) : NULL;
        ok = ok && nic && cJSON_AddItemToObject(x, "nic", nic);
        if (!ok && nic)
            cJSON_Delete(nic);
    }
    return ok;
}

/* "groups": each communicator's kind, transport and members. 1, or 0 out of memory. */
static int add_groups(cJSON *o, const struct plan *p)
{
    cJSON *gs = cJSON_AddArrayToObject(o, "groups");
    int ok = gs != NULL;
    for (int g = 0; ok && g < p->n_groups; g++) {
        const struct plan_group *gr = &p->groups[g];
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(gs, x);
        if (!ok) {
            cJSON_Delete(x);
            break;
        }
        cJSON *mem = cJSON_AddArrayToObject(x, "members");
        cJSON *rk = cJSON_AddArrayToObject(x, "ranks");
        ok = add_str(x, "kind", group_kind_name(gr->kind)) && mem && rk &&
             add_str(x, "transport", transport_name(gr->transport.kind)) &&
             add_str(x, "nccl_net", gr->transport.nccl_net) &&
             cJSON_AddBoolToObject(x, "intra_node", gr->transport.intra_node);
        if (ok && gr->stage >= 0)
            ok = add_num(x, "stage", gr->stage);
        if (ok && gr->transport.gid_index >= 0)
            ok = add_num(x, "gid_index", gr->transport.gid_index);
        if (ok && gr->transport.reason[0])
            ok = add_str(x, "reason", gr->transport.reason);
        if (ok && (gr->kind == GROUP_LINK || gr->kind == GROUP_EMBEDDING) && gr->nic_share > 0)
            ok = add_num(x, "gbps", gr->gbps) && add_num(x, "nic_share", gr->nic_share);
        for (int i = 0; ok && i < gr->n; i++)
            ok = cJSON_AddItemToArray(mem, cJSON_CreateString(
                                               p->workers[p->ranks[gr->members[i]].worker].name)) &&
                 cJSON_AddItemToArray(rk, cJSON_CreateNumber(gr->members[i]));
    }
    return ok;
}

/* "pipeline_links": per stage boundary, its links by transport, the slowest one's Gb/s and one
 * micro-batch's transfer on it. 1, or 0 out of memory. */
static int add_pipeline_links(cJSON *o, const struct plan *p)
{
    cJSON *a = cJSON_AddArrayToObject(o, "pipeline_links");
    int ok = a != NULL;
    for (int s = 0; ok && s + 1 < p->pipeline; s++) {
        struct plan_boundary b;
        plan_boundary_links(p, s, &b);
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(a, x);
        if (!ok) {
            cJSON_Delete(x);
            break;
        }
        ok = add_num(x, "stage", s) && add_num(x, "to_stage", s + 1) &&
             add_str(x, "transport", b.mixed ? "mixed" : transport_name(b.kind)) &&
             add_num(x, "ib", b.n[TRANSPORT_IB]) && add_num(x, "roce", b.n[TRANSPORT_ROCE]) &&
             add_num(x, "socket", b.n[TRANSPORT_SOCKET]) && add_num(x, "gbps", b.gbps) &&
             add_num(x, "seconds", b.seconds) &&
             cJSON_AddBoolToObject(x, "intra_node", b.intra_node);
        if (ok && b.reason[0])
            ok = add_str(x, "reason", b.reason);
    }
    return ok;
}

/* "candidates": the best shapes the search found. 1, or 0 out of memory. */
static int add_candidates(cJSON *o, const struct plan *p)
{
    cJSON *top = cJSON_AddArrayToObject(o, "candidates");
    int ok = top != NULL;
    for (int i = 0; ok && i < p->n_top; i++) {
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(top, x);
        if (!ok) {
            cJSON_Delete(x);
            break;
        }
        ok = add_num(x, "pipeline", p->top[i].pipeline) && add_num(x, "data", p->top[i].data) &&
             add_num(x, "micro_batches", p->top[i].micro_batches) &&
             add_num(x, "micro_batch_size", p->top[i].micro_batch_size) &&
             add_num(x, "step_seconds", p->top[i].step_s) &&
             add_num(x, "tokens_per_second", p->top[i].tokens_per_s);
    }
    return ok;
}

/* token_slices: what the planner decided about TeraPipe slicing, beside the unsliced step:
 * {count, lengths, predicted_step_seconds, unsliced_step_seconds, chosen_by}; with auto
 * rejecting a slicing, count 1 and the rejected try. Absent when the job asked for none. */
static int add_slices(cJSON *o, const struct plan *p)
{
    if (p->slices <= 1 && !p->slices_auto)
        return 1;
    cJSON *ts = cJSON_AddObjectToObject(o, "token_slices");
    int ok = ts && add_num(ts, "count", p->slices > 1 ? p->slices : 1) &&
             add_str(ts, "chosen_by", p->slices_auto ? "planner" : "spec") &&
             add_num(ts, "predicted_step_seconds", p->step_s) &&
             add_num(ts, "unsliced_step_seconds", p->unsliced_step_s);
    cJSON *len = ok ? cJSON_AddArrayToObject(ts, "lengths") : NULL;
    ok = ok && len;
    for (int k = 0; ok && k < p->slices; k++)
        ok = cJSON_AddItemToArray(len, cJSON_CreateNumber(p->slice_bounds[k + 1] - p->slice_bounds[k]));
    if (ok && p->auto_rejected_slices > 1)
        ok = add_num(ts, "rejected_count", p->auto_rejected_slices) &&
             add_num(ts, "rejected_step_seconds", p->sliced_step_s);
    return ok;
}

cJSON *plan_to_json(const struct plan *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = add_str(o, "policy", policy_name(p->policy)) &&
             add_num(o, "predicted_step_seconds", p->step_s) &&
             add_num(o, "tokens_per_second", p->tokens_per_s);
    cJSON *br = ok ? breakdown_json(&p->breakdown) : NULL;
    ok = ok && br && cJSON_AddItemToObject(o, "breakdown", br);
    if (!ok && br)
        cJSON_Delete(br);
    cJSON *par = ok ? cJSON_AddObjectToObject(o, "parallelism") : NULL;
    ok = ok && par && add_num(par, "tensor", p->tensor) && add_num(par, "pipeline", p->pipeline) &&
         add_num(par, "data", p->data) && add_num(par, "micro_batches", p->micro_batches) &&
         add_num(par, "micro_batch_size", p->micro_batch_size) &&
         add_str(par, "schedule", p->schedule == SCHED_GPIPE ? "gpipe" : "1f1b");
    /* at the top, where the plan document (common/plan_doc.h) has it */
    ok = ok && add_num(o, "warmup_extra", p->warmup_extra);
    ok = ok && add_slices(o, p);
    ok = ok && add_stages(o, p);
    ok = ok && add_workers(o, p);
    ok = ok && add_groups(o, p);
    ok = ok && add_pipeline_links(o, p);
    cJSON *bl = ok ? cJSON_AddObjectToObject(o, "baselines") : NULL;
    ok = ok && bl && add_num(bl, "naive", p->baseline_naive_s) &&
         add_num(bl, "ethernet", p->baseline_ethernet_s);
    ok = ok && add_num(o, "socket_groups", p->n_socket_groups) &&
         cJSON_AddBoolToObject(o, "homogeneous_possible", p->homogeneous_possible);
    ok = ok && add_candidates(o, p);
    cJSON *lk = ok ? cost_links_to_json(&p->links) : NULL;
    ok = ok && lk && cJSON_AddItemToObject(o, "links", lk);
    if (!ok && lk)
        cJSON_Delete(lk);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Group g of the plan into the document's group d->groups[d->ngroups - 1]. */
static int group_to_doc(const struct plan_group *gr, struct plan_doc *d, herr *e)
{
    if (plan_doc_add_group(d, gr->kind, gr->stage, gr->n, e))
        return -1;
    struct plan_doc_group *g = &d->groups[d->ngroups - 1];
    for (int i = 0; i < gr->n; i++)
        g->members[i] = gr->members[i];
    g->transport = gr->transport.kind;
    snprintf(g->nccl_net, sizeof g->nccl_net, "%s", gr->transport.nccl_net);
    g->gid_index = gr->transport.gid_index;
    return 0;
}

int plan_to_doc(const struct plan *p, struct plan_doc *d, herr *e)
{
    if (plan_doc_init(d, p->tensor, p->pipeline, p->data, e))
        return -1;
    d->stage_first = calloc((size_t)p->n_stages, sizeof(int));
    d->stage_last = calloc((size_t)p->n_stages, sizeof(int));
    if (!d->stage_first || !d->stage_last) {
        plan_doc_free(d);
        return herr_set(e, "out of memory for the plan document");
    }
    for (int s = 0; s < p->n_stages; s++) {
        d->stage_first[s] = p->stages[s].first_layer;
        d->stage_last[s] = p->stages[s].last_layer;
    }
    if (p->slices > 1) {
        d->slice_bounds = malloc(((size_t)p->slices + 1) * sizeof(int));
        if (!d->slice_bounds) {
            plan_doc_free(d);
            return herr_set(e, "out of memory for the plan document");
        }
        memcpy(d->slice_bounds, p->slice_bounds, ((size_t)p->slices + 1) * sizeof(int));
        d->slices = p->slices;
    }
    d->warmup_extra = p->warmup_extra;
    for (int r = 0; r < p->n_ranks; r++) {
        const struct plan_worker *w = &p->workers[p->ranks[r].worker];
        struct plan_doc_rank *k = &d->ranks[r];
        snprintf(k->name, sizeof k->name, "%s", w->name);
        k->local_rank = p->ranks[r].local;
        snprintf(k->fabric, sizeof k->fabric, "%s", w->nic.fabric);
        snprintf(k->ib_hca, sizeof k->ib_hca, "%s", w->nic.ib_hca);
        k->gid_index = w->nic.gid_index;
        snprintf(k->socket_ifname, sizeof k->socket_ifname, "%s", w->nic.socket_ifname);
    }
    for (int g = 0; g < p->n_groups; g++)
        if (group_to_doc(&p->groups[g], d, e)) {
            plan_doc_free(d);
            return -1;
        }
    if (plan_doc_complete(d, e)) {
        plan_doc_free(d);
        return herr_wrap(e, "the planner's groups");
    }
    return 0;
}
