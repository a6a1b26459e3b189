/* The worker-level NIC summary: the part of a NIC report (`holmes-node nic --json`)
 * that the planner and the coordinator act on. Discovery fills it; the planner's
 * cluster file and the coordinator's hello message carry it. */
#ifndef HOLMES_NIC_SUMMARY_H
#define HOLMES_NIC_SUMMARY_H

#include <cjson/cJSON.h>

#include "error.h"

/* Ordered by preference: a higher value is the better fabric. */
enum nic_class { NIC_ETHERNET = 0, NIC_ROCE = 1, NIC_INFINIBAND = 2 };

struct nic_summary {
    enum nic_class cls;
    char fabric[128];       /* fabric identity: members of one fabric reach each other by RDMA */
    double gbps;            /* usable bandwidth of the chosen ports */
    char ib_hca[256];       /* NCCL_IB_HCA value, e.g. "mlx5_0:1,mlx5_1:1"; "" for ethernet */
    int gid_index;          /* NCCL_IB_GID_INDEX for RoCE; -1 when not applicable */
    char socket_ifname[64]; /* NCCL_SOCKET_IFNAME, e.g. "eth0"; may be "" */
};

const char *nic_class_name(enum nic_class c); /* "infiniband", "roce", "ethernet" */
/* Accepts "infiniband"|"ib", "roce", "ethernet"|"eth"|"socket". Returns -1 otherwise. */
int nic_class_parse(const char *s, enum nic_class *out);

/* Reads a summary from either a full NIC report (an object with a "summary" member) or the
 * short form {class, fabric, gbps[, ib_hca, gid_index, socket_ifname]}. `where` names the
 * document in errors (e.g. "workers[3].nic"). Returns 0, or -1 with the field and rule in `e`. */
int nic_summary_from_json(const cJSON *j, const char *where, struct nic_summary *out, herr *e);
/* The summary as a JSON object (short-form keys plus "nccl": {NCCL_* env}); NULL on OOM. */
cJSON *nic_summary_to_json(const struct nic_summary *s);

#endif
