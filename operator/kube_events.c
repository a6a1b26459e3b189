#include "kube_events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

void kube_time_now(char *buf, size_t n, int micro)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    if (micro)
        snprintf(buf, n, "%s.%06ldZ", base, (long)tv.tv_usec);
    else
        snprintf(buf, n, "%sZ", base);
}

double kube_time_parse(const char *s)
{
    if (!s)
        return -1;
    struct tm tm = {0};
    const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!rest)
        return -1;
    double frac = 0;
    if (*rest == '.') {
        char *end;
        frac = strtod(rest, &end);
        rest = end;
    }
    if (*rest != 'Z')
        return -1;
    return (double)timegm(&tm) + frac;
}

static const char *meta(const cJSON *obj, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static const char *top(const cJSON *obj, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

cJSON *kube_event_build(const cJSON *obj, const char *type, const char *reason,
                        const char *message, const char *component)
{
    char now[48], gen[300], msg[1025];
    kube_time_now(now, sizeof now, 0);
    snprintf(gen, sizeof gen, "%s.", meta(obj, "name"));
    snprintf(msg, sizeof msg, "%s", message);
    cJSON *ev = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(ev, "metadata");
    cJSON *inv = cJSON_AddObjectToObject(ev, "involvedObject");
    cJSON *src = cJSON_AddObjectToObject(ev, "source");
    if (!md || !inv || !src || !cJSON_AddStringToObject(md, "generateName", gen) ||
        !cJSON_AddStringToObject(md, "namespace", meta(obj, "namespace")) ||
        !cJSON_AddStringToObject(inv, "apiVersion", top(obj, "apiVersion")) ||
        !cJSON_AddStringToObject(inv, "kind", top(obj, "kind")) ||
        !cJSON_AddStringToObject(inv, "name", meta(obj, "name")) ||
        !cJSON_AddStringToObject(inv, "namespace", meta(obj, "namespace")) ||
        !cJSON_AddStringToObject(inv, "uid", meta(obj, "uid")) ||
        !cJSON_AddStringToObject(inv, "resourceVersion", meta(obj, "resourceVersion")) ||
        !cJSON_AddStringToObject(ev, "type", type) || !cJSON_AddStringToObject(ev, "reason", reason) ||
        !cJSON_AddStringToObject(ev, "message", msg) ||
        !cJSON_AddStringToObject(ev, "firstTimestamp", now) ||
        !cJSON_AddStringToObject(ev, "lastTimestamp", now) || !cJSON_AddNumberToObject(ev, "count", 1) ||
        !cJSON_AddStringToObject(src, "component", component ? component : "holmes-operator") ||
        !cJSON_AddStringToObject(ev, "reportingComponent", component ? component : "holmes-operator")) {
        cJSON_Delete(ev);
        return NULL;
    }
    return ev;
}
