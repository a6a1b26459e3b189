#include "nic_addrs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "yaml_json.h"

static int add_addr(struct nic_report *r, const char *ifname, int family, const void *addr,
                    int prefix)
{
    struct nic_netdev *n = nic_report_find_netdev(r, ifname);
    if (!n)
        return 0;
    if (nic_addrs_find(n, family, addr))
        return 0;
    struct nic_addr *a = nic_netdev_add_addr(n);
    if (!a)
        return 0;
    a->family = family;
    memcpy(a->addr, addr, family == AF_INET ? 4 : 16);
    a->prefix = prefix;
    return 1;
}

/* One line: "4: eth0    inet 10.0.0.5/24 brd ... scope global eth0\ ..." */
static int parse_line(char *line, int lineno, struct nic_report *r)
{
    char *save = NULL;
    char *idx = strtok_r(line, " \t", &save);
    char *ifname = strtok_r(NULL, " \t", &save);
    char *fam = strtok_r(NULL, " \t", &save);
    char *cidr = strtok_r(NULL, " \t", &save);
    if (!idx || !ifname || !fam || !cidr)
        return -1;
    char *end;
    long ifindex = strtol(idx, &end, 10);
    if (end == idx || strcmp(end, ":") != 0 || ifindex <= 0)
        return -1;
    char *at = strchr(ifname, '@');
    if (at)
        *at = '\0';
    size_t il = strlen(ifname);
    if (il && ifname[il - 1] == ':')
        ifname[il - 1] = '\0';
    int family = strcmp(fam, "inet") == 0 ? AF_INET : strcmp(fam, "inet6") == 0 ? AF_INET6 : 0;
    if (!family)
        return 0; /* link lines and other families */
    char *slash = strchr(cidr, '/');
    int max = family == AF_INET ? 32 : 128;
    int prefix = max;
    if (slash) {
        *slash = '\0';
        long p = strtol(slash + 1, &end, 10);
        if (*end || p < 0 || p > max) {
            nic_report_warn(r, "ip-addr.txt:%d: prefix length \"%s\" is not 0..%d", lineno,
                            slash + 1, max);
            return 0;
        }
        prefix = (int)p;
    }
    uint8_t buf[16];
    if (inet_pton(family, cidr, buf) != 1) {
        nic_report_warn(r, "ip-addr.txt:%d: \"%s\" is not an %s address", lineno, cidr, fam);
        return 0;
    }
    return add_addr(r, ifname, family, buf, prefix);
}

int nic_addrs_parse_ip_o(const char *text, struct nic_report *r)
{
    int added = 0, lineno = 0;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[1024];
        lineno++;
        if (len >= sizeof line) {
            nic_report_warn(r, "ip-addr.txt:%d: line longer than %zu bytes skipped", lineno,
                            sizeof line - 1);
        } else if (len > 0) {
            memcpy(line, p, len);
            line[len] = '\0';
            int rc = parse_line(line, lineno, r);
            if (rc < 0)
                nic_report_warn(r, "ip-addr.txt:%d: not an `ip -o addr` line", lineno);
            else
                added += rc;
        }
        p += len + (nl ? 1 : 0);
    }
    return added;
}

void nic_addrs_read_recorded(const char *root, struct nic_report *r)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/ip-addr.txt", root);
    herr e;
    char *text = read_file_limited(path, 1 << 20, NULL, &e);
    if (!text) {
        nic_report_warn(r, "%s (IP addresses of the recorded tree)", e.msg);
        return;
    }
    nic_addrs_parse_ip_o(text, r);
    free(text);
}

static int prefix_of(const struct sockaddr *mask, int family)
{
    if (!mask)
        return family == AF_INET ? 32 : 128;
    const uint8_t *b = family == AF_INET
                           ? (const uint8_t *)&((const struct sockaddr_in *)mask)->sin_addr
                           : ((const struct sockaddr_in6 *)mask)->sin6_addr.s6_addr;
    int n = family == AF_INET ? 4 : 16, bits = 0;
    for (int i = 0; i < n; i++)
        bits += __builtin_popcount(b[i]);
    return bits;
}

int nic_addrs_read_live(struct nic_report *r, herr *e)
{
    struct ifaddrs *ifa;
    if (getifaddrs(&ifa) != 0)
        return herr_set(e, "getifaddrs: %s", strerror(errno));
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr || !i->ifa_name)
            continue;
        int fam = i->ifa_addr->sa_family;
        if (fam == AF_INET)
            add_addr(r, i->ifa_name, fam, &((struct sockaddr_in *)i->ifa_addr)->sin_addr,
                     prefix_of(i->ifa_netmask, fam));
        else if (fam == AF_INET6)
            add_addr(r, i->ifa_name, fam, ((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr.s6_addr,
                     prefix_of(i->ifa_netmask, fam));
    }
    freeifaddrs(ifa);
    return 0;
}

const struct nic_addr *nic_addrs_find(const struct nic_netdev *n, int family, const uint8_t *addr)
{
    for (int i = 0; i < n->naddrs; i++)
        if (n->addrs[i].family == family &&
            memcmp(n->addrs[i].addr, addr, family == AF_INET ? 4 : 16) == 0)
            return &n->addrs[i];
    return NULL;
}
