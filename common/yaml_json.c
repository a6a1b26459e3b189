#include "yaml_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define YAML_MAX_DEPTH 64
#define YAML_MAX_FILE (16u << 20)

struct yparser {
    yaml_parser_t p;
    const char *name;
    herr *e;
};

static int yerr(struct yparser *y, const yaml_mark_t *m, const char *what)
{
    return herr_set(y->e, "%s:%zu:%zu: %s", y->name, m->line + 1, m->column + 1, what);
}

static int next_event(struct yparser *y, yaml_event_t *ev)
{
    if (yaml_parser_parse(&y->p, ev))
        return 0;
    return herr_set(y->e, "%s:%zu:%zu: %s", y->name, y->p.problem_mark.line + 1,
                    y->p.problem_mark.column + 1, y->p.problem ? y->p.problem : "invalid YAML");
}

static int is_all(const char *s, const char *set)
{
    return *s && strspn(s, set) == strlen(s);
}

static int is_one_of(const char *s, const char *const *words)
{
    for (; *words; words++)
        if (!strcmp(s, *words))
            return 1;
    return 0;
}

/* A plain scalar as JSON per the YAML 1.2 core schema, plus the YAML 1.1 booleans (yes, no, on,
 * off, y, n) that kubectl's YAML reader takes: a manifest means here what it means on a cluster. */
static cJSON *plain_scalar(const char *s)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON",
                                      "y", "Y", NULL};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF",
                                     "n", "N", NULL};
    if (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL"))
        return cJSON_CreateNull();
    if (is_one_of(s, yes))
        return cJSON_CreateTrue();
    if (is_one_of(s, no))
        return cJSON_CreateFalse();
    const char *d = (*s == '-' || *s == '+') ? s + 1 : s;
    if (is_all(d, "0123456789")) {
        errno = 0;
        char *end;
        double v = strtod(s, &end);
        if (!*end && errno == 0)
            return cJSON_CreateNumber(v);
    }
    if (!strncmp(d, "0x", 2) && is_all(d + 2, "0123456789abcdefABCDEF") && strlen(d + 2) <= 15) {
        double v = (double)strtoll(d + 2, NULL, 16);
        return cJSON_CreateNumber(*s == '-' ? -v : v);
    }
    if (strpbrk(d, "0123456789") && strspn(d, "0123456789.eE+-") == strlen(d)) {
        errno = 0;
        char *end;
        double v = strtod(s, &end);
        if (!*end && errno == 0)
            return cJSON_CreateNumber(v);
    }
    if (!strcmp(d, ".inf") || !strcmp(d, ".Inf") || !strcmp(d, ".nan") || !strcmp(d, ".NaN"))
        return cJSON_CreateString(s); /* JSON has no infinities; validators reject the string */
    return cJSON_CreateString(s);
}

static cJSON *parse_node(struct yparser *y, yaml_event_t *ev, int depth);

static cJSON *parse_children(struct yparser *y, yaml_event_t *start, int depth)
{
    int is_map = start->type == YAML_MAPPING_START_EVENT;
    cJSON *out = is_map ? cJSON_CreateObject() : cJSON_CreateArray();
    if (!out) {
        herr_set(y->e, "%s: out of memory", y->name);
        return NULL;
    }
    for (;;) {
        yaml_event_t ev;
        if (next_event(y, &ev))
            goto fail;
        if (ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return out;
        }
        if (!is_map) {
            cJSON *item = parse_node(y, &ev, depth + 1);
            yaml_event_delete(&ev);
            if (!item)
                goto fail;
            cJSON_AddItemToArray(out, item);
            continue;
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            yerr(y, &ev.start_mark, "mapping keys must be scalars");
            yaml_event_delete(&ev);
            goto fail;
        }
        char *key = strdup((const char *)ev.data.scalar.value);
        yaml_mark_t key_mark = ev.start_mark;
        yaml_event_delete(&ev);
        if (!key) {
            herr_set(y->e, "%s: out of memory", y->name);
            goto fail;
        }
        if (cJSON_GetObjectItemCaseSensitive(out, key)) {
            char msg[300];
            snprintf(msg, sizeof msg, "duplicate key \"%.200s\"", key);
            yerr(y, &key_mark, msg);
            free(key);
            goto fail;
        }
        yaml_event_t vev;
        if (next_event(y, &vev)) {
            free(key);
            goto fail;
        }
        cJSON *val = parse_node(y, &vev, depth + 1);
        yaml_event_delete(&vev);
        if (!val) {
            free(key);
            goto fail;
        }
        cJSON_AddItemToObject(out, key, val);
        free(key);
    }
fail:
    cJSON_Delete(out);
    return NULL;
}

static cJSON *parse_node(struct yparser *y, yaml_event_t *ev, int depth)
{
    if (depth > YAML_MAX_DEPTH) {
        yerr(y, &ev->start_mark, "nested deeper than 64 levels");
        return NULL;
    }
    cJSON *v = NULL;
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        const char *s = (const char *)ev->data.scalar.value;
        v = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? plain_scalar(s) : cJSON_CreateString(s);
        break;
    }
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT:
        return parse_children(y, ev, depth);
    case YAML_ALIAS_EVENT:
        yerr(y, &ev->start_mark, "anchors and aliases are not supported");
        return NULL;
    default:
        yerr(y, &ev->start_mark, "unexpected YAML event");
        return NULL;
    }
    if (!v)
        herr_set(y->e, "%s: out of memory", y->name);
    return v;
}

cJSON *yaml_parse_documents(const char *text, size_t len, const char *name, herr *e)
{
    struct yparser y = {.name = name ? name : "<yaml>", .e = e};
    if (!yaml_parser_initialize(&y.p)) {
        herr_set(e, "%s: cannot initialise the YAML parser", y.name);
        return NULL;
    }
    yaml_parser_set_input_string(&y.p, (const unsigned char *)text, len);
    cJSON *docs = cJSON_CreateArray();
    if (!docs) {
        herr_set(e, "%s: out of memory", y.name);
        goto fail;
    }
    for (;;) {
        yaml_event_t ev;
        if (next_event(&y, &ev))
            goto fail;
        yaml_event_type_t t = ev.type;
        if (t == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (t == YAML_STREAM_START_EVENT || t == YAML_DOCUMENT_END_EVENT) {
            yaml_event_delete(&ev);
            continue;
        }
        if (t != YAML_DOCUMENT_START_EVENT) {
            yerr(&y, &ev.start_mark, "unexpected YAML event");
            yaml_event_delete(&ev);
            goto fail;
        }
        yaml_event_delete(&ev);
        yaml_event_t root;
        if (next_event(&y, &root))
            goto fail;
        if (root.type == YAML_DOCUMENT_END_EVENT) { /* empty document */
            yaml_event_delete(&root);
            continue;
        }
        cJSON *doc = parse_node(&y, &root, 0);
        yaml_event_delete(&root);
        if (!doc)
            goto fail;
        if (cJSON_IsNull(doc))
            cJSON_Delete(doc);
        else
            cJSON_AddItemToArray(docs, doc);
    }
    yaml_parser_delete(&y.p);
    return docs;
fail:
    yaml_parser_delete(&y.p);
    cJSON_Delete(docs);
    return NULL;
}

char *read_file_limited(const char *path, size_t max, size_t *len_out, herr *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        herr_set(e, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        herr_set(e, "%s: out of memory", path);
        return NULL;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= max) {
                herr_set(e, "%s: larger than %zu bytes", path, max);
                goto fail;
            }
            cap = cap * 2 > max ? max : cap * 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                herr_set(e, "%s: out of memory", path);
                goto fail;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) {
                herr_set(e, "%s: read error: %s", path, strerror(errno));
                goto fail;
            }
            break;
        }
    }
    fclose(f);
    buf[len] = '\0';
    if (len_out)
        *len_out = len;
    return buf;
fail:
    fclose(f);
    free(buf);
    return NULL;
}

cJSON *yaml_parse_file(const char *path, herr *e)
{
    size_t len;
    char *text = read_file_limited(path, YAML_MAX_FILE, &len, e);
    if (!text)
        return NULL;
    cJSON *docs = yaml_parse_documents(text, len, path, e);
    free(text);
    return docs;
}
