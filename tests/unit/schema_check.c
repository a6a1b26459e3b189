#include "schema_check.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

static void add(struct schema_violations *v, const char *path, const char *fmt, const char *arg, double num)
{
    if (v->count < SCHEMA_MAX_VIOLATIONS) {
        snprintf(v->path[v->count], sizeof v->path[0], "%s", path);
        char buf[256];
        if (arg)
            snprintf(buf, sizeof buf, fmt, arg);
        else
            snprintf(buf, sizeof buf, fmt, num);
        snprintf(v->rule[v->count], sizeof v->rule[0], "%s", buf);
    }
    v->count++;
}

const cJSON *schema_of_crd(const cJSON *crd)
{
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(crd, "spec");
    const cJSON *versions = cJSON_GetObjectItemCaseSensitive(spec, "versions");
    const cJSON *v0 = cJSON_GetArrayItem(versions, 0);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(v0, "schema");
    return cJSON_GetObjectItemCaseSensitive(schema, "openAPIV3Schema");
}

static const cJSON *kw(const cJSON *schema, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(schema, key);
}

static int type_ok(const char *type, const cJSON *val)
{
    if (!strcmp(type, "object")) return cJSON_IsObject(val);
    if (!strcmp(type, "array")) return cJSON_IsArray(val);
    if (!strcmp(type, "string")) return cJSON_IsString(val);
    if (!strcmp(type, "boolean")) return cJSON_IsBool(val);
    if (!strcmp(type, "number")) return cJSON_IsNumber(val) && isfinite(val->valuedouble);
    if (!strcmp(type, "integer"))
        return cJSON_IsNumber(val) && isfinite(val->valuedouble) && val->valuedouble == floor(val->valuedouble);
    return 0;
}

static void check_number(const cJSON *s, const cJSON *val, const char *path, struct schema_violations *v)
{
    double d = val->valuedouble;
    const cJSON *mn = kw(s, "minimum"), *mx = kw(s, "maximum");
    int exmn = cJSON_IsTrue(kw(s, "exclusiveMinimum")), exmx = cJSON_IsTrue(kw(s, "exclusiveMaximum"));
    if (mn && (exmn ? !(d > mn->valuedouble) : !(d >= mn->valuedouble)))
        add(v, path, exmn ? "exclusiveMinimum %g" : "minimum %g", NULL, mn->valuedouble);
    if (mx && (exmx ? !(d < mx->valuedouble) : !(d <= mx->valuedouble)))
        add(v, path, exmx ? "exclusiveMaximum %g" : "maximum %g", NULL, mx->valuedouble);
}

static void check_string(const cJSON *s, const cJSON *val, const char *path, struct schema_violations *v)
{
    double len = (double)strlen(val->valuestring);
    const cJSON *mn = kw(s, "minLength"), *mx = kw(s, "maxLength"), *pat = kw(s, "pattern");
    if (mn && len < mn->valuedouble)
        add(v, path, "minLength %g", NULL, mn->valuedouble);
    if (mx && len > mx->valuedouble)
        add(v, path, "maxLength %g", NULL, mx->valuedouble);
    if (cJSON_IsString(pat)) {
        regex_t re;
        if (regcomp(&re, pat->valuestring, REG_EXTENDED | REG_NOSUB) == 0) {
            if (regexec(&re, val->valuestring, 0, NULL, 0) != 0)
                add(v, path, "pattern %s", pat->valuestring, 0);
            regfree(&re);
        } else {
            add(v, path, "schema pattern %s does not compile", pat->valuestring, 0);
        }
    }
}

/* x-kubernetes-list-type: map: no two items share the values of the key fields. */
static void check_map_keys(const cJSON *keys, const cJSON *list, const char *path, struct schema_violations *v)
{
    int n = cJSON_GetArraySize(list);
    for (int i = 1; i < n; i++) {
        for (int k = 0; k < i; k++) {
            int same = 1;
            const cJSON *key;
            cJSON_ArrayForEach(key, keys) {
                const cJSON *a = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(list, i), key->valuestring);
                const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(list, k), key->valuestring);
                if (!a || !b || !cJSON_Compare(a, b, 1))
                    same = 0;
            }
            if (same) {
                char p[256];
                snprintf(p, sizeof p, "%s[%d].%s", path, i, cJSON_GetArrayItem(keys, 0)->valuestring);
                add(v, p, "duplicate list-map key", NULL, 0);
            }
        }
    }
}

int schema_check(const cJSON *s, const cJSON *val, const char *path, struct schema_violations *v)
{
    int before = v->count;
    if (cJSON_IsNull(val)) {
        return 0; /* pruned (non-nullable) or allowed (nullable) */
    }
    if (cJSON_IsTrue(kw(s, "x-kubernetes-int-or-string"))) {
        if (!type_ok("integer", val) && !cJSON_IsString(val))
            add(v, path, "type %s", "int-or-string", 0);
        return v->count - before;
    }
    const cJSON *type = kw(s, "type");
    if (cJSON_IsString(type) && !type_ok(type->valuestring, val)) {
        add(v, path, "type %s", type->valuestring, 0);
        return v->count - before;
    }
    const cJSON *en = kw(s, "enum");
    if (cJSON_IsArray(en)) {
        int found = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, en)
            if (cJSON_Compare(e, val, 1))
                found = 1;
        if (!found)
            add(v, path, "enum", NULL, 0);
    }
    if (cJSON_IsNumber(val))
        check_number(s, val, path, v);
    if (cJSON_IsString(val))
        check_string(s, val, path, v);
    if (cJSON_IsArray(val)) {
        double n = cJSON_GetArraySize(val);
        const cJSON *mn = kw(s, "minItems"), *mx = kw(s, "maxItems"), *items = kw(s, "items");
        if (mn && n < mn->valuedouble)
            add(v, path, "minItems %g", NULL, mn->valuedouble);
        if (mx && n > mx->valuedouble)
            add(v, path, "maxItems %g", NULL, mx->valuedouble);
        const cJSON *lt = kw(s, "x-kubernetes-list-type"), *keys = kw(s, "x-kubernetes-list-map-keys");
        if (cJSON_IsString(lt) && !strcmp(lt->valuestring, "map") && cJSON_IsArray(keys))
            check_map_keys(keys, val, path, v);
        if (items) {
            int i = 0;
            const cJSON *it;
            cJSON_ArrayForEach(it, val) {
                char p[256];
                snprintf(p, sizeof p, "%s[%d]", path, i++);
                schema_check(items, it, p, v);
            }
        }
    }
    if (cJSON_IsObject(val)) {
        const cJSON *props = kw(s, "properties"), *addl = kw(s, "additionalProperties");
        int preserve = cJSON_IsTrue(kw(s, "x-kubernetes-preserve-unknown-fields"));
        const cJSON *c;
        cJSON_ArrayForEach(c, val) {
            char p[256];
            snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", c->string);
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, c->string) : NULL;
            if (ps)
                schema_check(ps, c, p, v);
            else if (cJSON_IsObject(addl))
                schema_check(addl, c, p, v);
            else if (!preserve)
                add(v, p, "unknown field", NULL, 0);
        }
        const cJSON *req = kw(s, "required"), *r;
        cJSON_ArrayForEach(r, req) {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(val, r->valuestring);
            if (!m || cJSON_IsNull(m)) {
                char p[256];
                snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", r->valuestring);
                add(v, p, "required", NULL, 0);
            }
        }
    }
    return v->count - before;
}

int schema_apply_defaults(const cJSON *s, cJSON *val)
{
    if (cJSON_IsObject(val)) {
        const cJSON *props = kw(s, "properties"), *ps;
        cJSON_ArrayForEach(ps, props) {
            cJSON *m = cJSON_GetObjectItemCaseSensitive(val, ps->string);
            const cJSON *def = kw(ps, "default");
            if (m && cJSON_IsNull(m)) { /* nulls of non-nullable fields are pruned before defaulting */
                cJSON_DeleteItemFromObjectCaseSensitive(val, ps->string);
                m = NULL;
            }
            if (!m && def) {
                m = cJSON_Duplicate(def, 1);
                if (!m)
                    return -1;
                cJSON_AddItemToObject(val, ps->string, m);
            }
            if (m && schema_apply_defaults(ps, m))
                return -1;
        }
    } else if (cJSON_IsArray(val)) {
        const cJSON *items = kw(s, "items");
        cJSON *it;
        if (items)
            cJSON_ArrayForEach(it, val)
                if (schema_apply_defaults(items, it))
                    return -1;
    }
    return 0;
}

int schema_count_cel_rules(const cJSON *s)
{
    int n = 0;
    if (cJSON_IsObject(s)) {
        const cJSON *rules = kw(s, "x-kubernetes-validations");
        if (cJSON_IsArray(rules))
            n += cJSON_GetArraySize(rules);
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, s)
        if (cJSON_IsObject(c) || cJSON_IsArray(c))
            if (!c->string || strcmp(c->string, "x-kubernetes-validations"))
                n += schema_count_cel_rules(c);
    return n;
}

static void problem(struct schema_violations *v, const char *path, const char *what)
{
    add(v, path[0] ? path : "(root)", "%s", what, 0);
}

/* JSONSchemaProps fields of apiextensions.k8s.io/v1 (a typo would make the API server reject
 * the CRD), with the JSON type each must have: 's' string, 'n' number, 'b' boolean, 'o' object,
 * 'a' list, '*' anything. */
static const struct { const char *key; char type; } schema_keys[] = {
    {"type", 's'}, {"format", 's'}, {"title", 's'}, {"description", 's'}, {"pattern", 's'},
    {"properties", 'o'}, {"additionalProperties", '*'}, {"items", 'o'}, {"required", 'a'}, {"enum", 'a'},
    {"default", '*'}, {"example", '*'}, {"minimum", 'n'}, {"maximum", 'n'}, {"exclusiveMinimum", 'b'},
    {"exclusiveMaximum", 'b'}, {"multipleOf", 'n'}, {"minLength", 'n'}, {"maxLength", 'n'}, {"minItems", 'n'},
    {"maxItems", 'n'}, {"uniqueItems", 'b'}, {"minProperties", 'n'}, {"maxProperties", 'n'}, {"nullable", 'b'},
    {"allOf", 'a'}, {"anyOf", 'a'}, {"oneOf", 'a'}, {"not", 'o'},
    {"x-kubernetes-preserve-unknown-fields", 'b'}, {"x-kubernetes-embedded-resource", 'b'},
    {"x-kubernetes-int-or-string", 'b'}, {"x-kubernetes-list-map-keys", 'a'}, {"x-kubernetes-list-type", 's'},
    {"x-kubernetes-map-type", 's'}, {"x-kubernetes-validations", 'a'},
};

static void check_keywords(const cJSON *s, const char *path, struct schema_violations *v)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, s) {
        size_t i, n = sizeof schema_keys / sizeof schema_keys[0];
        for (i = 0; i < n; i++)
            if (!strcmp(c->string, schema_keys[i].key))
                break;
        char what[200];
        if (i == n) {
            snprintf(what, sizeof what, "unknown schema keyword \"%.100s\"", c->string);
            problem(v, path, what);
            continue;
        }
        char t = schema_keys[i].type;
        int ok = t == '*' || (t == 's' && cJSON_IsString(c)) || (t == 'n' && cJSON_IsNumber(c)) ||
                 (t == 'b' && cJSON_IsBool(c)) || (t == 'o' && cJSON_IsObject(c)) || (t == 'a' && cJSON_IsArray(c));
        if (!ok) {
            snprintf(what, sizeof what, "schema keyword \"%s\" has the wrong JSON type", c->string);
            problem(v, path, what);
        }
    }
    static const char *const rule_keys[] = {"rule", "message", "messageExpression", "reason", "fieldPath",
                                            "optionalOldSelf", NULL};
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(s, "x-kubernetes-validations")) {
        cJSON_ArrayForEach(c, r) {
            int ok = 0;
            for (const char *const *k = rule_keys; *k; k++)
                ok |= !strcmp(c->string, *k);
            if (!ok)
                problem(v, path, "unknown field in an x-kubernetes-validations entry");
        }
        const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "message"));
        if (m && strchr(m, '\n'))
            problem(v, path, "CEL message with a line break");
    }
}

int schema_structural_problems(const cJSON *s, const char *path, struct schema_violations *v)
{
    int before = v->count;
    if (!cJSON_IsObject(s)) {
        problem(v, path, "schema node is not an object");
        return v->count - before;
    }
    check_keywords(s, path, v);
    int ios = cJSON_IsTrue(kw(s, "x-kubernetes-int-or-string"));
    int preserve = cJSON_IsTrue(kw(s, "x-kubernetes-preserve-unknown-fields"));
    const cJSON *type = kw(s, "type");
    if (!ios && !cJSON_IsString(type))
        problem(v, path, "no type (structural schemas type every node)");
    if (ios && type)
        problem(v, path, "int-or-string with a type");
    const cJSON *props = kw(s, "properties"), *addl = kw(s, "additionalProperties"), *items = kw(s, "items");
    if (props && addl)
        problem(v, path, "properties and additionalProperties together");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "object") && (props || addl || preserve))
        problem(v, path, "properties on a non-object");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "array") && !items)
        problem(v, path, "array without items");
    const cJSON *c;
    cJSON_ArrayForEach(c, props) {
        char p[256];
        snprintf(p, sizeof p, "%s.%s", path, c->string);
        schema_structural_problems(c, p, v);
    }
    if (cJSON_IsObject(addl)) {
        char p[256];
        snprintf(p, sizeof p, "%s.*", path);
        schema_structural_problems(addl, p, v);
    }
    if (items) {
        char p[256];
        snprintf(p, sizeof p, "%s[]", path);
        schema_structural_problems(items, p, v);
        const cJSON *lt = kw(s, "x-kubernetes-list-type"), *keys = kw(s, "x-kubernetes-list-map-keys");
        if (cJSON_IsString(lt) && !strcmp(lt->valuestring, "map")) {
            const cJSON *req = kw(items, "required"), *k;
            if (!cJSON_IsArray(keys) || cJSON_GetArraySize(keys) == 0)
                problem(v, path, "list-type map without list-map-keys");
            cJSON_ArrayForEach(k, keys) {
                int found = 0;
                const cJSON *r;
                cJSON_ArrayForEach(r, req)
                    if (cJSON_IsString(r) && cJSON_IsString(k) && !strcmp(r->valuestring, k->valuestring))
                        found = 1;
                const cJSON *kp = cJSON_GetObjectItemCaseSensitive(kw(items, "properties"), k->valuestring);
                if (!found && !kw(kp, "default"))
                    problem(v, path, "list-map key neither required nor defaulted");
            }
        }
    }
    const cJSON *rules = kw(s, "x-kubernetes-validations"), *r;
    cJSON_ArrayForEach(r, rules) {
        if (!cJSON_IsString(kw(r, "rule")) || !cJSON_IsString(kw(r, "message")))
            problem(v, path, "CEL entry without rule and message");
    }
    const cJSON *def = kw(s, "default");
    if (def) {
        cJSON *d = cJSON_Duplicate(def, 1);
        if (d && schema_apply_defaults(s, d) == 0) {
            struct schema_violations dv = {0};
            if (schema_check(s, d, path, &dv))
                problem(v, path, "default does not validate against its own schema");
        }
        cJSON_Delete(d);
    }
    const cJSON *req = kw(s, "required"), *q;
    cJSON_ArrayForEach(q, req)
        if (!cJSON_IsString(q) || !cJSON_GetObjectItemCaseSensitive(props, q->valuestring))
            problem(v, path, "required names a field that is not in properties");
    return v->count - before;
}
