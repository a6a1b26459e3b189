/* sysfs attribute reading, directory listing order, PCI placement and `ip -o addr` parsing. */
#include "fs_testutil.h"
#include "test.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nic_addrs.h"
#include "nic_sysfs.h"

static char dir[64];

static void put(const char *rel, const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void files(void)
{
    char p[256], buf[64];
    long v;
    put("a", "4: ACTIVE\n");
    snprintf(p, sizeof p, "%s/a", dir);
    CHECK_INT("read ok", nic_sysfs_read(p, buf, sizeof buf), 0);
    CHECK_STR("newline trimmed", buf, "4: ACTIVE");
    CHECK_INT("read small buffer", nic_sysfs_read(p, buf, 3), 0);
    CHECK_STR("truncated", buf, "4:");
    put("hex", "0x15b3\n");
    snprintf(p, sizeof p, "%s/hex", dir);
    CHECK_INT("hex long", nic_sysfs_read_long(p, &v), 0);
    CHECK_INT("hex value", v, 0x15b3);
    put("neg", "-1\n");
    snprintf(p, sizeof p, "%s/neg", dir);
    CHECK_INT("negative long", nic_sysfs_read_long(p, &v), 0);
    CHECK_INT("negative value", v, -1);
    put("bad", "garbage\n");
    snprintf(p, sizeof p, "%s/bad", dir);
    CHECK_INT("not a number", nic_sysfs_read_long(p, &v), -1);
    snprintf(p, sizeof p, "%s/missing", dir);
    CHECK_INT("missing file", nic_sysfs_read(p, buf, sizeof buf), -1);

    snprintf(p, sizeof p, "%s/gids", dir);
    mkdir(p, 0755);
    put("gids/10", "x");
    put("gids/2", "x");
    put("gids/1", "x");
    char **names;
    int n = nic_sysfs_list(p, &names);
    CHECK_INT("list count", n, 3);
    if (n == 3) {
        CHECK_STR("numeric order 0", names[0], "1");
        CHECK_STR("numeric order 1", names[1], "2");
        CHECK_STR("numeric order 2", names[2], "10");
    }
    nic_sysfs_names_free(names, n);
    CHECK_INT("list missing dir", nic_sysfs_list("/nonexistent/holmes", &names), -1);
}

static void pci(void)
{
    char p[512], pci_addr[16], path[256];
    int numa;
    snprintf(p, sizeof p, "%s/devices/pci0000:00/0000:00:01.0/0000:3b:00.0/net/eth0", dir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && echo 1 > %s/devices/pci0000:00/0000:00:01.0/0000:3b:00.0/numa_node",
             p, dir);
    CHECK_INT("make tree", system(cmd), 0);
    nic_sysfs_pci_locate(p, pci_addr, path, &numa);
    CHECK_STR("pci address", pci_addr, "0000:3b:00.0");
    CHECK_STR("pci path", path, "0000:00:01.0/0000:3b:00.0");
    CHECK_INT("numa node", numa, 1);
    snprintf(p, sizeof p, "%s/devices/virtual", dir);
    mkdir(p, 0755);
    nic_sysfs_pci_locate(p, pci_addr, path, &numa);
    CHECK_STR("not on pci", pci_addr, "");
    CHECK_INT("no numa", numa, -1);
}

static void ip_lines(void)
{
    struct nic_report r;
    nic_report_init(&r);
    const char *names[] = {"eth0", "veth1", "lo"};
    for (int i = 0; i < 3; i++)
        snprintf(nic_report_add_netdev(&r)->name, 32, "%s", names[i]);
    const char *text =
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
        "2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever\n"
        "2: eth0    inet6 fe80::1/64 scope link \\       valid_lft forever preferred_lft forever\n"
        "5: veth1@if4    inet 10.244.0.1/24 scope global veth1\n"
        "7: ghost0    inet 10.9.9.9/24 scope global ghost0\n"
        "2: eth0    inet 10.0.0.6/99 scope global eth0\n"
        "2: eth0    inet 10.0.0.x/24 scope global eth0\n"
        "2: eth0    link/ether 00:11:22:33:44:55\n"
        "garbage\n";
    CHECK_INT("addresses added", nic_addrs_parse_ip_o(text, &r), 4);
    CHECK_INT("eth0 has two", r.netdevs[0].naddrs, 2);
    CHECK_INT("eth0 v4 prefix", r.netdevs[0].addrs[0].prefix, 24);
    CHECK_INT("eth0 v6 family", r.netdevs[0].addrs[1].family, AF_INET6);
    CHECK_INT("veth@ifN name stripped", r.netdevs[1].naddrs, 1);
    CHECK_INT("bad prefix, bad address, garbage warned", r.nwarnings, 3);
    const uint8_t want[4] = {10, 0, 0, 5};
    CHECK("find address", nic_addrs_find(&r.netdevs[0], AF_INET, want) != NULL);
    CHECK_INT("duplicates skipped", nic_addrs_parse_ip_o(text, &r), 0);
    nic_report_free(&r);
}

int main(void)
{
    if (test_in_tmpdir(dir, sizeof dir, "nic-sysfs", (void (*const[])(void)){files, pci, ip_lines, NULL}))
        return 1;
    TEST_MAIN_END();
}
