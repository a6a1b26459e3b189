/* The plan document and the rank table: derived groups (tensor too), planner-style groups, per-link
 * pacing, encode and decode agree, clear errors. */
#include "test.h"

#include <stdlib.h>
#include <string.h>

#include "rank_table.h"
#include "yaml_json.h"

static int load(const char *doc, struct plan_doc *rt, herr *e)
{
    cJSON *d = yaml_parse_documents(doc, strlen(doc), "doc", e);
    if (!d)
        return -1;
    int rc = plan_doc_from_json(cJSON_GetArrayItem(d, 0), "doc", rt, e);
    if (rc == 0 && (rc = plan_doc_check_endpoints(rt, "doc", e)) != 0)
        plan_doc_free(rt);
    cJSON_Delete(d);
    return rc;
}

#define W4 "\"workers\": [{\"host\": \"127.0.0.1\", \"port\": 1000, \"fabric\": \"a\"}," \
           "{\"host\": \"127.0.0.1\", \"port\": 1001, \"fabric\": \"a\"}," \
           "{\"host\": \"127.0.0.1\", \"port\": 1002, \"fabric\": \"b\"}," \
           "{\"host\": \"127.0.0.1\", \"port\": 1003, \"fabric\": \"b\", \"nic\": {\"ib_hca\": \"mlx5_0:1\", \"gid_index\": 3}}]"

/* Every node of a document, in order (for the fuzzer to pick one). */
static int collect(cJSON *n, cJSON **out, int cap, int k)
{
    if (k < cap)
        out[k++] = n;
    for (cJSON *c = n->child; c; c = c->next)
        k = collect(c, out, cap, k);
    return k;
}

/* A random value in place of node `n` (or n removed): types, ranges and shapes a user gets wrong. */
static void mutate(cJSON *root, unsigned *seed)
{
    cJSON *nodes[512];
    int n = collect(root, nodes, 512, 0);
    cJSON *t = nodes[1 + rand_r(seed) % (n - 1)];
    static const char *const strs[] = {"", "tp", "dp", "embedding", "ib", "roce", "x", "-1"};
    static const double nums[] = {-1, 0, 1, 2, 3, 7, 0.5, 1e9, 65535, 65536, 4294967296.0};
    cJSON *v;
    switch (rand_r(seed) % 6) {
    case 0: v = cJSON_CreateNumber(nums[rand_r(seed) % 11]); break;
    case 1: v = cJSON_CreateString(strs[rand_r(seed) % 8]); break;
    case 2: v = cJSON_CreateNull(); break;
    case 3: v = cJSON_CreateArray(); break;
    case 4: v = cJSON_CreateObject(); break;
    default: v = NULL; break;
    }
    cJSON *parent = NULL;
    for (int i = 0; i < n && !parent; i++)
        for (cJSON *c = nodes[i]->child; c && !parent; c = c->next)
            if (c == t)
                parent = nodes[i];
    if (!v) {
        cJSON_Delete(cJSON_DetachItemViaPointer(parent, t));
        return;
    }
    if (t->string) {
        v->string = strdup(t->string);
        if (!v->string) {
            cJSON_Delete(v);
            return;
        }
    }
    cJSON_ReplaceItemViaPointer(parent, t, v);
}

/* Mutated documents never crash the decoder: each is refused naming something, or decodes into
 * a table that holds together (every rank in its groups, members in range). */
static void fuzz_decoder(const char *doc)
{
    unsigned seed = 12345;
    int refused = 0, accepted = 0, bad = 0, silent = 0;
    for (int i = 0; i < 4000; i++) {
        cJSON *j = cJSON_Parse(doc);
        if (!j)
            break;
        for (int m = 1 + i % 3; m > 0; m--)
            mutate(j, &seed);
        struct plan_doc d;
        herr e = {0};
        if (plan_doc_from_json(j, "fuzz", &d, &e) != 0) {
            refused++;
            silent += !e.msg[0];
        } else {
            accepted++;
            for (int g = 0; g < d.ngroups; g++)
                for (int k = 0; k < d.groups[g].n; k++)
                    bad += d.groups[g].members[k] < 0 || d.groups[g].members[k] >= d.world;
            cJSON *back = plan_doc_to_json(&d);
            struct plan_doc d2;
            if (!back || plan_doc_from_json(back, "re-encoded", &d2, &e) != 0)
                bad++;
            else
                plan_doc_free(&d2);
            cJSON_Delete(back);
            plan_doc_free(&d);
        }
        cJSON_Delete(j);
    }
    printf("  fuzz: %d refused, %d accepted\n", refused, accepted);
    CHECK("fuzzed documents: some refused, some accepted", refused > 100 && accepted > 100);
    CHECK_INT("every refusal says why", silent, 0);
    CHECK_INT("every accepted document is consistent and re-encodes", bad, 0);
}

int main(void)
{
    struct plan_doc rt;
    herr e;
    const char *derived = "{\"parallelism\": {\"pipeline\": 2, \"data\": 2}, \"timeout_seconds\": 5,"
                          "\"cross_fabric_pacing\": {\"bytes_per_second\": 1e8, \"latency_us\": 100}," W4 "}";
    int rc = load(derived, &rt, &e);
    CHECK_INT("derived groups load", rc, 0);
    if (rc != 0)
        printf("  %s\n", e.msg);
    if (rc == 0) {
        CHECK_INT("world", rt.world, 4);
        CHECK_INT("groups dp 2 + pp 2 + embedding 2 + link 2", rt.ngroups, 8);
        int l = plan_doc_find_link(&rt, 1, 1);
        CHECK("a document without link groups gets them derived: rank 1 -> 3, socket, stage 0",
              l >= 0 && rt.groups[l].kind == GROUP_LINK && rt.groups[l].members[0] == 1 &&
                  rt.groups[l].members[1] == 3 && rt.groups[l].stage == 0 &&
                  rt.groups[l].transport == TRANSPORT_SOCKET &&
                  !strcmp(rt.groups[l].nccl_net, "Socket"));
        CHECK("rank 3's link back is rank 1's forward one; none beyond the ends",
              plan_doc_find_link(&rt, 3, -1) == l && plan_doc_find_link(&rt, 3, 1) == -1 &&
                  plan_doc_find_link(&rt, 1, -1) == -1);
        int g = plan_doc_find_group(&rt, GROUP_DP, 3);
        CHECK("dp group of rank 3 is stage 1", g >= 0 && rt.groups[g].stage == 1 &&
                                                   rt.groups[g].members[0] == 2);
        g = plan_doc_find_group(&rt, GROUP_PP, 1);
        CHECK("pp group of rank 1 = {1, 3}", g >= 0 && rt.groups[g].members[0] == 1 &&
                                                 rt.groups[g].members[1] == 3);
        struct rt_comm_spec cs;
        CHECK_INT("comm spec", rank_table_comm_spec(&rt, g, 3, &cs, &e), 0);
        CHECK_INT("comm spec index", cs.spec.index, 1);
        CHECK_INT("comm spec peer port", cs.eps[0].port, 1001);
        CHECK("cross-fabric link paced", cs.pacing[0].bytes_per_sec == 1e8 &&
                                             fabs(cs.pacing[0].latency_s - 1e-4) < 1e-12);
        rt_comm_spec_free(&cs);
        g = plan_doc_find_group(&rt, GROUP_DP, 0);
        CHECK_INT("comm spec dp", rank_table_comm_spec(&rt, g, 0, &cs, &e), 0);
        CHECK("same-fabric link unpaced", cs.pacing[1].bytes_per_sec == 0);
        rt_comm_spec_free(&cs);
        CHECK_STR("nic hca read", rt.ranks[3].ib_hca, "mlx5_0:1");
        CHECK_INT("nic gid read", rt.ranks[3].gid_index, 3);
        CHECK("timeout read", rt.timeout_s == 5);
        plan_doc_free(&rt);
    }
    const char *planned = "{\"parallelism\": {\"pipeline\": 2, \"data\": 2, \"tensor\": 1},"
                          "\"stages\": [{\"layers\": [0, 3]}, {\"layers\": [3, 4]}]," W4 ","
                          "\"groups\": [{\"kind\": \"dp\", \"ranks\": [0, 1], \"transport\": \"ib\", \"stage\": 0},"
                          "{\"kind\": \"dp\", \"ranks\": [2, 3], \"transport\": \"roce\", \"gid_index\": 3},"
                          "{\"kind\": \"pp\", \"ranks\": [0, 2], \"transport\": \"socket\","
                          " \"pacing\": {\"bytes_per_second\": 5e7}},"
                          "{\"kind\": \"pp\", \"ranks\": [1, 3]}, {\"kind\": \"tp\", \"ranks\": [0]}]}";
    rc = load(planned, &rt, &e);
    CHECK_INT("planner groups load", rc, 0);
    if (rc != 0)
        printf("  %s\n", e.msg);
    if (rc == 0) {
        CHECK_INT("stage split read", rt.stage_last[0], 3);
        CHECK_STR("ib group nccl net", rt.groups[0].nccl_net, "IB");
        CHECK_INT("roce gid", rt.groups[1].gid_index, 3);
        CHECK_STR("socket group nccl net", rt.groups[2].nccl_net, "Socket");
        CHECK("group pacing overrides", rt.groups[2].pacing.bytes_per_sec == 5e7);
        CHECK_INT("embedding derived", plan_doc_find_group(&rt, GROUP_EMBEDDING, 2) >= 0, 1);
        /* the comm seam on GPUs: RDMA dp/tp groups on NCCL with the plan's network and the
         * rank's NIC; pipeline links and socket groups on TCP */
        struct comm_nccl_params np;
        CHECK("ib dp group -> NCCL IB on the rank's device",
              rank_table_nccl_params(&rt, 0, 1, 1, &np) == 1 && !strcmp(np.net_name, "IB") &&
                  np.device == 1 && np.ib_hca == NULL && np.gid_index == -1 && np.timeout_s == rt.timeout_s);
        CHECK("roce dp group -> NCCL IB with the HCA and the group's GID index",
              rank_table_nccl_params(&rt, 1, 3, 0, &np) == 1 && !strcmp(np.net_name, "IB") &&
                  np.ib_hca && !strcmp(np.ib_hca, "mlx5_0:1") && np.gid_index == 3);
        CHECK_INT("pipeline group (socket) -> TCP", rank_table_nccl_params(&rt, 2, 0, 0, &np), 0);
        snprintf(rt.groups[3].nccl_net, sizeof rt.groups[3].nccl_net, "IB");
        CHECK_INT("pipeline group (planned IB) -> TCP", rank_table_nccl_params(&rt, 3, 1, 0, &np), 0);
        snprintf(rt.groups[0].nccl_net, sizeof rt.groups[0].nccl_net, "Socket");
        CHECK_INT("socket dp group -> TCP", rank_table_nccl_params(&rt, 0, 1, 0, &np), 0);
        /* both members in one worker, on GPUs 0 and 1: NCCL inside the node, whatever the
         * network; on one GPU (NCCL refuses two ranks of one communicator there), or in two
         * workers, TCP */
        snprintf(rt.ranks[0].name, sizeof rt.ranks[0].name, "w0");
        snprintf(rt.ranks[1].name, sizeof rt.ranks[1].name, "w0");
        rt.ranks[0].local_rank = 0;
        rt.ranks[1].local_rank = 1;
        CHECK("socket dp group inside one worker -> NCCL, NCCL's network",
              rank_table_nccl_params(&rt, 0, 1, 1, &np) == 1 && !strcmp(np.net_name, ""));
        rt.ranks[1].local_rank = 0;
        CHECK_INT("... both on one GPU -> TCP", rank_table_nccl_params(&rt, 0, 1, 0, &np), 0);
        rt.ranks[1].local_rank = 1;
        snprintf(rt.ranks[1].name, sizeof rt.ranks[1].name, "w1");
        CHECK_INT("... in two workers -> TCP", rank_table_nccl_params(&rt, 0, 1, 0, &np), 0);
        plan_doc_free(&rt);
    }
    struct {
        const char *doc, *want;
    } bad[] = {
        {"{\"workers\": []}", "parallelism"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}, \"workers\": []}", "4 entries"},
        {"{\"parallelism\": {\"pipeline\": 0, \"data\": 2}, \"workers\": []}", "parallelism.pipeline"},
        {"{\"parallelism\": {\"pipeline\": 1, \"data\": 1}, \"workers\": [{\"host\": \"h\"}]}", "workers[0] needs a host and a port"},
        {"{\"parallelism\": {\"pipeline\": 1, \"data\": 1}, \"workers\": [{\"host\": \"h\", \"port\": 70000}]}",
         "workers[0].port"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"groups\": [{\"kind\": \"dp\", \"ranks\": [0, 2]},"
         "{\"kind\": \"dp\", \"ranks\": [1, 3]}]}", "does not belong"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"groups\": [{\"kind\": \"dp\", \"ranks\": [0, 1]}]}",
         "rank 2 is in 0 'dp' groups"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"groups\": [{\"kind\": \"dp\", \"ranks\": [0, 1],"
         " \"transport\": \"carrier-pigeon\"}]}", "transport 'carrier-pigeon'"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"stages\": [{\"layers\": [0, 2]}, {\"layers\": [3, 4]}]}",
         "stages[1].layers"},
        /* found by make fuzz (fuzz_worker_message): a bound past int's range was cast first */
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"stages\": [{\"layers\": [0, 2]}, {\"layers\": [2, 3.1e24]}]}",
         "stages[1].layers must be [first, last), whole numbers"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"stages\": [{\"layers\": [0, 1.5]}, {\"layers\": [1.5, 4]}]}",
         "stages[0].layers must be [first, last), whole numbers"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"cross_fabric_pacing\": {\"bytes_per_second\": -1}}",
         "bytes_per_second"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"groups\": [{\"kind\": \"link\", \"ranks\": [0, 3]},"
         "{\"kind\": \"link\", \"ranks\": [1, 3]}]}", "rank 3 does not belong at position 1 of a 'link' group"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"groups\": [{\"kind\": \"link\", \"ranks\": [2, 0]}]}",
         "a 'link' group cannot start at rank 2 (stage 1 of 2)"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"groups\": [{\"kind\": \"link\", \"ranks\": [0, 2, 1]}]}",
         "a 'link' group must have 2 ranks, has 3"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"groups\": [{\"kind\": \"link\", \"ranks\": [0, 2]}]}",
         "rank 1 is in 0 'link' groups, must be in 1"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"groups\": [{\"kind\": \"link\", \"ranks\": [0, 2]},"
         "{\"kind\": \"link\", \"ranks\": [1, 3]}, {\"kind\": \"link\", \"ranks\": [1, 3]}]}",
         "rank 1 is in 2 'link' groups, must be in 1"},
        {"{\"parallelism\": {\"pipeline\": 2, \"data\": 2}," W4 ", \"groups\": [{\"kind\": \"wire\", \"ranks\": [0, 2]}]}",
         "not one of dp, tp, pp, embedding, link"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad table %zu rejected naming '%s'", i, bad[i].want);
        rc = load(bad[i].doc, &rt, &e);
        if (rc == 0) {
            plan_doc_free(&rt);
            TEST_FAIL(name, "accepted");
        } else if (!strstr(e.msg, bad[i].want)) {
            TEST_FAIL(name, "message: %s", e.msg);
        } else {
            TEST_PASS(name);
        }
    }
    /* tensor 2 x pipeline 2 x data 2: every kind derived, rank = tp + 2 * (dp + 2 * stage). */
    struct plan_doc d;
    rc = plan_doc_init(&d, 2, 2, 2, &e) || plan_doc_complete(&d, &e);
    CHECK_INT("tensor 2 x pipeline 2 x data 2 completes", rc, 0);
    if (rc == 0) {
        CHECK_INT("groups: tp 4 + dp 4 + pp 4 + embedding 4 + link 4", d.ngroups, 20);
        int g = plan_doc_find_group(&d, GROUP_TP, 5);
        CHECK("tp group of rank 5 = {4, 5}", g >= 0 && d.groups[g].members[0] == 4 &&
                                                d.groups[g].members[1] == 5 && d.groups[g].stage == 1);
        g = plan_doc_find_group(&d, GROUP_DP, 5);
        CHECK("dp group of rank 5 = {5, 7}", g >= 0 && d.groups[g].members[0] == 5 &&
                                                d.groups[g].members[1] == 7);
        g = plan_doc_find_group(&d, GROUP_EMBEDDING, 3);
        CHECK("embedding group of rank 3 = {3, 7}", g >= 0 && d.groups[g].members[0] == 3 &&
                                                       d.groups[g].members[1] == 7);
        CHECK_INT("rank 6: stage 1 dp 1 tp 0", plan_doc_stage_of(&d, 6) * 100 +
                                                   plan_doc_dp_of(&d, 6) * 10 + plan_doc_tp_of(&d, 6), 110);
        /* encode, decode: the same document */
        d.ranks[6].port = 999;
        snprintf(d.ranks[6].host, sizeof d.ranks[6].host, "h6");
        snprintf(d.ranks[6].ib_hca, sizeof d.ranks[6].ib_hca, "mlx5_1:1");
        d.groups[3].transport = TRANSPORT_ROCE;
        d.groups[3].gid_index = 3;
        d.groups[3].pacing = (struct plan_pacing){1e6, 2e-5};
        d.cross_fabric = (struct plan_pacing){5e5, 1e-4};
        cJSON *j = plan_doc_to_json(&d);
        struct plan_doc back;
        rc = j ? plan_doc_from_json(j, "encoded", &back, &e) : -1;
        CHECK_INT("an encoded document decodes", rc, 0);
        if (rc == 0) {
            CHECK_INT("same groups", back.ngroups, d.ngroups);
            int same = back.world == d.world && back.tensor == 2;
            for (int k = 0; same && k < d.ngroups; k++) {
                same = back.groups[k].kind == d.groups[k].kind && back.groups[k].n == d.groups[k].n &&
                       back.groups[k].transport == d.groups[k].transport &&
                       back.groups[k].gid_index == d.groups[k].gid_index &&
                       fabs(back.groups[k].pacing.latency_s - d.groups[k].pacing.latency_s) < 1e-12 &&
                       back.groups[k].pacing.bytes_per_sec == d.groups[k].pacing.bytes_per_sec;
                for (int m = 0; same && m < d.groups[k].n; m++)
                    same = back.groups[k].members[m] == d.groups[k].members[m];
            }
            CHECK("groups, transports and pacing round-trip", same);
            CHECK("rank 6 round-trips", back.ranks[6].port == 999 && !strcmp(back.ranks[6].host, "h6") &&
                                            !strcmp(back.ranks[6].ib_hca, "mlx5_1:1"));
            CHECK("cross-fabric pacing round-trips", back.cross_fabric.bytes_per_sec == 5e5 &&
                                                         fabs(back.cross_fabric.latency_s - 1e-4) < 1e-12);
            CHECK_STR("roce group nccl net kept", back.groups[3].nccl_net, "Socket");
            plan_doc_free(&back);
        }
        cJSON_Delete(j);
        plan_doc_free(&d);
    }
    rc = load("{\"parallelism\": {\"pipeline\": 1, \"data\": 1, \"tensor\": 2},"
              "\"workers\": [{\"host\": \"h\", \"port\": 1}, {\"host\": \"h\", \"port\": 2}],"
              "\"groups\": [{\"kind\": \"tp\", \"ranks\": [1, 0]}]}", &rt, &e);
    CHECK("a tensor group out of order refused", rc != 0 && strstr(e.msg, "does not belong"));
    if (rc == 0)
        plan_doc_free(&rt);
    /* pipeline 3 x data 1: the planner's link groups, each with its transport; the middle rank
     * is in two, its ends in one; they survive encoding and decoding */
    rc = load("{\"parallelism\": {\"pipeline\": 3, \"data\": 1},"
              "\"workers\": [{\"host\": \"h\", \"port\": 1, \"fabric\": \"ib-a\"}, {\"host\": \"h\", \"port\": 2, \"fabric\": \"ib-a\"},"
              "{\"host\": \"h\", \"port\": 3, \"fabric\": \"eth\"}],"
              "\"groups\": [{\"kind\": \"link\", \"ranks\": [0, 1], \"transport\": \"ib\", \"stage\": 0},"
              "{\"kind\": \"link\", \"ranks\": [1, 2], \"transport\": \"socket\","
              " \"pacing\": {\"bytes_per_second\": 2e6, \"latency_us\": 50}}]}", &rt, &e);
    CHECK_INT("a document with link groups loads", rc, 0);
    if (rc != 0)
        printf("  %s\n", e.msg);
    if (rc == 0) {
        int a = plan_doc_find_link(&rt, 1, -1), b = plan_doc_find_link(&rt, 1, 1);
        CHECK("the middle rank's two links: ib back to rank 0 (stage 0), socket on to rank 2 (stage 1)",
              a == 0 && b == 1 && rt.groups[a].transport == TRANSPORT_IB &&
                  !strcmp(rt.groups[a].nccl_net, "IB") && rt.groups[b].transport == TRANSPORT_SOCKET &&
                  rt.groups[a].stage == 0 && rt.groups[b].stage == 1);
        struct rt_comm_spec cs;
        CHECK("a link's comm spec: two members, its own pacing",
              rank_table_comm_spec(&rt, b, 2, &cs, &e) == 0 && cs.spec.size == 2 &&
                  cs.spec.index == 1 && cs.pacing[0].bytes_per_sec == 2e6);
        rt_comm_spec_free(&cs);
        struct comm_nccl_params np;
        CHECK("a link planned IB runs on NCCL for GPU ranks (send/recv on device buffers)",
              rank_table_nccl_params(&rt, a, 0, 0, &np) == 1 && !strcmp(np.net_name, "IB"));
        CHECK_INT("a link between fabrics (socket) stays on TCP", rank_table_nccl_params(&rt, b, 2, 0, &np),
                  0);
        cJSON *j = plan_doc_to_json(&rt);
        struct plan_doc back;
        int rc2 = j ? plan_doc_from_json(j, "encoded", &back, &e) : -1;
        CHECK("link groups round-trip", rc2 == 0 && back.ngroups == rt.ngroups &&
                                           back.groups[0].kind == GROUP_LINK &&
                                           back.groups[0].transport == TRANSPORT_IB &&
                                           back.groups[1].pacing.bytes_per_sec == 2e6 &&
                                           back.groups[1].stage == 1);
        if (rc2 == 0)
            plan_doc_free(&back);
        cJSON_Delete(j);
        plan_doc_free(&rt);
    }
    fuzz_decoder(planned);
    unsetenv("HOLMES_RANK_TABLE_JSON");
    unsetenv("HOLMES_RANK_TABLE");
    CHECK_INT("no env is an error", rank_table_from_env(&rt, &e), -1);
    setenv("HOLMES_RANK_TABLE_JSON", derived, 1);
    rc = rank_table_from_env(&rt, &e);
    CHECK_INT("table from env", rc, 0);
    if (rc == 0)
        plan_doc_free(&rt);
    CHECK_INT("missing file", rank_table_load("/nonexistent/rt.json", &rt, &e), -1);
    CHECK("missing file named", strstr(e.msg, "/nonexistent/rt.json") != NULL);
    TEST_MAIN_END();
}
