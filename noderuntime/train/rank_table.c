#include "rank_table.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "yaml_json.h"

#define MAX_WORLD 4096

static int get_pacing(const cJSON *o, const char *key, const char *where, struct tcp_pacing *p,
                      herr *e)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    memset(p, 0, sizeof *p);
    if (!x)
        return 0;
    char w[160];
    snprintf(w, sizeof w, "%s.%s", where, key);
    if (!cJSON_IsObject(x))
        return herr_set(e, "%s must be an object {bytes_per_second, latency_us}", w);
    double lat = 0;
    p->bytes_per_sec = 0;
    if (json_num(x, w, "bytes_per_second", JSON_OPTIONAL, 0, DBL_MAX, &p->bytes_per_sec, e) != 0 ||
        json_num(x, w, "latency_us", JSON_OPTIONAL, 0, DBL_MAX, &lat, e) != 0)
        return -1;
    if (p->bytes_per_sec > 0 && p->bytes_per_sec < 1000)
        return herr_set(e, "%s.bytes_per_second must be 0 (unpaced) or at least 1000", w);
    p->latency_s = lat * 1e-6;
    return 0;
}

void rank_table_free(struct rank_table *rt)
{
    if (!rt)
        return;
    for (int g = 0; rt->groups && g < rt->ngroups; g++)
        free(rt->groups[g].members);
    free(rt->groups);
    free(rt->ranks);
    free(rt->stage_first);
    free(rt->stage_last);
    memset(rt, 0, sizeof *rt);
}

static int parse_transport(const char *s, enum transport *t)
{
    if (strcmp(s, "ib") == 0 || strcmp(s, "infiniband") == 0)
        *t = TRANSPORT_IB;
    else if (strcmp(s, "roce") == 0)
        *t = TRANSPORT_ROCE;
    else if (strcmp(s, "socket") == 0 || strcmp(s, "tcp") == 0)
        *t = TRANSPORT_SOCKET;
    else
        return -1;
    return 0;
}

static int add_group(struct rank_table *rt, enum group_kind kind, int stage, int n, herr *e)
{
    struct rt_group *g = realloc(rt->groups, (size_t)(rt->ngroups + 1) * sizeof *g);
    if (!g)
        return herr_set(e, "out of memory for the rank table groups");
    rt->groups = g;
    g = &rt->groups[rt->ngroups];
    memset(g, 0, sizeof *g);
    g->members = calloc((size_t)n, sizeof *g->members);
    if (!g->members)
        return herr_set(e, "out of memory for the rank table groups");
    rt->ngroups++;
    g->kind = kind;
    g->stage = stage;
    g->n = n;
    g->transport = TRANSPORT_SOCKET;
    snprintf(g->nccl_net, sizeof g->nccl_net, "Socket");
    g->gid_index = -1;
    return 0;
}

static int derive_groups(struct rank_table *rt, enum group_kind kind, herr *e)
{
    int P = rt->pipeline, D = rt->data;
    if (kind == GROUP_DP) {
        for (int s = 0; s < P; s++) {
            if (add_group(rt, GROUP_DP, s, D, e) != 0)
                return -1;
            for (int d = 0; d < D; d++)
                rt->groups[rt->ngroups - 1].members[d] = d + D * s;
        }
    } else if (kind == GROUP_PP) {
        for (int d = 0; d < D; d++) {
            if (add_group(rt, GROUP_PP, -1, P, e) != 0)
                return -1;
            for (int s = 0; s < P; s++)
                rt->groups[rt->ngroups - 1].members[s] = d + D * s;
        }
    } else if (P > 1) {
        for (int d = 0; d < D; d++) {
            if (add_group(rt, GROUP_EMBEDDING, -1, 2, e) != 0)
                return -1;
            rt->groups[rt->ngroups - 1].members[0] = d;
            rt->groups[rt->ngroups - 1].members[1] = d + D * (P - 1);
        }
    }
    return 0;
}

static int parse_group(struct rank_table *rt, const cJSON *x, const char *w, herr *e)
{
    char kind[32] = "", tr[32] = "socket";
    if (!cJSON_IsObject(x))
        return herr_set(e, "%s must be an object", w);
    if (json_str(x, w, "kind", JSON_REQUIRED, kind, sizeof kind, e) != 0 ||
        json_str(x, w, "transport", JSON_OPTIONAL, tr, sizeof tr, e) != 0)
        return -1;
    if (!tr[0])
        snprintf(tr, sizeof tr, "socket");
    enum group_kind k;
    if (strcmp(kind, "dp") == 0)
        k = GROUP_DP;
    else if (strcmp(kind, "pp") == 0)
        k = GROUP_PP;
    else if (strcmp(kind, "embedding") == 0)
        k = GROUP_EMBEDDING;
    else if (strcmp(kind, "tp") == 0)
        return herr_set(e, "%s.kind: tensor-parallel groups are not supported by the CPU engine", w);
    else
        return herr_set(e, "%s.kind '%s' is not one of dp, pp, embedding", w, kind);
    const cJSON *rk = cJSON_GetObjectItemCaseSensitive(x, "ranks");
    if (!cJSON_IsArray(rk) || cJSON_GetArraySize(rk) < 1)
        return herr_set(e, "%s.ranks must be a non-empty array of global ranks", w);
    int n = cJSON_GetArraySize(rk);
    if (add_group(rt, k, -1, n, e) != 0)
        return -1;
    struct rt_group *g = &rt->groups[rt->ngroups - 1];
    if (parse_transport(tr, &g->transport) != 0)
        return herr_set(e, "%s.transport '%s' is not one of ib, roce, socket", w, tr);
    snprintf(g->nccl_net, sizeof g->nccl_net, "%s", g->transport == TRANSPORT_SOCKET ? "Socket" : "IB");
    char net[sizeof g->nccl_net];
    g->gid_index = -1;
    if (json_str(x, w, "nccl_net", JSON_OPTIONAL, net, sizeof net, e) != 0 ||
        json_int32(x, w, "gid_index", JSON_OPTIONAL, -1, 255, &g->gid_index, e) != 0 ||
        get_pacing(x, "pacing", w, &g->pacing, e) != 0)
        return -1;
    if (net[0])
        snprintf(g->nccl_net, sizeof g->nccl_net, "%s", net);
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, rk)
    {
        if (!cJSON_IsNumber(m) || m->valuedouble != floor(m->valuedouble) || m->valuedouble < 0 ||
            m->valuedouble >= rt->world)
            return herr_set(e, "%s.ranks[%d] must be a rank in 0..%d", w, i, rt->world - 1);
        g->members[i++] = (int)m->valuedouble;
    }
    return 0;
}

/* Every rank in exactly one group of each kind, with the layout's sizes and order. */
static int check_groups(const struct rank_table *rt, herr *e)
{
    int P = rt->pipeline, D = rt->data;
    for (int k = GROUP_DP; k <= GROUP_EMBEDDING; k++) {
        if (k == GROUP_TP || (k == GROUP_EMBEDDING && P == 1))
            continue; /* the CPU engine has no tensor groups */
        for (int r = 0; r < rt->world; r++) {
            int s = rank_table_stage(rt, r);
            int needs = k != GROUP_EMBEDDING || s == 0 || s == P - 1;
            int count = 0;
            for (int g = 0; g < rt->ngroups; g++) {
                const struct rt_group *gr = &rt->groups[g];
                if ((int)gr->kind != k)
                    continue;
                for (int i = 0; i < gr->n; i++)
                    count += gr->members[i] == r;
            }
            if (count != needs)
                return herr_set(e, "groups: rank %d is in %d '%s' groups, must be in %d", r, count,
                                group_kind_name(k), needs);
        }
    }
    for (int g = 0; g < rt->ngroups; g++) {
        struct rt_group *gr = &rt->groups[g];
        int want = gr->kind == GROUP_DP ? D : gr->kind == GROUP_PP ? P : 2;
        if (gr->n != want)
            return herr_set(e, "groups[%d]: a '%s' group must have %d ranks, has %d", g,
                            group_kind_name(gr->kind), want, gr->n);
        for (int i = 0; i < gr->n; i++) {
            int s = rank_table_stage(rt, gr->members[i]), d = rank_table_dp(rt, gr->members[i]);
            int ok = gr->kind == GROUP_DP ? s == rank_table_stage(rt, gr->members[0]) && d == i
                   : gr->kind == GROUP_PP ? s == i && d == rank_table_dp(rt, gr->members[0])
                                       : s == (i ? P - 1 : 0) && d == rank_table_dp(rt, gr->members[0]);
            if (!ok)
                return herr_set(e, "groups[%d]: rank %d does not belong at position %d of a '%s' group "
                                "(rank = dp + data * stage)", g, gr->members[i], i,
                                group_kind_name(gr->kind));
        }
        if (gr->kind == GROUP_DP)
            gr->stage = rank_table_stage(rt, gr->members[0]);
    }
    return 0;
}

static int parse_rank(struct rank_table *rt, const cJSON *x, int idx, herr *e)
{
    char w[64];
    snprintf(w, sizeof w, "workers[%d]", idx);
    if (!cJSON_IsObject(x))
        return herr_set(e, "%s must be an object", w);
    int r = idx;
    if (json_int32(x, w, "rank", JSON_OPTIONAL, 0, rt->world - 1, &r, e) != 0)
        return -1;
    if (r != idx)
        return herr_set(e, "%s.rank is %d: workers must be listed in rank order", w, r);
    struct rt_rank *k = &rt->ranks[r];
    k->gid_index = -1;
    if (json_str(x, w, "host", JSON_REQUIRED, k->host, sizeof k->host, e) != 0 ||
        json_int32(x, w, "port", JSON_REQUIRED, 1, 65535, &k->port, e) != 0 ||
        json_str(x, w, "fabric", JSON_OPTIONAL, k->fabric, sizeof k->fabric, e) != 0)
        return -1;
    int st = rank_table_stage(rt, r), dp = rank_table_dp(rt, r);
    if (json_int32(x, w, "stage", JSON_OPTIONAL, 0, rt->pipeline - 1, &st, e) != 0 ||
        json_int32(x, w, "dp_rank", JSON_OPTIONAL, 0, rt->data - 1, &dp, e) != 0)
        return -1;
    if (st != rank_table_stage(rt, r) || dp != rank_table_dp(rt, r))
        return herr_set(e, "%s: stage %d / dp_rank %d do not match rank %d = dp + data * stage", w,
                        st, dp, r);
    const cJSON *nic = cJSON_GetObjectItemCaseSensitive(x, "nic");
    if (nic) {
        char nw[80];
        snprintf(nw, sizeof nw, "%s.nic", w);
        if (json_str(nic, nw, "ib_hca", JSON_OPTIONAL, k->ib_hca, sizeof k->ib_hca, e) != 0 ||
            json_int32(nic, nw, "gid_index", JSON_OPTIONAL, -1, 255, &k->gid_index, e) != 0 ||
            json_str(nic, nw, "socket_ifname", JSON_OPTIONAL, k->socket_ifname,
                     sizeof k->socket_ifname, e) != 0)
            return -1;
        if (!k->fabric[0])
            json_str(nic, nw, "fabric", JSON_OPTIONAL, k->fabric, sizeof k->fabric, NULL);
    }
    return 0;
}

static int parse_table(const cJSON *j, struct rank_table *rt, herr *e)
{
    if (!cJSON_IsObject(j))
        return herr_set(e, "the rank table must be an object");
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(j, "parallelism");
    if (!cJSON_IsObject(par))
        return herr_set(e, "missing object 'parallelism' {pipeline, data}");
    int tensor = 1;
    if (json_int32(par, "parallelism", "pipeline", JSON_REQUIRED, 1, MAX_WORLD, &rt->pipeline, e) != 0 ||
        json_int32(par, "parallelism", "data", JSON_REQUIRED, 1, MAX_WORLD, &rt->data, e) != 0 ||
        json_int32(par, "parallelism", "tensor", JSON_OPTIONAL, 1, MAX_WORLD, &tensor, e) != 0)
        return -1;
    if (tensor != 1)
        return herr_set(e, "parallelism.tensor must be 1 for the CPU engine, got %d", tensor);
    if ((long)rt->pipeline * rt->data > MAX_WORLD)
        return herr_set(e, "parallelism: pipeline x data must be at most %d", MAX_WORLD);
    rt->world = rt->pipeline * rt->data;
    rt->timeout_s = 60;
    if (json_num(j, "rank table", "timeout_seconds", JSON_OPTIONAL, 0.001, DBL_MAX, &rt->timeout_s, e) != 0 ||
        get_pacing(j, "cross_fabric_pacing", "rank table", &rt->cross_fabric, e) != 0)
        return -1;
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(j, "workers");
    if (!cJSON_IsArray(ws) || cJSON_GetArraySize(ws) != rt->world)
        return herr_set(e, "'workers' must be an array of pipeline x data = %d entries (one per rank)",
                        rt->world);
    rt->ranks = calloc((size_t)rt->world, sizeof *rt->ranks);
    if (!rt->ranks)
        return herr_set(e, "out of memory for %d ranks", rt->world);
    int idx = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, ws)
    {
        if (parse_rank(rt, x, idx++, e) != 0)
            return -1;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "stages");
    if (st) {
        if (!cJSON_IsArray(st) || cJSON_GetArraySize(st) != rt->pipeline)
            return herr_set(e, "'stages' must be an array of %d entries", rt->pipeline);
        rt->stage_first = calloc((size_t)rt->pipeline, sizeof(int));
        rt->stage_last = calloc((size_t)rt->pipeline, sizeof(int));
        if (!rt->stage_first || !rt->stage_last)
            return herr_set(e, "out of memory for the stages");
        int s = 0;
        cJSON_ArrayForEach(x, st)
        {
            const cJSON *ly = cJSON_GetObjectItemCaseSensitive(x, "layers");
            if (!cJSON_IsArray(ly) || cJSON_GetArraySize(ly) != 2 ||
                !cJSON_IsNumber(cJSON_GetArrayItem(ly, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(ly, 1)))
                return herr_set(e, "stages[%d].layers must be [first, last)", s);
            rt->stage_first[s] = (int)cJSON_GetArrayItem(ly, 0)->valuedouble;
            rt->stage_last[s] = (int)cJSON_GetArrayItem(ly, 1)->valuedouble;
            int want = s ? rt->stage_last[s - 1] : 0;
            if (rt->stage_first[s] != want || rt->stage_last[s] <= rt->stage_first[s])
                return herr_set(e, "stages[%d].layers [%d, %d) must start at %d and hold at least "
                                "one layer", s, rt->stage_first[s], rt->stage_last[s], want);
            s++;
        }
    }
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(j, "groups");
    if (gs && !cJSON_IsArray(gs))
        return herr_set(e, "'groups' must be an array");
    int have[GROUP_KIND_COUNT] = {0}, gi = 0;
    cJSON_ArrayForEach(x, gs)
    {
        char w[32];
        snprintf(w, sizeof w, "groups[%d]", gi++);
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(x, "kind");
        if (cJSON_IsString(kind) && strcmp(kind->valuestring, "tp") == 0 && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(x, "ranks")) &&
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(x, "ranks")) == 1)
            continue; /* a planner's trivial tensor group */
        if (parse_group(rt, x, w, e) != 0)
            return -1;
        have[rt->groups[rt->ngroups - 1].kind] = 1;
    }
    for (int k = GROUP_DP; k <= GROUP_EMBEDDING; k++)
        if (k != GROUP_TP && !have[k] && derive_groups(rt, (enum group_kind)k, e) != 0)
            return -1;
    return check_groups(rt, e);
}

int rank_table_from_json(const cJSON *j, const char *where, struct rank_table *rt, herr *e)
{
    memset(rt, 0, sizeof *rt);
    if (parse_table(j, rt, e) != 0) {
        rank_table_free(rt);
        return herr_wrap(e, "%s", where);
    }
    return 0;
}

static int from_docs(cJSON *docs, const char *where, struct rank_table *rt, herr *e)
{
    if (!docs)
        return herr_wrap(e, "rank table");
    int rc;
    if (cJSON_GetArraySize(docs) != 1)
        rc = herr_set(e, "%s: expected one document, found %d", where, cJSON_GetArraySize(docs));
    else
        rc = rank_table_from_json(cJSON_GetArrayItem(docs, 0), where, rt, e);
    cJSON_Delete(docs);
    return rc;
}

int rank_table_load(const char *path, struct rank_table *rt, herr *e)
{
    memset(rt, 0, sizeof *rt);
    return from_docs(yaml_parse_file(path, e), path, rt, e);
}

int rank_table_from_env(struct rank_table *rt, herr *e)
{
    memset(rt, 0, sizeof *rt);
    const char *doc = getenv("HOLMES_RANK_TABLE_JSON");
    if (doc && *doc)
        return from_docs(yaml_parse_documents(doc, strlen(doc), "HOLMES_RANK_TABLE_JSON", e),
                         "HOLMES_RANK_TABLE_JSON", rt, e);
    const char *path = getenv("HOLMES_RANK_TABLE");
    if (path && *path)
        return rank_table_load(path, rt, e);
    return herr_set(e, "no rank table: set HOLMES_RANK_TABLE (a file) or HOLMES_RANK_TABLE_JSON");
}

int rank_table_find_group(const struct rank_table *rt, enum group_kind kind, int rank)
{
    for (int g = 0; g < rt->ngroups; g++) {
        if (rt->groups[g].kind != kind)
            continue;
        for (int i = 0; i < rt->groups[g].n; i++)
            if (rt->groups[g].members[i] == rank)
                return g;
    }
    return -1;
}

void rt_comm_spec_free(struct rt_comm_spec *s)
{
    free(s->eps);
    free(s->pacing);
    s->eps = NULL;
    s->pacing = NULL;
}

int rank_table_comm_spec(const struct rank_table *rt, int g, int rank, struct rt_comm_spec *out,
                         herr *e)
{
    memset(out, 0, sizeof *out);
    if (g < 0 || g >= rt->ngroups)
        return herr_set(e, "rank table: no group %d", g);
    const struct rt_group *gr = &rt->groups[g];
    int me = -1;
    for (int i = 0; i < gr->n; i++)
        if (gr->members[i] == rank)
            me = i;
    if (me < 0)
        return herr_set(e, "rank table: rank %d is not in group %d", rank, g);
    out->eps = calloc((size_t)gr->n, sizeof *out->eps);
    out->pacing = calloc((size_t)gr->n, sizeof *out->pacing);
    if (!out->eps || !out->pacing) {
        rt_comm_spec_free(out);
        return herr_set(e, "out of memory for group %d", g);
    }
    int paced = gr->pacing.bytes_per_sec > 0 || gr->pacing.latency_s > 0;
    for (int i = 0; i < gr->n; i++) {
        const struct rt_rank *k = &rt->ranks[gr->members[i]];
        snprintf(out->eps[i].host, sizeof out->eps[i].host, "%s", k->host);
        out->eps[i].port = k->port;
        if (paced)
            out->pacing[i] = gr->pacing;
        else if (strcmp(k->fabric, rt->ranks[rank].fabric) != 0)
            out->pacing[i] = rt->cross_fabric;
    }
    if (gr->kind == GROUP_DP)
        snprintf(out->name, sizeof out->name, "dp[stage %d]", gr->stage);
    else
        snprintf(out->name, sizeof out->name, "%s[replica %d]", group_kind_name(gr->kind),
                 rank_table_dp(rt, gr->members[0]));
    out->spec.name = out->name;
    out->spec.group_id = (uint32_t)g + 1;
    out->spec.size = gr->n;
    out->spec.index = me;
    out->spec.world_ranks = gr->members;
    out->spec.endpoints = out->eps;
    out->spec.pacing = out->pacing;
    out->spec.timeout_s = rt->timeout_s;
    return 0;
}
