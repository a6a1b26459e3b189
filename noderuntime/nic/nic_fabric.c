#include "nic_fabric.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "nic_addrs.h"

#define PORT_ACTIVE 4
#define DEFAULT_ETH_GBPS 10.0

static int gid_rank(const struct nic_gid *g)
{
    switch (nic_gid_addr_kind(g->raw)) {
    case NIC_GID_ADDR_IPV4: return 3;
    case NIC_GID_ADDR_IPV6: return 2;
    case NIC_GID_ADDR_LINK_LOCAL: return 1;
    case NIC_GID_ADDR_ZERO: break;
    }
    return 0;
}

int nic_roce_pick_gid(const struct nic_port *p)
{
    int best = -1, best_rank = 0;
    for (int i = 0; i < p->ngids; i++) {
        const struct nic_gid *g = &p->gids[i];
        if (g->type != NIC_GID_ROCE_V2)
            continue;
        int rank = gid_rank(g);
        if (rank > best_rank || (rank == best_rank && rank > 0 && g->index < p->gids[best].index)) {
            best = i;
            best_rank = rank;
        }
    }
    return best;
}

static void assign_roce(struct nic_report *r, const struct nic_rdma_dev *d, struct nic_port *p)
{
    int gi = nic_roce_pick_gid(p);
    if (gi < 0) {
        nic_report_warn(r, "%s port %d: RoCE port has no RoCE v2 GID; not placed on a fabric",
                        d->name, p->num);
        return;
    }
    const struct nic_gid *g = &p->gids[gi];
    p->roce_gid_index = g->index;
    int family = nic_gid_addr_kind(g->raw) == NIC_GID_ADDR_IPV4 ? AF_INET : AF_INET6;
    const uint8_t *addr = family == AF_INET ? g->raw + 12 : g->raw;
    const char *ndev = g->ndev[0] ? g->ndev : p->netdev;
    const struct nic_netdev *n = nic_report_find_netdev(r, ndev);
    const struct nic_addr *a = n ? nic_addrs_find(n, family, addr) : NULL;
    int prefix;
    if (a) {
        prefix = a->prefix;
    } else {
        prefix = family == AF_INET ? 24 : 64;
        nic_report_warn(r, "%s port %d: GID %d's address is not on netdev \"%s\"; assuming /%d",
                        d->name, p->num, g->index, ndev, prefix);
    }
    if (nic_gid_addr_kind(g->raw) == NIC_GID_ADDR_LINK_LOCAL)
        nic_report_warn(r, "%s port %d: only a link-local RoCE v2 GID (%d); the fabric can not be "
                        "told apart from other link-local ones", d->name, p->num, g->index);
    if (nic_subnet_string(family, addr, prefix, p->roce_subnet, sizeof p->roce_subnet) != 0 ||
        nic_fabric_roce(p->roce_subnet, p->fabric, sizeof p->fabric) != 0)
        p->fabric[0] = '\0';
}

void nic_fabric_assign(struct nic_report *r)
{
    for (int i = 0; i < r->ndevs; i++) {
        struct nic_rdma_dev *d = &r->devs[i];
        for (int j = 0; j < d->nports; j++) {
            struct nic_port *p = &d->ports[j];
            p->fabric[0] = '\0';
            p->roce_gid_index = -1;
            p->roce_subnet[0] = '\0';
            if (p->state != PORT_ACTIVE)
                continue;
            if (p->link_layer == NIC_LL_INFINIBAND) {
                if (p->ngids == 0 || p->sm_lid < 0)
                    nic_report_warn(r, "%s port %d: no GID 0 or SM LID; not placed on a fabric",
                                    d->name, p->num);
                else
                    nic_fabric_ib(p->subnet_prefix, p->sm_lid, p->fabric, sizeof p->fabric);
            } else if (p->link_layer == NIC_LL_ETHERNET) {
                assign_roce(r, d, p);
            }
        }
    }
}

static enum nic_class port_class(const struct nic_port *p)
{
    return p->link_layer == NIC_LL_INFINIBAND ? NIC_INFINIBAND : NIC_ROCE;
}

static int port_usable(const struct nic_port *p)
{
    return p->state == PORT_ACTIVE && p->fabric[0] && p->gbps > 0;
}

/* Total Gb/s of the usable ports of class c on fabric f (with the same GID index for RoCE). */
static double fabric_gbps(const struct nic_report *r, enum nic_class c, const char *f)
{
    double sum = 0;
    for (int i = 0; i < r->ndevs; i++)
        for (int j = 0; j < r->devs[i].nports; j++) {
            const struct nic_port *p = &r->devs[i].ports[j];
            if (port_usable(p) && port_class(p) == c && strcmp(p->fabric, f) == 0)
                sum += p->gbps;
        }
    return sum;
}

/* Appends ",item" (or "item"); returns -1 when it does not fit. */
static int append_list(char *dst, size_t cap, const char *item)
{
    size_t used = strlen(dst);
    if (used + strlen(item) + 2 > cap)
        return -1;
    snprintf(dst + used, cap - used, "%s%s", used ? "," : "", item);
    return 0;
}

/* True when n has an IPv4 or a non-link-local IPv6 address. */
static int has_routable_addr(const struct nic_netdev *n)
{
    for (int i = 0; i < n->naddrs; i++)
        if (n->addrs[i].family == AF_INET ||
            !(n->addrs[i].addr[0] == 0xfe && (n->addrs[i].addr[1] & 0xc0) == 0x80))
            return 1;
    return 0;
}

/* The Ethernet netdev to bootstrap on / run TCP over: up, physical (or a bond), addressed
 * (a bond's member ports are not), fastest, then by name. */
static const struct nic_netdev *best_ethernet(const struct nic_report *r)
{
    const struct nic_netdev *best = NULL;
    int best_addr = 0;
    for (int i = 0; i < r->nnetdevs; i++) {
        const struct nic_netdev *n = &r->netdevs[i];
        if (n->is_virtual || n->type != 1 || strcmp(n->operstate, "up") != 0)
            continue;
        int addr = has_routable_addr(n);
        if (!best || addr > best_addr || (addr == best_addr && n->speed_mbps > best->speed_mbps)) {
            best = n;
            best_addr = addr;
        }
    }
    return best;
}

/* The netdev's subnet: first IPv4, else first non-link-local IPv6. */
static int netdev_subnet(const struct nic_netdev *n, char *out, size_t cap)
{
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n->naddrs; i++) {
            const struct nic_addr *a = &n->addrs[i];
            if (pass == 0 && a->family != AF_INET)
                continue;
            if (pass == 1 && (a->family != AF_INET6 || (a->addr[0] == 0xfe && (a->addr[1] & 0xc0) == 0x80)))
                continue;
            return nic_subnet_string(a->family, a->addr, a->prefix, out, cap);
        }
    return -1;
}

static void summarize_ethernet(struct nic_report *r)
{
    struct nic_summary *s = &r->summary;
    s->cls = NIC_ETHERNET;
    const struct nic_netdev *n = best_ethernet(r);
    if (!n) {
        for (int i = 0; i < r->nnetdevs && !n; i++)
            if (strcmp(r->netdevs[i].kind, "loopback") != 0 &&
                strcmp(r->netdevs[i].operstate, "up") == 0 && r->netdevs[i].naddrs > 0)
                n = &r->netdevs[i];
        nic_report_warn(r, "no physical Ethernet netdev is up%s%s; fabric \"eth-default\"",
                        n ? "; bootstrap on virtual " : "", n ? n->name : "");
        snprintf(s->fabric, sizeof s->fabric, "eth-default");
    } else {
        char subnet[64];
        if (netdev_subnet(n, subnet, sizeof subnet) == 0) {
            nic_fabric_eth(subnet, s->fabric, sizeof s->fabric);
        } else {
            nic_report_warn(r, "%s: no IP address; fabric \"eth-default\"", n->name);
            snprintf(s->fabric, sizeof s->fabric, "eth-default");
        }
    }
    if (n && n->speed_mbps > 0) {
        s->gbps = n->speed_mbps / 1000.0;
    } else {
        s->gbps = DEFAULT_ETH_GBPS;
        nic_report_warn(r, "%s: link speed unknown; assuming %g Gb/s", n ? n->name : "ethernet",
                        DEFAULT_ETH_GBPS);
    }
    if (n)
        nic_copy(s->socket_ifname, sizeof s->socket_ifname, n->name);
}

void nic_fabric_summarize(struct nic_report *r)
{
    struct nic_summary *s = &r->summary;
    memset(s, 0, sizeof *s);
    s->gid_index = -1;
    r->have_summary = 1;

    /* Best class, then its fabric with the most bandwidth (first in device order on ties). */
    const struct nic_port *best = NULL;
    double best_gbps = 0;
    for (int i = 0; i < r->ndevs; i++)
        for (int j = 0; j < r->devs[i].nports; j++) {
            const struct nic_port *p = &r->devs[i].ports[j];
            if (!port_usable(p))
                continue;
            double g = fabric_gbps(r, port_class(p), p->fabric);
            if (!best || port_class(p) > port_class(best) ||
                (port_class(p) == port_class(best) && g > best_gbps)) {
                best = p;
                best_gbps = g;
            }
        }
    if (!best) {
        summarize_ethernet(r);
        return;
    }
    s->cls = port_class(best);
    nic_copy(s->fabric, sizeof s->fabric, best->fabric);
    if (s->cls == NIC_ROCE)
        s->gid_index = best->roce_gid_index;
    snprintf(s->ib_hca, sizeof s->ib_hca, "=");
    for (int i = 0; i < r->ndevs; i++)
        for (int j = 0; j < r->devs[i].nports; j++) {
            const struct nic_port *p = &r->devs[i].ports[j];
            if (!port_usable(p))
                continue;
            char item[96];
            snprintf(item, sizeof item, "%s:%d", r->devs[i].name, p->num);
            if (port_class(p) != s->cls || strcmp(p->fabric, s->fabric) != 0) {
                nic_report_warn(r, "%s is on fabric %s, not the chosen %s; NCCL will not use it",
                                item, p->fabric, s->fabric);
                continue;
            }
            if (s->cls == NIC_ROCE && p->roce_gid_index != s->gid_index) {
                nic_report_warn(r, "%s uses RoCE v2 GID index %d, not %d; NCCL will not use it",
                                item, p->roce_gid_index, s->gid_index);
                continue;
            }
            if (append_list(s->ib_hca + 1, sizeof s->ib_hca - 1, item) != 0) {
                nic_report_warn(r, "%s does not fit in NCCL_IB_HCA (%zu characters); left out",
                                item, sizeof s->ib_hca - 1);
                continue;
            }
            s->gbps += p->gbps;
        }
    if (s->cls == NIC_ROCE) {
        nic_copy(s->socket_ifname, sizeof s->socket_ifname, best->netdev);
    } else {
        const struct nic_netdev *n = best_ethernet(r);
        nic_copy(s->socket_ifname, sizeof s->socket_ifname, n ? n->name : best->netdev);
    }
}
