/* holmes-node nic: discover RDMA devices, netdevs and GPUs; print the NIC report, its labels,
 * or patch them onto this Node. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "log.h"
#include "nic_discover.h"
#include "nic_labels.h"
#include "nic_report.h"
#include "node_labeler.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: holmes-node nic [--json] [--sysfs ROOT] [--emulate CLASS:FABRIC:GBPS]\n"
            "                       [--print-labels] [--label-node] [--quiet]\n\n"
            "Discovers RDMA devices and ports (libibverbs), Ethernet netdevs and GPUs, and\n"
            "prints the NIC report: a text overview, or with --json the report the planner\n"
            "and the coordinator read (docs/nic.md).\n\n"
            "  --json            print the report as JSON\n"
            "  --sysfs ROOT      read a recorded sysfs tree (and ROOT/ip-addr.txt) instead of\n"
            "                    this machine; SYSFS_PATH=ROOT does the same through libibverbs\n"
            "  --emulate SPEC    print an emulated report whose summary is SPEC, e.g.\n"
            "                    roce:roce-10.1.0.0/16:100 (no discovery is run)\n"
            "  --print-labels    print the Node labels (holmes.dev/...) as key=value lines\n"
            "  --label-node      patch the labels onto this Node (in-cluster: NODE_NAME,\n"
            "                    service-account token, KUBERNETES_SERVICE_HOST/PORT)\n"
            "  --quiet           do not print warnings on stderr\n");
}

static void print_text(const struct nic_report *r)
{
    if (r->emulated)
        printf("emulated NIC (no discovery)\n");
    if (r->rdma_note[0])
        printf("RDMA: %s\n", r->rdma_note);
    for (int i = 0; i < r->ndevs; i++) {
        const struct nic_rdma_dev *d = &r->devs[i];
        printf("%s (%s) vendor 0x%04x part 0x%04x guid %s fw %s pci %s numa %d\n", d->name,
               d->source, d->vendor_id, d->part_id, d->node_guid[0] ? d->node_guid : "?",
               d->fw_ver[0] ? d->fw_ver : "?", d->pci[0] ? d->pci : "?", d->numa_node);
        for (int j = 0; j < d->nports; j++) {
            const struct nic_port *p = &d->ports[j];
            char width[16] = "?", mtu[16] = "?";
            if (p->lanes > 0)
                snprintf(width, sizeof width, "%dX", p->lanes);
            if (p->active_mtu > 0)
                snprintf(mtu, sizeof mtu, "%d", p->active_mtu);
            printf("  port %d: %s %s %s %s %s %g Gb/s mtu %s netdev %s", p->num,
                   nic_port_state_name(p->state), nic_port_phys_state_name(p->phys_state),
                   p->link_layer == NIC_LL_INFINIBAND ? "InfiniBand"
                   : p->link_layer == NIC_LL_ETHERNET ? "Ethernet (RoCE)" : "unknown",
                   width, p->speed[0] ? p->speed : "?", p->gbps, mtu,
                   p->netdev[0] ? p->netdev : "-");
            if (p->roce_gid_index >= 0)
                printf(" gid %d (%s)", p->roce_gid_index, p->roce_subnet);
            printf(" fabric %s\n", p->fabric[0] ? p->fabric : "-");
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        printf("%s:", pass ? "virtual netdevs" : "netdevs");
        for (int i = 0; i < r->nnetdevs; i++) {
            const struct nic_netdev *n = &r->netdevs[i];
            if (n->is_virtual != pass)
                continue;
            printf("\n  %s %s %s", n->name, n->kind, n->operstate[0] ? n->operstate : "?");
            if (n->speed_mbps > 0)
                printf(" %d Mb/s", n->speed_mbps);
            printf(" mtu %d", n->mtu);
            for (int a = 0; a < n->naddrs; a++) {
                char t[INET6_ADDRSTRLEN];
                if (inet_ntop(n->addrs[a].family, n->addrs[a].addr, t, sizeof t))
                    printf(" %s/%d", t, n->addrs[a].prefix);
            }
        }
        printf("\n");
    }
    for (int i = 0; i < r->ngpus; i++)
        printf("gpu %s numa %d nearest %s (%s)\n", r->gpus[i].pci, r->gpus[i].numa_node,
               r->gpus[i].nearest_nic[0] ? r->gpus[i].nearest_nic : "-",
               r->gpus[i].affinity ? r->gpus[i].affinity : "-");
    const struct nic_summary *s = &r->summary;
    printf("summary: class %s fabric %s %g Gb/s", nic_class_name(s->cls), s->fabric, s->gbps);
    if (s->ib_hca[0])
        printf(" NCCL_IB_HCA='%s'", s->ib_hca); /* "=dev:port,...": NCCL's exact-name form */
    if (s->gid_index >= 0)
        printf(" NCCL_IB_GID_INDEX=%d", s->gid_index);
    if (s->socket_ifname[0])
        printf(" NCCL_SOCKET_IFNAME=%s", s->socket_ifname);
    printf("\n");
}

int cmd_nic(int argc, char **argv)
{
    int json = 0, print_labels = 0, label_node = 0, quiet = 0;
    const char *sysfs = NULL, *emulate = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--print-labels") == 0) {
            print_labels = 1;
        } else if (strcmp(a, "--label-node") == 0) {
            label_node = 1;
        } else if (strcmp(a, "--quiet") == 0) {
            quiet = 1;
        } else if ((strcmp(a, "--sysfs") == 0 || strcmp(a, "--emulate") == 0) && i + 1 < argc) {
            *(a[2] == 's' ? &sysfs : &emulate) = argv[++i];
        } else if (strncmp(a, "--sysfs=", 8) == 0) {
            sysfs = a + 8;
        } else if (strncmp(a, "--emulate=", 10) == 0) {
            emulate = a + 10;
        } else {
            fprintf(stderr, "holmes-node nic: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (sysfs && emulate) {
        fprintf(stderr, "holmes-node nic: --sysfs and --emulate exclude each other\n");
        return 2;
    }
    log_set_component("nic");

    struct nic_report r;
    herr e;
    int rc = emulate ? nic_report_emulate(emulate, &r, &e)
                     : nic_discover(&(struct nic_discover_opts){.sysfs_root = sysfs}, &r, &e);
    if (rc != 0) {
        fprintf(stderr, "holmes-node nic: %s\n", e.msg);
        nic_report_free(&r);
        return emulate ? 2 : 1;
    }
    if (!quiet)
        for (int i = 0; i < r.nwarnings; i++)
            log_warn("%s", r.warnings[i]);

    int status = 0;
    struct nic_labels labels;
    if ((print_labels || label_node) && nic_labels_from_summary(&r.summary, &labels, &e) != 0) {
        fprintf(stderr, "holmes-node nic: %s\n", e.msg);
        nic_report_free(&r);
        return 1;
    }
    if (json) {
        cJSON *j = nic_report_to_json(&r);
        char *text = j ? cJSON_Print(j) : NULL;
        if (!text) {
            fprintf(stderr, "holmes-node nic: out of memory writing the report\n");
            status = 1;
        } else {
            printf("%s\n", text);
        }
        free(text);
        cJSON_Delete(j);
    } else if (!print_labels && !label_node) {
        print_text(&r);
    }
    if (print_labels)
        printf("%s=%s\n%s=%s\n%s=%s\n", NIC_LABEL_CLASS, labels.cls, NIC_LABEL_FABRIC,
               labels.fabric, NIC_LABEL_GBPS, labels.gbps);
    if (label_node && status == 0) {
        struct node_labeler_cfg *cfg = malloc(sizeof *cfg);
        if (!cfg) {
            fprintf(stderr, "holmes-node nic: out of memory\n");
            status = 1;
        } else if (node_labeler_config_from_env(getenv("HOLMES_SA_DIR"), cfg, &e) != 0 ||
                   node_labeler_patch(cfg, &labels, &e) != 0) {
            fprintf(stderr, "holmes-node nic --label-node: %s\n", e.msg);
            status = 1;
        } else {
            log_info("labelled node %s: %s=%s %s=%s %s=%s", cfg->node, NIC_LABEL_CLASS, labels.cls,
                     NIC_LABEL_FABRIC, labels.fabric, NIC_LABEL_GBPS, labels.gbps);
        }
        free(cfg);
    }
    nic_report_free(&r);
    return status;
}
