#include "nic_topology.h"

#include <string.h>

int nic_pci_common_depth(const char *a, const char *b)
{
    int depth = 0;
    while (*a && *b) {
        size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
        if (la != lb || strncmp(a, b, la) != 0)
            break;
        depth++;
        a += la;
        b += lb;
        if (*a != '/' || *b != '/')
            break;
        a++;
        b++;
    }
    return depth;
}

void nic_topology_link_netdevs(struct nic_report *r)
{
    for (int i = 0; i < r->nnetdevs; i++) {
        struct nic_netdev *n = &r->netdevs[i];
        for (int j = 0; n->pci[0] && j < r->ndevs; j++)
            if (strcmp(n->pci, r->devs[j].pci) == 0) {
                nic_copy(n->rdma_dev, sizeof n->rdma_dev, r->devs[j].name);
                break;
            }
    }
}

/* A NIC candidate's rank for one GPU; larger is nearer/better. */
struct cand {
    const char *name;
    int level;   /* 2 pcie-switch, 1 numa, 0 system */
    int depth;
    int active;
    int cls;     /* 2 ib, 1 roce, 0 ethernet */
};

static int better(const struct cand *a, const struct cand *b)
{
    if (a->level != b->level)
        return a->level > b->level;
    if (a->depth != b->depth)
        return a->depth > b->depth;
    if (a->active != b->active)
        return a->active > b->active;
    if (a->cls != b->cls)
        return a->cls > b->cls;
    return strcmp(a->name, b->name) < 0;
}

static struct cand rate(const struct nic_gpu *g, const char *name, const char *pci_path, int numa)
{
    struct cand c = {name, 0, nic_pci_common_depth(g->pci_path, pci_path), 0, 0};
    if (c.depth > 0)
        c.level = 2;
    else if (g->numa_node >= 0 && numa == g->numa_node)
        c.level = 1;
    return c;
}

void nic_topology_nearest(struct nic_report *r)
{
    static const char *const levels[] = {"system", "numa", "pcie-switch"};
    for (int i = 0; i < r->ngpus; i++) {
        struct nic_gpu *g = &r->gpus[i];
        struct cand best = {0};
        int have = 0;
        for (int j = 0; j < r->ndevs; j++) {
            const struct nic_rdma_dev *d = &r->devs[j];
            if (!d->pci[0])
                continue;
            struct cand c = rate(g, d->name, d->pci_path, d->numa_node);
            for (int p = 0; p < d->nports; p++)
                if (d->ports[p].state == 4) {
                    c.active = 1;
                    if (d->ports[p].link_layer == NIC_LL_INFINIBAND)
                        c.cls = 2;
                    else if (c.cls < 1)
                        c.cls = 1;
                }
            if (!have || better(&c, &best)) {
                best = c;
                have = 1;
            }
        }
        for (int j = 0; j < r->nnetdevs; j++) {
            const struct nic_netdev *n = &r->netdevs[j];
            if (n->is_virtual || !n->pci[0] || n->rdma_dev[0])
                continue;
            struct cand c = rate(g, n->name, n->pci_path, n->numa_node);
            c.active = strcmp(n->operstate, "up") == 0;
            if (!have || better(&c, &best)) {
                best = c;
                have = 1;
            }
        }
        if (have) {
            nic_copy(g->nearest_nic, sizeof g->nearest_nic, best.name);
            g->affinity = levels[best.level];
        }
    }
}
