/* Discovery on every recorded sysfs tree under tests/fixtures/sysfs: the report must equal the
 * reviewed expected.json, and the facts each fixture exists for are checked one by one. */
#include "test.h"

#include <stdlib.h>

#include "nic_discover.h"
#include "nic_labels.h"
#include "yaml_json.h"

#define FIX "tests/fixtures/sysfs"

/* Prints the first path where two JSON values differ. */
static void first_diff(const cJSON *a, const cJSON *b, const char *path)
{
    if (cJSON_Compare(a, b, 1))
        return;
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, a) {
            char p[512];
            snprintf(p, sizeof p, "%s.%s", path, x->string);
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            if (!y) {
                printf("  %s: missing in expected\n", p);
                return;
            }
            if (!cJSON_Compare(x, y, 1)) {
                first_diff(x, y, p);
                return;
            }
        }
    } else if (cJSON_IsArray(a) && cJSON_IsArray(b) && cJSON_GetArraySize(a) == cJSON_GetArraySize(b)) {
        for (int i = 0; i < cJSON_GetArraySize(a); i++) {
            char p[512];
            snprintf(p, sizeof p, "%s[%d]", path, i);
            if (!cJSON_Compare(cJSON_GetArrayItem(a, i), cJSON_GetArrayItem(b, i), 1)) {
                first_diff(cJSON_GetArrayItem(a, i), cJSON_GetArrayItem(b, i), p);
                return;
            }
        }
    }
    char *ta = cJSON_PrintUnformatted(a), *tb = cJSON_PrintUnformatted(b);
    printf("  %s: got %.300s, expected %.300s\n", path, ta ? ta : "?", tb ? tb : "?");
    free(ta);
    free(tb);
}

/* Discovers fixture `name` into r and compares it with its expected.json. */
static int run_case(const char *name, struct nic_report *r)
{
    char root[256], exp_path[256], tn[128];
    snprintf(root, sizeof root, FIX "/%s/sys", name);
    snprintf(exp_path, sizeof exp_path, FIX "/%s/expected.json", name);
    herr e;
    snprintf(tn, sizeof tn, "%s: discovery succeeds", name);
    int rc = nic_discover(&(struct nic_discover_opts){.sysfs_root = root}, r, &e);
    CHECK_INT(tn, rc, 0);
    if (rc)
        return -1;
    char *text = read_file_limited(exp_path, 1 << 20, NULL, &e);
    cJSON *want = text ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON *got = nic_report_to_json(r);
    snprintf(tn, sizeof tn, "%s: report equals expected.json", name);
    int same = want && got && cJSON_Compare(got, want, 1);
    CHECK(tn, same);
    if (!same && want && got)
        first_diff(got, want, "report");
    /* Every report is one the planner accepts. */
    struct nic_summary s;
    snprintf(tn, sizeof tn, "%s: summary parses as the planner reads it", name);
    CHECK_INT(tn, nic_summary_from_json(got, name, &s, &e), 0);
    struct nic_labels l;
    snprintf(tn, sizeof tn, "%s: labels are valid", name);
    CHECK(tn, nic_labels_from_summary(&r->summary, &l, &e) == 0 && nic_label_value_valid(l.fabric) &&
                  nic_label_value_valid(l.gbps) && nic_label_value_valid(l.cls));
    cJSON_Delete(want);
    cJSON_Delete(got);
    return 0;
}

static const struct nic_port *port0(const struct nic_report *r, int dev)
{
    return dev < r->ndevs && r->devs[dev].nports > 0 ? &r->devs[dev].ports[0] : NULL;
}

static int has_warning(const struct nic_report *r, const char *needle)
{
    for (int i = 0; i < r->nwarnings; i++)
        if (strstr(r->warnings[i], needle))
            return 1;
    return 0;
}

int main(void)
{
    struct nic_report r;
    const struct nic_port *p;

    if (run_case("cx6-hdr-ib", &r) == 0) {
        p = port0(&r, 0);
        CHECK("cx6: one port", p != NULL);
        if (p) {
            CHECK_INT("cx6: IB link layer", p->link_layer, NIC_LL_INFINIBAND);
            CHECK_NEAR("cx6: 4X HDR 200", p->gbps, 200, 0);
            CHECK_INT("cx6: 4 lanes", p->lanes, 4);
            CHECK_STR("cx6: HDR", p->speed, "HDR");
            CHECK_INT("cx6: sm lid", p->sm_lid, 1);
            CHECK_INT("cx6: lid", p->lid, 0x1a);
            CHECK_STR("cx6: ipoib netdev", p->netdev, "ib0");
        }
        CHECK_INT("cx6: part id", r.devs[0].part_id, 0x101b);
        CHECK_STR("cx6: fw", r.devs[0].fw_ver, "20.31.1014");
        CHECK_INT("cx6: class", r.summary.cls, NIC_INFINIBAND);
        CHECK_STR("cx6: fabric", r.summary.fabric, "ib-fe80000000000000-sm1");
        CHECK_STR("cx6: hca", r.summary.ib_hca, "=mlx5_0:1");
        CHECK_STR("cx6: bootstrap on ethernet", r.summary.socket_ifname, "eno1");
    }
    nic_report_free(&r);

    if (run_case("cx5-roce-100g", &r) == 0 && (p = port0(&r, 0))) {
        CHECK_INT("cx5: ethernet link layer", p->link_layer, NIC_LL_ETHERNET);
        CHECK_INT("cx5: six gids", p->ngids, 6);
        CHECK_INT("cx5: gid 1 is v2", p->gids[1].type, NIC_GID_ROCE_V2);
        CHECK_INT("cx5: v4 RoCE v2 gid index", p->roce_gid_index, 3);
        CHECK_STR("cx5: subnet", p->roce_subnet, "10.1.0.0/16");
        CHECK_INT("cx5: active mtu from netdev 9000", p->active_mtu, 4096);
        CHECK_INT("cx5: class", r.summary.cls, NIC_ROCE);
        CHECK_INT("cx5: NCCL gid index", r.summary.gid_index, 3);
        CHECK_STR("cx5: socket ifname", r.summary.socket_ifname, "ens1f0np0");
        CHECK_INT("cx5: virtual netdevs listed apart", r.netdevs[0].is_virtual, 1);
        CHECK_STR("cx5: docker0 bridge", r.netdevs[0].kind, "bridge");
    }
    nic_report_free(&r);

    if (run_case("e810-irdma-roce", &r) == 0 && (p = port0(&r, 0))) {
        CHECK_INT("e810: intel vendor", r.devs[0].vendor_id, 0x8086);
        CHECK_INT("e810: numa 1", r.devs[0].numa_node, 1);
        CHECK_INT("e810: gid index", p->roce_gid_index, 1);
        CHECK_STR("e810: fabric", r.summary.fabric, "roce-10.2.0.0/24");
        CHECK_STR("e810: hca", r.summary.ib_hca, "=rocep23s0f0:1");
    }
    nic_report_free(&r);

    if (run_case("port-down", &r) == 0 && (p = port0(&r, 0))) {
        CHECK_INT("down: state", p->state, 1);
        CHECK_STR("down: no fabric", p->fabric, "");
        CHECK_INT("down: ethernet summary", r.summary.cls, NIC_ETHERNET);
        CHECK_STR("down: eth fabric", r.summary.fabric, "eth-10.0.0.0/24");
        CHECK_NEAR("down: 25 GbE", r.summary.gbps, 25, 0);
        CHECK_STR("down: no hca", r.summary.ib_hca, "");
    }
    nic_report_free(&r);

    if (run_case("two-ib-subnets", &r) == 0) {
        CHECK_STR("two: mlx5_0 fabric", port0(&r, 0)->fabric, "ib-fe80000000000001");
        CHECK_STR("two: mlx5_1 fabric", port0(&r, 1)->fabric, "ib-fe80000000000002");
        CHECK_STR("two: NDR subnet chosen", r.summary.fabric, "ib-fe80000000000002");
        CHECK_STR("two: only its HCA", r.summary.ib_hca, "=mlx5_1:1");
        CHECK_NEAR("two: 400", r.summary.gbps, 400, 0);
        CHECK("two: other fabric warned", has_warning(&r, "mlx5_0:1 is on fabric"));
    }
    nic_report_free(&r);

    if (run_case("plain-ethernet", &r) == 0) {
        CHECK_INT("eth: no rdma", r.rdma_found, 0);
        CHECK("eth: says so", strstr(r.rdma_note, "no RDMA devices found") != NULL);
        CHECK_STR("eth: fabric", r.summary.fabric, "eth-10.3.0.0/22");
        CHECK_STR("eth: ifname", r.summary.socket_ifname, "ens2f0");
        int virt = 0;
        for (int i = 0; i < r.nnetdevs; i++)
            virt += r.netdevs[i].is_virtual;
        CHECK_INT("eth: cni0, flannel.1, lo, veth are virtual", virt, 4);
    }
    nic_report_free(&r);

    if (run_case("bonded-ethernet", &r) == 0) {
        CHECK_STR("bond: chosen", r.summary.socket_ifname, "bond0");
        CHECK_STR("bond: its subnet", r.summary.fabric, "eth-10.4.8.0/21");
        CHECK_NEAR("bond: aggregate speed", r.summary.gbps, 50, 0);
        CHECK_STR("bond: kind", r.netdevs[0].kind, "bond");
        CHECK_INT("bond: listed with physical netdevs", r.netdevs[0].is_virtual, 0);
    }
    nic_report_free(&r);

    if (run_case("gpu-pcie-switch", &r) == 0) {
        CHECK_INT("gpu: five GPUs (NVSwitch excluded)", r.ngpus, 5);
        if (r.ngpus == 5) {
            CHECK_STR("gpu: 03 nearest", r.gpus[0].nearest_nic, "mlx5_0");
            CHECK_STR("gpu: 03 switch", r.gpus[0].affinity, "pcie-switch");
            CHECK_STR("gpu: 06 numa", r.gpus[2].affinity, "numa");
            CHECK_STR("gpu: 83 nearest", r.gpus[3].nearest_nic, "mlx5_1");
            CHECK_STR("gpu: 85 nearest", r.gpus[4].nearest_nic, "mlx5_1");
            CHECK_STR("gpu: 85 numa", r.gpus[4].affinity, "numa");
        }
        CHECK_STR("gpu: both HCAs", r.summary.ib_hca, "=mlx5_0:1,mlx5_1:1");
        CHECK_NEAR("gpu: 400", r.summary.gbps, 400, 0);
    }
    nic_report_free(&r);

    if (run_case("odd-values", &r) == 0) {
        CHECK("odd: bad rate warned", has_warning(&r, "rate \"fast (very)\""));
        CHECK("odd: bad gid warned", has_warning(&r, "\"not-a-gid\" is not a GID"));
        CHECK("odd: missing fw warned", has_warning(&r, "cannot read fw_ver"));
        CHECK("odd: bad ip line warned", has_warning(&r, "ip-addr.txt:4"));
        CHECK_INT("odd: falls back to ethernet", r.summary.cls, NIC_ETHERNET);
    }
    nic_report_free(&r);

    herr e;
    CHECK_INT("missing tree is an error",
              nic_discover(&(struct nic_discover_opts){.sysfs_root = FIX "/no-such-case"}, &r, &e), -1);
    CHECK("missing tree names it", strstr(e.msg, "no-such-case") != NULL);

    /* SYSFS_PATH goes through libibverbs, which lists nothing here; the tree is read anyway. */
    setenv("SYSFS_PATH", FIX "/cx5-roce-100g/sys", 1);
    CHECK_INT("SYSFS_PATH discovery", nic_discover(NULL, &r, &e), 0);
    CHECK_INT("SYSFS_PATH finds the device", r.ndevs, 1);
    CHECK_STR("SYSFS_PATH fabric", r.summary.fabric, "roce-10.1.0.0/16");
    nic_report_free(&r);
    unsetenv("SYSFS_PATH");

    /* This machine: no RDMA in CI; the verbs path must say so and report Ethernet. */
    CHECK_INT("live discovery", nic_discover(NULL, &r, &e), 0);
    if (r.ndevs == 0) {
        CHECK("live: no rdma said plainly", strstr(r.rdma_note, "no RDMA devices found") != NULL);
        CHECK_INT("live: ethernet", r.summary.cls, NIC_ETHERNET);
    }
    CHECK("live: summary usable", r.have_summary && r.summary.gbps > 0 && r.summary.fabric[0]);
    nic_report_free(&r);
    TEST_MAIN_END();
}
