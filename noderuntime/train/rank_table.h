/* The rank table: the plan document (common/plan_doc.h) with every rank's endpoint filled in, as
 * the trainer reads it. It comes from the coordinator's assignment (the worker fills the
 * endpoints from the rendezvous) or, for `holmes-node train`, from a file or the environment in
 * the same JSON/YAML form. This module turns one group of it into a TCP communicator's spec. */
#ifndef HOLMES_RANK_TABLE_H
#define HOLMES_RANK_TABLE_H

#include <cjson/cJSON.h>

#include "comm.h"
#include "comm_tcp.h"
#include "error.h"
#include "plan_doc.h"

/* Reads a table from a file, or from HOLMES_RANK_TABLE_JSON (the document itself) /
 * HOLMES_RANK_TABLE (a path). Every rank must have its endpoint. */
int rank_table_load(const char *path, struct plan_doc *rt, herr *e);
int rank_table_from_env(struct plan_doc *rt, herr *e);

/* A TCP group spec for `rank`'s membership in group g (endpoints, pacing per link: the group's,
 * or cross_fabric between different fabrics when the group sets none). */
struct rt_comm_spec {
    struct tcp_group_spec spec;
    char name[64];
    struct tcp_endpoint *eps;
    struct tcp_pacing *pacing;
};
int rank_table_comm_spec(const struct plan_doc *rt, int g, int rank, struct rt_comm_spec *out,
                         herr *e);
void rt_comm_spec_free(struct rt_comm_spec *s);

/* Whether group g runs on NCCL when its ranks are GPUs: data- and tensor-parallel groups,
 * pipeline links and the tied embedding's link the plan put on RDMA (nccl_net "IB", which covers
 * RoCE: both ends on one RDMA fabric), and those whose members all sit in one worker on distinct
 * GPUs (NVLink or PCIe inside the node: net_name "", NCCL's choice); links between fabrics, every
 * other socket group and the pipeline group (the norm's scalars) stay on TCP. 1 with `out` filled for `rank` on
 * CUDA device `device` (the network, the rank's HCA and socket interface, the group's GID index
 * or else the rank's, the plan's timeout; out->name left to the caller), 0 for TCP. */
int rank_table_nccl_params(const struct plan_doc *rt, int g, int rank, int device,
                           struct comm_nccl_params *out);
/* 1 when the group's members all run in one worker (the plan's names, non-empty) on distinct
 * local ranks (GPUs). */
int rank_table_same_node(const struct plan_doc *rt, const struct plan_doc_group *gr);

#endif
