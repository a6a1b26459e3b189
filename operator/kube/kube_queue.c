#include "kube_queue.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kube_map.h"

struct key_state {
    int dirty;       /* waiting in `ready` or to be re-queued after done */
    int processing;
    int failures;
    double due;      /* > 0: a delayed add is pending for this monotonic time */
};

struct node {
    struct node *next;
    char key[];
};

struct kube_queue {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct kube_map *keys; /* key -> struct key_state */
    struct node *head, *tail;
    size_t len;
    size_t ndelayed;
    double base, max;
    int shutdown;
};

struct kube_queue *kube_queue_new(double base_delay_s, double max_delay_s)
{
    struct kube_queue *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->keys = kube_map_new();
    if (!q->keys) {
        free(q);
        return NULL;
    }
    pthread_mutex_init(&q->lock, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cond, &a);
    pthread_condattr_destroy(&a);
    q->base = base_delay_s > 0 ? base_delay_s : 0.005;
    q->max = max_delay_s > 0 ? max_delay_s : 300;
    return q;
}

void kube_queue_free(struct kube_queue *q)
{
    if (!q)
        return;
    struct node *n = q->head;
    while (n) {
        struct node *next = n->next;
        free(n);
        n = next;
    }
    kube_map_free(q->keys, free);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cond);
    free(q);
}

static struct key_state *state(struct kube_queue *q, const char *key)
{
    struct key_state *s = kube_map_get(q->keys, key);
    if (s)
        return s;
    s = calloc(1, sizeof *s);
    if (!s || kube_map_put(q->keys, key, s, NULL) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* Drops the state of a key nobody holds any more. */
static void maybe_gc(struct kube_queue *q, const char *key, struct key_state *s)
{
    if (!s->dirty && !s->processing && !s->failures && s->due == 0)
        free(kube_map_remove(q->keys, key));
}

static int push(struct kube_queue *q, const char *key)
{
    size_t size = strlen(key) + 1;
    struct node *n = calloc(1, sizeof *n + size); /* next: NULL */
    if (!n)
        return -1;
    memcpy(n->key, key, size);
    if (q->tail)
        q->tail->next = n;
    else
        q->head = n;
    q->tail = n;
    q->len++;
    pthread_cond_signal(&q->cond);
    return 0;
}

static int add_locked(struct kube_queue *q, const char *key)
{
    struct key_state *s = state(q, key);
    if (!s)
        return -1;
    if (s->dirty)
        return 0;
    s->dirty = 1;
    if (s->processing)
        return 0;
    if (push(q, key) != 0) {
        s->dirty = 0;
        return -1;
    }
    return 0;
}

int kube_queue_add(struct kube_queue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    int rc = q->shutdown ? -1 : add_locked(q, key);
    pthread_mutex_unlock(&q->lock);
    return rc;
}

int kube_queue_add_after(struct kube_queue *q, const char *key, double delay_s)
{
    if (delay_s <= 0)
        return kube_queue_add(q, key);
    pthread_mutex_lock(&q->lock);
    int rc = -1;
    if (!q->shutdown) {
        struct key_state *s = state(q, key);
        if (s) {
            double due = clock_mono_s() + delay_s;
            if (s->due == 0)
                q->ndelayed++;
            if (s->due == 0 || due < s->due)
                s->due = due;
            pthread_cond_broadcast(&q->cond);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

double kube_queue_add_rate_limited(struct kube_queue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    struct key_state *s = state(q, key);
    double d = q->base;
    if (s) {
        d = q->base * pow(2.0, s->failures < 60 ? s->failures : 60);
        if (d > q->max)
            d = q->max;
        s->failures++;
    }
    pthread_mutex_unlock(&q->lock);
    kube_queue_add_after(q, key, d);
    return d;
}

void kube_queue_forget(struct kube_queue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    struct key_state *s = kube_map_get(q->keys, key);
    if (s) {
        s->failures = 0;
        maybe_gc(q, key, s);
    }
    pthread_mutex_unlock(&q->lock);
}

int kube_queue_failures(struct kube_queue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    struct key_state *s = kube_map_get(q->keys, key);
    int n = s ? s->failures : 0;
    pthread_mutex_unlock(&q->lock);
    return n;
}

struct due_ctx {
    struct kube_queue *q;
    double now, next;
    char **ready;
    size_t nready, cap;
};

static int find_due(const char *key, void *value, void *user)
{
    struct due_ctx *c = user;
    struct key_state *s = value;
    if (s->due == 0)
        return 0;
    if (s->due <= c->now) {
        if (c->nready == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 16;
            char **r = realloc(c->ready, cap * sizeof *r);
            if (!r)
                return 1;
            c->ready = r;
            c->cap = cap;
        }
        c->ready[c->nready++] = (char *)key;
    } else if (c->next == 0 || s->due < c->next) {
        c->next = s->due;
    }
    return 0;
}

/* Moves due delayed keys to the ready list; returns the next due time (0 = none). */
static double promote(struct kube_queue *q)
{
    if (q->ndelayed == 0)
        return 0;
    struct due_ctx c = {q, clock_mono_s(), 0, NULL, 0, 0};
    kube_map_each(q->keys, find_due, &c);
    for (size_t i = 0; i < c.nready; i++) {
        char *key = strdup(c.ready[i]);
        if (!key)
            continue;
        struct key_state *s = kube_map_get(q->keys, key);
        s->due = 0;
        q->ndelayed--;
        add_locked(q, key);
        free(key);
    }
    free(c.ready);
    return c.next;
}

char *kube_queue_get_timeout(struct kube_queue *q, int timeout_ms)
{
    double deadline = timeout_ms >= 0 ? clock_mono_s() + timeout_ms / 1000.0 : 0;
    pthread_mutex_lock(&q->lock);
    char *out = NULL;
    for (;;) {
        if (q->shutdown)
            break;
        double next = promote(q);
        if (q->head) {
            struct node *n = q->head;
            q->head = n->next;
            if (!q->head)
                q->tail = NULL;
            q->len--;
            struct key_state *s = kube_map_get(q->keys, n->key);
            if (s) {
                s->dirty = 0;
                s->processing = 1;
            }
            out = strdup(n->key);
            free(n);
            if (out)
                break;
            continue;
        }
        double wake = next;
        if (deadline > 0 && (wake == 0 || deadline < wake))
            wake = deadline;
        if (deadline > 0 && clock_mono_s() >= deadline)
            break;
        if (wake == 0) {
            pthread_cond_wait(&q->cond, &q->lock);
        } else {
            struct timespec ts;
            ts.tv_sec = (time_t)wake;
            ts.tv_nsec = (long)((wake - floor(wake)) * 1e9);
            pthread_cond_timedwait(&q->cond, &q->lock, &ts);
        }
    }
    pthread_mutex_unlock(&q->lock);
    return out;
}

char *kube_queue_get(struct kube_queue *q) { return kube_queue_get_timeout(q, -1); }

void kube_queue_done(struct kube_queue *q, const char *key)
{
    pthread_mutex_lock(&q->lock);
    struct key_state *s = kube_map_get(q->keys, key);
    if (s) {
        s->processing = 0;
        if (s->dirty && !q->shutdown)
            push(q, key);
        maybe_gc(q, key, s);
    }
    pthread_mutex_unlock(&q->lock);
}

void kube_queue_shutdown(struct kube_queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->shutdown = 1;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

size_t kube_queue_len(struct kube_queue *q)
{
    pthread_mutex_lock(&q->lock);
    size_t n = q->len;
    pthread_mutex_unlock(&q->lock);
    return n;
}
