/* IP addresses of netdevs (sysfs has none): live from getifaddrs(3), or for a recorded tree
 * from ROOT/ip-addr.txt, the output of `ip -o addr show` saved next to the tree. */
#ifndef HOLMES_NIC_ADDRS_H
#define HOLMES_NIC_ADDRS_H

#include "nic_report.h"

/* Parses `ip -o addr show` text and attaches each inet/inet6 address to the netdev of that
 * name already in r (others are skipped). Odd lines become warnings. Returns the count added. */
int nic_addrs_parse_ip_o(const char *text, struct nic_report *r);
/* ROOT/ip-addr.txt; a missing file is a warning (subnets then fall back to /24 and /64). */
void nic_addrs_read_recorded(const char *root, struct nic_report *r);
/* This host's addresses via getifaddrs(3). */
int nic_addrs_read_live(struct nic_report *r, herr *e);
/* The address of netdev n equal to addr (4 or 16 bytes); NULL when none. */
const struct nic_addr *nic_addrs_find(const struct nic_netdev *n, int family, const uint8_t *addr);

#endif
