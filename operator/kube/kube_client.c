#include "kube_client.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "clock.h"

const struct kube_resource KUBE_PODS = {"", "v1", "pods", "Pod"};
const struct kube_resource KUBE_SECRETS = {"", "v1", "secrets", "Secret"};
const struct kube_resource KUBE_SERVICES = {"", "v1", "services", "Service"};
const struct kube_resource KUBE_EVENTS = {"", "v1", "events", "Event"};
const struct kube_resource KUBE_NODES = {"", "v1", "nodes", "Node"};
const struct kube_resource KUBE_LEASES = {"coordination.k8s.io", "v1", "leases", "Lease"};
const struct kube_resource KUBE_TRAININGJOBS = {"holmes.dev", "v1alpha1", "trainingjobs",
                                                "TrainingJob"};

#define POOL_MAX 64
#define MULTI_POOL_MAX 16 /* multi handles kept (one per thread making calls at once) */
#define MULTI_CONNS 16    /* connections each multi handle keeps open */
#define MAX_BODY (256u << 20)

struct kube_client {
    struct kube_config *cfg;
    struct kube_client_opts o;
    pthread_mutex_t lock;
    CURL *pool[POOL_MAX];
    int npool;
    CURLM *multi[MULTI_POOL_MAX];
    int nmulti;
    /* token bucket */
    double tokens;
    struct timespec last;
    double not_before; /* monotonic seconds: a 429 pauses everyone until then */
    atomic_ulong errors[600];
    atomic_ulong requests;
    struct metrics_hist latency; /* per request: sent until answered */
    double throttled_s;          /* time spent waiting for the rate limiter (under lock) */
};

static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

/* The options with their defaults where unset (kube_client.h). */
static struct kube_client_opts client_opts(struct kube_client_opts d)
{
    d.qps = d.qps > 0 ? d.qps : 50;
    d.burst = d.burst > 0 ? d.burst : 100;
    d.max_429_retries = d.max_429_retries > 0 ? d.max_429_retries : 8;
    d.timeout_ms = d.timeout_ms > 0 ? d.timeout_ms : 30000;
    d.user_agent = d.user_agent ? d.user_agent : "holmes-operator";
    return d;
}

struct kube_client *kube_client_new(struct kube_config *cfg, const struct kube_client_opts *opts,
                                    herr *e)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, global_init);
    struct kube_client *kc = calloc(1, sizeof *kc);
    if (!kc) {
        herr_set(e, "kube client: out of memory");
        return NULL;
    }
    kc->cfg = cfg;
    kc->o = client_opts(opts ? *opts : (struct kube_client_opts){0});
    kc->tokens = kc->o.burst;
    kc->last.tv_sec = 0;
    pthread_mutex_init(&kc->lock, NULL);
    metrics_hist_init(&kc->latency);
    return kc;
}

void kube_client_free(struct kube_client *kc)
{
    if (!kc)
        return;
    for (int i = 0; i < kc->npool; i++)
        curl_easy_cleanup(kc->pool[i]);
    for (int i = 0; i < kc->nmulti; i++)
        curl_multi_cleanup(kc->multi[i]);
    pthread_mutex_destroy(&kc->lock);
    free(kc);
}

static CURL *take_handle(struct kube_client *kc)
{
    CURL *h = NULL;
    pthread_mutex_lock(&kc->lock);
    if (kc->npool > 0)
        h = kc->pool[--kc->npool];
    pthread_mutex_unlock(&kc->lock);
    if (!h)
        h = curl_easy_init();
    else
        curl_easy_reset(h);
    return h;
}

static void give_handle(struct kube_client *kc, CURL *h)
{
    pthread_mutex_lock(&kc->lock);
    if (kc->npool < POOL_MAX) {
        kc->pool[kc->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&kc->lock);
    if (h)
        curl_easy_cleanup(h);
}

/* Token bucket: reserve one token, then sleep until it is ours. */
static void rate_wait(struct kube_client *kc)
{
    pthread_mutex_lock(&kc->lock);
    double now = clock_mono_s();
    double last = (double)kc->last.tv_sec + kc->last.tv_nsec / 1e9;
    if (last > 0)
        kc->tokens += (now - last) * kc->o.qps;
    if (kc->tokens > kc->o.burst)
        kc->tokens = kc->o.burst;
    clock_gettime(CLOCK_MONOTONIC, &kc->last);
    kc->tokens -= 1.0;
    double wait = kc->tokens < 0 ? -kc->tokens / kc->o.qps : 0;
    if (kc->not_before > now + wait)
        wait = kc->not_before - now;
    kc->throttled_s += wait;
    pthread_mutex_unlock(&kc->lock);
    clock_sleep_s(wait);
}

void kube_client_count_error(struct kube_client *kc, int code)
{
    if (code < 0 || code >= 600)
        code = 0;
    atomic_fetch_add(&kc->errors[code], 1);
}

void kube_client_error_counts(struct kube_client *kc,
                              void (*fn)(int code, unsigned long count, void *user), void *user)
{
    for (int i = 0; i < 600; i++) {
        unsigned long n = atomic_load(&kc->errors[i]);
        if (n)
            fn(i, n, user);
    }
}

struct metrics_hist *kube_client_latency(struct kube_client *kc) { return &kc->latency; }

double kube_client_throttled_seconds(struct kube_client *kc)
{
    pthread_mutex_lock(&kc->lock);
    double s = kc->throttled_s;
    pthread_mutex_unlock(&kc->lock);
    return s;
}

unsigned long kube_client_request_count(struct kube_client *kc)
{
    return atomic_load(&kc->requests);
}

char *kube_escape(const char *s)
{
    char *out = curl_easy_escape(NULL, s, 0);
    if (!out)
        return NULL;
    char *copy = strdup(out);
    curl_free(out);
    return copy;
}

char *kube_path(const struct kube_resource *r, const char *ns, const char *name, const char *sub)
{
    char *p = NULL;
    int n;
    char base[128];
    if (r->group[0])
        snprintf(base, sizeof base, "/apis/%s/%s", r->group, r->version);
    else
        snprintf(base, sizeof base, "/api/%s", r->version);
    n = asprintf(&p, "%s%s%s/%s%s%s%s%s", base, ns ? "/namespaces/" : "", ns ? ns : "",
                 r->resource, name ? "/" : "", name ? name : "", sub ? "/" : "", sub ? sub : "");
    return n < 0 ? NULL : p;
}

struct buf {
    char *data;
    size_t len, cap;
    int too_big;
};

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct buf *b = ud;
    size_t n = size * nmemb;
    if (b->len + n + 1 > MAX_BODY) {
        b->too_big = 1;
        return 0;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return 0;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

struct resp_headers {
    double retry_after;
};

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct resp_headers *h = ud;
    size_t n = size * nmemb;
    if (n > 12 && strncasecmp(ptr, "Retry-After:", 12) == 0) {
        char tmp[32];
        size_t k = n - 12 < sizeof tmp - 1 ? n - 12 : sizeof tmp - 1;
        memcpy(tmp, ptr + 12, k);
        tmp[k] = '\0';
        h->retry_after = atof(tmp);
    }
    return n;
}

struct curl_slist *kube_client_prepare(struct kube_client *kc, CURL *h, const char *path_query,
                                       herr *e)
{
    rate_wait(kc);
    atomic_fetch_add(&kc->requests, 1);
    struct kube_config *c = kc->cfg;
    char *url = NULL;
    if (asprintf(&url, "%s%s", c->server, path_query) < 0) {
        herr_set(e, "out of memory");
        return NULL;
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    free(url);
    curl_easy_setopt(h, CURLOPT_USERAGENT, kc->o.user_agent);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    if (c->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (c->ca_data) {
        struct curl_blob blob = {c->ca_data, c->ca_data_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    } else if (c->ca_file) {
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    }
    if (c->cert_data) {
        struct curl_blob blob = {c->cert_data, c->cert_data_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    } else if (c->cert_file) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
    }
    if (c->key_data) {
        struct curl_blob blob = {c->key_data, c->key_data_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    } else if (c->key_file) {
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
    }
    struct curl_slist *hd = curl_slist_append(NULL, "Accept: application/json");
    char tok[4096];
    if (hd && kube_config_token(c, tok, sizeof tok) == 0) {
        char auth[4200];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", tok);
        struct curl_slist *t = curl_slist_append(hd, auth);
        if (!t) {
            curl_slist_free_all(hd);
            hd = NULL;
        } else {
            hd = t;
        }
    }
    if (!hd)
        herr_set(e, "out of memory");
    return hd;
}

/* Fills e from an API Status body (or the raw text when it is not one). */
static void api_error(herr *e, const char *method, const char *path, long code, const cJSON *st,
                      const char *raw)
{
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(st, "reason");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(st, "message");
    if (cJSON_IsString(msg))
        herr_set(e, "%s %s: %ld %s: %s", method, path, code,
                 cJSON_IsString(reason) ? reason->valuestring : "", msg->valuestring);
    else
        herr_set(e, "%s %s: %ld: %.200s", method, path, code, raw ? raw : "");
}

/* One transfer of a kube_calls batch. */
struct xfer {
    struct kube_call *call;
    char *payload;
    CURL *h;
    struct curl_slist *hd;
    struct buf b;
    struct resp_headers rh;
    int attempt;
    int done;
    double t0;
};

/* Sets up x->h for one attempt of x->call; 0, or -1 with the call's error set. */
static int xfer_start(struct kube_client *kc, struct xfer *x)
{
    struct kube_call *c = x->call;
    memset(&x->b, 0, sizeof x->b);
    memset(&x->rh, 0, sizeof x->rh);
    x->h = take_handle(kc);
    if (!x->h)
        return herr_set(&c->e, "%s %s: curl_easy_init failed", c->method, c->path_query);
    x->hd = kube_client_prepare(kc, x->h, c->path_query, &c->e);
    if (!x->hd) {
        curl_easy_cleanup(x->h);
        x->h = NULL;
        return -1;
    }
    CURL *h = x->h;
    if (x->payload) {
        char ct[128];
        snprintf(ct, sizeof ct, "Content-Type: %s", c->content_type ? c->content_type : "application/json");
        struct curl_slist *t = curl_slist_append(x->hd, ct);
        if (t)
            x->hd = t;
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, x->payload);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hd);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
    if (strcmp(c->method, "GET") == 0)
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, kc->o.timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x->b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x->rh);
    curl_easy_setopt(h, CURLOPT_PRIVATE, x);
    x->t0 = clock_mono_s();
    return 0;
}

/* Takes the answer of a finished transfer. Returns 1 when the call must be tried again (a
 * 429 within the retry budget), else 0 with the call's rc (and out, e) set. */
static int xfer_finish(struct kube_client *kc, struct xfer *x, CURLcode cc)
{
    struct kube_call *c = x->call;
    long code = 0;
    metrics_hist_observe(&kc->latency, clock_mono_s() - x->t0);
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(x->hd);
    x->hd = NULL;
    if (cc != CURLE_OK) {
        herr_set(&c->e, "%s %s%s: %s", c->method, kc->cfg->server, c->path_query,
                 x->b.too_big ? "answer larger than 256 MiB" : curl_easy_strerror(cc));
        curl_easy_cleanup(x->h);
        x->h = NULL;
        free(x->b.data);
        kube_client_count_error(kc, 0);
        c->rc = -1;
        return 0;
    }
    give_handle(kc, x->h);
    x->h = NULL;
    cJSON *parsed = x->b.len ? cJSON_ParseWithLength(x->b.data, x->b.len) : NULL;
    int retry = 0;
    if (code == 429 && x->attempt < kc->o.max_429_retries) {
        double wait = x->rh.retry_after > 0 ? x->rh.retry_after : 1.0;
        if (wait > 60)
            wait = 60;
        pthread_mutex_lock(&kc->lock);
        double nb = clock_mono_s() + wait;
        if (nb > kc->not_before)
            kc->not_before = nb;
        pthread_mutex_unlock(&kc->lock);
        kube_client_count_error(kc, 429);
        x->attempt++;
        retry = 1;
    } else if (code >= 400 || code < 200) {
        api_error(&c->e, c->method, c->path_query, code, parsed, x->b.data);
        kube_client_count_error(kc, (int)code);
        c->rc = code >= 400 ? (int)code : -1;
    } else if (x->b.len && !parsed) {
        herr_set(&c->e, "%s %s: the answer is not JSON", c->method, c->path_query);
        c->rc = -1;
    } else {
        c->rc = 0;
        if (c->out) {
            *c->out = parsed;
            parsed = NULL;
        }
    }
    cJSON_Delete(parsed);
    free(x->b.data);
    x->b.data = NULL;
    return retry;
}

static CURLM *take_multi(struct kube_client *kc)
{
    CURLM *m = NULL;
    pthread_mutex_lock(&kc->lock);
    if (kc->nmulti > 0)
        m = kc->multi[--kc->nmulti];
    pthread_mutex_unlock(&kc->lock);
    if (!m && (m = curl_multi_init()))
        curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)MULTI_CONNS);
    return m;
}

static void give_multi(struct kube_client *kc, CURLM *m)
{
    pthread_mutex_lock(&kc->lock);
    if (kc->nmulti < MULTI_POOL_MAX) {
        kc->multi[kc->nmulti++] = m;
        m = NULL;
    }
    pthread_mutex_unlock(&kc->lock);
    if (m)
        curl_multi_cleanup(m);
}

/* Runs the transfers not done yet, all at once on one multi handle, until each has an
 * answer or must be retried. Returns how many must be retried. */
static int run_round(struct kube_client *kc, CURLM *m, struct xfer *xs, int n)
{
    int running = 0, retries = 0;
    for (int i = 0; i < n; i++) {
        if (xs[i].done)
            continue;
        if (xfer_start(kc, &xs[i]) != 0) {
            xs[i].call->rc = -1;
            xs[i].done = 1;
            continue;
        }
        if (curl_multi_add_handle(m, xs[i].h) != CURLM_OK) {
            curl_slist_free_all(xs[i].hd);
            curl_easy_cleanup(xs[i].h);
            xs[i].h = NULL;
            herr_set(&xs[i].call->e, "%s %s: curl_multi_add_handle failed", xs[i].call->method,
                     xs[i].call->path_query);
            xs[i].call->rc = -1;
            xs[i].done = 1;
            continue;
        }
        running++;
    }
    while (running > 0) {
        int still = 0;
        if (curl_multi_perform(m, &still) != CURLM_OK)
            break;
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct xfer *x = NULL;
            CURL *h = msg->easy_handle;
            CURLcode cc = msg->data.result;
            curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&x);
            curl_multi_remove_handle(m, h);
            running--;
            if (xfer_finish(kc, x, cc))
                retries++;
            else
                x->done = 1;
        }
        if (running > 0 && curl_multi_poll(m, NULL, 0, 1000, NULL) != CURLM_OK)
            break;
    }
    /* Only when the multi interface itself failed: give up on what is left. */
    for (int i = 0; i < n; i++) {
        struct xfer *x = &xs[i];
        if (x->h) {
            curl_multi_remove_handle(m, x->h);
            curl_slist_free_all(x->hd);
            curl_easy_cleanup(x->h);
            free(x->b.data);
            x->h = NULL;
            x->hd = NULL;
            x->b.data = NULL;
            herr_set(&x->call->e, "%s %s: curl multi failed", x->call->method, x->call->path_query);
            x->call->rc = -1;
            x->done = 1;
        }
    }
    return retries;
}

void kube_calls(struct kube_client *kc, struct kube_call *calls, int n)
{
    if (n <= 0)
        return;
    struct xfer *xs = calloc((size_t)n, sizeof *xs);
    CURLM *m = xs ? take_multi(kc) : NULL;
    for (int i = 0; i < n; i++) {
        struct kube_call *c = &calls[i];
        c->rc = -1;
        c->e.msg[0] = '\0';
        if (c->out)
            *c->out = NULL;
        if (!m) {
            herr_set(&c->e, "%s %s: out of memory", c->method, c->path_query);
            continue;
        }
        xs[i].call = c;
        if (c->body && !(xs[i].payload = cJSON_PrintUnformatted(c->body))) {
            herr_set(&c->e, "%s %s: cannot encode the request body", c->method, c->path_query);
            xs[i].done = 1;
        }
    }
    if (m) {
        while (run_round(kc, m, xs, n) > 0) {
        }
        give_multi(kc, m);
    }
    for (int i = 0; xs && i < n; i++)
        cJSON_free(xs[i].payload);
    free(xs);
}

int kube_request(struct kube_client *kc, const char *method, const char *path_query,
                 const char *content_type, const cJSON *body, cJSON **out, herr *e)
{
    struct kube_call c = {.method = method, .path_query = path_query,
                          .content_type = content_type, .body = body, .out = out};
    kube_calls(kc, &c, 1);
    if (c.rc != 0)
        *e = c.e;
    return c.rc;
}

static int with_path(struct kube_client *kc, const char *method, const struct kube_resource *r,
                     const char *ns, const char *name, const char *sub, const char *query,
                     const char *ctype, const cJSON *body, cJSON **out, herr *e)
{
    char *p = kube_path(r, ns, name, sub);
    char *pq = NULL;
    if (!p || asprintf(&pq, "%s%s", p, query ? query : "") < 0) {
        free(p);
        return herr_set(e, "out of memory");
    }
    int rc = kube_request(kc, method, pq, ctype, body, out, e);
    free(p);
    free(pq);
    return rc;
}

int kube_get(struct kube_client *kc, const struct kube_resource *r, const char *ns,
             const char *name, cJSON **out, herr *e)
{
    return with_path(kc, "GET", r, ns, name, NULL, NULL, NULL, NULL, out, e);
}

int kube_create(struct kube_client *kc, const struct kube_resource *r, const char *ns,
                const cJSON *obj, cJSON **out, herr *e)
{
    return with_path(kc, "POST", r, ns, NULL, NULL, NULL, "application/json", obj, out, e);
}

int kube_patch(struct kube_client *kc, const struct kube_resource *r, const char *ns,
               const char *name, const char *sub, const cJSON *patch, cJSON **out, herr *e)
{
    return with_path(kc, "PATCH", r, ns, name, sub, NULL, "application/merge-patch+json", patch,
                     out, e);
}

int kube_delete(struct kube_client *kc, const struct kube_resource *r, const char *ns,
                const char *name, const char *propagation, herr *e)
{
    return kube_delete_grace(kc, r, ns, name, propagation, -1, e);
}

int kube_delete_grace(struct kube_client *kc, const struct kube_resource *r, const char *ns,
                      const char *name, const char *propagation, int grace_s, herr *e)
{
    cJSON *opts = NULL;
    if (propagation || grace_s >= 0) {
        opts = cJSON_CreateObject();
        if (!opts || !cJSON_AddStringToObject(opts, "kind", "DeleteOptions") ||
            !cJSON_AddStringToObject(opts, "apiVersion", "v1") ||
            (propagation && !cJSON_AddStringToObject(opts, "propagationPolicy", propagation)) ||
            (grace_s >= 0 && !cJSON_AddNumberToObject(opts, "gracePeriodSeconds", grace_s))) {
            cJSON_Delete(opts);
            return herr_set(e, "out of memory");
        }
    }
    int rc = with_path(kc, "DELETE", r, ns, name, NULL, NULL, "application/json", opts, NULL, e);
    cJSON_Delete(opts);
    return rc;
}

/* Appends "&k=v" (v escaped) to *q. */
static int add_query(char **q, const char *k, const char *v)
{
    if (!v || !*v)
        return 0;
    char *ev = kube_escape(v), *nq = NULL;
    if (!ev)
        return -1;
    int n = asprintf(&nq, "%s%c%s=%s", *q, **q ? '&' : '?', k, ev);
    free(ev);
    if (n < 0)
        return -1;
    free(*q);
    *q = nq;
    return 0;
}

int kube_list(struct kube_client *kc, const struct kube_resource *r, const char *ns,
              const char *label_selector, const char *field_selector, int limit, cJSON **items,
              char **rv, herr *e)
{
    *items = cJSON_CreateArray();
    *rv = NULL;
    char *cont = NULL;
    char limit_s[16];
    snprintf(limit_s, sizeof limit_s, "%d", limit);
    if (!*items)
        return herr_set(e, "out of memory");
    for (;;) {
        char *q = strdup("");
        if (!q || add_query(&q, "labelSelector", label_selector) ||
            add_query(&q, "fieldSelector", field_selector) ||
            (limit > 0 && add_query(&q, "limit", limit_s)) || add_query(&q, "continue", cont)) {
            free(q);
            free(cont);
            return herr_set(e, "out of memory");
        }
        free(cont);
        cont = NULL;
        cJSON *page = NULL;
        int rc = with_path(kc, "GET", r, ns, NULL, NULL, q, NULL, NULL, &page, e);
        free(q);
        if (rc != 0) {
            cJSON_Delete(*items);
            *items = NULL;
            free(*rv);
            *rv = NULL;
            return rc;
        }
        cJSON *md = cJSON_GetObjectItemCaseSensitive(page, "metadata");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(md, "continue");
        if (cJSON_IsString(v)) {
            free(*rv);
            *rv = strdup(v->valuestring);
        }
        if (cJSON_IsString(c) && c->valuestring[0])
            cont = strdup(c->valuestring);
        cJSON *list = cJSON_DetachItemFromObjectCaseSensitive(page, "items");
        cJSON *it;
        while (cJSON_IsArray(list) && (it = cJSON_DetachItemFromArray(list, 0)))
            cJSON_AddItemToArray(*items, it);
        cJSON_Delete(list);
        cJSON_Delete(page);
        if (!cont)
            break;
    }
    if (!*rv) {
        cJSON_Delete(*items);
        *items = NULL;
        return herr_set(e, "list %s: the answer has no metadata.resourceVersion", r->resource);
    }
    return 0;
}
