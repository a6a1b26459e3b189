/* Prometheus text exposition helpers and a latency histogram fine enough for p50/p99: the
 * operator's /metrics (controller, coordinator) and its Kubernetes client's request latency. */
#ifndef HOLMES_METRICS_H
#define HOLMES_METRICS_H

#include <pthread.h>
#include <stddef.h>

#define METRICS_FINE_BUCKETS 256

/* Log-spaced buckets from 1 us to ~100 s (about 7.5% wide), thread-safe. */
struct metrics_hist {
    pthread_mutex_t lock;
    unsigned long fine[METRICS_FINE_BUCKETS];
    unsigned long std[13]; /* exact counts for the exported buckets 1 ms .. 10 s */
    unsigned long count;
    double sum, max;
};

void metrics_hist_init(struct metrics_hist *h);
void metrics_hist_observe(struct metrics_hist *h, double seconds);
/* q in [0,1]: the upper edge of the bucket holding that quantile (0 when empty). */
double metrics_hist_quantile(struct metrics_hist *h, double q);
unsigned long metrics_hist_count(struct metrics_hist *h);
/* Appends a Prometheus histogram (standard buckets 1ms..10s) named name to the buffer. */
struct metrics_buf {
    char *data;
    size_t len, cap;
    int oom;
};
void metrics_printf(struct metrics_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void metrics_hist_render(struct metrics_hist *h, struct metrics_buf *b, const char *name,
                         const char *help);

#endif
