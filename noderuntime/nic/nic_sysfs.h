/* Reads NIC, netdev and GPU facts from a sysfs tree: the live /sys or a recorded copy
 * (`--sysfs ROOT`, SYSFS_PATH). Only relative paths below ROOT are used, so a recorded tree
 * whose symlinks are relative (as in /sys itself) reads exactly like the real one.
 * Unreadable files and odd values become warnings in the report, never failures. */
#ifndef HOLMES_NIC_SYSFS_H
#define HOLMES_NIC_SYSFS_H

#include <stddef.h>

#include "nic_report.h"

/* Reads one attribute file into buf (at most cap-1 bytes) without the trailing newline.
 * Returns 0, or -1 when it is missing or unreadable (errno tells why). */
int nic_sysfs_read(const char *path, char *buf, size_t cap);
/* Reads an integer attribute (decimal or 0x hex); -1 when missing or not a number. */
int nic_sysfs_read_long(const char *path, long *out);
/* Sorted entry names of a directory (no dot entries). Caller frees with nic_sysfs_names_free.
 * Returns the count, or -1 when the directory can not be opened. */
int nic_sysfs_list(const char *dir, char ***names);
void nic_sysfs_names_free(char **names, int n);

/* Finds the PCI function a sysfs device directory sits on (following symlinks): fills pci
 * ("0000:3b:00.0"), pci_path (every PCI function from the root port down, '/'-separated) and
 * numa_node (-1 unknown). Leaves pci "" when the device is not on PCI. */
void nic_sysfs_pci_locate(const char *devdir, char pci[16], char pci_path[256], int *numa_node);

/* Names of the RDMA devices under ROOT/class/infiniband (sorted); count or -1 (none there). */
int nic_sysfs_rdma_names(const char *root, char ***names);
/* Device-level facts every path needs: PCI location and NUMA node. */
void nic_sysfs_rdma_locate(const char *root, struct nic_rdma_dev *d);
/* Everything about device d->name from ROOT/class/infiniband/<name>: ids, firmware, ports,
 * GID tables; marks d->source "sysfs". Problems become warnings in r. */
void nic_sysfs_read_rdma_dev(const char *root, struct nic_rdma_dev *d, struct nic_report *r);
/* The netdev of port `port` of device d (from its GID table or device/net); "" if none. */
void nic_sysfs_port_netdev(const char *root, const struct nic_rdma_dev *d, int port, char *out,
                           size_t cap);

/* Every netdev under ROOT/class/net (addresses are added separately: nic_addrs.h). */
int nic_sysfs_read_netdevs(const char *root, struct nic_report *r, herr *e);
/* Every NVIDIA GPU (vendor 0x10de, display class) under ROOT/bus/pci/devices. */
void nic_sysfs_read_gpus(const char *root, struct nic_report *r);

#endif
