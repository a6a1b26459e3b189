#include "nic_report.h"

#include <arpa/inet.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "nic_labels.h"

void nic_copy(char *dst, size_t cap, const char *src)
{
    if (cap == 0)
        return;
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void nic_report_init(struct nic_report *r)
{
    memset(r, 0, sizeof *r);
    r->summary.gid_index = -1;
}

void nic_report_free(struct nic_report *r)
{
    for (int i = 0; i < r->ndevs; i++) {
        for (int p = 0; p < r->devs[i].nports; p++)
            free(r->devs[i].ports[p].gids);
        free(r->devs[i].ports);
    }
    free(r->devs);
    for (int i = 0; i < r->nnetdevs; i++)
        free(r->netdevs[i].addrs);
    free(r->netdevs);
    free(r->gpus);
    for (int i = 0; i < r->nwarnings; i++)
        free(r->warnings[i]);
    free(r->warnings);
    nic_report_init(r);
}

void nic_report_warn(struct nic_report *r, const char *fmt, ...)
{
    char **w = realloc(r->warnings, (size_t)(r->nwarnings + 1) * sizeof *w);
    if (!w)
        return;
    r->warnings = w;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&w[r->nwarnings], fmt, ap) >= 0)
        r->nwarnings++;
    va_end(ap);
}

/* Grows *arr by one zeroed element of `size` bytes; returns it, or NULL on OOM. */
static void *append(void **arr, int *n, size_t size)
{
    char *a = realloc(*arr, (size_t)(*n + 1) * size);
    if (!a)
        return NULL;
    *arr = a;
    char *el = a + (size_t)*n * size;
    memset(el, 0, size);
    (*n)++;
    return el;
}

struct nic_rdma_dev *nic_report_add_dev(struct nic_report *r)
{
    struct nic_rdma_dev *d = append((void **)&r->devs, &r->ndevs, sizeof *d);
    if (d)
        d->numa_node = -1;
    return d;
}

struct nic_port *nic_dev_add_port(struct nic_rdma_dev *d)
{
    struct nic_port *p = append((void **)&d->ports, &d->nports, sizeof *p);
    if (p) {
        p->state = p->phys_state = -1;
        p->lid = p->sm_lid = -1;
        p->roce_gid_index = -1;
    }
    return p;
}

struct nic_gid *nic_port_add_gid(struct nic_port *p)
{
    return append((void **)&p->gids, &p->ngids, sizeof(struct nic_gid));
}

struct nic_netdev *nic_report_add_netdev(struct nic_report *r)
{
    struct nic_netdev *n = append((void **)&r->netdevs, &r->nnetdevs, sizeof *n);
    if (n) {
        n->speed_mbps = -1;
        n->numa_node = -1;
    }
    return n;
}

struct nic_addr *nic_netdev_add_addr(struct nic_netdev *n)
{
    return append((void **)&n->addrs, &n->naddrs, sizeof(struct nic_addr));
}

struct nic_gpu *nic_report_add_gpu(struct nic_report *r)
{
    struct nic_gpu *g = append((void **)&r->gpus, &r->ngpus, sizeof *g);
    if (g)
        g->numa_node = -1;
    return g;
}

struct nic_netdev *nic_report_find_netdev(struct nic_report *r, const char *name)
{
    for (int i = 0; i < r->nnetdevs; i++)
        if (strcmp(r->netdevs[i].name, name) == 0)
            return &r->netdevs[i];
    return NULL;
}

/* ---- JSON ---- */

/* cJSON builders that remember the first failure, so building reads straight. */
struct jb {
    int ok;
};

static void put_str(struct jb *b, cJSON *o, const char *k, const char *v)
{
    if (b->ok && !cJSON_AddStringToObject(o, k, v))
        b->ok = 0;
}

static void put_str_or_null(struct jb *b, cJSON *o, const char *k, const char *v)
{
    if (!b->ok)
        return;
    if (!(v && v[0] ? cJSON_AddStringToObject(o, k, v) : cJSON_AddNullToObject(o, k)))
        b->ok = 0;
}

static void put_num(struct jb *b, cJSON *o, const char *k, double v)
{
    if (b->ok && !cJSON_AddNumberToObject(o, k, v))
        b->ok = 0;
}

/* A number, or null when negative (unknown). */
static void put_num_known(struct jb *b, cJSON *o, const char *k, double v, double unknown_below)
{
    if (!b->ok)
        return;
    if (!(v < unknown_below ? cJSON_AddNullToObject(o, k) : cJSON_AddNumberToObject(o, k, v)))
        b->ok = 0;
}

static void put_bool(struct jb *b, cJSON *o, const char *k, int v)
{
    if (b->ok && !cJSON_AddBoolToObject(o, k, v))
        b->ok = 0;
}

static cJSON *add_obj(struct jb *b, cJSON *o, const char *k)
{
    cJSON *c = b->ok ? cJSON_AddObjectToObject(o, k) : NULL;
    if (!c)
        b->ok = 0;
    return c;
}

static cJSON *add_arr(struct jb *b, cJSON *o, const char *k)
{
    cJSON *c = b->ok ? cJSON_AddArrayToObject(o, k) : NULL;
    if (!c)
        b->ok = 0;
    return c;
}

static cJSON *push_obj(struct jb *b, cJSON *arr)
{
    if (!b->ok)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o)) {
        cJSON_Delete(o);
        b->ok = 0;
        return NULL;
    }
    return o;
}

static void push_str(struct jb *b, cJSON *arr, const char *s)
{
    if (!b->ok)
        return;
    cJSON *v = cJSON_CreateString(s);
    if (!v || !cJSON_AddItemToArray(arr, v)) {
        cJSON_Delete(v);
        b->ok = 0;
    }
}

static const char *link_layer_name(enum nic_link_layer ll)
{
    return ll == NIC_LL_INFINIBAND ? "InfiniBand" : ll == NIC_LL_ETHERNET ? "Ethernet" : "unknown";
}

static void port_json(struct jb *b, cJSON *o, const struct nic_port *p)
{
    char buf[64];
    put_num(b, o, "port", p->num);
    put_str(b, o, "state", p->state >= 0 ? nic_port_state_name(p->state) : "UNKNOWN");
    put_str(b, o, "phys_state", p->phys_state >= 0 ? nic_port_phys_state_name(p->phys_state) : "UNKNOWN");
    put_str(b, o, "link_layer", link_layer_name(p->link_layer));
    put_str_or_null(b, o, "speed", p->speed);
    if (p->lanes > 0) {
        snprintf(buf, sizeof buf, "%dX", p->lanes);
        put_str(b, o, "width", buf);
    } else {
        put_str_or_null(b, o, "width", NULL);
    }
    put_num_known(b, o, "gbps", p->gbps, 1e-9);
    put_num_known(b, o, "active_mtu", p->active_mtu, 1);
    put_str_or_null(b, o, "netdev", p->netdev);
    if (p->link_layer == NIC_LL_INFINIBAND) {
        cJSON *ib = add_obj(b, o, "ib");
        if (ib) {
            uint8_t raw[16] = {0};
            for (int i = 0; i < 8; i++)
                raw[i] = (uint8_t)(p->subnet_prefix >> (56 - 8 * i));
            char gid[40];
            nic_gid_format(raw, gid);
            gid[19] = '\0'; /* the first four groups */
            put_str(b, ib, "subnet_prefix", gid);
            put_num_known(b, ib, "lid", p->lid, 0);
            put_num_known(b, ib, "sm_lid", p->sm_lid, 0);
        }
    } else if (p->link_layer == NIC_LL_ETHERNET) {
        cJSON *roce = add_obj(b, o, "roce");
        if (roce) {
            put_num_known(b, roce, "gid_index", p->roce_gid_index, 0);
            put_str_or_null(b, roce, "subnet", p->roce_subnet);
        }
    }
    cJSON *gids = add_arr(b, o, "gids");
    for (int i = 0; gids && i < p->ngids; i++) {
        cJSON *g = push_obj(b, gids);
        if (!g)
            break;
        char text[40];
        nic_gid_format(p->gids[i].raw, text);
        put_num(b, g, "index", p->gids[i].index);
        put_str(b, g, "gid", text);
        put_str(b, g, "type", nic_gid_type_name(p->gids[i].type));
        put_str_or_null(b, g, "netdev", p->gids[i].ndev);
    }
    put_str_or_null(b, o, "fabric", p->fabric);
}

static void dev_json(struct jb *b, cJSON *o, const struct nic_rdma_dev *d)
{
    char hex[16];
    put_str(b, o, "name", d->name);
    put_str(b, o, "source", d->source);
    snprintf(hex, sizeof hex, "0x%04x", d->vendor_id);
    put_str(b, o, "vendor_id", hex);
    snprintf(hex, sizeof hex, "0x%04x", d->part_id);
    put_str(b, o, "part_id", hex);
    put_str_or_null(b, o, "node_guid", d->node_guid);
    put_str_or_null(b, o, "fw_ver", d->fw_ver);
    put_str_or_null(b, o, "pci", d->pci);
    put_num_known(b, o, "numa_node", d->numa_node, 0);
    cJSON *ports = add_arr(b, o, "ports");
    for (int i = 0; ports && i < d->nports; i++) {
        cJSON *p = push_obj(b, ports);
        if (p)
            port_json(b, p, &d->ports[i]);
    }
}

static void netdev_json(struct jb *b, cJSON *o, const struct nic_netdev *n)
{
    put_str(b, o, "name", n->name);
    put_str(b, o, "kind", n->kind);
    put_str(b, o, "operstate", n->operstate[0] ? n->operstate : "unknown");
    put_num_known(b, o, "speed_mbps", n->speed_mbps, 0);
    put_num_known(b, o, "mtu", n->mtu, 1);
    put_str_or_null(b, o, "mac", n->mac);
    cJSON *addrs = add_arr(b, o, "addresses");
    for (int i = 0; addrs && i < n->naddrs; i++) {
        char text[INET6_ADDRSTRLEN], buf[INET6_ADDRSTRLEN + 8];
        if (!inet_ntop(n->addrs[i].family, n->addrs[i].addr, text, sizeof text))
            continue;
        snprintf(buf, sizeof buf, "%s/%d", text, n->addrs[i].prefix);
        push_str(b, addrs, buf);
    }
    put_str_or_null(b, o, "pci", n->pci);
    put_num_known(b, o, "numa_node", n->numa_node, 0);
    put_str_or_null(b, o, "rdma_device", n->rdma_dev);
}

static void gpu_json(struct jb *b, cJSON *o, const struct nic_gpu *g)
{
    char hex[16];
    put_str(b, o, "pci", g->pci);
    snprintf(hex, sizeof hex, "0x%04x", g->device_id);
    put_str(b, o, "device_id", hex);
    put_num_known(b, o, "numa_node", g->numa_node, 0);
    put_str_or_null(b, o, "nearest_nic", g->nearest_nic);
    put_str_or_null(b, o, "affinity", g->affinity);
}

cJSON *nic_report_to_json(const struct nic_report *r)
{
    struct jb b = {1};
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    put_str(&b, o, "kind", "NicReport");
    put_bool(&b, o, "emulated", r->emulated);
    cJSON *rdma = add_obj(&b, o, "rdma");
    if (rdma) {
        put_bool(&b, rdma, "found", r->rdma_found);
        put_str_or_null(&b, rdma, "note", r->rdma_note);
        cJSON *devs = add_arr(&b, rdma, "devices");
        for (int i = 0; devs && i < r->ndevs; i++) {
            cJSON *d = push_obj(&b, devs);
            if (d)
                dev_json(&b, d, &r->devs[i]);
        }
    }
    cJSON *phys = add_arr(&b, o, "netdevs");
    cJSON *virt = add_arr(&b, o, "virtual_netdevs");
    for (int i = 0; phys && virt && i < r->nnetdevs; i++) {
        cJSON *n = push_obj(&b, r->netdevs[i].is_virtual ? virt : phys);
        if (n)
            netdev_json(&b, n, &r->netdevs[i]);
    }
    cJSON *gpus = add_arr(&b, o, "gpus");
    for (int i = 0; gpus && i < r->ngpus; i++) {
        cJSON *g = push_obj(&b, gpus);
        if (g)
            gpu_json(&b, g, &r->gpus[i]);
    }
    if (b.ok && r->have_summary) {
        cJSON *s = nic_summary_to_json(&r->summary);
        if (!s || !cJSON_AddItemToObject(o, "summary", s)) {
            cJSON_Delete(s);
            b.ok = 0;
        } else if (r->emulated) {
            put_bool(&b, s, "emulated", 1);
        }
        struct nic_labels l;
        if (b.ok && nic_labels_from_summary(&r->summary, &l, NULL) == 0) {
            cJSON *lj = nic_labels_to_json(&l);
            if (!lj || !cJSON_AddItemToObject(o, "labels", lj)) {
                cJSON_Delete(lj);
                b.ok = 0;
            }
        }
    }
    cJSON *warns = add_arr(&b, o, "warnings");
    for (int i = 0; warns && i < r->nwarnings; i++)
        push_str(&b, warns, r->warnings[i]);
    if (!b.ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int nic_report_emulate(const char *spec, struct nic_report *r, herr *e)
{
    nic_report_init(r);
    const char *first = spec ? strchr(spec, ':') : NULL;
    const char *last = spec ? strrchr(spec, ':') : NULL;
    if (!first || first == last)
        return herr_set(e, "--emulate \"%s\": expected CLASS:FABRIC:GBPS, e.g. roce:roce-10.1.0.0/16:100",
                        spec ? spec : "");
    char cls[32];
    size_t clen = (size_t)(first - spec);
    if (clen == 0 || clen >= sizeof cls)
        return herr_set(e, "--emulate \"%s\": CLASS must be infiniband, roce or ethernet", spec);
    memcpy(cls, spec, clen);
    cls[clen] = '\0';
    if (nic_class_parse(cls, &r->summary.cls))
        return herr_set(e, "--emulate \"%s\": CLASS \"%s\" must be infiniband, roce or ethernet",
                        spec, cls);
    size_t flen = (size_t)(last - first - 1);
    if (flen == 0 || flen >= sizeof r->summary.fabric)
        return herr_set(e, "--emulate \"%s\": FABRIC must be 1 to %zu characters", spec,
                        sizeof r->summary.fabric - 1);
    memcpy(r->summary.fabric, first + 1, flen);
    r->summary.fabric[flen] = '\0';
    char *end;
    double g = strtod(last + 1, &end);
    if (end == last + 1 || *end || !isfinite(g) || !(g > 0) || g > 1e6)
        return herr_set(e, "--emulate \"%s\": GBPS \"%s\" must be a number in (0, 1000000]", spec,
                        last + 1);
    r->summary.gbps = g;
    r->summary.gid_index = -1;
    r->have_summary = 1;
    r->emulated = 1;
    snprintf(r->rdma_note, sizeof r->rdma_note, "emulated NIC; no discovery was run");
    return 0;
}
