/* Kubernetes REST client over libcurl + cJSON: GET, LIST (selectors, limit/continue), CREATE,
 * JSON merge PATCH (also on /status), DELETE (propagationPolicy). Client-side QPS/burst token
 * bucket; 429 answers are retried after their Retry-After. Thread-safe: one client serves all
 * threads (pools of curl easy and multi handles keep connections alive; every request goes
 * through a multi handle, so a batch and a single request share the same connections).
 *
 * Return convention of the request functions: 0 on success; the HTTP status (>= 400) when the
 * API answered with an error, with e holding "<verb> <path>: <code> <reason>: <message>" from
 * the API's Status; -1 when no answer came (connection, TLS, bad JSON). */
#ifndef HOLMES_KUBE_CLIENT_H
#define HOLMES_KUBE_CLIENT_H

#include <curl/curl.h>
#include <cjson/cJSON.h>

#include "error.h"
#include "kube_config.h"
#include "metrics.h"

struct kube_resource {
    const char *group;    /* "" for core */
    const char *version;  /* "v1", "v1alpha1" */
    const char *resource; /* plural: "pods" */
    const char *kind;
};
extern const struct kube_resource KUBE_PODS, KUBE_NODES, KUBE_SECRETS, KUBE_SERVICES, KUBE_EVENTS,
    KUBE_LEASES, KUBE_TRAININGJOBS;

struct kube_client_opts {
    double qps;         /* requests per second, client-side (default 50) */
    int burst;          /* bucket size (default 100) */
    int max_429_retries;/* default 8 */
    long timeout_ms;    /* per request (default 30000) */
    const char *user_agent;
};

struct kube_client;

/* cfg is borrowed and must outlive the client. opts may be NULL for the defaults. */
struct kube_client *kube_client_new(struct kube_config *cfg, const struct kube_client_opts *opts,
                                    herr *e);
void kube_client_free(struct kube_client *kc);

/* "/api/v1/namespaces/NS/pods/NAME/status" (ns, name, sub may be NULL). Caller frees. */
char *kube_path(const struct kube_resource *r, const char *ns, const char *name, const char *sub);

int kube_get(struct kube_client *kc, const struct kube_resource *r, const char *ns,
             const char *name, cJSON **out, herr *e);
/* Lists every object (following `continue` with pages of `limit`, 0 = no limit) matching the
 * selectors (NULL = none). *items gets a JSON array, *rv the list's resourceVersion. */
int kube_list(struct kube_client *kc, const struct kube_resource *r, const char *ns,
              const char *label_selector, const char *field_selector, int limit, cJSON **items,
              char **rv, herr *e);
int kube_create(struct kube_client *kc, const struct kube_resource *r, const char *ns,
                const cJSON *obj, cJSON **out, herr *e);
/* JSON merge patch (RFC 7386); sub = "status" for the status subresource. out may be NULL. */
int kube_patch(struct kube_client *kc, const struct kube_resource *r, const char *ns,
               const char *name, const char *sub, const cJSON *patch, cJSON **out, herr *e);
/* propagation: "Background", "Foreground", "Orphan" or NULL. */
int kube_delete(struct kube_client *kc, const struct kube_resource *r, const char *ns,
                const char *name, const char *propagation, herr *e);
/* The same with DeleteOptions.gracePeriodSeconds (>= 0; -1: the object's own): 0 removes a pod
 * at once, without its kubelet's confirmation (what the pod GC does for a node that is gone). */
int kube_delete_grace(struct kube_client *kc, const struct kube_resource *r, const char *ns,
                      const char *name, const char *propagation, int grace_s, herr *e);

/* The raw request under the functions above: method, path with query, optional JSON body
 * (sent with content_type), parsed answer in *out (may be NULL). */
int kube_request(struct kube_client *kc, const char *method, const char *path_query,
                 const char *content_type, const cJSON *body, cJSON **out, herr *e);

/* Several requests at once (curl multi, from the calling thread), each as kube_request
 * would make it: calls[i].rc and .e (and *out) get its result; 429s are retried as there. */
struct kube_call {
    const char *method, *path_query, *content_type;
    const cJSON *body; /* may be NULL */
    cJSON **out;       /* may be NULL */
    int rc;            /* result */
    herr e;
};
void kube_calls(struct kube_client *kc, struct kube_call *calls, int n);

/* For streaming calls (watch): takes a token from the rate limiter, then sets URL, TLS and
 * auth on h; returns the header list the caller frees after the transfer, or NULL on error. */
struct curl_slist *kube_client_prepare(struct kube_client *kc, CURL *h, const char *path_query,
                                       herr *e);
/* URL-encodes s into a new string (caller frees). */
char *kube_escape(const char *s);

/* Counts of API errors by HTTP status (and 0 for transport errors), for metrics. */
void kube_client_error_counts(struct kube_client *kc,
                              void (*fn)(int code, unsigned long count, void *user), void *user);
unsigned long kube_client_request_count(struct kube_client *kc);
/* Latency of each request (request sent until its answer; watches excluded), and the total
 * time callers waited for the client-side rate limiter (QPS/burst, 429 pauses). */
struct metrics_hist *kube_client_latency(struct kube_client *kc);
double kube_client_throttled_seconds(struct kube_client *kc);
void kube_client_count_error(struct kube_client *kc, int code);

#endif
