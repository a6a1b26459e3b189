#include "worker_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TCP_LATENCY_US 50.0 /* emulated latency of a cross-fabric TCP message */

struct worker_train {
    int unused;
};

int worker_train_create(struct worker_train **out, herr *e)
{
    *out = NULL;
    return herr_set(e, "the distributed trainer is not part of this build yet; "
                       "run with --simulate STEPS to exercise the protocol");
}

void worker_train_free(struct worker_train *wt)
{
    free(wt);
}

struct worker_runner worker_train_runner(struct worker_train *wt)
{
    struct worker_runner r = worker_sim_runner;
    r.user = wt;
    return r;
}

/* "host:port" or "[v6]:port" into host and port. */
static int split_endpoint(const char *ep, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(ep, ':');
    if (!colon || colon == ep)
        return -1;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 1 || p > 65535)
        return -1;
    const char *h = ep;
    size_t n = (size_t)(colon - ep);
    if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n == 0 || n >= cap)
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (int)p;
    return 0;
}

static int add_pacing(cJSON *obj, const char *key, double gbps, double scale, double latency_us)
{
    cJSON *p = cJSON_AddObjectToObject(obj, key);
    return p && cJSON_AddNumberToObject(p, "bytes_per_second", gbps * scale * 1e9 / 8.0) &&
           cJSON_AddNumberToObject(p, "latency_us", latency_us);
}

/* The slowest NIC among a group's ranks (workers[] entries carry nic.gbps). */
static double group_gbps(const cJSON *workers, const cJSON *ranks)
{
    double g = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, ranks) {
        const cJSON *w = cJSON_GetArrayItem(workers, r->valueint);
        const cJSON *gb = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(w, "nic"), "gbps");
        if (cJSON_IsNumber(gb) && (g == 0 || gb->valuedouble < g))
            g = gb->valuedouble;
    }
    return g;
}

cJSON *worker_rank_table_json(const cJSON *assignment, const cJSON *peers, herr *e)
{
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(assignment, "plan");
    if (!cJSON_IsObject(plan))
        return herr_set(e, "assignment.plan: required (the planner's document)"), NULL;
    cJSON *rt = cJSON_Duplicate(plan, 1);
    if (!rt)
        return herr_set(e, "out of memory"), NULL;
    cJSON *workers = cJSON_GetObjectItemCaseSensitive(rt, "workers");
    if (!cJSON_IsArray(workers)) {
        cJSON_Delete(rt);
        return herr_set(e, "assignment.plan.workers: required, an array by rank"), NULL;
    }
    int world = cJSON_GetArraySize(workers);
    const cJSON *p;
    int i = 0;
    cJSON_ArrayForEach(p, peers) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "rank");
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(p, "endpoint");
        char host[256];
        int port;
        if (!cJSON_IsNumber(r) || r->valueint < 0 || r->valueint >= world ||
            !cJSON_IsString(ep) || split_endpoint(ep->valuestring, host, sizeof host, &port)) {
            cJSON_Delete(rt);
            return herr_set(e, "start.peers[%d]: needs a rank below %d and an endpoint host:port",
                            i, world), NULL;
        }
        cJSON *w = cJSON_GetArrayItem(workers, r->valueint);
        cJSON_DeleteItemFromObjectCaseSensitive(w, "host");
        cJSON_DeleteItemFromObjectCaseSensitive(w, "port");
        if (!cJSON_AddStringToObject(w, "host", host) || !cJSON_AddNumberToObject(w, "port", port)) {
            cJSON_Delete(rt);
            return herr_set(e, "out of memory"), NULL;
        }
        i++;
    }
    const cJSON *em = cJSON_GetObjectItemCaseSensitive(assignment, "emulation");
    if (cJSON_IsObject(em)) {
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(em, "bandwidth_scale");
        const cJSON *cf = cJSON_GetObjectItemCaseSensitive(em, "cross_fabric_gbps");
        double scale = cJSON_IsNumber(sc) && sc->valuedouble > 0 ? sc->valuedouble : 1.0;
        double cross = cJSON_IsNumber(cf) && cf->valuedouble > 0 ? cf->valuedouble : 25.0;
        int ok = add_pacing(rt, "cross_fabric_pacing", cross, scale, TCP_LATENCY_US);
        cJSON *g;
        cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(rt, "groups")) {
            const cJSON *tr = cJSON_GetObjectItemCaseSensitive(g, "transport");
            const cJSON *reason = cJSON_GetObjectItemCaseSensitive(g, "reason");
            int spans = cJSON_IsString(reason) && strstr(reason->valuestring, "span");
            double gbps = group_gbps(workers, cJSON_GetObjectItemCaseSensitive(g, "ranks"));
            int socket = cJSON_IsString(tr) && strcmp(tr->valuestring, "socket") == 0;
            if (spans || gbps <= 0)
                gbps = cross;
            ok = ok && add_pacing(g, "pacing", gbps, scale, socket ? TCP_LATENCY_US : 0);
        }
        if (!ok) {
            cJSON_Delete(rt);
            return herr_set(e, "out of memory"), NULL;
        }
    }
    return rt;
}
