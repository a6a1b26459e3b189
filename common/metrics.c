#include "metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_S 1e-6
static const double les[13] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define GROWTH 1.075

void metrics_hist_init(struct metrics_hist *h)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
}

static double edge(int i) { return MIN_S * pow(GROWTH, i + 1); }

void metrics_hist_observe(struct metrics_hist *h, double s)
{
    int i = s <= MIN_S ? 0 : (int)(log(s / MIN_S) / log(GROWTH));
    if (i < 0)
        i = 0;
    if (i >= METRICS_FINE_BUCKETS)
        i = METRICS_FINE_BUCKETS - 1;
    pthread_mutex_lock(&h->lock);
    h->fine[i]++;
    for (int k = 0; k < 13; k++)
        if (s <= les[k])
            h->std[k]++;
    h->count++;
    h->sum += s;
    if (s > h->max)
        h->max = s;
    pthread_mutex_unlock(&h->lock);
}

double metrics_hist_quantile(struct metrics_hist *h, double q)
{
    pthread_mutex_lock(&h->lock);
    double out = 0;
    if (h->count) {
        unsigned long want = (unsigned long)ceil(q * (double)h->count), seen = 0;
        if (want == 0)
            want = 1;
        for (int i = 0; i < METRICS_FINE_BUCKETS; i++) {
            seen += h->fine[i];
            if (seen >= want) {
                out = edge(i);
                break;
            }
        }
        if (out > h->max)
            out = h->max;
    }
    pthread_mutex_unlock(&h->lock);
    return out;
}

unsigned long metrics_hist_count(struct metrics_hist *h)
{
    pthread_mutex_lock(&h->lock);
    unsigned long n = h->count;
    pthread_mutex_unlock(&h->lock);
    return n;
}

void metrics_printf(struct metrics_buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->data && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->oom = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
}

void metrics_hist_render(struct metrics_hist *h, struct metrics_buf *b, const char *name,
                         const char *help)
{
    metrics_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    pthread_mutex_lock(&h->lock);
    for (int k = 0; k < 13; k++)
        metrics_printf(b, "%s_bucket{le=\"%g\"} %lu\n", name, les[k], h->std[k]);
    metrics_printf(b, "%s_bucket{le=\"+Inf\"} %lu\n%s_sum %.6f\n%s_count %lu\n", name, h->count,
                   name, h->sum, name, h->count);
    pthread_mutex_unlock(&h->lock);
}
