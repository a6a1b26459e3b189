/* The C validator (common/trainingjob*.c) and the CRD schema (crds/trainingjob.yaml) agree.
 *
 * For every manifest under tests/manifests/ and examples/:
 *  - valid ones pass both; the schema's defaults, applied to the manifest, give the same
 *    resolved spec as the C defaults, and tj_spec_to_json's output passes the schema;
 *  - an invalid one carries "# expect: TEXT" lines (each must appear among the C errors) and
 *    "# layer: schema|cel|validator|parse": "schema" means the openAPI part (types, enums,
 *    ranges, required, unknown fields) rejects it, and then at each path the schema flags,
 *    the C validator reports an error too; cel/validator means the structural schema accepts
 *    it (the CRD's CEL rules or only the C validator reject it); parse means broken YAML.
 *  - the CRD's CEL rules (evaluated by tests/unit/cel_eval.c) reject every "cel" manifest at a
 *    path the C validator also reports, and accept the valid and "validator" ones;
 *  - on 3000 random specs near the cross-field boundaries, C accepts exactly when schema + CEL
 *    accept, except where only C-only rules (auto splits, fabric classes) reject.
 * Also checks the CRD is structural. Run from the repository root (tests/run.sh does). */
#include "test.h"

#include <dirent.h>
#include <stdlib.h>

#include "cel_eval.h"
#include "manifest_testutil.h"
#include "schema_check.h"
#include "trainingjob.h"
#include "yaml_json.h"

static const cJSON *g_schema;      /* openAPIV3Schema */
static const cJSON *g_spec_schema; /* .properties.spec */
static const cJSON *g_name_schema; /* .properties.metadata.properties.name */

/* Schema violations of one document (spec and metadata.name). */
static void schema_doc(const cJSON *doc, struct schema_violations *v)
{
    memset(v, 0, sizeof *v);
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(doc, "spec");
    if (spec)
        schema_check(g_spec_schema, spec, "spec", v);
    else
        schema_check(g_schema, doc, "", v); /* reports "spec: required" */
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "metadata"), "name");
    if (name)
        schema_check(g_name_schema, name, "metadata.name", v);
}

/* CEL violations of a document's spec after the schema's defaults (as the API server orders it). */
static void cel_doc(const cJSON *doc, struct schema_violations *v)
{
    memset(v, 0, sizeof *v);
    cJSON *spec = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(doc, "spec"), 1);
    if (spec && schema_apply_defaults(g_spec_schema, spec) == 0)
        cel_check(g_spec_schema, spec, "spec", v);
    cJSON_Delete(spec);
}

/* An error in errs is about `path` ("spec.model" matches "spec.model.hidden: ..."). */
static int has_error_at(const struct tj_errors *errs, const char *path)
{
    size_t n = strlen(path);
    for (int i = 0; i < errs->count && i < TJ_MAX_ERRORS; i++) {
        const char *m = strstr(errs->msg[i], path);
        while (m && m[n] != ':' && m[n] != '.' && m[n] != '[')
            m = strstr(m + 1, path);
        if (m)
            return 1;
    }
    return 0;
}

/* Every leaf of `sub` is equal in `super` (objects compared key by key). */
static int subset(const cJSON *sub, const cJSON *super, char *where, size_t n)
{
    if (cJSON_IsObject(sub) && cJSON_IsObject(super)) {
        const cJSON *c;
        cJSON_ArrayForEach(c, sub) {
            const cJSON *o = cJSON_GetObjectItemCaseSensitive(super, c->string);
            if (!o) {
                snprintf(where, n, "%s missing", c->string);
                return 0;
            }
            if (!subset(c, o, where, n)) {
                char tmp[512];
                snprintf(tmp, sizeof tmp, "%s.%s", c->string, where);
                snprintf(where, n, "%s", tmp);
                return 0;
            }
        }
        return 1;
    }
    if (cJSON_IsNumber(sub) && cJSON_IsNumber(super)) {
        if (fabs(sub->valuedouble - super->valuedouble) <= 1e-12 * fabs(sub->valuedouble))
            return 1;
        snprintf(where, n, "(schema %g, C %g)", sub->valuedouble, super->valuedouble);
        return 0;
    }
    if (!cJSON_Compare(sub, super, 1)) {
        snprintf(where, n, "differs");
        return 0;
    }
    return 1;
}

static void check_valid_doc(const char *label, const cJSON *doc)
{
    char name[2400];
    struct tj_job job;
    struct tj_errors errs = {0};
    int rc = tj_job_from_json(doc, &job, &errs);
    snprintf(name, sizeof name, "%s: C validator accepts", label);
    if (rc)
        tj_errors_print(&errs, "    C error: ");
    CHECK(name, rc == 0);
    struct schema_violations v;
    schema_doc(doc, &v);
    snprintf(name, sizeof name, "%s: schema accepts", label);
    if (v.count)
        printf("    schema: %s: %s\n", v.path[0], v.rule[0]);
    CHECK(name, v.count == 0);
    schema_doc(doc, &v);
    if (v.count == 0) {
        cel_doc(doc, &v);
        snprintf(name, sizeof name, "%s: CEL rules accept", label);
        if (v.count)
            printf("    CEL: %s: %s\n", v.path[0], v.rule[0]);
        CHECK(name, v.count == 0);
    }
    if (rc) {
        tj_job_free(&job);
        return;
    }

    /* Defaults: the schema's defaults applied to the manifest resolve to the same struct. */
    cJSON *defaulted = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(doc, "spec"), 1);
    int ok = defaulted && schema_apply_defaults(g_spec_schema, defaulted) == 0;
    struct tj_spec again;
    struct tj_errors e2 = {0};
    ok = ok && tj_spec_from_json(defaulted, "spec", &again, &e2) == 0;
    if (ok) {
        struct tj_spec a = again, b = job.spec;
        a.pod_template = b.pod_template = NULL;
        ok = memcmp(&a, &b, sizeof a) == 0;
        tj_spec_free(&again);
    }
    snprintf(name, sizeof name, "%s: schema-defaulted spec resolves identically", label);
    CHECK(name, ok);

    /* Every value the schema defaulted equals the C resolved spec's value (the template, as
     * given, is the pods' and not in it). */
    cJSON *resolved = tj_spec_to_json(&job.spec);
    cJSON_DeleteItemFromObjectCaseSensitive(defaulted, "template");
    char where[512] = "";
    snprintf(name, sizeof name, "%s: schema defaults equal C defaults", label);
    if (resolved && defaulted && subset(defaulted, resolved, where, sizeof where))
        TEST_PASS(name);
    else
        TEST_FAIL(name, "at %s", where);

    /* The resolved spec the coordinator sends passes the schema. */
    memset(&v, 0, sizeof v);
    if (resolved)
        schema_check(g_spec_schema, resolved, "spec", &v);
    snprintf(name, sizeof name, "%s: tj_spec_to_json output passes the schema", label);
    if (v.count)
        printf("    schema: %s: %s\n", v.path[0], v.rule[0]);
    CHECK(name, resolved && v.count == 0);
    cJSON_Delete(resolved);
    cJSON_Delete(defaulted);
    tj_job_free(&job);
}

static void check_valid_file(const char *path)
{
    herr e;
    cJSON *docs = yaml_parse_file(path, &e);
    if (!docs) {
        TEST_FAIL(path, "%s", e.msg);
        return;
    }
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, docs) {
        char label[512];
        snprintf(label, sizeof label, "%s[%d]", path, i++);
        check_valid_doc(label, d);
    }
    cJSON_Delete(docs);
}

/* Reads "# expect:" and "# layer:" lines from the top of the file. */
static int read_header(const char *path, char expects[8][256], int *n_expect, char *layer, size_t layer_cap)
{
    herr e;
    char *text = read_file_limited(path, 1 << 20, NULL, &e);
    if (!text)
        return -1;
    *n_expect = 0;
    layer[0] = '\0';
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "# expect: ", 10) && *n_expect < 8)
            snprintf(expects[(*n_expect)++], 256, "%s", line + 10);
        else if (!strncmp(line, "# layer: ", 9))
            snprintf(layer, layer_cap, "%s", line + 9);
    }
    free(text);
    return 0;
}

static void check_invalid_file(const char *path)
{
    char expects[8][256], layer[32], name[2400];
    int n_expect;
    if (read_header(path, expects, &n_expect, layer, sizeof layer) || n_expect == 0 || !layer[0]) {
        TEST_FAIL(path, "needs '# expect:' and '# layer:' lines");
        return;
    }
    struct tj_job *jobs;
    int n;
    struct tj_errors errs = {0};
    int rc = tj_load_file(path, &jobs, &n, &errs);
    snprintf(name, sizeof name, "%s: C validator rejects", path);
    CHECK(name, rc == -1);
    if (rc == 0) {
        for (int i = 0; i < n; i++)
            tj_job_free(&jobs[i]);
        free(jobs);
    }
    for (int i = 0; i < n_expect; i++) {
        snprintf(name, sizeof name, "%s: error \"%s\"", path, expects[i]);
        if (!tj_errors_have(&errs, expects[i]))
            tj_errors_print(&errs, "    C error: ");
        CHECK(name, tj_errors_have(&errs, expects[i]));
    }

    herr e;
    cJSON *docs = yaml_parse_file(path, &e);
    if (!strcmp(layer, "parse")) {
        snprintf(name, sizeof name, "%s: YAML does not parse", path);
        CHECK(name, docs == NULL);
        cJSON_Delete(docs);
        return;
    }
    if (!docs) {
        TEST_FAIL(path, "does not parse: %s", e.msg);
        return;
    }
    struct schema_violations v;
    schema_doc(cJSON_GetArrayItem(docs, 0), &v);
    if (!strcmp(layer, "schema")) {
        snprintf(name, sizeof name, "%s: schema rejects", path);
        CHECK(name, v.count > 0);
        for (int i = 0; i < v.count && i < SCHEMA_MAX_VIOLATIONS; i++) {
            char needle[300];
            snprintf(needle, sizeof needle, "%s: ", v.path[i]);
            snprintf(name, sizeof name, "%s: C reports the schema's violation at %s (%s)", path, v.path[i], v.rule[i]);
            if (!tj_errors_have(&errs, needle))
                tj_errors_print(&errs, "    C error: ");
            CHECK(name, tj_errors_have(&errs, needle));
        }
    } else if (!strcmp(layer, "cel") || !strcmp(layer, "validator")) {
        snprintf(name, sizeof name, "%s: structural schema accepts (rule is %s)", path, layer);
        if (v.count)
            printf("    schema: %s: %s\n", v.path[0], v.rule[0]);
        CHECK(name, v.count == 0);
        struct schema_violations cv;
        cel_doc(cJSON_GetArrayItem(docs, 0), &cv);
        if (!strcmp(layer, "cel")) {
            snprintf(name, sizeof name, "%s: a CEL rule rejects", path);
            CHECK(name, cv.count > 0);
            for (int i = 0; i < cv.count && i < SCHEMA_MAX_VIOLATIONS; i++) {
                snprintf(name, sizeof name, "%s: C reports the CEL violation at %s (%s)", path, cv.path[i], cv.rule[i]);
                if (!has_error_at(&errs, cv.path[i]))
                    tj_errors_print(&errs, "    C error: ");
                CHECK(name, has_error_at(&errs, cv.path[i]));
            }
        } else {
            snprintf(name, sizeof name, "%s: CEL rules accept (only the C validator can tell)", path);
            if (cv.count)
                printf("    CEL: %s: %s\n", cv.path[0], cv.rule[0]);
            CHECK(name, cv.count == 0);
        }
    } else {
        TEST_FAIL(path, "unknown layer \"%s\"", layer);
    }
    cJSON_Delete(docs);
}

/* ---------------------------------------------------------------- differential test */

static unsigned long long rng = 88172645463325252ull;
static int pick(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)((rng >> 11) % (unsigned long long)n);
}
#define PICK(arr) (arr)[pick((int)(sizeof(arr) / sizeof(arr)[0]))]

/* A random spec near the boundaries of the cross-field rules. */
static cJSON *random_spec(void)
{
    static const int workers[] = {1, 2, 3, 4, 6, 8, 12, 16};
    static const int gpus[] = {0, 0, 1, 2, 4, 8};
    static const int tensor[] = {1, 1, 2, 3, 4, 8};
    static const int pipes[] = {0, 0, 1, 2, 3, 4, 8, 12, 16}; /* 0 = auto */
    static const int datas[] = {0, 0, 1, 2, 4, 8};
    static const int mbs[] = {1, 2, 4, 8, 16};
    static const int layers[] = {1, 2, 4, 8, 12};
    static const int hidden[] = {64, 96, 100, 128};
    static const int heads[] = {1, 2, 3, 4, 8};
    static const char *const presets[] = {"gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b"};
    static const int steps[] = {1, 10, 100};
    static const int warm[] = {-1, 0, 5, 50, 500};
    static const int decay[] = {-1, -1, 0, 5, 50, 95, 500}; /* -1: absent */
    static const char *const sched[] = {NULL, "cosine", "constant", "linear", "wsd", "wsd"};
    cJSON *s = cJSON_CreateObject();
    int w = PICK(workers), g = PICK(gpus);
    cJSON_AddNumberToObject(s, "workers", w);
    cJSON_AddNumberToObject(s, "gpusPerWorker", g);
    cJSON *m = cJSON_AddObjectToObject(s, "model");
    int kind = pick(3);
    if (kind > 0)
        cJSON_AddStringToObject(m, "preset", PICK(presets));
    if (kind != 1) {
        if (kind == 0 || pick(2)) cJSON_AddNumberToObject(m, "layers", PICK(layers));
        if (kind == 0 || pick(2)) cJSON_AddNumberToObject(m, "hidden", PICK(hidden));
        if (kind == 0 || pick(2)) cJSON_AddNumberToObject(m, "heads", PICK(heads));
        if (kind == 0 || pick(4)) cJSON_AddNumberToObject(m, "vocab", pick(8) ? 256 : 128);
        if (kind == 0 || pick(4)) cJSON_AddNumberToObject(m, "seqLen", 64);
    }
    if (pick(4)) {
        cJSON *p = cJSON_AddObjectToObject(s, "parallelism");
        if (pick(2)) cJSON_AddNumberToObject(p, "tensor", PICK(tensor));
        int pp = PICK(pipes), dd = PICK(datas);
        if (pick(3)) {
            if (pp) cJSON_AddNumberToObject(p, "pipeline", pp); else cJSON_AddStringToObject(p, "pipeline", "auto");
        }
        if (pick(3)) {
            if (dd) cJSON_AddNumberToObject(p, "data", dd); else cJSON_AddStringToObject(p, "data", "auto");
        }
        if (pick(2)) cJSON_AddNumberToObject(p, "microBatches", PICK(mbs));
        if (pick(3) == 0) cJSON_AddStringToObject(p, "schedule", pick(2) ? "gpipe" : "1f1b");
    }
    cJSON *t = cJSON_AddObjectToObject(s, "training");
    int st = PICK(steps);
    cJSON_AddNumberToObject(t, "steps", st);
    if (pick(3) == 0) cJSON_AddStringToObject(t, "precision", pick(2) ? "bf16" : "fp32");
    if (pick(3) == 0) {
        cJSON *d = cJSON_AddObjectToObject(t, "data");
        cJSON_AddStringToObject(d, "path", "/d/x.bin");
        if (pick(2)) cJSON_AddStringToObject(d, "format", pick(2) ? "llmc" : "text");
    }
    int wu = PICK(warm), dc = PICK(decay);
    const char *lrs = PICK(sched);
    if (wu >= 0 || dc >= 0 || lrs) {
        cJSON *op = cJSON_AddObjectToObject(t, "optimizer");
        if (wu >= 0) cJSON_AddNumberToObject(op, "warmupSteps", wu);
        if (dc >= 0) cJSON_AddNumberToObject(op, "decaySteps", dc);
        if (lrs) cJSON_AddStringToObject(op, "schedule", lrs);
    }
    if (pick(3) == 0) {
        cJSON *c = cJSON_AddObjectToObject(t, "checkpoint");
        if (pick(2)) cJSON_AddNumberToObject(c, "everySteps", pick(2) * 10);
        if (pick(2)) cJSON_AddStringToObject(c, "path", "/ckpt");
    }
    if (pick(3) == 0) {
        cJSON *e = cJSON_AddObjectToObject(s, "emulation");
        cJSON *nics = cJSON_AddArrayToObject(e, "nics");
        int left = w + (pick(4) == 0 ? (pick(2) ? 1 : -1) : 0);
        static const char *const cls[] = {"infiniband", "roce", "ethernet"};
        static const char *const fab[] = {"a", "b", "c"};
        while (left > 0) {
            int c = 1 + pick(left);
            cJSON *n = cJSON_CreateObject();
            cJSON_AddStringToObject(n, "class", PICK(cls));
            cJSON_AddStringToObject(n, "fabric", PICK(fab));
            cJSON_AddNumberToObject(n, "gbps", 100);
            cJSON_AddNumberToObject(n, "count", c);
            cJSON_AddItemToArray(nics, n);
            left -= c;
        }
        if (pick(3) == 0) cJSON_AddBoolToObject(e, "gpus", pick(2));
        if (cJSON_GetArraySize(nics) == 0) cJSON_Delete(cJSON_DetachItemFromObject(e, "emulation"));
    }
    if (pick(3) == 0) { /* elastic: minWorkers around workers, with or without checkpoints, gangs */
        cJSON *el = cJSON_AddObjectToObject(s, "elastic");
        if (pick(4)) cJSON_AddNumberToObject(el, "minWorkers", w > 1 && pick(2) ? w - 1 : w + pick(2));
        if (pick(2)) cJSON_AddBoolToObject(el, "scaleUp", pick(2));
        if (pick(3) == 0) {
            static const char *const gangs[] = {"none", "kueue", "volcano", "coscheduling"};
            cJSON *sc = cJSON_AddObjectToObject(s, "scheduling");
            const char *gang = PICK(gangs);
            cJSON_AddStringToObject(sc, "gang", gang);
            if (!strcmp(gang, "kueue")) cJSON_AddStringToObject(sc, "queue", "q");
        }
    }
    return s;
}

/* C-only rules: the CRD cannot express them (they need "auto" resolved or compare list items). */
static int c_only_error(const char *msg)
{
    return strstr(msg, "cannot be split") || strstr(msg, "leaves") || strstr(msg, "one fabric has one class");
}

static void differential(int cases)
{
    int agree = 0, c_valid = 0, c_only = 0, disagree = 0;
    for (int i = 0; i < cases; i++) {
        cJSON *spec = random_spec();
        if (!spec)
            continue;
        struct schema_violations sv = {0}, cv = {0};
        schema_check(g_spec_schema, spec, "spec", &sv);
        cJSON *defaulted = cJSON_Duplicate(spec, 1);
        if (defaulted && schema_apply_defaults(g_spec_schema, defaulted) == 0)
            cel_check(g_spec_schema, defaulted, "spec", &cv);
        struct tj_spec ts;
        struct tj_errors errs = {0};
        int c_ok = tj_spec_from_json(spec, "spec", &ts, &errs) == 0;
        tj_spec_free(&ts);
        int crd_ok = sv.count == 0 && cv.count == 0;
        int only = !c_ok;
        for (int k = 0; k < errs.count && k < TJ_MAX_ERRORS; k++)
            if (!c_only_error(errs.msg[k]))
                only = 0;
        if (c_ok == crd_ok) {
            agree++;
            c_valid += c_ok;
        } else if (!c_ok && crd_ok && only) {
            c_only++;
        } else {
            if (disagree++ < 3) {
                char *txt = cJSON_PrintUnformatted(spec);
                printf("    disagreement: C %s, CRD %s: %s\n", c_ok ? "accepts" : "rejects", crd_ok ? "accepts" : "rejects",
                       txt ? txt : "?");
                free(txt);
                for (int k = 0; k < errs.count && k < TJ_MAX_ERRORS; k++) printf("      C: %s\n", errs.msg[k]);
                for (int k = 0; k < cv.count && k < SCHEMA_MAX_VIOLATIONS; k++)
                    printf("      CEL: %s: %s\n", cv.path[k], cv.rule[k]);
                for (int k = 0; k < sv.count && k < SCHEMA_MAX_VIOLATIONS; k++)
                    printf("      schema: %s: %s\n", sv.path[k], sv.rule[k]);
            }
        }
        cJSON_Delete(defaulted);
        cJSON_Delete(spec);
    }
    printf("  differential: %d cases, %d agree (%d valid), %d rejected only by C-only rules, %d disagree\n", cases,
           agree, c_valid, c_only, disagree);
    CHECK_INT("differential: C validator and CRD (schema + CEL) agree on random specs", disagree, 0);
    CHECK("differential: both outcomes exercised", c_valid > cases / 20 && agree - c_valid > cases / 20);
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".yaml"))
            n++;
    closedir(d);
    return n;
}

int main(void)
{
    herr e;
    cJSON *crd_docs = yaml_parse_file("crds/trainingjob.yaml", &e);
    if (!crd_docs) {
        TEST_FAIL("CRD parses", "%s", e.msg);
        TEST_MAIN_END();
    }
    const cJSON *crd = cJSON_GetArrayItem(crd_docs, 0);
    g_schema = schema_of_crd(crd);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(g_schema, "properties");
    g_spec_schema = cJSON_GetObjectItemCaseSensitive(props, "spec");
    g_name_schema = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(props, "metadata"), "properties"), "name");
    CHECK("CRD has a spec schema", g_spec_schema && g_name_schema);
    if (!g_spec_schema || !g_name_schema) {
        cJSON_Delete(crd_docs);
        TEST_MAIN_END();
    }
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(crd, "spec"), "names");
    const cJSON *sn = cJSON_GetObjectItemCaseSensitive(names, "shortNames");
    CHECK("CRD short name tj", cJSON_IsArray(sn) && !strcmp(cJSON_GetArrayItem(sn, 0)->valuestring, "tj"));
    CHECK("CRD has CEL rules for cross-field checks", schema_count_cel_rules(g_schema) >= 10);
    struct schema_violations sv = {0};
    int probs = schema_structural_problems(g_schema, "", &sv);
    for (int i = 0; i < sv.count && i < SCHEMA_MAX_VIOLATIONS; i++)
        printf("    structural: %s: %s\n", sv.path[i], sv.rule[i]);
    CHECK_INT("CRD schema is structural", probs, 0);
    const cJSON *ver = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(crd, "spec"),
                                                                           "versions"), 0);
    const cJSON *sub = cJSON_GetObjectItemCaseSensitive(ver, "subresources");
    CHECK("CRD has a status subresource", cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(sub, "status")));
    const cJSON *cols = cJSON_GetObjectItemCaseSensitive(ver, "additionalPrinterColumns"), *col;
    int want = 0;
    cJSON_ArrayForEach(col, cols) {
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(col, "name"));
        if (n && (!strcmp(n, "Phase") || !strcmp(n, "Workers") || !strcmp(n, "Step") || !strcmp(n, "Loss") ||
                  !strcmp(n, "Age")))
            want++;
    }
    CHECK_INT("CRD printer columns Phase, Workers, Step, Loss, Age", want, 5);

    /* The CEL evaluator itself. */
    char err[256];
    cJSON *self = cJSON_Parse("{\"a\": 3, \"s\": \"auto\", \"l\": [{\"c\": 2}, {\"c\": 5}], \"m\": {}}");
    CHECK("cel: arithmetic", cel_eval_bool("self.a * 2 + 1 == 7 && self.a % 2 == 1", self, err, sizeof err) == 1);
    CHECK("cel: has", cel_eval_bool("has(self.a) && !has(self.m.x)", self, err, sizeof err) == 1);
    CHECK("cel: true || error", cel_eval_bool("true || self.nope == 1", self, err, sizeof err) == 1);
    CHECK("cel: error || true", cel_eval_bool("self.nope == 1 || true", self, err, sizeof err) == 1);
    CHECK("cel: error alone", cel_eval_bool("self.nope == 1", self, err, sizeof err) == -1 && strstr(err, "no such key"));
    CHECK("cel: type and ternary", cel_eval_bool("type(self.s) == string ? self.s == 'auto' : int(self.s) > 0", self,
                                                 err, sizeof err) == 1);
    CHECK("cel: map literal", cel_eval_bool("{'x': 12, 'y': 4}['y'] == 4", self, err, sizeof err) == 1);
    CHECK("cel: map/sum", cel_eval_bool("self.l.map(n, n.c).sum() == 7", self, err, sizeof err) == 1);
    CHECK("cel: false", cel_eval_bool("self.a >= 4", self, err, sizeof err) == 0);
    CHECK("cel: syntax error", cel_eval_bool("self.a >= ", self, err, sizeof err) == -1);
    cJSON_Delete(self);

    CHECK("valid manifests found", for_each_manifest("tests/manifests/valid", check_valid_file) >= 5);
    for_each_manifest("examples", check_valid_file);
    int n_invalid = for_each_manifest("tests/manifests/invalid", check_invalid_file);
    differential(3000);
    CHECK("at least 30 invalid manifests", n_invalid >= 30 && count_files("tests/manifests/invalid") == n_invalid);
    cJSON_Delete(crd_docs);
    TEST_MAIN_END();
}
