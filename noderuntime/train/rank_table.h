/* The rank table: every rank's endpoint, the pipeline x data layout, the communicators and their
 * transports. Its JSON/YAML form is the planner's --json document (parallelism, stages, workers,
 * groups) plus where each rank listens ("host", "port" in workers[r]) and optional pacing, so the
 * coordinator can hand a plan straight to the workers; until then it comes from a file or the
 * environment. Global rank = dp + data * stage (tensor = 1 on the CPU). */
#ifndef HOLMES_RANK_TABLE_H
#define HOLMES_RANK_TABLE_H

#include <cjson/cJSON.h>

#include "comm_tcp.h"
#include "error.h"
#include "names.h"



struct rt_rank {
    char host[256];
    int port;
    char fabric[128];
    char ib_hca[256];       /* from workers[r].nic, "" if none */
    int gid_index;          /* -1 if none */
    char socket_ifname[64];
};

struct rt_group {
    enum group_kind kind;
    int stage;             /* dp groups: their stage; else -1 */
    int n;
    int *members;          /* global ranks in communicator order */
    enum transport transport;
    char nccl_net[16];     /* "IB" or "Socket" */
    int gid_index;         /* -1 = unset */
    struct tcp_pacing pacing; /* every link of the group (0 = unpaced) */
};

struct rank_table {
    int world, pipeline, data;
    double timeout_s;               /* bound on every communication wait (default 60) */
    struct rt_rank *ranks;          /* [world] */
    int *stage_first, *stage_last;  /* [pipeline] layer ranges, or NULL when not given */
    int ngroups;
    struct rt_group *groups;
    struct tcp_pacing cross_fabric; /* links between ranks of different fabrics (0 = unpaced) */
};

/* Reads the table; missing groups are derived (dp per stage, pp per replica, embedding between
 * first and last stage when pipeline > 1, all "socket"). `where` names the document in errors. */
int rank_table_from_json(const cJSON *j, const char *where, struct rank_table *rt, herr *e);
int rank_table_load(const char *path, struct rank_table *rt, herr *e);
/* HOLMES_RANK_TABLE_JSON (the document itself) or HOLMES_RANK_TABLE (a path). */
int rank_table_from_env(struct rank_table *rt, herr *e);
void rank_table_free(struct rank_table *rt);

static inline int rank_table_stage(const struct rank_table *rt, int rank) { return rank / rt->data; }
static inline int rank_table_dp(const struct rank_table *rt, int rank) { return rank % rt->data; }

/* Index of the group of `kind` that holds `rank`, or -1. */
int rank_table_find_group(const struct rank_table *rt, enum group_kind kind, int rank);

/* A TCP group spec for `rank`'s membership in group g (endpoints, pacing per link: the group's,
 * or cross_fabric between different fabrics when the group sets none). */
struct rt_comm_spec {
    struct tcp_group_spec spec;
    char name[64];
    struct tcp_endpoint *eps;
    struct tcp_pacing *pacing;
};
int rank_table_comm_spec(const struct rank_table *rt, int g, int rank, struct rt_comm_spec *out,
                         herr *e);
void rt_comm_spec_free(struct rt_comm_spec *s);

#endif
