#include "plan_doc.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

/* ---------------------------------------------------------------- building */

void plan_doc_free(struct plan_doc *d)
{
    if (!d)
        return;
    for (int g = 0; d->groups && g < d->ngroups; g++)
        free(d->groups[g].members);
    free(d->groups);
    free(d->ranks);
    free(d->stage_first);
    free(d->slice_bounds);
    free(d->stage_last);
    memset(d, 0, sizeof *d);
}

int plan_doc_init(struct plan_doc *d, int tensor, int pipeline, int data, herr *e)
{
    memset(d, 0, sizeof *d);
    if (tensor < 1 || pipeline < 1 || data < 1 ||
        (long)tensor * pipeline * data > PLAN_DOC_MAX_WORLD)
        return herr_set(e, "parallelism: tensor x pipeline x data must be 1..%d, got %d x %d x %d",
                        PLAN_DOC_MAX_WORLD, tensor, pipeline, data);
    d->tensor = tensor;
    d->pipeline = pipeline;
    d->data = data;
    d->world = tensor * pipeline * data;
    d->timeout_s = 60;
    d->ranks = calloc((size_t)d->world, sizeof *d->ranks);
    if (!d->ranks)
        return herr_set(e, "out of memory for %d ranks", d->world);
    for (int r = 0; r < d->world; r++)
        d->ranks[r].gid_index = -1;
    return 0;
}

int plan_doc_add_group(struct plan_doc *d, enum group_kind kind, int stage, int n, herr *e)
{
    struct plan_doc_group *g;
    if (d->ngroups >= d->cap_groups) { /* doubling: a plan of many groups is not copied each time */
        int cap = d->cap_groups > 0 ? 2 * d->cap_groups : 16;
        if (cap <= d->ngroups || !(g = realloc(d->groups, (size_t)cap * sizeof *g)))
            return herr_set(e, "out of memory for the plan's groups");
        d->groups = g;
        d->cap_groups = cap;
    }
    g = &d->groups[d->ngroups];
    memset(g, 0, sizeof *g);
    g->members = calloc((size_t)n, sizeof *g->members);
    if (!g->members)
        return herr_set(e, "out of memory for the plan's groups");
    d->ngroups++;
    g->kind = kind;
    g->stage = stage;
    g->n = n;
    g->transport = TRANSPORT_SOCKET;
    snprintf(g->nccl_net, sizeof g->nccl_net, "Socket");
    g->gid_index = -1;
    return 0;
}

/* A copy of n ints of src into *dst (NULL for none): 0, or -1 out of memory. */
static int dup_ints(int **dst, const int *src, int n)
{
    *dst = NULL;
    if (!src || n <= 0)
        return 0;
    if (!(*dst = malloc((size_t)n * sizeof **dst)))
        return -1;
    memcpy(*dst, src, (size_t)n * sizeof **dst);
    return 0;
}

int plan_doc_copy(struct plan_doc *dst, const struct plan_doc *src, herr *e)
{
    *dst = *src;
    dst->ranks = NULL;
    dst->stage_first = dst->stage_last = dst->slice_bounds = NULL;
    dst->groups = NULL;
    dst->ngroups = 0;
    dst->cap_groups = src->ngroups;
    int ok = (dst->ranks = malloc((size_t)src->world * sizeof *dst->ranks)) != NULL &&
             dup_ints(&dst->stage_first, src->stage_first, src->pipeline) == 0 &&
             dup_ints(&dst->stage_last, src->stage_last, src->pipeline) == 0 &&
             dup_ints(&dst->slice_bounds, src->slice_bounds, src->slices + 1) == 0 &&
             (src->ngroups == 0 ||
              (dst->groups = calloc((size_t)src->ngroups, sizeof *dst->groups)) != NULL);
    if (ok)
        memcpy(dst->ranks, src->ranks, (size_t)src->world * sizeof *dst->ranks);
    for (int g = 0; ok && g < src->ngroups; g++) {
        dst->groups[g] = src->groups[g];
        ok = dup_ints(&dst->groups[g].members, src->groups[g].members, src->groups[g].n) == 0;
        dst->ngroups = g + 1;
    }
    if (ok)
        return 0;
    plan_doc_free(dst);
    return herr_set(e, "out of memory copying the plan");
}

/* Global rank of (stage, dp, tp). */
static int rank_of(const struct plan_doc *d, int stage, int dp, int tp)
{
    return tp + d->tensor * (dp + d->data * stage);
}

/* Size of a group of `kind` (embedding and link groups: 2). */
static int group_size(const struct plan_doc *d, enum group_kind k)
{
    return k == GROUP_DP ? d->data : k == GROUP_TP ? d->tensor : k == GROUP_PP ? d->pipeline : 2;
}

/* How many groups of `kind` a rank of `stage` belongs to: embedding, end stages only; tensor
 * groups only with tensor parallelism; link groups one per neighbour stage (0, 1 or 2). */
static int needs_group(const struct plan_doc *d, enum group_kind k, int stage)
{
    if (k == GROUP_TP)
        return d->tensor > 1;
    if (k == GROUP_EMBEDDING)
        return d->pipeline > 1 && (stage == 0 || stage == d->pipeline - 1);
    if (k == GROUP_LINK)
        return (stage > 0) + (stage < d->pipeline - 1);
    return 1;
}

/* Member i of the group of `kind` whose first member is (stage, dp, tp). */
static int member(const struct plan_doc *d, enum group_kind k, int stage, int dp, int tp, int i)
{
    switch (k) {
    case GROUP_DP: return rank_of(d, stage, i, tp);
    case GROUP_TP: return rank_of(d, stage, dp, i);
    case GROUP_PP: return rank_of(d, i, dp, tp);
    case GROUP_LINK: return rank_of(d, stage + i, dp, tp);
    default: return rank_of(d, i ? d->pipeline - 1 : 0, dp, tp);
    }
}

/* Does a group of `kind` start at a rank of `stage`? (a link starts at every stage but the
 * last; the others at the member-0 place the rank formula gives) */
static int starts_group(const struct plan_doc *d, enum group_kind k, int stage)
{
    return k == GROUP_LINK ? stage < d->pipeline - 1 : needs_group(d, k, stage) > 0;
}

/* The stage a group of `kind` records: its own for dp and tp, the sending stage for a link
 * (stage -> stage + 1), else -1. */
static int group_stage(enum group_kind k, int first_stage)
{
    return k == GROUP_DP || k == GROUP_TP || k == GROUP_LINK ? first_stage : -1;
}

static int derive_groups(struct plan_doc *d, enum group_kind k, herr *e)
{
    int n = group_size(d, k);
    for (int r = 0; r < d->world; r++) {
        int s = plan_doc_stage_of(d, r), dp = plan_doc_dp_of(d, r), tp = plan_doc_tp_of(d, r);
        if (!starts_group(d, k, s) || member(d, k, s, dp, tp, 0) != r)
            continue; /* one group per first member */
        if (plan_doc_add_group(d, k, group_stage(k, s), n, e) != 0)
            return -1;
        for (int i = 0; i < n; i++)
            d->groups[d->ngroups - 1].members[i] = member(d, k, s, dp, tp, i);
    }
    return 0;
}

/* Every member of group g at its place (communicator order follows the rank formula). */
static int check_group(struct plan_doc *d, int g, herr *e)
{
    struct plan_doc_group *gr = &d->groups[g];
    const char *kn = group_kind_name(gr->kind);
    int want = group_size(d, gr->kind);
    if (gr->n != want)
        return herr_set(e, "groups[%d]: a '%s' group must have %d ranks, has %d", g, kn, want, gr->n);
    int m0 = gr->members[0];
    int s0 = plan_doc_stage_of(d, m0), dp0 = plan_doc_dp_of(d, m0), tp0 = plan_doc_tp_of(d, m0);
    if (!starts_group(d, gr->kind, s0))
        return herr_set(e, "groups[%d]: a '%s' group cannot start at rank %d (stage %d of %d)", g,
                        kn, m0, s0, d->pipeline);
    for (int i = 0; i < gr->n; i++)
        if (gr->members[i] != member(d, gr->kind, s0, dp0, tp0, i) ||
            (gr->kind == GROUP_EMBEDDING && s0 != 0))
            return herr_set(e, "groups[%d]: rank %d does not belong at position %d of a '%s' group "
                            "(rank = tp + tensor * (dp + data * stage))", g, gr->members[i], i, kn);
    gr->stage = group_stage(gr->kind, s0);
    return 0;
}

/* Every rank in as many groups of each kind as it needs (one, or none; links: one per
 * neighbour stage). */
static int check_membership(const struct plan_doc *d, herr *e)
{
    int *count = calloc((size_t)d->world * GROUP_KIND_COUNT, sizeof *count);
    if (!count)
        return herr_set(e, "out of memory checking the plan's groups");
    for (int g = 0; g < d->ngroups; g++)
        for (int i = 0; i < d->groups[g].n; i++)
            count[d->groups[g].members[i] * GROUP_KIND_COUNT + (int)d->groups[g].kind]++;
    int rc = 0;
    for (int r = 0; !rc && r < d->world; r++)
        for (int k = 0; !rc && k < GROUP_KIND_COUNT; k++) {
            int needs = needs_group(d, (enum group_kind)k, plan_doc_stage_of(d, r));
            if (count[r * GROUP_KIND_COUNT + k] != needs)
                rc = herr_set(e, "groups: rank %d is in %d '%s' groups, must be in %d", r,
                              count[r * GROUP_KIND_COUNT + k], group_kind_name((enum group_kind)k),
                              needs);
        }
    free(count);
    return rc;
}

int plan_doc_complete(struct plan_doc *d, herr *e)
{
    int have[GROUP_KIND_COUNT] = {0};
    for (int g = 0; g < d->ngroups; g++)
        have[d->groups[g].kind] = 1;
    for (int k = 0; k < GROUP_KIND_COUNT; k++)
        if (!have[k] && derive_groups(d, (enum group_kind)k, e) != 0)
            return -1;
    for (int g = 0; g < d->ngroups; g++)
        if (check_group(d, g, e) != 0)
            return -1;
    return check_membership(d, e);
}

int plan_doc_find_group(const struct plan_doc *d, enum group_kind kind, int rank)
{
    for (int g = 0; g < d->ngroups; g++) {
        if (d->groups[g].kind != kind)
            continue;
        for (int i = 0; i < d->groups[g].n; i++)
            if (d->groups[g].members[i] == rank)
                return g;
    }
    return -1;
}

int plan_doc_find_link(const struct plan_doc *d, int rank, int dir)
{
    if (rank < 0 || rank >= d->world || (dir != 1 && dir != -1))
        return -1;
    for (int g = 0; g < d->ngroups; g++) {
        const struct plan_doc_group *gr = &d->groups[g];
        if (gr->kind == GROUP_LINK && gr->n == 2 && gr->members[dir > 0 ? 0 : 1] == rank)
            return g;
    }
    return -1;
}

int plan_doc_check_endpoints(const struct plan_doc *d, const char *where, herr *e)
{
    for (int r = 0; r < d->world; r++)
        if (!d->ranks[r].host[0] || d->ranks[r].port < 1)
            return herr_set(e, "%s: workers[%d] needs a host and a port (where rank %d listens)",
                            where, r, r);
    return 0;
}

/* ---------------------------------------------------------------- decoding */

static int get_pacing(const cJSON *o, const char *key, const char *where, struct plan_pacing *p,
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
    if (json_num(x, w, "bytes_per_second", JSON_OPTIONAL, 0, DBL_MAX, &p->bytes_per_sec, e) != 0 ||
        json_num(x, w, "latency_us", JSON_OPTIONAL, 0, DBL_MAX, &lat, e) != 0)
        return -1;
    if (p->bytes_per_sec > 0 && p->bytes_per_sec < 1000)
        return herr_set(e, "%s.bytes_per_second must be 0 (unpaced) or at least 1000", w);
    p->latency_s = lat * 1e-6;
    return 0;
}

static int parse_group(struct plan_doc *d, const cJSON *x, const char *w, herr *e)
{
    char kind[32] = "", tr[32] = "", net[16] = "";
    if (!cJSON_IsObject(x))
        return herr_set(e, "%s must be an object", w);
    if (json_str(x, w, "kind", JSON_REQUIRED, kind, sizeof kind, e) != 0 ||
        json_str(x, w, "transport", JSON_OPTIONAL, tr, sizeof tr, e) != 0 ||
        json_str(x, w, "nccl_net", JSON_OPTIONAL, net, sizeof net, e) != 0)
        return -1;
    enum group_kind k;
    if (group_kind_parse(kind, &k) != 0)
        return herr_set(e, "%s.kind '%s' is not one of dp, tp, pp, embedding, link", w, kind);
    enum transport t = TRANSPORT_SOCKET;
    if (tr[0] && transport_parse(tr, &t) != 0)
        return herr_set(e, "%s.transport '%s' is not one of ib, roce, socket", w, tr);
    const cJSON *rk = cJSON_GetObjectItemCaseSensitive(x, "ranks");
    if (!cJSON_IsArray(rk) || cJSON_GetArraySize(rk) < 1)
        return herr_set(e, "%s.ranks must be a non-empty array of global ranks", w);
    if (k == GROUP_TP && d->tensor == 1 && cJSON_GetArraySize(rk) == 1)
        return 0; /* a planner's trivial tensor group: there is no tensor parallelism */
    if (plan_doc_add_group(d, k, -1, cJSON_GetArraySize(rk), e) != 0)
        return -1;
    struct plan_doc_group *g = &d->groups[d->ngroups - 1];
    g->transport = t;
    snprintf(g->nccl_net, sizeof g->nccl_net, "%s",
             net[0] ? net : t == TRANSPORT_SOCKET ? "Socket" : "IB");
    if (json_int32(x, w, "gid_index", JSON_OPTIONAL, -1, 255, &g->gid_index, e) != 0 ||
        get_pacing(x, "pacing", w, &g->pacing, e) != 0)
        return -1;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, rk)
    {
        if (!cJSON_IsNumber(m) || m->valuedouble != floor(m->valuedouble) || m->valuedouble < 0 ||
            m->valuedouble >= d->world)
            return herr_set(e, "%s.ranks[%d] must be a rank in 0..%d", w, i, d->world - 1);
        g->members[i++] = (int)m->valuedouble;
    }
    return 0;
}

static int parse_nic(const cJSON *x, const char *w, struct plan_doc_rank *k, herr *e)
{
    const cJSON *nic = cJSON_GetObjectItemCaseSensitive(x, "nic");
    if (!nic)
        return 0;
    char nw[80];
    snprintf(nw, sizeof nw, "%s.nic", w);
    if (!cJSON_IsObject(nic))
        return herr_set(e, "%s must be an object", nw);
    if (json_str(nic, nw, "ib_hca", JSON_OPTIONAL, k->ib_hca, sizeof k->ib_hca, e) != 0 ||
        json_int32(nic, nw, "gid_index", JSON_OPTIONAL, -1, 255, &k->gid_index, e) != 0 ||
        json_str(nic, nw, "socket_ifname", JSON_OPTIONAL, k->socket_ifname,
                 sizeof k->socket_ifname, e) != 0)
        return -1;
    if (!k->fabric[0] &&
        json_str(nic, nw, "fabric", JSON_OPTIONAL, k->fabric, sizeof k->fabric, e) != 0)
        return -1;
    return 0;
}

static int parse_rank(struct plan_doc *d, const cJSON *x, int r, herr *e)
{
    char w[64];
    snprintf(w, sizeof w, "workers[%d]", r);
    if (!cJSON_IsObject(x))
        return herr_set(e, "%s must be an object", w);
    int got = r;
    if (json_int32(x, w, "rank", JSON_OPTIONAL, 0, d->world - 1, &got, e) != 0)
        return -1;
    if (got != r)
        return herr_set(e, "%s.rank is %d: workers must be listed in rank order", w, got);
    struct plan_doc_rank *k = &d->ranks[r];
    if (json_str(x, w, "name", JSON_OPTIONAL, k->name, sizeof k->name, e) != 0 ||
        json_int32(x, w, "local_rank", JSON_OPTIONAL, 0, 1 << 20, &k->local_rank, e) != 0 ||
        json_str(x, w, "host", JSON_OPTIONAL, k->host, sizeof k->host, e) != 0 ||
        json_int32(x, w, "port", JSON_OPTIONAL, 1, 65535, &k->port, e) != 0 ||
        json_str(x, w, "fabric", JSON_OPTIONAL, k->fabric, sizeof k->fabric, e) != 0)
        return -1;
    int st = plan_doc_stage_of(d, r), dp = plan_doc_dp_of(d, r), tp = plan_doc_tp_of(d, r);
    if (json_int32(x, w, "stage", JSON_OPTIONAL, 0, d->pipeline - 1, &st, e) != 0 ||
        json_int32(x, w, "dp_rank", JSON_OPTIONAL, 0, d->data - 1, &dp, e) != 0 ||
        json_int32(x, w, "tp_rank", JSON_OPTIONAL, 0, d->tensor - 1, &tp, e) != 0)
        return -1;
    if (st != plan_doc_stage_of(d, r) || dp != plan_doc_dp_of(d, r) || tp != plan_doc_tp_of(d, r))
        return herr_set(e, "%s: stage %d / dp_rank %d / tp_rank %d do not match rank %d = tp + "
                        "tensor * (dp + data * stage)", w, st, dp, tp, r);
    return parse_nic(x, w, k, e);
}

/* a layer bound: a whole number in [0, PLAN_DOC_MAX_LAYER] (checked before any cast to int) */
enum { PLAN_DOC_MAX_LAYER = 1 << 20 };
static int layer_index(const cJSON *n)
{
    return cJSON_IsNumber(n) && n->valuedouble >= 0 && n->valuedouble <= PLAN_DOC_MAX_LAYER &&
           n->valuedouble == floor(n->valuedouble);
}

static int parse_stages(struct plan_doc *d, const cJSON *st, herr *e)
{
    if (!cJSON_IsArray(st) || cJSON_GetArraySize(st) != d->pipeline)
        return herr_set(e, "'stages' must be an array of %d entries", d->pipeline);
    d->stage_first = calloc((size_t)d->pipeline, sizeof(int));
    d->stage_last = calloc((size_t)d->pipeline, sizeof(int));
    if (!d->stage_first || !d->stage_last)
        return herr_set(e, "out of memory for the stages");
    int s = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, st)
    {
        const cJSON *ly = cJSON_GetObjectItemCaseSensitive(x, "layers");
        if (!cJSON_IsArray(ly) || cJSON_GetArraySize(ly) != 2 ||
            !layer_index(cJSON_GetArrayItem(ly, 0)) || !layer_index(cJSON_GetArrayItem(ly, 1)))
            return herr_set(e, "stages[%d].layers must be [first, last), whole numbers in 0..%d", s,
                            PLAN_DOC_MAX_LAYER);
        d->stage_first[s] = (int)cJSON_GetArrayItem(ly, 0)->valuedouble;
        d->stage_last[s] = (int)cJSON_GetArrayItem(ly, 1)->valuedouble;
        int want = s ? d->stage_last[s - 1] : 0;
        if (d->stage_first[s] != want || d->stage_last[s] <= d->stage_first[s])
            return herr_set(e, "stages[%d].layers [%d, %d) must start at %d and hold at least one "
                            "layer", s, d->stage_first[s], d->stage_last[s], want);
        s++;
    }
    return 0;
}

/* token_slices: [0, b1, ..., T], strictly increasing (TeraPipe's slice bounds). */
static int parse_slices(struct plan_doc *d, const cJSON *ts, herr *e)
{
    int n = cJSON_IsArray(ts) ? cJSON_GetArraySize(ts) : 0;
    if (n < 2 || n > 131073)
        return herr_set(e, "'token_slices' must be an array of 2 to 131073 token bounds [0, ..., T]");
    d->slice_bounds = calloc((size_t)n, sizeof(int));
    if (!d->slice_bounds)
        return herr_set(e, "out of memory for the token slices");
    d->slices = n - 1;
    int k = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, ts)
    {
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (v != (double)(int)v || v < 0 || v > 131072 || (k == 0 && v != 0) ||
            (k > 0 && (int)v <= d->slice_bounds[k - 1]))
            return herr_set(e, "token_slices[%d]: bounds must be integers rising from 0", k);
        d->slice_bounds[k++] = (int)v;
    }
    return 0;
}

static int parse_doc(const cJSON *j, struct plan_doc *d, herr *e)
{
    if (!cJSON_IsObject(j))
        return herr_set(e, "the plan must be an object");
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(j, "parallelism");
    if (!cJSON_IsObject(par))
        return herr_set(e, "missing object 'parallelism' {pipeline, data}");
    int T = 1, P = 0, D = 0;
    if (json_int32(par, "parallelism", "pipeline", JSON_REQUIRED, 1, PLAN_DOC_MAX_WORLD, &P, e) != 0 ||
        json_int32(par, "parallelism", "data", JSON_REQUIRED, 1, PLAN_DOC_MAX_WORLD, &D, e) != 0 ||
        json_int32(par, "parallelism", "tensor", JSON_OPTIONAL, 1, PLAN_DOC_MAX_WORLD, &T, e) != 0 ||
        plan_doc_init(d, T, P, D, e) != 0)
        return -1;
    if (json_num(j, "plan", "timeout_seconds", JSON_OPTIONAL, 0.001, DBL_MAX, &d->timeout_s, e) != 0 ||
        json_int32(j, "plan", "warmup_extra", JSON_OPTIONAL, 0, PIPE_WARMUP_EXTRA_MAX,
                   &d->warmup_extra, e) != 0 ||
        get_pacing(j, "cross_fabric_pacing", "plan", &d->cross_fabric, e) != 0)
        return -1;
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(j, "workers");
    if (!cJSON_IsArray(ws) || cJSON_GetArraySize(ws) != d->world)
        return herr_set(e, "'workers' must be an array of tensor x pipeline x data = %d entries "
                        "(one per rank)", d->world);
    int r = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, ws)
    {
        if (parse_rank(d, x, r++, e) != 0)
            return -1;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "stages");
    if (st && parse_stages(d, st, e) != 0)
        return -1;
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "token_slices");
    if (ts && !cJSON_IsNull(ts) && parse_slices(d, ts, e) != 0)
        return -1;
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(j, "groups");
    if (gs && !cJSON_IsArray(gs))
        return herr_set(e, "'groups' must be an array");
    int gi = 0;
    cJSON_ArrayForEach(x, gs)
    {
        char w[32];
        snprintf(w, sizeof w, "groups[%d]", gi++);
        if (parse_group(d, x, w, e) != 0)
            return -1;
    }
    return plan_doc_complete(d, e);
}

int plan_doc_from_json(const cJSON *j, const char *where, struct plan_doc *d, herr *e)
{
    memset(d, 0, sizeof *d);
    if (parse_doc(j, d, e) != 0) {
        plan_doc_free(d);
        return herr_wrap(e, "%s", where);
    }
    return 0;
}

/* ---------------------------------------------------------------- encoding */

static int add_pacing(cJSON *o, const char *key, const struct plan_pacing *p)
{
    if (p->bytes_per_sec <= 0 && p->latency_s <= 0)
        return 1;
    cJSON *x = cJSON_AddObjectToObject(o, key);
    return x && cJSON_AddNumberToObject(x, "bytes_per_second", p->bytes_per_sec) &&
           cJSON_AddNumberToObject(x, "latency_us", p->latency_s * 1e6);
}

/* A rank's place: {rank, stage, dp_rank, tp_rank}. 1, or 0 out of memory. */
static int add_place(cJSON *o, int rank, int stage, int dp, int tp)
{
    const char *const keys[] = {"rank", "stage", "dp_rank", "tp_rank"};
    const int vals[] = {rank, stage, dp, tp};
    for (int i = 0; i < 4; i++)
        if (!cJSON_AddNumberToObject(o, keys[i], vals[i]))
            return 0;
    return 1;
}

static cJSON *rank_to_json(const struct plan_doc *d, int r)
{
    const struct plan_doc_rank *k = &d->ranks[r];
    cJSON *x = cJSON_CreateObject(), *nic = cJSON_CreateObject();
    int ok = x && nic &&
             add_place(x, r, plan_doc_stage_of(d, r), plan_doc_dp_of(d, r), plan_doc_tp_of(d, r)) &&
             cJSON_AddNumberToObject(x, "local_rank", k->local_rank) &&
             cJSON_AddStringToObject(x, "name", k->name) &&
             cJSON_AddStringToObject(x, "fabric", k->fabric) &&
             cJSON_AddStringToObject(nic, "ib_hca", k->ib_hca) &&
             cJSON_AddNumberToObject(nic, "gid_index", k->gid_index) &&
             cJSON_AddStringToObject(nic, "socket_ifname", k->socket_ifname);
    if (ok && k->port > 0)
        ok = cJSON_AddStringToObject(x, "host", k->host) && cJSON_AddNumberToObject(x, "port", k->port);
    if (ok && cJSON_AddItemToObject(x, "nic", nic))
        return x;
    cJSON_Delete(nic);
    cJSON_Delete(x);
    return NULL;
}

static cJSON *group_to_json(const struct plan_doc_group *g)
{
    cJSON *x = cJSON_CreateObject();
    cJSON *rk = x ? cJSON_CreateIntArray(g->members, g->n) : NULL;
    int ok = x && rk && cJSON_AddItemToObject(x, "ranks", rk);
    if (!ok)
        cJSON_Delete(rk);
    ok = ok && cJSON_AddStringToObject(x, "kind", group_kind_name(g->kind)) &&
         cJSON_AddStringToObject(x, "transport", transport_name(g->transport)) &&
         cJSON_AddStringToObject(x, "nccl_net", g->nccl_net) && add_pacing(x, "pacing", &g->pacing);
    if (ok && g->stage >= 0)
        ok = cJSON_AddNumberToObject(x, "stage", g->stage) != NULL;
    if (ok && g->gid_index >= 0)
        ok = cJSON_AddNumberToObject(x, "gid_index", g->gid_index) != NULL;
    if (ok)
        return x;
    cJSON_Delete(x);
    return NULL;
}

/* Adds `item` to array `a`; deletes it when it cannot. 1, or 0. */
static int push(cJSON *a, cJSON *item)
{
    if (item && cJSON_AddItemToArray(a, item))
        return 1;
    cJSON_Delete(item);
    return 0;
}

cJSON *plan_doc_to_json(const struct plan_doc *d)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *par = o ? cJSON_AddObjectToObject(o, "parallelism") : NULL;
    int ok = par && cJSON_AddNumberToObject(par, "tensor", d->tensor) &&
             cJSON_AddNumberToObject(par, "pipeline", d->pipeline) &&
             cJSON_AddNumberToObject(par, "data", d->data) &&
             cJSON_AddNumberToObject(o, "timeout_seconds", d->timeout_s) &&
             cJSON_AddNumberToObject(o, "warmup_extra", d->warmup_extra) &&
             add_pacing(o, "cross_fabric_pacing", &d->cross_fabric);
    if (ok && d->stage_first) {
        cJSON *st = cJSON_AddArrayToObject(o, "stages");
        ok = st != NULL;
        for (int s = 0; ok && s < d->pipeline; s++) {
            cJSON *x = cJSON_CreateObject();
            cJSON *ly = cJSON_CreateIntArray((const int[]){d->stage_first[s], d->stage_last[s]}, 2);
            ok = push(st, x) && ly && cJSON_AddItemToObject(x, "layers", ly);
            if (!ok && x)
                cJSON_Delete(ly);
        }
    }
    if (ok && d->slices > 0) {
        cJSON *ts = cJSON_CreateIntArray(d->slice_bounds, d->slices + 1);
        ok = ts && cJSON_AddItemToObject(o, "token_slices", ts);
        if (!ok)
            cJSON_Delete(ts);
    }
    cJSON *ws = ok ? cJSON_AddArrayToObject(o, "workers") : NULL;
    ok = ok && ws;
    for (int r = 0; ok && r < d->world; r++)
        ok = push(ws, rank_to_json(d, r));
    cJSON *gs = ok ? cJSON_AddArrayToObject(o, "groups") : NULL;
    ok = ok && gs;
    for (int g = 0; ok && g < d->ngroups; g++)
        ok = push(gs, group_to_json(&d->groups[g]));
    if (ok)
        return o;
    cJSON_Delete(o);
    return NULL;
}

/* ---------------------------------------------------------------- the assignment */

void plan_assignment_free(struct plan_assignment *a)
{
    if (!a)
        return;
    if (a->has_plan)
        plan_doc_free(&a->plan);
    if (a->has_spec)
        tj_spec_free(&a->spec);
    free(a->peers);
    memset(a, 0, sizeof *a);
}

cJSON *plan_assignment_to_json(const struct plan_assignment *a)
{
    cJSON *o = cJSON_CreateObject();
    int n = a->nranks > 0 ? a->nranks : 1;
    cJSON *rk = o ? cJSON_CreateIntArray(n > 1 ? a->ranks : &a->rank, n) : NULL;
    if (!rk || !cJSON_AddItemToObject(o, "ranks", rk)) {
        cJSON_Delete(rk);
        cJSON_Delete(o);
        return NULL;
    }
    int ok = add_place(o, a->rank, a->stage, a->dp_rank, a->tp_rank) &&
             cJSON_AddNumberToObject(o, "stages", a->stages > 0 ? a->stages : 1) &&
             cJSON_AddStringToObject(o, "fabric", a->fabric) &&
             cJSON_AddStringToObject(o, "job", a->job);
    if (ok && a->peers) {
        cJSON *p = cJSON_CreateIntArray(a->peers, a->npeers);
        ok = p && cJSON_AddItemToObject(o, "peers", p);
        if (!ok)
            cJSON_Delete(p);
    }
    if (ok && a->has_plan) {
        cJSON *p = plan_doc_to_json(&a->plan);
        ok = p && cJSON_AddItemToObject(o, "plan", p);
        if (!ok)
            cJSON_Delete(p);
    }
    if (ok && a->has_spec) {
        cJSON *s = tj_spec_to_json(&a->spec);
        ok = s && cJSON_AddItemToObject(o, "spec", s);
        if (!ok)
            cJSON_Delete(s);
    }
    if (ok)
        return o;
    cJSON_Delete(o);
    return NULL;
}

/* "ranks": the worker's global ranks, first == rank, distinct; absent = [rank]. */
static int decode_ranks(const cJSON *j, struct plan_assignment *a, herr *e)
{
    const cJSON *rk = cJSON_GetObjectItemCaseSensitive(j, "ranks");
    a->nranks = 1;
    a->ranks[0] = a->rank;
    if (!rk)
        return 0;
    int n = cJSON_GetArraySize(rk);
    if (!cJSON_IsArray(rk) || n < 1 || n > PLAN_MAX_LOCAL_RANKS)
        return herr_set(e, "assignment.ranks must be an array of 1..%d global ranks",
                        PLAN_MAX_LOCAL_RANKS);
    for (int i = 0; i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(rk, i);
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
            x->valuedouble >= PLAN_DOC_MAX_WORLD)
            return herr_set(e, "assignment.ranks[%d] must be a global rank", i);
        a->ranks[i] = (int)x->valuedouble;
        for (int k = 0; k < i; k++)
            if (a->ranks[k] == a->ranks[i])
                return herr_set(e, "assignment.ranks[%d]: rank %d is listed twice", i, a->ranks[i]);
    }
    if (a->ranks[0] != a->rank)
        return herr_set(e, "assignment.ranks[0] is %d, but rank is %d", a->ranks[0], a->rank);
    a->nranks = n;
    return 0;
}

/* "peers": ranks of the job, each below PLAN_DOC_MAX_WORLD; absent = every rank. */
static int decode_peers(const cJSON *j, struct plan_assignment *a, herr *e)
{
    const cJSON *peers = cJSON_GetObjectItemCaseSensitive(j, "peers");
    if (!peers)
        return 0;
    int n = cJSON_GetArraySize(peers);
    if (!cJSON_IsArray(peers) || n > PLAN_DOC_MAX_WORLD)
        return herr_set(e, "assignment.peers must be an array of at most %d ranks",
                        PLAN_DOC_MAX_WORLD);
    if (!(a->peers = calloc((size_t)n + 1, sizeof *a->peers)))
        return herr_set(e, "out of memory");
    const cJSON *p;
    cJSON_ArrayForEach(p, peers) {
        if (!cJSON_IsNumber(p) || p->valuedouble < 0 || p->valuedouble >= PLAN_DOC_MAX_WORLD ||
            p->valuedouble != floor(p->valuedouble))
            return herr_set(e, "assignment.peers[%d] must be a rank in [0, %d]", a->npeers,
                            PLAN_DOC_MAX_WORLD - 1);
        a->peers[a->npeers++] = (int)p->valuedouble;
    }
    return 0;
}

/* "spec": the resolved TrainingJob spec, decoded and validated once, here. */
static int decode_spec(const cJSON *spec, struct plan_assignment *a, herr *e)
{
    if (!cJSON_IsObject(spec))
        return herr_set(e, "assignment.spec must be an object");
    struct tj_errors *errs = calloc(1, sizeof *errs);
    if (!errs)
        return herr_set(e, "out of memory");
    a->has_spec = 1; /* what could be read is freed with the assignment */
    int rc = tj_spec_from_json(spec, "assignment.spec", &a->spec, errs) ? tj_errors_to_herr(errs, e) : 0;
    free(errs);
    return rc;
}

static int decode_assignment(const cJSON *j, struct plan_assignment *a, herr *e)
{
    const char *w = "assignment";
    if (!cJSON_IsObject(j))
        return herr_set(e, "the assignment must be an object");
    a->stages = 1;
    if (json_int32(j, w, "rank", JSON_REQUIRED, 0, PLAN_DOC_MAX_WORLD - 1, &a->rank, e) != 0 ||
        json_int32(j, w, "stages", JSON_OPTIONAL, 1, PLAN_DOC_MAX_WORLD, &a->stages, e) != 0 ||
        json_int32(j, w, "stage", JSON_OPTIONAL, 0, a->stages - 1, &a->stage, e) != 0 ||
        json_int32(j, w, "dp_rank", JSON_OPTIONAL, 0, PLAN_DOC_MAX_WORLD - 1, &a->dp_rank, e) != 0 ||
        json_int32(j, w, "tp_rank", JSON_OPTIONAL, 0, PLAN_DOC_MAX_WORLD - 1, &a->tp_rank, e) != 0 ||
        json_str(j, w, "fabric", JSON_OPTIONAL, a->fabric, sizeof a->fabric, e) != 0 ||
        json_str(j, w, "job", JSON_OPTIONAL, a->job, sizeof a->job, e) != 0)
        return -1;
    if (decode_ranks(j, a, e) != 0 || decode_peers(j, a, e) != 0)
        return -1;
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(j, "spec");
    if (spec && decode_spec(spec, a, e) != 0)
        return -1;
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(j, "plan");
    if (!plan)
        return 0;
    if (plan_doc_from_json(plan, "assignment.plan", &a->plan, e) != 0)
        return -1;
    a->has_plan = 1;
    for (int i = 0; i < a->nranks; i++)
        if (a->ranks[i] >= a->plan.world)
            return herr_set(e, "assignment.ranks[%d] %d: outside the plan's 0..%d", i, a->ranks[i],
                            a->plan.world - 1);
    if (a->stages != a->plan.pipeline || a->stage != plan_doc_stage_of(&a->plan, a->rank))
        return herr_set(e, "assignment: stage %d of %d does not match rank %d of the plan "
                        "(stage %d of %d)", a->stage, a->stages, a->rank,
                        plan_doc_stage_of(&a->plan, a->rank), a->plan.pipeline);
    return 0;
}

int plan_assignment_from_json(const cJSON *j, struct plan_assignment *a, herr *e)
{
    memset(a, 0, sizeof *a);
    if (decode_assignment(j, a, e) != 0) {
        plan_assignment_free(a);
        return -1;
    }
    return 0;
}

void plan_doc_slice_lengths(const int *bounds, int slices, char *buf, size_t cap)
{
    size_t at = 0;
    if (cap)
        buf[0] = '\0';
    for (int k = 0; k < slices && cap > 8; k++) {
        char one[24];
        int n = snprintf(one, sizeof one, "%s%d", k ? ", " : "", bounds[k + 1] - bounds[k]);
        if (n < 0 || at + (size_t)n + 6 > cap) {
            snprintf(buf + at, cap - at, ", ...");
            return;
        }
        memcpy(buf + at, one, (size_t)n + 1);
        at += (size_t)n;
    }
}
