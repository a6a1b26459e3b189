/* NIC discovery on this node: netdevs and addresses, RDMA devices (libibverbs, or a recorded
 * sysfs tree), GPUs, fabrics, GPU-to-NIC affinity and the summary. The one entry point the
 * `nic` command and the worker use. */
#ifndef HOLMES_NIC_DISCOVER_H
#define HOLMES_NIC_DISCOVER_H

#include "nic_report.h"

struct nic_discover_opts {
    /* A recorded sysfs tree to read instead of this machine (RDMA devices are then read from
     * it directly, without libibverbs). NULL: this machine, through libibverbs; the sysfs
     * root is then $SYSFS_PATH (which libibverbs honours too) or /sys. */
    const char *sysfs_root;
};

/* Fills r (initialised here; free with nic_report_free). Fails only on out-of-memory;
 * everything else becomes a warning in r->warnings. */
int nic_discover(const struct nic_discover_opts *o, struct nic_report *r, herr *e);

#endif
