#include "nic_discover.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nic_addrs.h"
#include "nic_fabric.h"
#include "nic_sysfs.h"
#include "nic_topology.h"
#include "nic_verbs.h"

/* Reads every device under ROOT/class/infiniband from sysfs. Returns the count. */
static int read_sysfs_devices(const char *root, struct nic_report *r)
{
    char **names;
    int n = nic_sysfs_rdma_names(root, &names);
    if (n < 0)
        return 0;
    int added = 0;
    for (int i = 0; i < n; i++) {
        struct nic_rdma_dev *d = nic_report_add_dev(r);
        if (!d) {
            nic_report_warn(r, "out of memory listing RDMA devices");
            break;
        }
        nic_copy(d->name, sizeof d->name, names[i]);
        nic_sysfs_read_rdma_dev(root, d, r);
        added++;
    }
    nic_sysfs_names_free(names, n);
    return added;
}

/* Why no RDMA device was found, from what ROOT/class/infiniband shows (the kernel's RDMA
 * devices), rather than libibverbs' errno (ENOSYS when that directory is missing). */
static void no_rdma_note(const char *root, struct nic_report *r)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/class/infiniband", root);
    DIR *d = opendir(dir);
    if (!d && (errno == ENOENT || errno == ENOTDIR)) {
        snprintf(r->rdma_note, sizeof r->rdma_note,
                 "no RDMA devices found: %.120s does not exist (no RDMA NIC, or its kernel driver is "
                 "not loaded); reporting Ethernet only", dir);
        return;
    }
    if (!d) {
        snprintf(r->rdma_note, sizeof r->rdma_note,
                 "no RDMA devices found: %.120s cannot be read (%.40s); reporting Ethernet only", dir,
                 strerror(errno));
        return;
    }
    closedir(d);
    snprintf(r->rdma_note, sizeof r->rdma_note,
             "no RDMA devices found: %.120s lists none (no NIC bound to an RDMA driver); reporting "
             "Ethernet only", dir);
}

int nic_discover(const struct nic_discover_opts *o, struct nic_report *r, herr *e)
{
    nic_report_init(r);
    const char *env = getenv("SYSFS_PATH");
    int recorded = o && o->sysfs_root;
    const char *root = recorded ? o->sysfs_root : env && env[0] ? env : "/sys";

    struct stat st;
    if (recorded && (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))) {
        herr_set(e, "--sysfs %s: not a directory (a recorded sysfs tree is expected)", root);
        goto fail;
    }
    if (nic_sysfs_read_netdevs(root, r, e) != 0)
        goto fail;
    if (recorded || (env && env[0])) {
        nic_addrs_read_recorded(root, r);
    } else if (nic_addrs_read_live(r, e) != 0) {
        nic_report_warn(r, "%s; subnets unknown", e->msg);
    }

    if (recorded) {
        if (read_sysfs_devices(root, r) == 0)
            snprintf(r->rdma_note, sizeof r->rdma_note,
                     "no RDMA devices found (the recorded tree has none under class/infiniband); "
                     "reporting Ethernet only");
    } else if (nic_verbs_discover(root, r) == 0) {
        /* Devices in sysfs that libibverbs can not list (no provider, or a recorded tree
         * named by SYSFS_PATH) are still worth reporting. */
        int n = read_sysfs_devices(root, r);
        if (n > 0) {
            nic_report_warn(r, "libibverbs lists no devices but %s/class/infiniband has %d; "
                            "read from sysfs (is the ibverbs provider installed?)", root, n);
            r->rdma_note[0] = '\0';
        } else {
            no_rdma_note(root, r);
        }
    }
    r->rdma_found = r->ndevs > 0;

    nic_sysfs_read_gpus(root, r);
    nic_fabric_assign(r);
    nic_topology_link_netdevs(r);
    nic_topology_nearest(r);
    nic_fabric_summarize(r);
    return 0;
fail:
    nic_report_free(r);
    return -1;
}
