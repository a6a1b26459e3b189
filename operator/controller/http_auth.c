/* TokenReview + SubjectAccessReview with a short cache (http_auth.h). */
#include "http_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "error.h"
#include "json.h"
#include "kube_client.h"

#define CACHE_SLOTS 512
#define TOKEN_MAX 16384

struct entry {
    unsigned char key[32];   /* SHA-256 of "t:" token, or of "a:" user and the access asked */
    double expires;          /* monotonic seconds; 0 = free */
    int result;              /* 1 / 0 */
    cJSON *user;             /* token entries that authenticated: status.user */
    char why[200];
};

struct http_auth {
    struct kube_client *kc;
    double ttl;
    pthread_mutex_t mu;
    struct entry slots[CACHE_SLOTS];
    atomic_ulong token_reviews, access_reviews, hits;
};

struct http_auth *http_auth_new(struct kube_client *kc, double ttl_s)
{
    struct http_auth *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->kc = kc;
    a->ttl = ttl_s > 0 ? ttl_s : 30;
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

void http_auth_free(struct http_auth *a)
{
    if (!a)
        return;
    for (int i = 0; i < CACHE_SLOTS; i++)
        cJSON_Delete(a->slots[i].user);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static void digest(const char *prefix, const char *text, unsigned char out[32])
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned int n = 0;
    if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(c, prefix, strlen(prefix)) != 1 ||
        EVP_DigestUpdate(c, text, strlen(text)) != 1 || EVP_DigestFinal_ex(c, out, &n) != 1)
        memset(out, 0, 32); /* never matches a real key: no caching */
    EVP_MD_CTX_free(c);
}

/* A cached answer for key: 1/0 with *user copied (when asked), or -1 when none. */
static int cache_get(struct http_auth *a, const unsigned char key[32], cJSON **user, char *why,
                     size_t why_len)
{
    static const unsigned char zero[32];
    if (!memcmp(key, zero, 32))
        return -1;
    double now = clock_mono_s();
    int rc = -1;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < CACHE_SLOTS; i++) {
        struct entry *en = &a->slots[i];
        if (en->expires > now && !memcmp(en->key, key, 32)) {
            rc = en->result;
            if (user)
                *user = en->user ? cJSON_Duplicate(en->user, 1) : NULL;
            if (user && en->user && !*user)
                rc = -1;
            snprintf(why, why_len, "%s", en->why);
            break;
        }
    }
    pthread_mutex_unlock(&a->mu);
    if (rc >= 0)
        atomic_fetch_add(&a->hits, 1);
    return rc;
}

static void cache_put(struct http_auth *a, const unsigned char key[32], int result,
                      const cJSON *user, const char *why)
{
    double now = clock_mono_s();
    pthread_mutex_lock(&a->mu);
    struct entry *victim = &a->slots[0];
    for (int i = 0; i < CACHE_SLOTS; i++) { /* a free or expired slot, else the oldest */
        struct entry *en = &a->slots[i];
        if (en->expires <= now) {
            victim = en;
            break;
        }
        if (en->expires < victim->expires)
            victim = en;
    }
    cJSON_Delete(victim->user);
    victim->user = user ? cJSON_Duplicate(user, 1) : NULL;
    memcpy(victim->key, key, 32);
    victim->result = result;
    victim->expires = now + a->ttl;
    snprintf(victim->why, sizeof victim->why, "%s", why);
    pthread_mutex_unlock(&a->mu);
}

/* The token of "Bearer TOKEN" (scheme case-insensitive), NULL when it is not one. */
static const char *bearer(const char *authorization)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return NULL;
    const char *t = authorization + 7;
    while (*t == ' ')
        t++;
    return *t && strlen(t) < TOKEN_MAX ? t : NULL;
}

int http_auth_authenticate(struct http_auth *a, const char *authorization, cJSON **user,
                           char *why, size_t why_len)
{
    *user = NULL;
    const char *token = bearer(authorization);
    if (!token) {
        snprintf(why, why_len, authorization ? "the Authorization header is not a bearer token"
                                              : "no bearer token (Authorization: Bearer ...)");
        return 0;
    }
    unsigned char key[32];
    digest("t:", token, key);
    int rc = cache_get(a, key, user, why, why_len);
    if (rc >= 0)
        return rc;
    cJSON *body = cJSON_CreateObject(), *spec = NULL;
    if (!body || !cJSON_AddStringToObject(body, "apiVersion", "authentication.k8s.io/v1") ||
        !cJSON_AddStringToObject(body, "kind", "TokenReview") ||
        !(spec = cJSON_AddObjectToObject(body, "spec")) ||
        !cJSON_AddStringToObject(spec, "token", token)) {
        cJSON_Delete(body);
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    cJSON *out = NULL;
    herr e = {0};
    atomic_fetch_add(&a->token_reviews, 1);
    int api = kube_request(a->kc, "POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                           "application/json", body, &out, &e);
    cJSON *t = cJSON_GetObjectItemCaseSensitive(spec, "token"); /* wipe the copy we made */
    if (cJSON_IsString(t))
        OPENSSL_cleanse(t->valuestring, strlen(t->valuestring));
    cJSON_Delete(body);
    if (api != 0) {
        snprintf(why, why_len, "TokenReview failed: %.150s", e.msg);
        cJSON_Delete(out);
        return -1;
    }
    const cJSON *u = json_at(out, "status.user");
    int ok = cJSON_IsTrue(json_at(out, "status.authenticated")) && json_str_at(u, "username");
    if (ok) {
        snprintf(why, why_len, "authenticated as %.150s", json_str_at(u, "username"));
        *user = cJSON_Duplicate(u, 1);
        if (!*user) {
            cJSON_Delete(out);
            snprintf(why, why_len, "out of memory");
            return -1;
        }
    } else {
        const char *err = json_str_at(out, "status.error");
        snprintf(why, why_len, "the token was not accepted (TokenReview%s%.120s)",
                 err ? ": " : "", err ? err : "");
    }
    cache_put(a, key, ok, ok ? u : NULL, why);
    cJSON_Delete(out);
    return ok;
}

/* The cache key's text for (user, access): every field that changes the answer. */
static char *access_text(const cJSON *user, const struct http_access *w)
{
    char *u = cJSON_PrintUnformatted(user);
    if (!u)
        return NULL;
    size_t n = strlen(u) + 512;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s|%s|%.100s|%.100s|%.100s|%.100s", u, w->verb, w->path ? w->path : "",
                 w->group ? w->group : "", w->resource ? w->resource : "", w->ns ? w->ns : "");
    cJSON_free(u);
    return s;
}

static cJSON *sar_body(const cJSON *user, const struct http_access *w)
{
    cJSON *b = cJSON_CreateObject();
    cJSON *spec = cJSON_AddObjectToObject(b, "spec");
    int ok = spec && cJSON_AddStringToObject(b, "apiVersion", "authorization.k8s.io/v1") &&
             cJSON_AddStringToObject(b, "kind", "SubjectAccessReview") &&
             cJSON_AddStringToObject(spec, "user", json_str_at(user, "username"));
    const char *uid = json_str_at(user, "uid");
    if (ok && uid)
        ok = cJSON_AddStringToObject(spec, "uid", uid) != NULL;
    const char *fields[] = {"groups", "extra"};
    for (int i = 0; ok && i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(user, fields[i]);
        if (v)
            ok = cJSON_AddItemToObject(spec, fields[i], cJSON_Duplicate(v, 1));
    }
    cJSON *attrs = ok ? cJSON_AddObjectToObject(spec, w->path ? "nonResourceAttributes"
                                                              : "resourceAttributes")
                      : NULL;
    ok = attrs && cJSON_AddStringToObject(attrs, "verb", w->verb);
    if (ok && w->path)
        ok = cJSON_AddStringToObject(attrs, "path", w->path) != NULL;
    else if (ok)
        ok = cJSON_AddStringToObject(attrs, "group", w->group ? w->group : "") &&
             cJSON_AddStringToObject(attrs, "resource", w->resource ? w->resource : "") &&
             (!w->ns || !*w->ns || cJSON_AddStringToObject(attrs, "namespace", w->ns));
    if (!ok) {
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

int http_auth_authorize(struct http_auth *a, const cJSON *user, const struct http_access *w,
                        char *why, size_t why_len)
{
    const char *name = json_str_at(user, "username");
    if (!name) {
        snprintf(why, why_len, "no user");
        return 0;
    }
    char *text = access_text(user, w);
    if (!text) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    unsigned char key[32];
    digest("a:", text, key);
    free(text);
    int rc = cache_get(a, key, NULL, why, why_len);
    if (rc >= 0)
        return rc;
    cJSON *body = sar_body(user, w), *out = NULL;
    if (!body) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    herr e = {0};
    atomic_fetch_add(&a->access_reviews, 1);
    int api = kube_request(a->kc, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                           "application/json", body, &out, &e);
    cJSON_Delete(body);
    if (api != 0) {
        snprintf(why, why_len, "SubjectAccessReview failed: %.150s", e.msg);
        cJSON_Delete(out);
        return -1;
    }
    int ok = cJSON_IsTrue(json_at(out, "status.allowed"));
    const char *reason = json_str_at(out, "status.reason");
    char what[300];
    if (w->path)
        snprintf(what, sizeof what, "%s %s", w->verb, w->path);
    else
        snprintf(what, sizeof what, "%s %s%s%s in %s", w->verb, w->resource,
                 w->group && *w->group ? "." : "", w->group ? w->group : "",
                 w->ns && *w->ns ? w->ns : "every namespace");
    snprintf(why, why_len, "%.100s may%s %.200s%s%.150s", name, ok ? "" : " not", what,
             reason && *reason ? ": " : "", reason ? reason : "");
    cache_put(a, key, ok, NULL, why);
    cJSON_Delete(out);
    return ok;
}

void http_auth_metrics(struct http_auth *a, struct metrics_buf *b)
{
    metrics_printf(b, "# HELP holmes_auth_reviews_total Reviews the metrics and job page listener sent "
                      "to the API server.\n# TYPE holmes_auth_reviews_total counter\n"
                      "holmes_auth_reviews_total{kind=\"TokenReview\"} %lu\n"
                      "holmes_auth_reviews_total{kind=\"SubjectAccessReview\"} %lu\n"
                      "# HELP holmes_auth_cache_hits_total Answers taken from the review cache.\n"
                      "# TYPE holmes_auth_cache_hits_total counter\nholmes_auth_cache_hits_total %lu\n",
                   atomic_load(&a->token_reviews), atomic_load(&a->access_reviews),
                   atomic_load(&a->hits));
}

unsigned long http_auth_reviews(struct http_auth *a)
{
    return atomic_load(&a->token_reviews) + atomic_load(&a->access_reviews);
}
