/* IB speed/width decoding, rate strings, port states, MTUs, GID parsing and typing, subnets,
 * fabric ids. */
#include "test.h"

#include <sys/socket.h>

#include "nic_decode.h"

static void speeds(void)
{
    /* Every IB speed, SDR to XDR, per lane and at 4X. */
    static const struct { int code; const char *name; double lane; } t[] = {
        {1, "SDR", 2.5}, {2, "DDR", 5}, {4, "QDR", 10}, {8, "FDR10", 10}, {16, "FDR", 14},
        {32, "EDR", 25}, {64, "HDR", 50}, {128, "NDR", 100}, {256, "XDR", 200},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char n[64];
        snprintf(n, sizeof n, "lane rate %s", t[i].name);
        CHECK_NEAR(n, nic_ib_lane_gbps(t[i].code), t[i].lane, 1e-12);
        snprintf(n, sizeof n, "speed name %d", t[i].code);
        CHECK_STR(n, nic_ib_speed_name(t[i].code), t[i].name);
        snprintf(n, sizeof n, "speed code %s", t[i].name);
        CHECK_INT(n, nic_ib_speed_code(t[i].name), t[i].code);
    }
    CHECK_NEAR("4X HDR is 200", nic_ib_port_gbps(64, 2), 200, 1e-12);
    CHECK_NEAR("4X NDR is 400", nic_ib_port_gbps(128, 2), 400, 1e-12);
    CHECK_NEAR("8X XDR is 1600", nic_ib_port_gbps(256, 4), 1600, 1e-12);
    CHECK_NEAR("4X FDR is 56", nic_ib_port_gbps(16, 2), 56, 1e-12);
    CHECK_NEAR("1X EDR (25 GbE RoCE) is 25", nic_ib_port_gbps(32, 1), 25, 1e-12);
    CHECK_NEAR("12X QDR is 120", nic_ib_port_gbps(4, 8), 120, 1e-12);
    CHECK_NEAR("2X HDR is 100", nic_ib_port_gbps(64, 16), 100, 1e-12);
    CHECK_NEAR("unknown speed is 0", nic_ib_port_gbps(3, 2), 0, 0);
    CHECK_NEAR("unknown width is 0", nic_ib_port_gbps(64, 3), 0, 0);
    CHECK("unknown speed has no name", nic_ib_speed_name(512) == NULL);
    CHECK_INT("unknown speed name", nic_ib_speed_code("ZDR"), -1);
    CHECK_INT("width 1X", nic_ib_width_lanes(1), 1);
    CHECK_INT("width 12X", nic_ib_width_lanes(8), 12);
}

static void rates(void)
{
    double g = 0;
    int lanes = 0;
    char sp[8];
    CHECK_INT("rate HDR parses", nic_ib_parse_rate("200 Gb/sec (4X HDR)", &g, &lanes, sp, sizeof sp), 0);
    CHECK_NEAR("rate HDR gbps", g, 200, 0);
    CHECK_INT("rate HDR lanes", lanes, 4);
    CHECK_STR("rate HDR speed", sp, "HDR");
    CHECK_INT("rate SDR 1X", nic_ib_parse_rate("2.5 Gb/sec (1X SDR)", &g, &lanes, sp, sizeof sp), 0);
    CHECK_NEAR("rate SDR gbps", g, 2.5, 0);
    CHECK_INT("rate FDR10", nic_ib_parse_rate("40 Gb/sec (4X FDR10)", &g, &lanes, sp, sizeof sp), 0);
    CHECK_STR("rate FDR10 speed", sp, "FDR10");
    CHECK_INT("rate without lanes", nic_ib_parse_rate("100 Gb/sec", &g, &lanes, sp, sizeof sp), 0);
    CHECK_INT("rate without lanes: 0 lanes", lanes, 0);
    CHECK_INT("rate garbage", nic_ib_parse_rate("fast (very)", &g, &lanes, sp, sizeof sp), -1);
    CHECK_INT("rate zero", nic_ib_parse_rate("0 Gb/sec (4X HDR)", &g, &lanes, sp, sizeof sp), -1);
    CHECK_INT("rate wrong unit", nic_ib_parse_rate("200 Mb/sec (4X HDR)", &g, &lanes, sp, sizeof sp), -1);
    CHECK_INT("rate NULL", nic_ib_parse_rate(NULL, &g, &lanes, sp, sizeof sp), -1);
}

static void states_mtus(void)
{
    CHECK_INT("state ACTIVE", nic_parse_numbered_state("4: ACTIVE"), 4);
    CHECK_INT("phys LinkUp", nic_parse_numbered_state("5: LinkUp"), 5);
    CHECK_INT("state without number", nic_parse_numbered_state("ACTIVE"), -1);
    CHECK_INT("state without colon", nic_parse_numbered_state("4 ACTIVE"), -1);
    CHECK_STR("state name 1", nic_port_state_name(1), "DOWN");
    CHECK_STR("state name out of range", nic_port_state_name(9), "UNKNOWN");
    CHECK_STR("phys name 2", nic_port_phys_state_name(2), "Polling");
    CHECK_INT("mtu 4096", nic_ib_mtu_bytes(5), 4096);
    CHECK_INT("mtu 256", nic_ib_mtu_bytes(1), 256);
    CHECK_INT("mtu unknown", nic_ib_mtu_bytes(6), 0);
    CHECK_INT("roce mtu 9000", nic_roce_mtu_bytes(9000), 4096);
    CHECK_INT("roce mtu 1500", nic_roce_mtu_bytes(1500), 1024);
    CHECK_INT("roce mtu 100", nic_roce_mtu_bytes(100), 0);
}

static void gids(void)
{
    uint8_t raw[16];
    char text[40];
    CHECK_INT("gid sysfs form", nic_gid_parse("fe80:0000:0000:0000:0c42:a103:0065:4ab2", raw), 0);
    CHECK_INT("gid byte 0", raw[0], 0xfe);
    CHECK_INT("gid byte 15", raw[15], 0xb2);
    nic_gid_format(raw, text);
    CHECK_STR("gid round trip", text, "fe80:0000:0000:0000:0c42:a103:0065:4ab2");
    CHECK_INT("gid link-local", nic_gid_addr_kind(raw), NIC_GID_ADDR_LINK_LOCAL);
    CHECK("gid subnet prefix", nic_gid_subnet_prefix(raw) == 0xfe80000000000000ULL);
    CHECK_INT("gid v4-mapped", nic_gid_parse("0000:0000:0000:0000:0000:ffff:0a01:020b", raw), 0);
    CHECK_INT("gid v4-mapped kind", nic_gid_addr_kind(raw), NIC_GID_ADDR_IPV4);
    CHECK_INT("gid v4 byte", raw[12], 10);
    CHECK_INT("gid global v6", nic_gid_parse("2001:db8:1::11", raw), 0);
    CHECK_INT("gid global v6 kind", nic_gid_addr_kind(raw), NIC_GID_ADDR_IPV6);
    CHECK_INT("gid zero", nic_gid_parse("0000:0000:0000:0000:0000:0000:0000:0000", raw), 0);
    CHECK_INT("gid zero kind", nic_gid_addr_kind(raw), NIC_GID_ADDR_ZERO);
    CHECK("gid zero is zero", nic_gid_is_zero(raw));
    CHECK_INT("gid garbage", nic_gid_parse("not-a-gid", raw), -1);
    CHECK_INT("gid too short", nic_gid_parse("fe80:0000", raw), -1);
    CHECK_INT("gid type v1", nic_gid_type_parse("IB/RoCE v1"), NIC_GID_IB_ROCE_V1);
    CHECK_INT("gid type v2", nic_gid_type_parse("RoCE v2"), NIC_GID_ROCE_V2);
    CHECK_INT("gid type odd", nic_gid_type_parse("RoCE v9"), NIC_GID_TYPE_UNKNOWN);
    CHECK_INT("gid type NULL", nic_gid_type_parse(NULL), NIC_GID_TYPE_UNKNOWN);
    CHECK_STR("gid type name", nic_gid_type_name(NIC_GID_ROCE_V2), "RoCE v2");
}

static void subnets_fabrics(void)
{
    char s[64], f[128];
    const uint8_t v4[4] = {10, 1, 2, 11};
    CHECK_INT("subnet /16", nic_subnet_string(AF_INET, v4, 16, s, sizeof s), 0);
    CHECK_STR("subnet /16 text", s, "10.1.0.0/16");
    CHECK_INT("subnet /22", nic_subnet_string(AF_INET, (const uint8_t[]){10, 3, 1, 5}, 22, s, sizeof s), 0);
    CHECK_STR("subnet /22 text", s, "10.3.0.0/22");
    CHECK_INT("subnet /32", nic_subnet_string(AF_INET, v4, 32, s, sizeof s), 0);
    CHECK_STR("subnet /32 text", s, "10.1.2.11/32");
    uint8_t v6[16];
    nic_gid_parse("2001:db8:1:0:abcd::11", v6);
    CHECK_INT("subnet v6 /64", nic_subnet_string(AF_INET6, v6, 64, s, sizeof s), 0);
    CHECK_STR("subnet v6 /64 text", s, "2001:db8:1::/64");
    CHECK_INT("subnet bad prefix", nic_subnet_string(AF_INET, v4, 33, s, sizeof s), -1);
    CHECK_INT("subnet bad family", nic_subnet_string(7, v4, 8, s, sizeof s), -1);
    CHECK_INT("subnet small buffer", nic_subnet_string(AF_INET, v4, 16, s, 5), -1);

    CHECK_INT("fabric ib default", nic_fabric_ib(0xfe80000000000000ULL, 1, f, sizeof f), 0);
    CHECK_STR("fabric ib default text", f, "ib-fe80000000000000-sm1");
    CHECK_INT("fabric ib configured", nic_fabric_ib(0xfe80000000000002ULL, 7, f, sizeof f), 0);
    CHECK_STR("fabric ib configured text", f, "ib-fe80000000000002");
    CHECK_INT("fabric roce", nic_fabric_roce("10.1.0.0/16", f, sizeof f), 0);
    CHECK_STR("fabric roce text", f, "roce-10.1.0.0/16");
    CHECK_INT("fabric eth", nic_fabric_eth("10.3.0.0/22", f, sizeof f), 0);
    CHECK_STR("fabric eth text", f, "eth-10.3.0.0/22");
    CHECK_INT("fabric empty subnet", nic_fabric_eth("", f, sizeof f), -1);
}

int main(void)
{
    speeds();
    rates();
    states_mtus();
    gids();
    subnets_fabrics();
    TEST_MAIN_END();
}
