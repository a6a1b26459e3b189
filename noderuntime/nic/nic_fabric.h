/* Places ports on fabrics and chooses the worker's summary:
 *  - IB port (ACTIVE): "ib-<subnet prefix>[-sm<SM LID>]";
 *  - RoCE port (ACTIVE): the RoCE v2 GID NCCL should use (IPv4-mapped > global IPv6 >
 *    link-local, then lowest index) and "roce-<subnet of that GID>";
 *  - summary: best class among ACTIVE ports (infiniband > roce > ethernet); within it the
 *    fabric with the most Gb/s; NCCL settings that select exactly those ports. */
#ifndef HOLMES_NIC_FABRIC_H
#define HOLMES_NIC_FABRIC_H

#include "nic_report.h"

/* Position in p->gids of the RoCE v2 GID to use, or -1 when the port has none. */
int nic_roce_pick_gid(const struct nic_port *p);
/* Fills fabric (and for RoCE roce_gid_index / roce_subnet) of every ACTIVE port. */
void nic_fabric_assign(struct nic_report *r);
/* Chooses r->summary from the ports and netdevs; always succeeds (Ethernet at worst). */
void nic_fabric_summarize(struct nic_report *r);

#endif
