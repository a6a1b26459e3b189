/* RDMA discovery through libibverbs: every device and port via ibv_get_device_list,
 * ibv_open_device, ibv_query_device, ibv_query_port and ibv_query_gid_table (GID types and
 * netdevs included). A device that fails to open is read from sysfs instead, with a warning. */
#ifndef HOLMES_NIC_VERBS_H
#define HOLMES_NIC_VERBS_H

#include "nic_report.h"

/* Appends every device libibverbs lists to r->devs; `root` is the sysfs root used for PCI
 * placement and the fallback. Returns the number of devices libibverbs listed (0 when none;
 * r->rdma_note then says why). */
int nic_verbs_discover(const char *root, struct nic_report *r);

#endif
