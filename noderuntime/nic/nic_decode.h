/* Pure decoding of what verbs and sysfs say about RDMA ports: IB speed and width codes,
 * sysfs rate strings, port states, MTU codes, GIDs and their types, subnets and fabric ids.
 * No I/O; every function is total (odd input gives a "not known" answer, never a crash). */
#ifndef HOLMES_NIC_DECODE_H
#define HOLMES_NIC_DECODE_H

#include <stddef.h>
#include <stdint.h>

/* Per-lane signalling rate in Gb/s of a verbs `active_speed` code (1 SDR 2.5, 2 DDR 5,
 * 4 QDR 10, 8 FDR10 10, 16 FDR 14, 32 EDR 25, 64 HDR 50, 128 NDR 100, 256 XDR 200),
 * as ibv_devinfo and sysfs count them. 0 for an unknown code. */
double nic_ib_lane_gbps(int speed_code);
/* "SDR" ... "XDR"; NULL for an unknown code. */
const char *nic_ib_speed_name(int speed_code);
/* The speed code of a name ("HDR" -> 64); -1 when unknown. */
int nic_ib_speed_code(const char *name);
/* Lanes of a verbs `active_width` code (1 -> 1X, 2 -> 4X, 4 -> 8X, 8 -> 12X, 16 -> 2X); 0 if unknown. */
int nic_ib_width_lanes(int width_code);
/* Port bandwidth in Gb/s: lane rate x lanes; 0 when either code is unknown. */
double nic_ib_port_gbps(int speed_code, int width_code);
/* Parses a sysfs port `rate`, e.g. "200 Gb/sec (4X HDR)" or "25 Gb/sec (1X EDR)".
 * Fills gbps, lanes and the speed name (cap >= 8); returns 0, or -1 when unreadable. */
int nic_ib_parse_rate(const char *s, double *gbps, int *lanes, char *speed, size_t cap);

/* Active MTU in bytes of a verbs `enum ibv_mtu` (1 -> 256 ... 5 -> 4096); 0 if unknown. */
int nic_ib_mtu_bytes(int mtu_code);
/* The largest IB MTU (256..4096) that fits in an Ethernet MTU (RoCE's active MTU); 0 if < 256. */
int nic_roce_mtu_bytes(int eth_mtu);

/* Port states: verbs codes and names (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER). */
const char *nic_port_state_name(int state);
/* Physical states (1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp,
 * 6 LinkErrorRecovery, 7 PhyTest). */
const char *nic_port_phys_state_name(int phys_state);
/* Parses sysfs "4: ACTIVE" / "5: LinkUp" into the number; -1 when unreadable. */
int nic_parse_numbered_state(const char *s);

/* GIDs. */
enum nic_gid_type { NIC_GID_IB_ROCE_V1 = 0, NIC_GID_ROCE_V2 = 1, NIC_GID_TYPE_UNKNOWN = 2 };
/* sysfs gid_attrs/types/N: "IB/RoCE v1" | "RoCE v2". Unknown text gives NIC_GID_TYPE_UNKNOWN. */
enum nic_gid_type nic_gid_type_parse(const char *s);
const char *nic_gid_type_name(enum nic_gid_type t); /* "IB/RoCE v1", "RoCE v2", "unknown" */
/* Parses a GID as sysfs writes it (8 groups of 4 hex digits) or any IPv6 text form. 0 / -1. */
int nic_gid_parse(const char *s, uint8_t raw[16]);
/* Writes the sysfs form "fe80:0000:...:4ab2" (40 bytes with the NUL). */
void nic_gid_format(const uint8_t raw[16], char out[40]);
int nic_gid_is_zero(const uint8_t raw[16]);
/* What address a RoCE GID carries. */
enum nic_gid_addr { NIC_GID_ADDR_ZERO, NIC_GID_ADDR_IPV4, NIC_GID_ADDR_LINK_LOCAL, NIC_GID_ADDR_IPV6 };
enum nic_gid_addr nic_gid_addr_kind(const uint8_t raw[16]); /* ::ffff:a.b.c.d is IPV4 */
/* The GID's subnet prefix (its first 8 bytes, host order), the IB fabric identity. */
uint64_t nic_gid_subnet_prefix(const uint8_t raw[16]);

/* "a.b.c.0/24" or "2001:db8:1::/64": the network of addr (4 or 16 bytes) with `prefix` bits.
 * family is AF_INET or AF_INET6. Returns 0, or -1 for a bad family/prefix or small buffer. */
int nic_subnet_string(int family, const uint8_t *addr, int prefix, char *out, size_t cap);

/* Fabric ids. IB: "ib-" + the 16 hex digits of the subnet prefix; for the default prefix
 * fe80::/64 (shared by every unconfigured subnet) "-sm<SM LID>" is appended. */
int nic_fabric_ib(uint64_t subnet_prefix, int sm_lid, char *out, size_t cap);
/* RoCE: "roce-<subnet>"; Ethernet: "eth-<subnet>". */
int nic_fabric_roce(const char *subnet, char *out, size_t cap);
int nic_fabric_eth(const char *subnet, char *out, size_t cap);

#endif
