#include "rank_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "yaml_json.h"

static int from_docs(cJSON *docs, const char *where, struct plan_doc *rt, herr *e)
{
    if (!docs)
        return herr_wrap(e, "rank table");
    int rc;
    if (cJSON_GetArraySize(docs) != 1)
        rc = herr_set(e, "%s: expected one document, found %d", where, cJSON_GetArraySize(docs));
    else if ((rc = plan_doc_from_json(cJSON_GetArrayItem(docs, 0), where, rt, e)) == 0 &&
             (rc = plan_doc_check_endpoints(rt, where, e)) != 0)
        plan_doc_free(rt);
    cJSON_Delete(docs);
    return rc;
}

int rank_table_load(const char *path, struct plan_doc *rt, herr *e)
{
    memset(rt, 0, sizeof *rt);
    return from_docs(yaml_parse_file(path, e), path, rt, e);
}

int rank_table_from_env(struct plan_doc *rt, herr *e)
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

void rt_comm_spec_free(struct rt_comm_spec *s)
{
    free(s->eps);
    free(s->pacing);
    s->eps = NULL;
    s->pacing = NULL;
}

int rank_table_comm_spec(const struct plan_doc *rt, int g, int rank, struct rt_comm_spec *out,
                         herr *e)
{
    memset(out, 0, sizeof *out);
    if (g < 0 || g >= rt->ngroups)
        return herr_set(e, "rank table: no group %d", g);
    const struct plan_doc_group *gr = &rt->groups[g];
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
        const struct plan_doc_rank *k = &rt->ranks[gr->members[i]];
        snprintf(out->eps[i].host, sizeof out->eps[i].host, "%s", k->host);
        out->eps[i].port = k->port;
        const struct plan_pacing *p = paced ? &gr->pacing
                                     : strcmp(k->fabric, rt->ranks[rank].fabric) != 0 ? &rt->cross_fabric
                                                                                      : NULL;
        if (p)
            out->pacing[i] = (struct tcp_pacing){p->bytes_per_sec, p->latency_s};
    }
    if (gr->kind == GROUP_DP)
        snprintf(out->name, sizeof out->name, "dp[stage %d]", gr->stage);
    else
        snprintf(out->name, sizeof out->name, "%s[replica %d]", group_kind_name(gr->kind),
                 plan_doc_dp_of(rt, gr->members[0]));
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

int rank_table_same_node(const struct plan_doc *rt, const struct plan_doc_group *gr)
{
    if (gr->n < 2)
        return 0;
    const char *w = rt->ranks[gr->members[0]].name;
    if (!w[0])
        return 0;
    for (int i = 0; i < gr->n; i++) {
        const struct plan_doc_rank *a = &rt->ranks[gr->members[i]];
        if (strcmp(a->name, w) != 0)
            return 0;
        for (int j = 0; j < i; j++)
            if (rt->ranks[gr->members[j]].local_rank == a->local_rank)
                return 0;
    }
    return 1;
}

int rank_table_nccl_params(const struct plan_doc *rt, int g, int rank, int device,
                           struct comm_nccl_params *out)
{
    memset(out, 0, sizeof *out);
    if (g < 0 || g >= rt->ngroups || rank < 0 || rank >= rt->world)
        return 0;
    const struct plan_doc_group *gr = &rt->groups[g];
    if (gr->kind == GROUP_PP) /* the pipeline group carries only the norm's scalars: TCP */
        return 0;
    int rdma = strcmp(gr->nccl_net, "IB") == 0, local = rank_table_same_node(rt, gr);
    if (!rdma && !local)
        return 0;
    const struct plan_doc_rank *k = &rt->ranks[rank];
    out->device = device;
    out->net_name = rdma ? gr->nccl_net : ""; /* one node: NVLink / PCIe, NCCL's choice */
    out->ib_hca = k->ib_hca[0] ? k->ib_hca : NULL;
    out->gid_index = gr->gid_index >= 0 ? gr->gid_index : k->gid_index;
    out->socket_ifname = k->socket_ifname[0] ? k->socket_ifname : NULL;
    out->timeout_s = rt->timeout_s;
    return 1;
}
