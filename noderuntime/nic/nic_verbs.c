#include "nic_verbs.h"

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "nic_sysfs.h"

static void format_guid(__be64 guid, char out[24])
{
    uint64_t g = be64toh(guid);
    snprintf(out, 24, "%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff,
             (unsigned)(g >> 32) & 0xffff, (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
}

/* The netdev of a RoCE GID when its ifindex is not in this network namespace (a pod). */
static void gid_ndev_from_sysfs(const char *root, const char *dev, int port, struct nic_gid *g)
{
    char path[PATH_MAX], buf[64];
    snprintf(path, sizeof path, "%s/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", root, dev,
             port, g->index);
    if (nic_sysfs_read(path, buf, sizeof buf) == 0)
        nic_copy(g->ndev, sizeof g->ndev, buf);
}

static void query_gids(const char *root, struct ibv_context *ctx, struct nic_rdma_dev *d,
                       struct nic_port *p, int table_len, struct nic_report *r)
{
    if (table_len <= 0)
        return;
    struct ibv_gid_entry *ents = calloc((size_t)table_len * (size_t)d->nports + 1, sizeof *ents);
    if (!ents) {
        nic_report_warn(r, "%s: out of memory querying GIDs", d->name);
        return;
    }
    ssize_t n = ibv_query_gid_table(ctx, ents, (size_t)table_len * (size_t)d->nports + 1, 0);
    if (n < 0) {
        /* Older kernels: ibv_query_gid one by one; types unknown to verbs, so IB/RoCE v1. */
        nic_report_warn(r, "%s: ibv_query_gid_table failed (%s); reading GIDs one by one",
                        d->name, strerror((int)-n));
        for (int i = 0; i < table_len; i++) {
            union ibv_gid gid;
            if (ibv_query_gid(ctx, (uint8_t)p->num, i, &gid) != 0 || nic_gid_is_zero(gid.raw))
                continue;
            struct nic_gid *g = nic_port_add_gid(p);
            if (!g)
                break;
            g->index = i;
            memcpy(g->raw, gid.raw, 16);
            g->type = p->link_layer == NIC_LL_INFINIBAND ? NIC_GID_IB_ROCE_V1 : NIC_GID_TYPE_UNKNOWN;
        }
        free(ents);
        return;
    }
    for (ssize_t i = 0; i < n; i++) {
        if ((int)ents[i].port_num != p->num || nic_gid_is_zero(ents[i].gid.raw))
            continue;
        struct nic_gid *g = nic_port_add_gid(p);
        if (!g)
            break;
        g->index = (int)ents[i].gid_index;
        memcpy(g->raw, ents[i].gid.raw, 16);
        g->type = ents[i].gid_type == IBV_GID_TYPE_ROCE_V2 ? NIC_GID_ROCE_V2 : NIC_GID_IB_ROCE_V1;
        char ifname[IF_NAMESIZE];
        if (ents[i].ndev_ifindex && if_indextoname(ents[i].ndev_ifindex, ifname))
            nic_copy(g->ndev, sizeof g->ndev, ifname);
        else if (p->link_layer == NIC_LL_ETHERNET)
            gid_ndev_from_sysfs(root, d->name, p->num, g);
    }
    free(ents);
}

static void query_port(const char *root, struct ibv_context *ctx, struct nic_rdma_dev *d,
                       struct nic_port *p, struct nic_report *r)
{
    struct ibv_port_attr pa;
    int rc = ibv_query_port(ctx, (uint8_t)p->num, &pa);
    if (rc != 0) {
        nic_report_warn(r, "%s port %d: ibv_query_port: %s", d->name, p->num, strerror(rc));
        return;
    }
    p->state = (int)pa.state;
    p->phys_state = pa.phys_state;
    p->link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? NIC_LL_ETHERNET : NIC_LL_INFINIBAND;
    const char *speed = nic_ib_speed_name(pa.active_speed);
    nic_copy(p->speed, sizeof p->speed, speed ? speed : "");
    p->lanes = nic_ib_width_lanes(pa.active_width);
    p->gbps = nic_ib_port_gbps(pa.active_speed, pa.active_width);
    if (p->state == IBV_PORT_ACTIVE && p->gbps <= 0)
        nic_report_warn(r, "%s port %d: unknown speed %d / width %d codes", d->name, p->num,
                        pa.active_speed, pa.active_width);
    p->active_mtu = nic_ib_mtu_bytes(pa.active_mtu);
    if (p->link_layer == NIC_LL_INFINIBAND) {
        p->lid = pa.lid;
        p->sm_lid = pa.sm_lid;
    }
    query_gids(root, ctx, d, p, pa.gid_tbl_len, r);
    if (p->link_layer == NIC_LL_INFINIBAND && p->ngids > 0 && p->gids[0].index == 0)
        p->subnet_prefix = nic_gid_subnet_prefix(p->gids[0].raw);
    nic_sysfs_port_netdev(root, d, p->num, p->netdev, sizeof p->netdev);
}

/* Fills d from an open context; returns -1 when the device can not be queried. */
static int query_device(const char *root, struct ibv_context *ctx, struct nic_rdma_dev *d,
                        struct nic_report *r)
{
    struct ibv_device_attr da;
    int rc = ibv_query_device(ctx, &da);
    if (rc != 0) {
        nic_report_warn(r, "%s: ibv_query_device: %s; reading sysfs instead", d->name, strerror(rc));
        return -1;
    }
    snprintf(d->source, sizeof d->source, "verbs");
    d->vendor_id = da.vendor_id;
    d->part_id = da.vendor_part_id;
    format_guid(da.node_guid, d->node_guid);
    nic_copy(d->fw_ver, sizeof d->fw_ver, da.fw_ver);
    for (int i = 1; i <= da.phys_port_cnt; i++) {
        struct nic_port *p = nic_dev_add_port(d);
        if (!p) {
            nic_report_warn(r, "%s: out of memory", d->name);
            break;
        }
        p->num = i;
        query_port(root, ctx, d, p, r);
    }
    return 0;
}

int nic_verbs_discover(const char *root, struct nic_report *r)
{
    int n = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) {
        snprintf(r->rdma_note, sizeof r->rdma_note,
                 "no RDMA devices found (libibverbs: %s); reporting Ethernet only",
                 errno ? strerror(errno) : "no device list");
        return 0;
    }
    if (n == 0)
        snprintf(r->rdma_note, sizeof r->rdma_note,
                 "no RDMA devices found (libibverbs lists none); reporting Ethernet only");
    for (int i = 0; i < n; i++) {
        struct nic_rdma_dev *d = nic_report_add_dev(r);
        if (!d) {
            nic_report_warn(r, "out of memory listing RDMA devices");
            break;
        }
        nic_copy(d->name, sizeof d->name, ibv_get_device_name(list[i]));
        nic_sysfs_rdma_locate(root, d);
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) {
            nic_report_warn(r, "%s: ibv_open_device failed (%s); reading sysfs instead", d->name,
                            strerror(errno ? errno : ENODEV));
            nic_sysfs_read_rdma_dev(root, d, r);
            continue;
        }
        if (query_device(root, ctx, d, r) != 0)
            nic_sysfs_read_rdma_dev(root, d, r);
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return n;
}
