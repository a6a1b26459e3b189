#include "json.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int json_int(const cJSON *o, const char *where, const char *key, int required, long lo, long hi,
             long *out, herr *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return required ? herr_set(e, "%s.%s: required", where, key) : 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < (double)lo || v->valuedouble > (double)hi)
        return herr_set(e, "%s.%s: must be an integer in [%ld, %ld]", where, key, lo, hi);
    *out = (long)v->valuedouble;
    return 0;
}

int json_int32(const cJSON *o, const char *where, const char *key, int required, int lo, int hi,
               int *out, herr *e)
{
    long v = *out;
    if (json_int(o, where, key, required, lo, hi, &v, e) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

int json_num(const cJSON *o, const char *where, const char *key, int required, double lo,
             double hi, double *out, herr *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return required ? herr_set(e, "%s.%s: required", where, key) : 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return herr_set(e, "%s.%s: must be a number in [%g, %g]", where, key, lo, hi);
    *out = v->valuedouble;
    return 0;
}

int json_str(const cJSON *o, const char *where, const char *key, int required, char *dst,
             size_t cap, herr *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        if (required)
            return herr_set(e, "%s.%s: required", where, key);
        dst[0] = '\0';
        return 0;
    }
    if (!cJSON_IsString(v))
        return herr_set(e, "%s.%s: must be a string", where, key);
    size_t n = strlen(v->valuestring);
    if (n >= cap)
        return herr_set(e, "%s.%s: longer than %zu characters", where, key, cap - 1);
    if (required && n == 0)
        return herr_set(e, "%s.%s: must not be empty", where, key);
    memcpy(dst, v->valuestring, n + 1);
    return 0;
}

const cJSON *json_at(const cJSON *o, const char *dotted)
{
    char part[128];
    while (o && *dotted) {
        size_t n = strcspn(dotted, ".");
        if (n >= sizeof part)
            return NULL;
        memcpy(part, dotted, n);
        part[n] = '\0';
        o = cJSON_GetObjectItemCaseSensitive(o, part);
        dotted += n + (dotted[n] == '.');
    }
    return o;
}

const char *json_str_at(const cJSON *o, const char *dotted)
{
    const cJSON *v = json_at(o, dotted);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

double json_num_at(const cJSON *o, const char *dotted, double def)
{
    const cJSON *v = json_at(o, dotted);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static void set_item(cJSON *o, const char *key, cJSON *v)
{
    if (!v)
        return;
    if (cJSON_GetObjectItemCaseSensitive(o, key))
        cJSON_ReplaceItemInObjectCaseSensitive(o, key, v);
    else
        cJSON_AddItemToObject(o, key, v);
}

void json_set_num(cJSON *o, const char *key, double v) { set_item(o, key, cJSON_CreateNumber(v)); }
void json_set_str(cJSON *o, const char *key, const char *v) { set_item(o, key, cJSON_CreateString(v)); }

const char *json_fmt_num(char *buf, size_t cap, const char *fmt, double v)
{
    if (!isfinite(v))
        return "null";
    snprintf(buf, cap, fmt, v);
    return buf;
}

cJSON *json_child_object(cJSON *o, const char *key)
{
    cJSON *c = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsObject(c))
        return c;
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    return cJSON_AddObjectToObject(o, key);
}

int json_merge_patch(cJSON *target, const cJSON *patch, int compose)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, patch) {
        if (cJSON_IsNull(it) && !compose) {
            cJSON_DeleteItemFromObjectCaseSensitive(target, it->string);
        } else if (cJSON_IsObject(it)) {
            cJSON *t = json_child_object(target, it->string);
            if (!t || json_merge_patch(t, it, compose) != 0)
                return -1;
        } else {
            cJSON *v = cJSON_Duplicate(it, 1);
            if (!v)
                return -1;
            set_item(target, it->string, v);
        }
    }
    return 0;
}

cJSON *json_merge_diff(const cJSON *from, const cJSON *to)
{
    cJSON *d = cJSON_CreateObject();
    const cJSON *it;
    cJSON_ArrayForEach(it, to) {
        if (!d)
            return NULL;
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(from, it->string);
        cJSON *v = NULL;
        if (o && cJSON_Compare(o, it, 1))
            continue;
        if (cJSON_IsObject(o) && cJSON_IsObject(it))
            v = json_merge_diff(o, it);
        else
            v = cJSON_Duplicate(it, 1);
        if (!v || !cJSON_AddItemToObject(d, it->string, v)) {
            cJSON_Delete(v);
            cJSON_Delete(d);
            return NULL;
        }
    }
    cJSON_ArrayForEach(it, from) {
        if (d && !cJSON_GetObjectItemCaseSensitive(to, it->string) && !cJSON_AddNullToObject(d, it->string)) {
            cJSON_Delete(d);
            return NULL;
        }
    }
    return d;
}

void json_key_path(char *out, size_t n, const char *parent, const char *key)
{
    if (!key)
        key = "?";
    int plain = *key != '\0';
    for (const char *k = key; *k; k++)
        if (!isalnum((unsigned char)*k) && *k != '_' && *k != '-')
            plain = 0;
    if (plain) {
        snprintf(out, n, "%s.%.60s", parent, key);
        return;
    }
    char q[130];
    size_t j = 0;
    for (size_t i = 0; key[i] && i < 60 && j + 3 < sizeof q; i++) {
        if (key[i] == '"' || key[i] == '\\')
            q[j++] = '\\';
        q[j++] = key[i];
    }
    q[j] = '\0';
    snprintf(out, n, "%s[\"%s\"]", parent, q);
}

static void clean_items(cJSON *it)
{
    for (; it; it = it->next) {
        if (cJSON_IsString(it) && it->valuestring)
            herr_clean(it->valuestring);
        clean_items(it->child);
    }
}

void json_clean_strings(cJSON *j)
{
    if (!j)
        return;
    if (cJSON_IsString(j) && j->valuestring)
        herr_clean(j->valuestring);
    clean_items(j->child);
}
