/* The start message's peers into the plan document (worker_peers.h). */
#include "worker_peers.h"

#include <stdlib.h>
#include <string.h>

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

int worker_plan_endpoints(struct plan_doc *d, const cJSON *peers, herr *e)
{
    const cJSON *p;
    int i = 0;
    cJSON_ArrayForEach(p, peers) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "rank");
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(p, "endpoint");
        struct plan_doc_rank *k = cJSON_IsNumber(r) && r->valueint >= 0 && r->valueint < d->world
                                      ? &d->ranks[r->valueint] : NULL;
        if (!k || !cJSON_IsString(ep) ||
            split_endpoint(ep->valuestring, k->host, sizeof k->host, &k->port))
            return herr_set(e, "start.peers[%d]: needs a rank below %d and an endpoint host:port",
                            i, d->world);
        i++;
    }
    if (plan_doc_check_endpoints(d, "start.peers", e))
        return -1;
    /* HOLMES_NO_PACING=1: the network itself is shaped (tc in the fabric benchmark's
     * namespaces), so the transport sends at full speed and adds no emulated latency. */
    const char *nopace = getenv("HOLMES_NO_PACING");
    if (nopace && strcmp(nopace, "1") == 0) {
        memset(&d->cross_fabric, 0, sizeof d->cross_fabric);
        for (int g = 0; g < d->ngroups; g++)
            memset(&d->groups[g].pacing, 0, sizeof d->groups[g].pacing);
    }
    return 0;
}
