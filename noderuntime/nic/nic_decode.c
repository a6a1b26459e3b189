#include "nic_decode.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static const struct {
    int code;
    const char *name;
    double lane_gbps;
} ib_speeds[] = {
    {1, "SDR", 2.5}, {2, "DDR", 5.0}, {4, "QDR", 10.0}, {8, "FDR10", 10.0}, {16, "FDR", 14.0},
    {32, "EDR", 25.0}, {64, "HDR", 50.0}, {128, "NDR", 100.0}, {256, "XDR", 200.0},
};
#define N_SPEEDS (sizeof ib_speeds / sizeof ib_speeds[0])

double nic_ib_lane_gbps(int speed_code)
{
    for (size_t i = 0; i < N_SPEEDS; i++)
        if (ib_speeds[i].code == speed_code)
            return ib_speeds[i].lane_gbps;
    return 0;
}

const char *nic_ib_speed_name(int speed_code)
{
    for (size_t i = 0; i < N_SPEEDS; i++)
        if (ib_speeds[i].code == speed_code)
            return ib_speeds[i].name;
    return NULL;
}

int nic_ib_speed_code(const char *name)
{
    for (size_t i = 0; name && i < N_SPEEDS; i++)
        if (strcmp(ib_speeds[i].name, name) == 0)
            return ib_speeds[i].code;
    return -1;
}

int nic_ib_width_lanes(int width_code)
{
    switch (width_code) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    }
    return 0;
}

double nic_ib_port_gbps(int speed_code, int width_code)
{
    return nic_ib_lane_gbps(speed_code) * nic_ib_width_lanes(width_code);
}

int nic_ib_parse_rate(const char *s, double *gbps, int *lanes, char *speed, size_t cap)
{
    if (!s || cap < 8)
        return -1;
    char *end;
    double g = strtod(s, &end);
    if (end == s || !(g > 0) || g > 1e6)
        return -1;
    while (*end == ' ')
        end++;
    if (strncmp(end, "Gb/sec", 6) != 0)
        return -1;
    end += 6;
    int l = 0;
    char name[16] = "";
    /* The "(4X HDR)" part is optional on some drivers. */
    const char *p = strchr(end, '(');
    if (p && sscanf(p, "(%dX %15[A-Za-z0-9])", &l, name) != 2) {
        l = 0;
        name[0] = '\0';
    }
    if (l < 0 || l > 32)
        l = 0;
    *gbps = g;
    *lanes = l;
    snprintf(speed, cap, "%s", name);
    return 0;
}

int nic_ib_mtu_bytes(int mtu_code)
{
    return mtu_code >= 1 && mtu_code <= 5 ? 128 << mtu_code : 0;
}

int nic_roce_mtu_bytes(int eth_mtu)
{
    int best = 0;
    for (int m = 256; m <= 4096; m *= 2)
        if (m <= eth_mtu)
            best = m;
    return best;
}

const char *nic_port_state_name(int state)
{
    static const char *const names[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
    return state >= 0 && state <= 5 ? names[state] : "UNKNOWN";
}

const char *nic_port_phys_state_name(int phys_state)
{
    static const char *const names[] = {"NOP", "Sleep", "Polling", "Disabled",
                                        "PortConfigurationTraining", "LinkUp",
                                        "LinkErrorRecovery", "PhyTest"};
    return phys_state >= 0 && phys_state <= 7 ? names[phys_state] : "UNKNOWN";
}

int nic_parse_numbered_state(const char *s)
{
    if (!s || !isdigit((unsigned char)s[0]))
        return -1;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != ':' || v < 0 || v > 255)
        return -1;
    return (int)v;
}

enum nic_gid_type nic_gid_type_parse(const char *s)
{
    if (!s)
        return NIC_GID_TYPE_UNKNOWN;
    if (strcmp(s, "IB/RoCE v1") == 0 || strcmp(s, "IB") == 0 || strcmp(s, "RoCE v1") == 0)
        return NIC_GID_IB_ROCE_V1;
    if (strcmp(s, "RoCE v2") == 0)
        return NIC_GID_ROCE_V2;
    return NIC_GID_TYPE_UNKNOWN;
}

const char *nic_gid_type_name(enum nic_gid_type t)
{
    switch (t) {
    case NIC_GID_IB_ROCE_V1: return "IB/RoCE v1";
    case NIC_GID_ROCE_V2: return "RoCE v2";
    case NIC_GID_TYPE_UNKNOWN: break;
    }
    return "unknown";
}

int nic_gid_parse(const char *s, uint8_t raw[16])
{
    if (!s)
        return -1;
    struct in6_addr a;
    if (inet_pton(AF_INET6, s, &a) != 1)
        return -1;
    memcpy(raw, a.s6_addr, 16);
    return 0;
}

void nic_gid_format(const uint8_t raw[16], char out[40])
{
    for (int i = 0; i < 8; i++)
        sprintf(out + i * 5, "%02x%02x%s", raw[2 * i], raw[2 * i + 1], i < 7 ? ":" : "");
}

int nic_gid_is_zero(const uint8_t raw[16])
{
    for (int i = 0; i < 16; i++)
        if (raw[i])
            return 0;
    return 1;
}

enum nic_gid_addr nic_gid_addr_kind(const uint8_t raw[16])
{
    static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (nic_gid_is_zero(raw))
        return NIC_GID_ADDR_ZERO;
    if (memcmp(raw, v4_mapped, 12) == 0)
        return NIC_GID_ADDR_IPV4;
    if (raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80)
        return NIC_GID_ADDR_LINK_LOCAL;
    return NIC_GID_ADDR_IPV6;
}

uint64_t nic_gid_subnet_prefix(const uint8_t raw[16])
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | raw[i];
    return v;
}

int nic_subnet_string(int family, const uint8_t *addr, int prefix, char *out, size_t cap)
{
    int bytes = family == AF_INET ? 4 : family == AF_INET6 ? 16 : 0;
    if (!bytes || prefix < 0 || prefix > bytes * 8)
        return -1;
    uint8_t net[16] = {0};
    for (int i = 0; i < bytes; i++) {
        int keep = prefix - i * 8;
        uint8_t mask = keep >= 8 ? 0xff : keep <= 0 ? 0 : (uint8_t)(0xff << (8 - keep));
        net[i] = addr[i] & mask;
    }
    char text[INET6_ADDRSTRLEN];
    if (!inet_ntop(family, net, text, sizeof text))
        return -1;
    int n = snprintf(out, cap, "%s/%d", text, prefix);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

#define IB_DEFAULT_SUBNET_PREFIX 0xfe80000000000000ULL

int nic_fabric_ib(uint64_t subnet_prefix, int sm_lid, char *out, size_t cap)
{
    int n;
    if (subnet_prefix == IB_DEFAULT_SUBNET_PREFIX)
        n = snprintf(out, cap, "ib-%016llx-sm%d", (unsigned long long)subnet_prefix, sm_lid);
    else
        n = snprintf(out, cap, "ib-%016llx", (unsigned long long)subnet_prefix);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static int fabric_with(const char *prefix, const char *subnet, char *out, size_t cap)
{
    if (!subnet || !subnet[0])
        return -1;
    int n = snprintf(out, cap, "%s-%s", prefix, subnet);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int nic_fabric_roce(const char *subnet, char *out, size_t cap)
{
    return fabric_with("roce", subnet, out, cap);
}

int nic_fabric_eth(const char *subnet, char *out, size_t cap)
{
    return fabric_with("eth", subnet, out, cap);
}
