#include "test.h"

#include <stdlib.h>

#include "yaml_json.h"

static cJSON *parse(const char *s, herr *e) { return yaml_parse_documents(s, strlen(s), "t.yaml", e); }

int main(void)
{
    herr e;
    cJSON *d = parse("a: 1\nb: [x, \"2\", 2.5, true, null, ~]\nc: {d: -7}\n---\n---\nz: 0x1f\n", &e);
    CHECK("two documents parse", d && cJSON_GetArraySize(d) == 2);
    if (d) {
        cJSON *a = cJSON_GetArrayItem(d, 0);
        CHECK_INT("int scalar", cJSON_GetObjectItem(a, "a")->valuedouble, 1);
        cJSON *b = cJSON_GetObjectItem(a, "b");
        CHECK("plain string", cJSON_IsString(cJSON_GetArrayItem(b, 0)));
        CHECK("quoted number stays string", cJSON_IsString(cJSON_GetArrayItem(b, 1)));
        CHECK_NEAR("float", cJSON_GetArrayItem(b, 2)->valuedouble, 2.5, 0);
        CHECK("bool", cJSON_IsTrue(cJSON_GetArrayItem(b, 3)));
        CHECK("null", cJSON_IsNull(cJSON_GetArrayItem(b, 4)) && cJSON_IsNull(cJSON_GetArrayItem(b, 5)));
        CHECK_INT("nested negative", cJSON_GetObjectItem(cJSON_GetObjectItem(a, "c"), "d")->valuedouble, -7);
        CHECK_INT("hex", cJSON_GetObjectItem(cJSON_GetArrayItem(d, 1), "z")->valuedouble, 31);
    }
    cJSON_Delete(d);

    /* kubectl reads YAML 1.1 booleans; so must we, or validate judges another object. */
    d = parse("[yes, Yes, on, ON, y, no, Off, N, \"yes\", yess]\n", &e);
    CHECK("YAML 1.1 booleans parse", d && cJSON_GetArraySize(cJSON_GetArrayItem(d, 0)) == 10);
    if (d) {
        cJSON *l = cJSON_GetArrayItem(d, 0);
        int t = 0, f = 0;
        for (int i = 0; i < 5; i++) t += cJSON_IsTrue(cJSON_GetArrayItem(l, i));
        for (int i = 5; i < 8; i++) f += cJSON_IsFalse(cJSON_GetArrayItem(l, i));
        CHECK_INT("yes/Yes/on/ON/y are true", t, 5);
        CHECK_INT("no/Off/N are false", f, 3);
        CHECK("quoted \"yes\" and yess stay strings",
              cJSON_IsString(cJSON_GetArrayItem(l, 8)) && cJSON_IsString(cJSON_GetArrayItem(l, 9)));
    }
    cJSON_Delete(d);

    d = parse("a: [1, 2\n", &e);
    CHECK("unterminated flow is an error", d == NULL);
    CHECK("error names file and line", strncmp(e.msg, "t.yaml:", 7) == 0);
    d = parse("a: 1\na: 2\n", &e);
    CHECK("duplicate key rejected", d == NULL && strstr(e.msg, "duplicate key \"a\""));
    d = parse("a: &x 1\nb: *x\n", &e);
    CHECK("alias rejected", d == NULL && strstr(e.msg, "aliases"));

    char deep[400] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    d = parse(deep, &e);
    CHECK("deep nesting rejected", d == NULL);
    d = parse("1e999999: x\nv: 99999999999999999999999\n", &e);
    CHECK("huge number parses without crash", d != NULL);
    cJSON_Delete(d);

    /* Truncations of a valid document never crash. */
    const char *doc = "spec:\n  workers: 4\n  model: {preset: gpt2-124m}\n  list: [a, b, {c: d}]\n";
    int errors = 0;
    for (size_t n = 0; n <= strlen(doc); n++) {
        cJSON *t = yaml_parse_documents(doc, n, "trunc", &e);
        if (!t) errors++;
        cJSON_Delete(t);
    }
    CHECK("truncated prefixes handled", errors > 0);

    CHECK("missing file", yaml_parse_file("/nonexistent/x.yaml", &e) == NULL &&
                           strstr(e.msg, "/nonexistent/x.yaml: No such file"));
    TEST_MAIN_END();
}
