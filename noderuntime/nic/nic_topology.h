/* GPU-to-NIC affinity from the PCI tree: for each GPU its nearest NIC, preferring a NIC under
 * the same PCIe switch (their PCI paths share an upstream port), else on the same NUMA node,
 * else any ("system"). Among equals: more shared PCI levels, an ACTIVE RDMA port, the better
 * class, then the name. */
#ifndef HOLMES_NIC_TOPOLOGY_H
#define HOLMES_NIC_TOPOLOGY_H

#include "nic_report.h"

/* Number of leading PCI functions two '/'-separated PCI paths share. */
int nic_pci_common_depth(const char *a, const char *b);
/* Sets netdev->rdma_dev for netdevs on an RDMA device's PCI function. */
void nic_topology_link_netdevs(struct nic_report *r);
/* Fills nearest_nic and affinity of every GPU. */
void nic_topology_nearest(struct nic_report *r);

#endif
