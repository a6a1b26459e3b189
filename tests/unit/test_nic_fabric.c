/* RoCE GID choice, port fabrics, summary choice, nearest-NIC choice and labels, on reports
 * built in memory. */
#include "test.h"

#include <sys/socket.h>

#include "nic_fabric.h"
#include "nic_labels.h"
#include "nic_report.h"
#include "nic_topology.h"

static void add_gid(struct nic_port *p, int idx, const char *text, enum nic_gid_type t, const char *ndev)
{
    struct nic_gid *g = nic_port_add_gid(p);
    g->index = idx;
    nic_gid_parse(text, g->raw);
    g->type = t;
    snprintf(g->ndev, sizeof g->ndev, "%s", ndev);
}

static struct nic_port *add_port(struct nic_rdma_dev *d, int state, enum nic_link_layer ll, double gbps)
{
    struct nic_port *p = nic_dev_add_port(d);
    p->num = d->nports;
    p->state = state;
    p->link_layer = ll;
    p->gbps = gbps;
    return p;
}

static struct nic_rdma_dev *add_dev(struct nic_report *r, const char *name)
{
    struct nic_rdma_dev *d = nic_report_add_dev(r);
    snprintf(d->name, sizeof d->name, "%s", name);
    return d;
}

static void roce_gid_choice(void)
{
    struct nic_report r;
    nic_report_init(&r);
    struct nic_rdma_dev *d = add_dev(&r, "mlx5_0");
    struct nic_port *p = add_port(d, 4, NIC_LL_ETHERNET, 100);
    add_gid(p, 0, "fe80::1", NIC_GID_IB_ROCE_V1, "eth2");
    CHECK_INT("no v2 gid", nic_roce_pick_gid(p), -1);
    add_gid(p, 1, "fe80::1", NIC_GID_ROCE_V2, "eth2");
    CHECK_INT("link-local v2 when alone", p->gids[nic_roce_pick_gid(p)].index, 1);
    add_gid(p, 2, "2001:db8::5", NIC_GID_ROCE_V2, "eth2");
    CHECK_INT("global v6 beats link-local", p->gids[nic_roce_pick_gid(p)].index, 2);
    add_gid(p, 3, "::ffff:10.9.8.7", NIC_GID_IB_ROCE_V1, "eth2");
    CHECK_INT("v4 v1 is not chosen", p->gids[nic_roce_pick_gid(p)].index, 2);
    add_gid(p, 5, "::ffff:10.9.8.7", NIC_GID_ROCE_V2, "eth2");
    add_gid(p, 4, "::ffff:10.9.8.7", NIC_GID_ROCE_V2, "eth2");
    CHECK_INT("v4 v2 lowest index wins", p->gids[nic_roce_pick_gid(p)].index, 4);

    /* The address's prefix comes from the netdev; without it /24 and a warning. */
    struct nic_netdev *n = nic_report_add_netdev(&r);
    snprintf(n->name, sizeof n->name, "eth2");
    struct nic_addr *a = nic_netdev_add_addr(n);
    a->family = AF_INET;
    memcpy(a->addr, (uint8_t[]){10, 9, 8, 7}, 4);
    a->prefix = 20;
    nic_fabric_assign(&r);
    CHECK_STR("roce fabric from netdev prefix", r.devs[0].ports[0].fabric, "roce-10.9.0.0/20");
    CHECK_INT("roce gid index", r.devs[0].ports[0].roce_gid_index, 4);
    CHECK_INT("no warnings", r.nwarnings, 0);
    r.netdevs[0].naddrs = 0;
    nic_fabric_assign(&r);
    CHECK_STR("roce fabric default /24", r.devs[0].ports[0].fabric, "roce-10.9.8.0/24");
    CHECK_INT("default prefix warns", r.nwarnings, 1);
    nic_report_free(&r);
}

static void summary_choice(void)
{
    struct nic_report r;
    nic_report_init(&r);
    /* A RoCE port, two IB ports on fabric A (100 each), one IB port on B (150), one down. */
    struct nic_port *p = add_port(add_dev(&r, "mlx5_0"), 4, NIC_LL_ETHERNET, 400);
    add_gid(p, 3, "::ffff:10.0.0.1", NIC_GID_ROCE_V2, "");
    static const struct {
        const char *dev;
        int state, gbps;
        const char *gid;
        uint64_t subnet;
    } ib[] = {{"mlx5_1", 4, 100, "fe80::1:0:0:1", 0xfe80000000000001ULL},
              {"mlx5_2", 4, 100, "fe80::1:0:0:2", 0xfe80000000000001ULL},
              {"mlx5_3", 4, 150, "fe80::2:0:0:3", 0xfe80000000000002ULL},
              {"mlx5_4", 1, 400, "fe80::2:0:0:4", 0xfe80000000000002ULL}};
    for (int i = 0; i < 4; i++) {
        p = add_port(add_dev(&r, ib[i].dev), ib[i].state, NIC_LL_INFINIBAND, ib[i].gbps);
        p->sm_lid = 1;
        add_gid(p, 0, ib[i].gid, NIC_GID_IB_ROCE_V1, "");
        p->subnet_prefix = ib[i].subnet;
    }
    nic_fabric_assign(&r);
    CHECK_STR("down port has no fabric", r.devs[4].ports[0].fabric, "");
    nic_fabric_summarize(&r);
    CHECK_INT("ib beats faster roce", r.summary.cls, NIC_INFINIBAND);
    CHECK_STR("fabric with most Gb/s", r.summary.fabric, "ib-fe80000000000001");
    CHECK_NEAR("gbps summed", r.summary.gbps, 200, 0);
    CHECK_STR("exact hca list", r.summary.ib_hca, "=mlx5_1:1,mlx5_2:1");
    CHECK_INT("no gid index for ib", r.summary.gid_index, -1);

    /* Take IB away: RoCE remains. */
    for (int i = 1; i < r.ndevs; i++)
        r.devs[i].ports[0].state = 1;
    nic_fabric_assign(&r);
    nic_fabric_summarize(&r);
    CHECK_INT("roce when ib down", r.summary.cls, NIC_ROCE);
    CHECK_INT("roce gid index", r.summary.gid_index, 3);
    CHECK_STR("roce hca", r.summary.ib_hca, "=mlx5_0:1");

    /* Nothing active and no netdev: Ethernet with a default, never a failure. */
    r.devs[0].ports[0].state = 1;
    nic_fabric_assign(&r);
    nic_fabric_summarize(&r);
    CHECK_INT("ethernet fallback", r.summary.cls, NIC_ETHERNET);
    CHECK_STR("ethernet fallback fabric", r.summary.fabric, "eth-default");
    CHECK("ethernet fallback gbps positive", r.summary.gbps > 0);
    nic_report_free(&r);
}

static void ethernet_choice(void)
{
    struct nic_report r;
    nic_report_init(&r);
    const char *names[] = {"docker0", "eth0", "eth1", "veth1"};
    int speeds[] = {10000, 10000, 25000, 100000};
    int virt[] = {1, 0, 0, 1};
    for (int i = 0; i < 4; i++) {
        struct nic_netdev *n = nic_report_add_netdev(&r);
        snprintf(n->name, sizeof n->name, "%s", names[i]);
        snprintf(n->operstate, sizeof n->operstate, "up");
        n->type = 1;
        n->speed_mbps = speeds[i];
        n->is_virtual = virt[i];
        struct nic_addr *a = nic_netdev_add_addr(n);
        a->family = AF_INET;
        memcpy(a->addr, (uint8_t[]){192, 168, (uint8_t)i, 9}, 4);
        a->prefix = 24;
    }
    nic_fabric_summarize(&r);
    CHECK_STR("fastest physical netdev", r.summary.socket_ifname, "eth1");
    CHECK_STR("its subnet", r.summary.fabric, "eth-192.168.2.0/24");
    CHECK_NEAR("its speed", r.summary.gbps, 25, 0);
    snprintf(r.netdevs[2].operstate, sizeof r.netdevs[2].operstate, "down");
    nic_fabric_summarize(&r);
    CHECK_STR("down netdev skipped", r.summary.socket_ifname, "eth0");
    /* A bond member without an address loses to a slower addressed bond. */
    struct nic_netdev *b = nic_report_add_netdev(&r);
    snprintf(b->name, sizeof b->name, "bond0");
    snprintf(b->kind, sizeof b->kind, "bond");
    snprintf(b->operstate, sizeof b->operstate, "up");
    b->type = 1;
    b->speed_mbps = 20000;
    struct nic_addr *ba = nic_netdev_add_addr(b);
    ba->family = AF_INET;
    memcpy(ba->addr, (uint8_t[]){172, 16, 5, 1}, 4);
    ba->prefix = 16;
    r.netdevs[1].naddrs = 0; /* eth0 becomes a member port */
    snprintf(r.netdevs[2].operstate, sizeof r.netdevs[2].operstate, "up");
    r.netdevs[2].naddrs = 0;
    nic_fabric_summarize(&r);
    CHECK_STR("addressed bond beats faster bare port", r.summary.socket_ifname, "bond0");
    CHECK_STR("bond subnet", r.summary.fabric, "eth-172.16.0.0/16");
    nic_report_free(&r);
}

static void nearest(void)
{
    CHECK_INT("common depth 2", nic_pci_common_depth("0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
                                                      "0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"), 2);
    CHECK_INT("common depth 0", nic_pci_common_depth("0000:00:01.0/0000:01:00.0", "0000:00:02.0/0000:05:00.0"), 0);
    CHECK_INT("common depth prefix-safe", nic_pci_common_depth("0000:00:01.0", "0000:00:01.00"), 0);
    CHECK_INT("common depth empty", nic_pci_common_depth("", "0000:00:01.0"), 0);

    struct nic_report r;
    nic_report_init(&r);
    struct nic_rdma_dev *d = add_dev(&r, "mlx5_0"); /* NUMA 0, switch A */
    snprintf(d->pci, sizeof d->pci, "0000:04:00.0");
    snprintf(d->pci_path, sizeof d->pci_path, "0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0");
    d->numa_node = 0;
    add_port(d, 4, NIC_LL_INFINIBAND, 200);
    d = add_dev(&r, "mlx5_1");                       /* NUMA 1, switch B */
    snprintf(d->pci, sizeof d->pci, "0000:84:00.0");
    snprintf(d->pci_path, sizeof d->pci_path, "0000:80:01.0/0000:81:00.0/0000:82:01.0/0000:84:00.0");
    d->numa_node = 1;
    add_port(d, 4, NIC_LL_INFINIBAND, 200);
    struct nic_netdev *n = nic_report_add_netdev(&r); /* NUMA 1, own root port */
    snprintf(n->name, sizeof n->name, "eno1");
    snprintf(n->pci, sizeof n->pci, "0000:85:00.0");
    snprintf(n->pci_path, sizeof n->pci_path, "0000:80:02.0/0000:85:00.0");
    snprintf(n->operstate, sizeof n->operstate, "up");
    n->numa_node = 1;
    const char *gpus[][2] = {
        {"0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", "0"}, /* switch A */
        {"0000:80:01.0/0000:81:00.0/0000:82:00.0/0000:83:00.0", "1"}, /* switch B */
        {"0000:80:03.0/0000:86:00.0", "1"},                             /* NUMA 1 only */
        {"0000:c0:01.0/0000:c1:00.0", "2"},                             /* NUMA 2: none near */
    };
    for (int i = 0; i < 4; i++) {
        struct nic_gpu *g = nic_report_add_gpu(&r);
        snprintf(g->pci_path, sizeof g->pci_path, "%s", gpus[i][0]);
        g->numa_node = gpus[i][1][0] - '0';
    }
    nic_topology_nearest(&r);
    /* each GPU's nearest NIC (gpu2: RDMA over the netdev on its NUMA node) and how near */
    static const char *const want[4][2] = {{"mlx5_0", "pcie-switch"}, {"mlx5_1", "pcie-switch"},
                                           {"mlx5_1", "numa"}, {NULL, "system"}};
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "gpu%d nearest", i);
        if (want[i][0])
            CHECK_STR(name, r.gpus[i].nearest_nic, want[i][0]);
        snprintf(name, sizeof name, "gpu%d affinity", i);
        CHECK_STR(name, r.gpus[i].affinity, want[i][1]);
    }
    /* A down RDMA port loses to an up netdev at the same level. */
    r.devs[1].ports[0].state = 1;
    nic_topology_nearest(&r);
    CHECK_STR("gpu2 prefers active netdev", r.gpus[2].nearest_nic, "eno1");
    CHECK_STR("gpu1 still under its switch", r.gpus[1].nearest_nic, "mlx5_1");
    nic_report_free(&r);
}

static void labels(void)
{
    CHECK("valid label", nic_label_value_valid("roce-ddb4bd7148355363"));
    CHECK("empty label valid", nic_label_value_valid(""));
    CHECK("slash invalid", !nic_label_value_valid("roce-10.1.0.0/16"));
    CHECK("colon invalid", !nic_label_value_valid("ib-fe80:0"));
    CHECK("leading dash invalid", !nic_label_value_valid("-ib"));
    CHECK("64 chars invalid", !nic_label_value_valid("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
    char a[64], b[64], c[64];
    herr e;
    CHECK_INT("digest ok", nic_fabric_label("roce-10.1.0.0/16", a, sizeof a, &e), 0);
    CHECK("digest prefix", strncmp(a, "roce-", 5) == 0 && strlen(a) == 21);
    CHECK("digest valid", nic_label_value_valid(a));
    nic_fabric_label("roce-10.1.0.0/16", b, sizeof b, &e);
    CHECK_STR("digest stable", a, b);
    nic_fabric_label("roce-10.2.0.0/16", c, sizeof c, &e);
    CHECK("different fabrics differ", strcmp(a, c) != 0);
    CHECK_INT("empty fabric fails", nic_fabric_label("", a, sizeof a, &e), -1);
    char longid[128];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    CHECK_INT("long odd fabric id ok", nic_fabric_label(longid, a, sizeof a, &e), 0);
    CHECK("long odd fabric id valid", nic_label_value_valid(a));
    struct nic_summary s = {.cls = NIC_INFINIBAND, .gbps = 2.5, .gid_index = -1};
    snprintf(s.fabric, sizeof s.fabric, "ib-fe80000000000000-sm1");
    struct nic_labels l;
    CHECK_INT("labels ok", nic_labels_from_summary(&s, &l, &e), 0);
    CHECK_STR("label class", l.cls, "infiniband");
    CHECK_STR("label gbps", l.gbps, "2.5");
    CHECK("label fabric", strncmp(l.fabric, "ib-", 3) == 0 && nic_label_value_valid(l.fabric));
    s.gbps = 0;
    CHECK_INT("zero gbps refused", nic_labels_from_summary(&s, &l, &e), -1);
}

static void emulate(void)
{
    struct nic_report r;
    herr e;
    CHECK_INT("emulate ok", nic_report_emulate("roce:roce-10.1.0.0/16:100", &r, &e), 0);
    CHECK_INT("emulate class", r.summary.cls, NIC_ROCE);
    CHECK_STR("emulate fabric", r.summary.fabric, "roce-10.1.0.0/16");
    CHECK_NEAR("emulate gbps", r.summary.gbps, 100, 0);
    cJSON *j = nic_report_to_json(&r);
    CHECK("emulated flag", cJSON_IsTrue(cJSON_GetObjectItem(j, "emulated")));
    struct nic_summary back;
    CHECK_INT("emulated report is a valid summary", nic_summary_from_json(j, "nic", &back, &e), 0);
    CHECK_STR("emulated summary fabric", back.fabric, "roce-10.1.0.0/16");
    cJSON_Delete(j);
    nic_report_free(&r);
    CHECK_INT("emulate ipv6 fabric", nic_report_emulate("ib:ib-fe80::1:200", &r, &e), 0);
    CHECK_STR("emulate ipv6 fabric text", r.summary.fabric, "ib-fe80::1");
    nic_report_free(&r);
    CHECK_INT("emulate bad class", nic_report_emulate("tokenring:x:1", &r, &e), -1);
    CHECK("emulate bad class message", strstr(e.msg, "CLASS \"tokenring\"") != NULL);
    nic_report_free(&r);
    CHECK_INT("emulate bad gbps", nic_report_emulate("eth:eth-a:fast", &r, &e), -1);
    CHECK("emulate bad gbps message", strstr(e.msg, "GBPS \"fast\"") != NULL);
    nic_report_free(&r);
    CHECK_INT("emulate zero gbps", nic_report_emulate("eth:eth-a:0", &r, &e), -1);
    nic_report_free(&r);
    CHECK_INT("emulate missing parts", nic_report_emulate("eth:100", &r, &e), -1);
    nic_report_free(&r);
    CHECK_INT("emulate empty fabric", nic_report_emulate("eth::100", &r, &e), -1);
    nic_report_free(&r);
}

int main(void)
{
    roce_gid_choice();
    summary_choice();
    ethernet_choice();
    nearest();
    labels();
    emulate();
    TEST_MAIN_END();
}
