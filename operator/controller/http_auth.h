/* Who may read the operator's metrics and job page: the caller's bearer token goes to the API
 * server's TokenReview (who is it?), its identity to a SubjectAccessReview (may it `get` the
 * /metrics non-resource URL; may it `get` TrainingJobs in a namespace?), as kube-rbac-proxy and
 * controller-runtime's authenticated metrics do. Both answers are cached for a short while
 * (keyed by a SHA-256 of the token, never the token), so a scrape every few seconds is not two
 * API calls each time. Thread-safe. The token never appears in an answer, a reason or a log. */
#ifndef HOLMES_HTTP_AUTH_H
#define HOLMES_HTTP_AUTH_H

#include <cjson/cJSON.h>

#include "metrics.h"

struct kube_client;
struct http_auth;

/* ttl_s: how long an answer is kept (0 = 30 s). */
struct http_auth *http_auth_new(struct kube_client *kc, double ttl_s);
void http_auth_free(struct http_auth *a);

/* The caller behind an Authorization header value ("Bearer TOKEN"): 1 authenticated, *user a
 * copy of TokenReview's status.user (free with cJSON_Delete); 0 not (no header, not a bearer
 * token, or the API refused it: why says which); -1 the API server could not answer (why). */
int http_auth_authenticate(struct http_auth *a, const char *authorization, cJSON **user,
                           char *why, size_t why_len);

/* What is asked: verb on a non-resource path (path set), or on group/resource in namespace ns
 * ("" or NULL: in every namespace). */
struct http_access {
    const char *verb;
    const char *path;
    const char *group, *resource, *ns;
};
/* Whether user (from http_auth_authenticate) may: 1 yes, 0 no (why: who was refused what, and
 * the API's reason), -1 the API server could not answer. */
int http_auth_authorize(struct http_auth *a, const cJSON *user, const struct http_access *what,
                        char *why, size_t why_len);

/* Prometheus text: reviews sent by kind and answers taken from the cache. */
void http_auth_metrics(struct http_auth *a, struct metrics_buf *b);
/* Reviews sent so far (TokenReviews + SubjectAccessReviews), for tests. */
unsigned long http_auth_reviews(struct http_auth *a);

#endif
