/* The worker's NIC report: every RDMA device and port, every netdev, every GPU with its
 * nearest NIC, warnings, and the summary the planner acts on. Discovery fills it
 * (nic_discover.h); this module owns its memory, its JSON form and emulated reports. */
#ifndef HOLMES_NIC_REPORT_H
#define HOLMES_NIC_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "error.h"
#include "nic_decode.h"
#include "nic_summary.h"

enum nic_link_layer { NIC_LL_UNKNOWN = 0, NIC_LL_INFINIBAND, NIC_LL_ETHERNET };

struct nic_gid {
    int index;
    uint8_t raw[16];
    enum nic_gid_type type;
    char ndev[32];              /* netdev of a RoCE GID; "" for IB */
};

struct nic_port {
    int num;
    int state;                  /* verbs enum ibv_port_state; -1 unknown */
    int phys_state;             /* -1 unknown */
    enum nic_link_layer link_layer;
    char speed[8];              /* "HDR"; "" unknown */
    int lanes;                  /* 4 for 4X; 0 unknown */
    double gbps;                /* 0 unknown */
    int active_mtu;             /* bytes; 0 unknown */
    uint64_t subnet_prefix;     /* IB: from GID 0 */
    int lid, sm_lid;            /* IB; -1 unknown */
    struct nic_gid *gids;       /* non-zero GID table entries */
    int ngids;
    int roce_gid_index;         /* RoCE v2 GID NCCL should use; -1 none */
    char roce_subnet[64];       /* subnet of that GID */
    char netdev[32];            /* associated netdev ("" none) */
    char fabric[128];           /* "" when the port can not be placed on a fabric */
};

struct nic_rdma_dev {
    char name[64];
    char source[8];             /* "verbs" or "sysfs" */
    unsigned vendor_id, part_id;
    char node_guid[24];
    char fw_ver[64];
    char pci[16];               /* "0000:3b:00.0"; "" unknown */
    char pci_path[256];         /* chain of PCI functions from the root port, '/'-separated */
    int numa_node;              /* -1 unknown */
    struct nic_port *ports;
    int nports;
};

struct nic_addr {
    int family;                 /* AF_INET / AF_INET6 */
    uint8_t addr[16];
    int prefix;
};

struct nic_netdev {
    char name[32];
    char kind[16];              /* physical, ipoib, loopback, bridge, bond, veth, tunnel, virtual */
    int is_virtual;
    int type;                   /* ARPHRD: 1 ether, 32 infiniband, 772 loopback */
    int speed_mbps;             /* -1 unknown */
    char operstate[16];
    int mtu;
    char mac[64];
    struct nic_addr *addrs;
    int naddrs;
    char pci[16];
    char pci_path[256];
    int numa_node;
    char rdma_dev[64];          /* RDMA device on the same PCI function, if any */
};

struct nic_gpu {
    char pci[16];
    char pci_path[256];
    unsigned device_id;
    int numa_node;
    char nearest_nic[64];       /* RDMA device or netdev name; "" none */
    const char *affinity;       /* "pcie-switch", "numa", "system" or NULL */
};

struct nic_report {
    int emulated;
    int rdma_found;             /* RDMA devices seen */
    char rdma_note[256];        /* e.g. "no RDMA devices found" */
    struct nic_rdma_dev *devs;
    int ndevs;
    struct nic_netdev *netdevs;
    int nnetdevs;
    struct nic_gpu *gpus;
    int ngpus;
    struct nic_summary summary;
    int have_summary;
    char **warnings;
    int nwarnings;
};

/* Copies src into dst (capacity cap), truncating; dst is always terminated. */
void nic_copy(char *dst, size_t cap, const char *src);

void nic_report_init(struct nic_report *r);
void nic_report_free(struct nic_report *r);
/* Appends a warning (printf-style); allocation failure drops it. */
void nic_report_warn(struct nic_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends a zeroed element; NULL on OOM. */
struct nic_rdma_dev *nic_report_add_dev(struct nic_report *r);
struct nic_port *nic_dev_add_port(struct nic_rdma_dev *d);
struct nic_gid *nic_port_add_gid(struct nic_port *p);
struct nic_netdev *nic_report_add_netdev(struct nic_report *r);
struct nic_addr *nic_netdev_add_addr(struct nic_netdev *n);
struct nic_gpu *nic_report_add_gpu(struct nic_report *r);
struct nic_netdev *nic_report_find_netdev(struct nic_report *r, const char *name);

/* The whole report as JSON (schema in docs/nic.md); NULL on OOM. */
cJSON *nic_report_to_json(const struct nic_report *r);

/* An emulated report from "CLASS:FABRIC:GBPS" (the fabric may itself hold ':'), e.g.
 * "roce:roce-10.1.0.0/16:100": no devices, the summary is that NIC, "emulated": true. */
int nic_report_emulate(const char *spec, struct nic_report *r, herr *e);

#endif
