#include "test.h"

#include "nic_summary.h"

static int parse(const char *text, struct nic_summary *s, herr *e)
{
    cJSON *j = cJSON_Parse(text);
    int rc = nic_summary_from_json(j, "nic", s, e);
    cJSON_Delete(j);
    return rc;
}

int main(void)
{
    struct nic_summary s;
    herr e;
    CHECK_INT("short form ok", parse("{\"class\":\"roce\",\"fabric\":\"roce-10.1.0.0/16\",\"gbps\":100}", &s, &e), 0);
    CHECK_INT("short form class", s.cls, NIC_ROCE);
    CHECK_STR("short form fabric", s.fabric, "roce-10.1.0.0/16");
    CHECK_INT("short form gid default", s.gid_index, -1);

    CHECK_INT("full report ok", parse("{\"summary\":{\"class\":\"infiniband\",\"fabric\":\"ib-fe80\","
                                      "\"gbps\":200,\"nccl\":{\"NCCL_IB_HCA\":\"mlx5_0:1\","
                                      "\"NCCL_IB_GID_INDEX\":\"3\"}}}", &s, &e), 0);
    CHECK_STR("full report hca", s.ib_hca, "mlx5_0:1");
    CHECK_INT("full report gid", s.gid_index, 3);

    CHECK_INT("bad class", parse("{\"class\":\"token-ring\",\"fabric\":\"x\",\"gbps\":1}", &s, &e), -1);
    CHECK_STR("bad class message", e.msg, "nic.class: must be one of infiniband, roce, ethernet");
    CHECK_INT("zero gbps", parse("{\"class\":\"ib\",\"fabric\":\"x\",\"gbps\":0}", &s, &e), -1);
    CHECK_STR("zero gbps message", e.msg, "nic.gbps: must be a number in (0, 1000000]");
    CHECK_INT("missing fabric", parse("{\"class\":\"ib\",\"gbps\":5}", &s, &e), -1);
    CHECK_INT("not object", parse("[1]", &s, &e), -1);
    CHECK_INT("null json", nic_summary_from_json(NULL, "nic", &s, &e), -1);
    CHECK_INT("bad gid", parse("{\"class\":\"roce\",\"fabric\":\"f\",\"gbps\":1,\"gid_index\":1.5}", &s, &e), -1);

    s.cls = NIC_ROCE; snprintf(s.fabric, sizeof s.fabric, "roce-a"); s.gbps = 100;
    snprintf(s.ib_hca, sizeof s.ib_hca, "mlx5_2:1"); s.gid_index = 3; s.socket_ifname[0] = 0;
    cJSON *j = nic_summary_to_json(&s);
    struct nic_summary back;
    CHECK_INT("round trip parse", nic_summary_from_json(j, "rt", &back, &e), 0);
    CHECK_INT("round trip gid", back.gid_index, 3);
    CHECK_STR("round trip hca", back.ib_hca, "mlx5_2:1");
    cJSON_Delete(j);
    TEST_MAIN_END();
}
