#include "kube_watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kube_json_stream {
    char *buf;
    size_t len, cap, max;
    size_t scanned;   /* bytes of buf already scanned */
    int depth, in_string, escape, started;
};

struct kube_json_stream *kube_json_stream_new(size_t max_value)
{
    struct kube_json_stream *s = calloc(1, sizeof *s);
    if (s)
        s->max = max_value ? max_value : (64u << 20);
    return s;
}

void kube_json_stream_free(struct kube_json_stream *s)
{
    if (!s)
        return;
    free(s->buf);
    free(s);
}

size_t kube_json_stream_pending(const struct kube_json_stream *s) { return s->len; }

static int append(struct kube_json_stream *s, const char *d, size_t n, herr *e)
{
    if (s->len + n > s->max)
        return herr_set(e, "watch stream: a value is larger than %zu bytes", s->max);
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 8192;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *b = realloc(s->buf, cap);
        if (!b)
            return herr_set(e, "watch stream: out of memory");
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, d, n);
    s->len += n;
    return 0;
}

/* Emits the value in buf[0..end) and keeps the rest. */
static int emit(struct kube_json_stream *s, size_t end, kube_json_value_fn fn, void *user, herr *e)
{
    cJSON *v = cJSON_ParseWithLength(s->buf, end);
    if (!v) {
        herr_set(e, "watch stream: not JSON near \"%.60s\"", s->buf);
        return -1;
    }
    memmove(s->buf, s->buf + end, s->len - end);
    s->len -= end;
    s->scanned = 0;
    s->depth = s->in_string = s->escape = s->started = 0;
    return fn(v, user);
}

int kube_json_stream_feed(struct kube_json_stream *s, const char *data, size_t n,
                          kube_json_value_fn fn, void *user, herr *e)
{
    /* Drop whitespace between values without buffering it. */
    while (s->len == 0 && n > 0 && (*data == '\n' || *data == '\r' || *data == ' ' || *data == '\t')) {
        data++;
        n--;
    }
    if (n && append(s, data, n, e) != 0)
        return -1;
    size_t i = s->scanned;
    while (i < s->len) {
        char c = s->buf[i++];
        if (!s->started) {
            if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
                /* leading whitespace: drop it */
                memmove(s->buf, s->buf + i, s->len - i);
                s->len -= i;
                i = 0;
                continue;
            }
            if (c != '{' && c != '[')
                return herr_set(e, "watch stream: expected an object, got '%c'", c);
            s->started = 1;
            s->depth = 1;
            continue;
        }
        if (s->in_string) {
            if (s->escape)
                s->escape = 0;
            else if (c == '\\')
                s->escape = 1;
            else if (c == '"')
                s->in_string = 0;
            continue;
        }
        if (c == '"')
            s->in_string = 1;
        else if (c == '{' || c == '[')
            s->depth++;
        else if ((c == '}' || c == ']') && --s->depth == 0) {
            int rc = emit(s, i, fn, user, e);
            if (rc != 0)
                return rc;
            i = 0;
        }
    }
    s->scanned = i;
    return 0;
}

const char *kube_event_name(enum kube_event_type t)
{
    static const char *const names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
    return (unsigned)t < 5 ? names[t] : "?";
}

struct watch_state {
    struct kube_json_stream *js;
    kube_watch_fn fn;
    void *user;
    const volatile int *stop;
    int cb_rc;     /* the callback's stop value */
    int failed;    /* parse error */
    herr *e;
    long http_code;
    CURL *h;
    char errbody[512];
    size_t errlen;
};

int kube_watch_event_decode(cJSON *v, enum kube_event_type *t, cJSON **obj, herr *e)
{
    *obj = NULL;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
    cJSON *o = cJSON_DetachItemFromObjectCaseSensitive(v, "object");
    int rc = 0;
    if (!cJSON_IsString(type))
        rc = herr_set(e, "watch event.type: required, a string");
    else if (!cJSON_IsObject(o))
        rc = herr_set(e, "watch event.object: required, an object");
    else if (strcmp(type->valuestring, "ADDED") == 0)
        *t = KUBE_ADDED;
    else if (strcmp(type->valuestring, "MODIFIED") == 0)
        *t = KUBE_MODIFIED;
    else if (strcmp(type->valuestring, "DELETED") == 0)
        *t = KUBE_DELETED;
    else if (strcmp(type->valuestring, "BOOKMARK") == 0)
        *t = KUBE_BOOKMARK;
    else if (strcmp(type->valuestring, "ERROR") == 0)
        *t = KUBE_ERROR;
    else
        rc = herr_set(e, "watch event.type: unknown event type \"%.40s\"", type->valuestring);
    cJSON_Delete(v);
    if (rc) {
        cJSON_Delete(o);
        return -1;
    }
    *obj = o;
    return 0;
}

static int on_value(cJSON *v, void *user)
{
    struct watch_state *w = user;
    enum kube_event_type t = KUBE_ERROR;
    cJSON *obj = NULL;
    if (kube_watch_event_decode(v, &t, &obj, w->e) != 0) {
        w->failed = 1;
        return -1;
    }
    int rc = w->fn(t, obj, w->user);
    if (rc)
        w->cb_rc = rc;
    return rc;
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct watch_state *w = ud;
    size_t n = size * nmemb;
    if (!w->http_code)
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->http_code);
    if (w->http_code != 200) {
        size_t k = n < sizeof w->errbody - 1 - w->errlen ? n : sizeof w->errbody - 1 - w->errlen;
        memcpy(w->errbody + w->errlen, ptr, k);
        w->errlen += k;
        w->errbody[w->errlen] = '\0';
        return n;
    }
    int rc = kube_json_stream_feed(w->js, ptr, n, on_value, w, w->e);
    if (rc == -1 && !w->cb_rc)
        w->failed = 1;
    return rc ? 0 : n;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    struct watch_state *w = ud;
    (void)a; (void)b; (void)c; (void)d;
    return w->stop && *w->stop ? 1 : 0;
}

/* Appends "&k=v" (escaped) to buf. */
static void qadd(char *buf, size_t n, const char *k, const char *v)
{
    if (!v || !*v)
        return;
    char *ev = kube_escape(v);
    size_t len = strlen(buf);
    snprintf(buf + len, n - len, "&%s=%s", k, ev ? ev : "");
    free(ev);
}

int kube_watch(struct kube_client *kc, const struct kube_resource *r,
               const struct kube_watch_opts *o, kube_watch_fn fn, void *user, herr *e)
{
    int timeout = o->timeout_s > 0 ? o->timeout_s : 300;
    char *path = kube_path(r, o->ns, NULL, NULL);
    char q[4096];
    if (!path)
        return herr_set(e, "out of memory");
    snprintf(q, sizeof q, "%s?watch=1&timeoutSeconds=%d%s", path, timeout,
             o->bookmarks ? "&allowWatchBookmarks=true" : "");
    free(path);
    qadd(q, sizeof q, "resourceVersion", o->resource_version);
    qadd(q, sizeof q, "labelSelector", o->label_selector);
    qadd(q, sizeof q, "fieldSelector", o->field_selector);

    struct watch_state w = {.fn = fn, .user = user, .stop = o->stop, .e = e};
    w.js = kube_json_stream_new(64u << 20);
    CURL *h = curl_easy_init();
    if (!w.js || !h) {
        kube_json_stream_free(w.js);
        if (h)
            curl_easy_cleanup(h);
        return herr_set(e, "watch %s: out of memory", r->resource);
    }
    w.h = h;
    struct curl_slist *hd = kube_client_prepare(kc, h, q, e);
    if (!hd) {
        kube_json_stream_free(w.js);
        curl_easy_cleanup(h);
        return -1;
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &w);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &w);
    /* A stream that outlives its own timeout by a margin is dead. */
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)timeout + 30);
    CURLcode cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &w.http_code);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    size_t pending = kube_json_stream_pending(w.js);
    kube_json_stream_free(w.js);
    if (w.cb_rc)
        return w.cb_rc;
    if (w.failed)
        return -1;
    if (o->stop && *o->stop)
        return 0;
    if (w.http_code >= 400) {
        cJSON *st = cJSON_Parse(w.errbody);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(st, "message");
        herr_set(e, "watch %s: %ld: %s", r->resource, w.http_code,
                 cJSON_IsString(m) ? m->valuestring : w.errbody);
        cJSON_Delete(st);
        kube_client_count_error(kc, (int)w.http_code);
        return (int)w.http_code;
    }
    if (cc != CURLE_OK) {
        kube_client_count_error(kc, 0);
        return herr_set(e, "watch %s: %s", r->resource, curl_easy_strerror(cc));
    }
    if (pending)
        return herr_set(e, "watch %s: the stream ended inside an event (%zu bytes)", r->resource,
                        pending);
    return 0;
}
