/* Robustness of the TrainingJob parser: truncated and garbled YAML/JSON, wrong types in every
 * field, huge numbers, huge lists, deep nesting and error overflow give errors, never a crash
 * (this binary also runs under ASan+UBSan). Deterministic: a fixed-seed generator. */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

#include "trainingjob.h"
#include "yaml_json.h"

static const char *RICH =
    "apiVersion: holmes.dev/v1alpha1\n"
    "kind: TrainingJob\n"
    "metadata: {name: rich, namespace: ns}\n"
    "spec:\n"
    "  workers: 4\n"
    "  gpusPerWorker: 2\n"
    "  image: \"img:1\"\n"
    "  model: {preset: gpt2-124m, seqLen: 256}\n"
    "  parallelism: {tensor: 2, pipeline: 2, data: 2, microBatches: 4, microBatchSize: 2, schedule: 1f1b}\n"
    "  placement: {policy: holmes, crossFabricGbps: 10, fabrics: [{fabric: ib-a, gbps: 200}]}\n"
    "  training:\n"
    "    steps: 100\n"
    "    optimizer: {lr: 3.0e-4, warmupSteps: 10, schedule: cosine, minLrRatio: 0.1, beta1: 0.9, beta2: 0.95,"
    " eps: 1.0e-8, weightDecay: 0.1, gradClip: 1.0}\n"
    "    precision: bf16\n"
    "    seed: 7\n"
    "    data: {path: '/d/*.bin', format: llmc}\n"
    "    checkpoint: {path: /c, everySteps: 10, keep: 2}\n"
    "    initFrom: /w.bin\n"
    "  gangTimeoutSeconds: 60\n"
    "  restartPolicy: {maxRestarts: 1, backoffSeconds: 5}\n"
    "  suspend: false\n"
    "  emulation:\n"
    "    nics:\n"
    "    - {class: infiniband, fabric: ib-a, gbps: 200, count: 2}\n"
    "    - {class: roce, fabric: roce-b, gbps: 100, count: 2}\n"
    "    crossFabricGbps: 25\n"
    "    bandwidthScale: 0.5\n"
    "  template:\n"
    "    spec:\n"
    "      nodeSelector: {a: b}\n"
    "      containers: [{name: worker, env: [{name: X, value: '1'}]}]\n";

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* Parses YAML text and validates every document. Returns 1 valid, 0 invalid with errors
 * that each name something, -1 when an error message is empty (a bug). */
static int parse_yaml(const char *text, size_t len)
{
    herr e;
    e.msg[0] = '\0';
    cJSON *docs = yaml_parse_documents(text, len, "fuzz", &e);
    if (!docs)
        return e.msg[0] ? 0 : -1;
    int result = cJSON_GetArraySize(docs) > 0 ? 1 : 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, docs) {
        struct tj_job job;
        struct tj_errors errs = {0};
        if (tj_job_from_json(d, &job, &errs)) {
            result = 0;
            for (int i = 0; i < errs.count && i < TJ_MAX_ERRORS; i++)
                if (!errs.msg[i][0])
                    result = -1;
            if (errs.count == 0)
                result = -1;
        }
        tj_job_free(&job);
    }
    cJSON_Delete(docs);
    return result;
}

static int validate_spec(const cJSON *spec, struct tj_errors *errs)
{
    struct tj_spec s;
    memset(errs, 0, sizeof *errs);
    int rc = tj_spec_from_json(spec, "spec", &s, errs);
    tj_spec_free(&s);
    return rc;
}

/* The k-th node below `root` in pre-order (root itself excluded), with its parent. */
static cJSON *nth_node(cJSON *node, int *k, cJSON **parent)
{
    for (cJSON *c = node->child; c; c = c->next) {
        if ((*k)-- == 0) {
            *parent = node;
            return c;
        }
        cJSON *r = nth_node(c, k, parent);
        if (r)
            return r;
    }
    return NULL;
}

struct walk_stats {
    int replaced, rejected, unnamed;
};

/* For each node of `spec`, validates a copy with that node replaced by `bad`. Errors must
 * name a "spec" path. */
static void replace_each(const cJSON *spec, const cJSON *bad, struct walk_stats *st)
{
    for (int idx = 0;; idx++) {
        cJSON *copy = cJSON_Duplicate(spec, 1);
        if (!copy)
            return;
        int k = idx;
        cJSON *parent = NULL;
        cJSON *target = nth_node(copy, &k, &parent);
        if (!target) {
            cJSON_Delete(copy);
            return;
        }
        cJSON *repl = cJSON_Duplicate(bad, 1);
        int done = 0;
        if (repl && cJSON_IsObject(parent) && target->string)
            done = cJSON_ReplaceItemInObjectCaseSensitive(parent, target->string, repl);
        else if (repl)
            done = cJSON_ReplaceItemViaPointer(parent, target, repl);
        if (repl && !done)
            cJSON_Delete(repl);
        struct tj_errors errs;
        st->replaced++;
        if (validate_spec(copy, &errs)) {
            st->rejected++;
            for (int m = 0; m < errs.count && m < TJ_MAX_ERRORS; m++)
                if (strncmp(errs.msg[m], "spec", 4))
                    st->unnamed++;
        }
        cJSON_Delete(copy);
    }
}

int main(void)
{
    size_t len = strlen(RICH);
    CHECK_INT("rich manifest is valid", parse_yaml(RICH, len), 1);

    /* Every truncation. */
    int bad = 0, invalid = 0;
    for (size_t n = 0; n < len; n++) {
        int r = parse_yaml(RICH, n);
        if (r < 0) bad++;
        if (r == 0) invalid++;
    }
    CHECK_INT("truncations: every error has a message", bad, 0);
    CHECK("truncations: most are rejected", invalid > (int)len / 2);

    /* Random byte mutations. */
    static const char alphabet[] = ":{}[]-#,'\"\n\t 0123456789.eE+-abcxyz&*!|>%@`\\";
    char *buf = malloc(len + 1);
    bad = 0;
    for (int iter = 0; buf && iter < 3000; iter++) {
        memcpy(buf, RICH, len + 1);
        int flips = 1 + (int)(rnd() % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = rnd() % len;
            uint32_t r = rnd();
            buf[at] = (r % 16 == 0) ? (char)(0x80 + r % 0x7f) : alphabet[r % (sizeof alphabet - 1)];
        }
        if (parse_yaml(buf, len) < 0)
            bad++;
    }
    free(buf);
    CHECK_INT("byte mutations: never an empty error", bad, 0);

    /* Wrong types in every field of the resolved spec. */
    herr e;
    cJSON *docs = yaml_parse_documents(RICH, len, "rich", &e);
    struct tj_job job;
    struct tj_errors errs = {0};
    int ok = docs && tj_job_from_json(cJSON_GetArrayItem(docs, 0), &job, &errs) == 0;
    CHECK("rich manifest parses", ok);
    cJSON_Delete(docs);
    if (ok) {
        cJSON *spec = tj_spec_to_json(&job.spec);
        char huge[3000];
        memset(huge, 'x', sizeof huge - 1);
        huge[sizeof huge - 1] = '\0';
        cJSON *values[] = {cJSON_CreateString("x"), cJSON_CreateNumber(-1), cJSON_CreateNumber(1e308),
                           cJSON_CreateNumber(-1e308), cJSON_CreateNumber(0.5), cJSON_CreateTrue(),
                           cJSON_CreateArray(), cJSON_CreateObject(), cJSON_CreateString(huge),
                           cJSON_CreateNumber(9.3e18)};
        const char *labels[] = {"string", "-1", "1e308", "-1e308", "0.5", "true", "list", "object", "huge string",
                                "9.3e18"};
        for (size_t v = 0; spec && v < sizeof values / sizeof values[0]; v++) {
            struct walk_stats st = {0};
            replace_each(spec, values[v], &st);
            char name[128];
            printf("  %s: %d replacements, %d rejected\n", labels[v], st.replaced, st.rejected);
            snprintf(name, sizeof name, "wrong type %s in every field: errors name a spec path", labels[v]);
            CHECK(name, st.replaced > 50 && st.unnamed == 0);
            if (v == 0 || v == 6 || v == 8) {
                /* A string/list can be right only where a string is expected (or inside template). */
                snprintf(name, sizeof name, "wrong type %s in every field: most rejected", labels[v]);
                CHECK(name, st.rejected * 2 > st.replaced);
            }
            cJSON_Delete(values[v]);
        }
        /* The spec is unchanged by the walk. */
        struct tj_spec again;
        memset(&errs, 0, sizeof errs);
        CHECK("spec restored after the walk", tj_spec_from_json(spec, "spec", &again, &errs) == 0 &&
                                                 again.workers == 4 && again.emulation.n_groups == 2);
        tj_spec_free(&again);
        cJSON_Delete(spec);
    }
    tj_job_free(&job);

    /* Huge numbers in YAML and JSON. */
    const char *huge_yaml = "apiVersion: holmes.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: h}\n"
                            "spec: {workers: 1e400, gpusPerWorker: 99999999999999999999999999, model: {preset: gpt2-124m},"
                            " training: {steps: -1e309, seed: 1e30}}\n";
    CHECK_INT("huge YAML numbers rejected", parse_yaml(huge_yaml, strlen(huge_yaml)), 0);
    {
        herr he;
        cJSON *hd = yaml_parse_documents(huge_yaml, strlen(huge_yaml), "h", &he);
        struct tj_job hj;
        struct tj_errors herrs = {0};
        tj_job_from_json(cJSON_GetArrayItem(hd, 0), &hj, &herrs);
        CHECK("1e400 reported as out of range", herrs.count >= 3 &&
              !strcmp(herrs.msg[0], "spec.workers: must be an integer, got a number out of range"));
        tj_job_free(&hj);
        cJSON_Delete(hd);
    }
    cJSON *j = cJSON_Parse("{\"workers\": 1e999, \"gpusPerWorker\": -1e999, \"model\": {\"preset\": \"gpt2-124m\"},"
                           " \"training\": {\"steps\": 1e15}}");
    CHECK("huge JSON parses", j != NULL);
    if (j) {
        int rc = validate_spec(j, &errs);
        CHECK("huge JSON numbers rejected with paths", rc == -1 && errs.count == 3 &&
                                                          strstr(errs.msg[0], "spec.workers") != NULL);
        cJSON_Delete(j);
    }

    /* Huge lists. */
    cJSON *spec = cJSON_Parse("{\"workers\": 1, \"gpusPerWorker\": 0, \"model\": {\"preset\": \"gpt2-124m\"},"
                              " \"training\": {\"steps\": 1}, \"emulation\": {\"nics\": []},"
                              " \"placement\": {\"fabrics\": []}}");
    if (spec) {
        cJSON *nics = cJSON_GetObjectItem(cJSON_GetObjectItem(spec, "emulation"), "nics");
        cJSON *fabrics = cJSON_GetObjectItem(cJSON_GetObjectItem(spec, "placement"), "fabrics");
        for (int i = 0; i < 5000; i++) {
            cJSON_AddItemToArray(nics, cJSON_CreateNumber(i));
            cJSON_AddItemToArray(fabrics, cJSON_CreateString("f"));
        }
        int rc = validate_spec(spec, &errs);
        CHECK("5000-entry lists rejected by count", rc == -1 && errs.count == 2);
        cJSON_Delete(spec);
    }

    /* Deep nesting: in YAML the reader stops at 64 levels; in a JSON template it is kept as is. */
    char deep[4096] = "apiVersion: holmes.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: d}\nspec:\n  template: ";
    for (int i = 0; i < 200; i++) strcat(deep, "[");
    CHECK_INT("deep YAML nesting rejected", parse_yaml(deep, strlen(deep)), 0);
    char deepj[8192] = "{\"workers\": 1, \"gpusPerWorker\": 0, \"model\": {\"preset\": \"gpt2-124m\"},"
                       " \"training\": {\"steps\": 1}, \"template\": {\"metadata\": ";
    for (int i = 0; i < 500; i++) strcat(deepj, "{\"a\":");
    strcat(deepj, "1");
    for (int i = 0; i < 500; i++) strcat(deepj, "}");
    strcat(deepj, "}}");
    j = cJSON_Parse(deepj);
    if (j) {
        CHECK("deep JSON template accepted and copied", validate_spec(j, &errs) == 0);
        cJSON_Delete(j);
    } else {
        TEST_PASS("deep JSON template refused by cJSON");
    }

    /* More errors than are kept: counted, and the joined message says how many more. */
    spec = cJSON_CreateObject();
    for (int i = 0; spec && i < 100; i++) {
        char k[32];
        snprintf(k, sizeof k, "bogus%d", i);
        cJSON_AddNumberToObject(spec, k, i);
    }
    if (spec) {
        validate_spec(spec, &errs);
        CHECK("error overflow counted", errs.count >= 100);
        tj_errors_to_herr(&errs, &e);
        CHECK("joined message reports the rest", strstr(e.msg, "more") != NULL || strlen(e.msg) > 900);
        cJSON_Delete(spec);
    }

    /* Not objects at all. */
    j = cJSON_Parse("[1,2,3]");
    struct tj_job jj;
    memset(&errs, 0, sizeof errs);
    CHECK("a list is not a job", tj_job_from_json(j, &jj, &errs) == -1 && strstr(errs.msg[0], "must be an object"));
    tj_job_free(&jj);
    cJSON_Delete(j);
    memset(&errs, 0, sizeof errs);
    CHECK("NULL is not a job", tj_job_from_json(NULL, &jj, &errs) == -1);
    tj_job_free(&jj);
    TEST_MAIN_END();
}
