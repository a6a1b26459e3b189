#include "nic_sysfs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int nic_sysfs_read(const char *path, char *buf, size_t cap)
{
    if (cap == 0)
        return -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    int err = ferror(f);
    int saved = errno;
    fclose(f);
    if (err) {
        errno = saved ? saved : EIO;
        return -1;
    }
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return 0;
}

int nic_sysfs_read_long(const char *path, long *out)
{
    char buf[64], *end;
    if (nic_sysfs_read(path, buf, sizeof buf))
        return -1;
    errno = 0;
    long v = strtol(buf, &end, 0);
    if (end == buf || *end || errno) {
        errno = EINVAL;
        return -1;
    }
    *out = v;
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    /* Numeric names (GID indexes, ports) in numeric order, the rest alphabetically. */
    char *ex, *ey;
    long nx = strtol(x, &ex, 10), ny = strtol(y, &ey, 10);
    if (*x && *y && !*ex && !*ey && nx != ny)
        return nx < ny ? -1 : 1;
    return strcmp(x, y);
}

int nic_sysfs_list(const char *dir, char ***names)
{
    *names = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0, cap = 0;
    char **v = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            int ncap = cap ? cap * 2 : 16;
            char **nv = realloc(v, (size_t)ncap * sizeof *nv);
            if (!nv)
                goto oom;
            v = nv;
            cap = ncap;
        }
        if (!(v[n] = strdup(de->d_name)))
            goto oom;
        n++;
    }
    closedir(d);
    if (n)
        qsort(v, (size_t)n, sizeof *v, name_cmp);
    *names = v;
    return n;
oom:
    closedir(d);
    nic_sysfs_names_free(v, n);
    errno = ENOMEM;
    return -1;
}

void nic_sysfs_names_free(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* True for a PCI function name "dddd:bb:dd.f". */
static int is_pci_name(const char *s, size_t len)
{
    if (len != 12)
        return 0;
    static const char shape[] = "hhhh:hh:hh.h";
    for (size_t i = 0; i < len; i++)
        if (shape[i] == 'h' ? !isxdigit((unsigned char)s[i]) : s[i] != shape[i])
            return 0;
    return 1;
}

void nic_sysfs_pci_locate(const char *devdir, char pci[16], char pci_path[256], int *numa_node)
{
    pci[0] = pci_path[0] = '\0';
    *numa_node = -1;
    char real[PATH_MAX];
    if (!realpath(devdir, real))
        return;
    /* Keep everything up to the last PCI function to read its numa_node. */
    size_t last_end = 0, used = 0;
    for (char *p = real; *p;) {
        char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (is_pci_name(p, len)) {
            memcpy(pci, p, len);
            pci[len] = '\0';
            int n = snprintf(pci_path + used, 256 - used, "%s%s", used ? "/" : "", pci);
            if (n > 0 && (size_t)n < 256 - used)
                used += (size_t)n;
            last_end = (size_t)(p - real) + len;
        }
        if (!slash)
            break;
        p = slash + 1;
    }
    if (!pci[0])
        return;
    real[last_end] = '\0';
    char path[PATH_MAX + 16];
    long v;
    snprintf(path, sizeof path, "%s/numa_node", real);
    if (nic_sysfs_read_long(path, &v) == 0 && v >= 0 && v < 4096)
        *numa_node = (int)v;
}

int nic_sysfs_rdma_names(const char *root, char ***names)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/class/infiniband", root);
    return nic_sysfs_list(dir, names);
}

void nic_sysfs_rdma_locate(const char *root, struct nic_rdma_dev *d)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/class/infiniband/%s/device", root, d->name);
    nic_sysfs_pci_locate(dir, d->pci, d->pci_path, &d->numa_node);
}

/* Reads base/rel into buf; a missing file is a warning naming the device and file. */
static int read_attr(struct nic_report *r, const char *dev, const char *base, const char *rel,
                     char *buf, size_t cap)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", base, rel);
    if (nic_sysfs_read(path, buf, cap) == 0)
        return 0;
    nic_report_warn(r, "%s: cannot read %s: %s", dev, rel, strerror(errno));
    buf[0] = '\0';
    return -1;
}

static void read_gids(const char *devdir, const char *dev, struct nic_port *p, struct nic_report *r)
{
    char dir[PATH_MAX], path[PATH_MAX + 64], buf[128];
    if (snprintf(dir, sizeof dir, "%s/ports/%d/gids", devdir, p->num) >= (int)sizeof dir)
        return;
    char **names;
    int n = nic_sysfs_list(dir, &names);
    if (n < 0) {
        nic_report_warn(r, "%s port %d: cannot list gids: %s", dev, p->num, strerror(errno));
        return;
    }
    for (int i = 0; i < n; i++) {
        char *end;
        long idx = strtol(names[i], &end, 10);
        if (*end || idx < 0 || idx > 65535)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        uint8_t raw[16];
        if (nic_sysfs_read(path, buf, sizeof buf) != 0)
            continue; /* unpopulated entries may fail to read on some kernels */
        if (nic_gid_parse(buf, raw) != 0) {
            nic_report_warn(r, "%s port %d: gid %ld \"%s\" is not a GID", dev, p->num, idx, buf);
            continue;
        }
        if (nic_gid_is_zero(raw))
            continue;
        struct nic_gid *g = nic_port_add_gid(p);
        if (!g) {
            nic_report_warn(r, "%s port %d: out of memory reading gids", dev, p->num);
            break;
        }
        g->index = (int)idx;
        memcpy(g->raw, raw, 16);
        g->type = NIC_GID_TYPE_UNKNOWN;
        snprintf(path, sizeof path, "%s/ports/%d/gid_attrs/types/%ld", devdir, p->num, idx);
        if (nic_sysfs_read(path, buf, sizeof buf) == 0)
            g->type = nic_gid_type_parse(buf);
        else if (p->link_layer == NIC_LL_INFINIBAND)
            g->type = NIC_GID_IB_ROCE_V1;
        if (g->type == NIC_GID_TYPE_UNKNOWN)
            nic_report_warn(r, "%s port %d: gid %ld has an unknown type", dev, p->num, idx);
        snprintf(path, sizeof path, "%s/ports/%d/gid_attrs/ndevs/%ld", devdir, p->num, idx);
        if (nic_sysfs_read(path, buf, sizeof buf) == 0)
            nic_copy(g->ndev, sizeof g->ndev, buf);
    }
    nic_sysfs_names_free(names, n);
}

void nic_sysfs_port_netdev(const char *root, const struct nic_rdma_dev *d, int port, char *out,
                           size_t cap)
{
    out[0] = '\0';
    for (int i = 0; i < d->nports; i++)
        if (d->ports[i].num == port)
            for (int g = 0; g < d->ports[i].ngids; g++)
                if (d->ports[i].gids[g].ndev[0]) {
                    snprintf(out, cap, "%s", d->ports[i].gids[g].ndev);
                    return;
                }
    /* IPoIB and some drivers: the netdevs of the PCI function, matched by dev_port. */
    char dir[PATH_MAX], path[PATH_MAX + 300];
    snprintf(dir, sizeof dir, "%s/class/infiniband/%s/device/net", root, d->name);
    char **names;
    int n = nic_sysfs_list(dir, &names);
    for (int i = 0; i < n; i++) {
        long dev_port;
        snprintf(path, sizeof path, "%s/%s/dev_port", dir, names[i]);
        if ((nic_sysfs_read_long(path, &dev_port) == 0 && dev_port == port - 1) || n == 1) {
            snprintf(out, cap, "%s", names[i]);
            break;
        }
    }
    if (n >= 0)
        nic_sysfs_names_free(names, n);
}

static void read_port(const char *root, const char *devdir, struct nic_rdma_dev *d,
                      struct nic_port *p, struct nic_report *r)
{
    char base[PATH_MAX], buf[128];
    if (snprintf(base, sizeof base, "%s/ports/%d", devdir, p->num) >= (int)sizeof base)
        return;
    char who[96];
    snprintf(who, sizeof who, "%s port %d", d->name, p->num);
    if (read_attr(r, who, base, "state", buf, sizeof buf) == 0 &&
        (p->state = nic_parse_numbered_state(buf)) < 0)
        nic_report_warn(r, "%s: state \"%s\" is not \"N: NAME\"", who, buf);
    if (read_attr(r, who, base, "phys_state", buf, sizeof buf) == 0 &&
        (p->phys_state = nic_parse_numbered_state(buf)) < 0)
        nic_report_warn(r, "%s: phys_state \"%s\" is not \"N: NAME\"", who, buf);
    if (read_attr(r, who, base, "link_layer", buf, sizeof buf) == 0) {
        if (strcmp(buf, "InfiniBand") == 0)
            p->link_layer = NIC_LL_INFINIBAND;
        else if (strcmp(buf, "Ethernet") == 0)
            p->link_layer = NIC_LL_ETHERNET;
        else
            nic_report_warn(r, "%s: link_layer \"%s\" is neither InfiniBand nor Ethernet", who, buf);
    }
    if (read_attr(r, who, base, "rate", buf, sizeof buf) == 0 &&
        nic_ib_parse_rate(buf, &p->gbps, &p->lanes, p->speed, sizeof p->speed) != 0)
        nic_report_warn(r, "%s: rate \"%s\" is not \"N Gb/sec (WX SPEED)\"", who, buf);
    if (p->link_layer == NIC_LL_INFINIBAND) {
        char path[PATH_MAX + 16];
        long v;
        snprintf(path, sizeof path, "%s/lid", base);
        if (nic_sysfs_read_long(path, &v) == 0 && v >= 0 && v <= 0xffff)
            p->lid = (int)v;
        snprintf(path, sizeof path, "%s/sm_lid", base);
        if (nic_sysfs_read_long(path, &v) == 0 && v >= 0 && v <= 0xffff)
            p->sm_lid = (int)v;
        else
            nic_report_warn(r, "%s: cannot read sm_lid", who);
    }
    read_gids(devdir, d->name, p, r);
    if (p->link_layer == NIC_LL_INFINIBAND && p->ngids > 0 && p->gids[0].index == 0)
        p->subnet_prefix = nic_gid_subnet_prefix(p->gids[0].raw);
    nic_sysfs_port_netdev(root, d, p->num, p->netdev, sizeof p->netdev);
    if (p->link_layer == NIC_LL_ETHERNET && p->netdev[0]) {
        char path[PATH_MAX + 64];
        long mtu;
        snprintf(path, sizeof path, "%s/class/net/%s/mtu", root, p->netdev);
        if (nic_sysfs_read_long(path, &mtu) == 0)
            p->active_mtu = nic_roce_mtu_bytes((int)mtu);
    }
}

void nic_sysfs_read_rdma_dev(const char *root, struct nic_rdma_dev *d, struct nic_report *r)
{
    char devdir[PATH_MAX], buf[128], path[PATH_MAX + 32];
    snprintf(devdir, sizeof devdir, "%s/class/infiniband/%s", root, d->name);
    snprintf(d->source, sizeof d->source, "sysfs");
    nic_sysfs_rdma_locate(root, d);
    long v;
    snprintf(path, sizeof path, "%s/device/vendor", devdir);
    if (nic_sysfs_read_long(path, &v) == 0 && v >= 0 && v <= 0xffff)
        d->vendor_id = (unsigned)v;
    else
        nic_report_warn(r, "%s: cannot read device/vendor", d->name);
    snprintf(path, sizeof path, "%s/device/device", devdir);
    if (nic_sysfs_read_long(path, &v) == 0 && v >= 0 && v <= 0xffff)
        d->part_id = (unsigned)v;
    else
        nic_report_warn(r, "%s: cannot read device/device (part id)", d->name);
    if (read_attr(r, d->name, devdir, "node_guid", buf, sizeof buf) == 0)
        nic_copy(d->node_guid, sizeof d->node_guid, buf);
    if (read_attr(r, d->name, devdir, "fw_ver", buf, sizeof buf) == 0)
        nic_copy(d->fw_ver, sizeof d->fw_ver, buf);

    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/ports", devdir);
    char **names;
    int n = nic_sysfs_list(dir, &names);
    if (n < 0) {
        nic_report_warn(r, "%s: cannot list ports: %s", d->name, strerror(errno));
        return;
    }
    for (int i = 0; i < n; i++) {
        char *end;
        long num = strtol(names[i], &end, 10);
        if (*end || num < 1 || num > 255) {
            nic_report_warn(r, "%s: ports/%s is not a port number", d->name, names[i]);
            continue;
        }
        struct nic_port *p = nic_dev_add_port(d);
        if (!p) {
            nic_report_warn(r, "%s: out of memory reading ports", d->name);
            break;
        }
        p->num = (int)num;
        read_port(root, devdir, d, p, r);
    }
    nic_sysfs_names_free(names, n);
}

static const char *virtual_kind(const char *name, const char *dir)
{
    char path[PATH_MAX + 16];
    struct stat st;
    snprintf(path, sizeof path, "%s/bridge", dir);
    if (stat(path, &st) == 0)
        return "bridge";
    snprintf(path, sizeof path, "%s/bonding", dir);
    if (stat(path, &st) == 0)
        return "bond";
    static const char *const veth[] = {"veth", "cali", "lxc", "vnet"};
    for (size_t i = 0; i < sizeof veth / sizeof veth[0]; i++)
        if (strncmp(name, veth[i], strlen(veth[i])) == 0)
            return "veth";
    static const char *const tun[] = {"tun", "tap", "vxlan", "flannel", "tunl", "gre", "wg",
                                      "genev", "cilium", "kube-ipvs", "ifb", "ip6tnl", "sit"};
    for (size_t i = 0; i < sizeof tun / sizeof tun[0]; i++)
        if (strncmp(name, tun[i], strlen(tun[i])) == 0)
            return "tunnel";
    return "virtual";
}

static void read_netdev(const char *root, const char *name, struct nic_netdev *n)
{
    char dir[PATH_MAX], path[PATH_MAX + 32], buf[128], real[PATH_MAX];
    nic_copy(n->name, sizeof n->name, name);
    snprintf(dir, sizeof dir, "%s/class/net/%s", root, name);
    long v;
    snprintf(path, sizeof path, "%s/type", dir);
    n->type = nic_sysfs_read_long(path, &v) == 0 ? (int)v : -1;
    snprintf(path, sizeof path, "%s/speed", dir);
    n->speed_mbps = nic_sysfs_read_long(path, &v) == 0 && v > 0 && v < 100000000 ? (int)v : -1;
    snprintf(path, sizeof path, "%s/mtu", dir);
    n->mtu = nic_sysfs_read_long(path, &v) == 0 && v > 0 && v < 1000000 ? (int)v : 0;
    snprintf(path, sizeof path, "%s/operstate", dir);
    if (nic_sysfs_read(path, buf, sizeof buf) == 0)
        nic_copy(n->operstate, sizeof n->operstate, buf);
    snprintf(path, sizeof path, "%s/address", dir);
    if (nic_sysfs_read(path, buf, sizeof buf) == 0)
        nic_copy(n->mac, sizeof n->mac, buf);

    int is_virtual = realpath(dir, real) ? strstr(real, "/devices/virtual/") != NULL : 0;
    snprintf(path, sizeof path, "%s/device", dir);
    struct stat st;
    if (!is_virtual && stat(path, &st) != 0)
        is_virtual = 1;
    n->is_virtual = is_virtual || n->type == 772;
    /* A bond aggregates physical ports and usually carries the node's address: it may be
     * chosen, unlike bridges, veths and tunnels. */
    snprintf(path, sizeof path, "%s/bonding", dir);
    int is_bond = n->type == 1 && stat(path, &st) == 0;
    if (is_bond)
        n->is_virtual = 0;
    if (is_bond)
        snprintf(n->kind, sizeof n->kind, "bond");
    else if (n->type == 772)
        snprintf(n->kind, sizeof n->kind, "loopback");
    else if (n->is_virtual)
        snprintf(n->kind, sizeof n->kind, "%s", virtual_kind(name, dir));
    else if (n->type == 32)
        snprintf(n->kind, sizeof n->kind, "ipoib");
    else
        snprintf(n->kind, sizeof n->kind, "physical");
    snprintf(path, sizeof path, "%s/device", dir);
    if (!n->is_virtual && !is_bond)
        nic_sysfs_pci_locate(path, n->pci, n->pci_path, &n->numa_node);
}

int nic_sysfs_read_netdevs(const char *root, struct nic_report *r, herr *e)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/class/net", root);
    char **names;
    int n = nic_sysfs_list(dir, &names);
    if (n < 0) {
        if (errno == ENOMEM)
            return herr_set(e, "%s: out of memory", dir);
        nic_report_warn(r, "%s: cannot list netdevs: %s", dir, strerror(errno));
        return 0;
    }
    for (int i = 0; i < n; i++) {
        struct nic_netdev *nd = nic_report_add_netdev(r);
        if (!nd) {
            nic_sysfs_names_free(names, n);
            return herr_set(e, "%s: out of memory", dir);
        }
        read_netdev(root, names[i], nd);
    }
    nic_sysfs_names_free(names, n);
    return 0;
}

void nic_sysfs_read_gpus(const char *root, struct nic_report *r)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/bus/pci/devices", root);
    char **names;
    int n = nic_sysfs_list(dir, &names);
    if (n < 0) {
        nic_report_warn(r, "%s: cannot list PCI devices: %s", dir, strerror(errno));
        return;
    }
    for (int i = 0; i < n; i++) {
        long vendor, cls, device;
        snprintf(path, sizeof path, "%s/%s/vendor", dir, names[i]);
        if (nic_sysfs_read_long(path, &vendor) != 0 || vendor != 0x10de)
            continue;
        snprintf(path, sizeof path, "%s/%s/class", dir, names[i]);
        if (nic_sysfs_read_long(path, &cls) != 0 || (cls >> 16) != 0x03)
            continue; /* audio, USB and NVSwitch functions are not GPUs */
        struct nic_gpu *g = nic_report_add_gpu(r);
        if (!g) {
            nic_report_warn(r, "out of memory listing GPUs");
            break;
        }
        snprintf(path, sizeof path, "%s/%s/device", dir, names[i]);
        if (nic_sysfs_read_long(path, &device) == 0 && device >= 0 && device <= 0xffff)
            g->device_id = (unsigned)device;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        nic_sysfs_pci_locate(path, g->pci, g->pci_path, &g->numa_node);
        if (!g->pci[0])
            snprintf(g->pci, sizeof g->pci, "%.15s", names[i]);
    }
    nic_sysfs_names_free(names, n);
}
