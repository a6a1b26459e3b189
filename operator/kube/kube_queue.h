/* A work queue of string keys ("namespace/name") in the style of client-go's: a key is queued
 * at most once however often it is added; a key being processed is not handed to a second
 * worker, and one added meanwhile is handed out again after done(); delayed adds; per-key
 * exponential backoff for failed keys (rate-limited requeue). Thread-safe. */
#ifndef HOLMES_KUBE_QUEUE_H
#define HOLMES_KUBE_QUEUE_H

#include <stddef.h>

struct kube_queue;

/* base_delay_s, max_delay_s: the backoff of add_rate_limited (base * 2^failures, capped). */
struct kube_queue *kube_queue_new(double base_delay_s, double max_delay_s);
void kube_queue_free(struct kube_queue *q);
/* Returns 0, or -1 when out of memory or shut down. */
int kube_queue_add(struct kube_queue *q, const char *key);
/* Adds key after delay_s seconds (an earlier pending delay for the key wins). */
int kube_queue_add_after(struct kube_queue *q, const char *key, double delay_s);
/* Adds key after its backoff and counts a failure; returns the delay used. */
double kube_queue_add_rate_limited(struct kube_queue *q, const char *key);
/* Resets the failure count of key. */
void kube_queue_forget(struct kube_queue *q, const char *key);
int kube_queue_failures(struct kube_queue *q, const char *key);
/* Blocks for the next key (caller frees it and calls done); NULL once shut down. */
char *kube_queue_get(struct kube_queue *q);
/* Like get, but gives up after timeout_ms (NULL). */
char *kube_queue_get_timeout(struct kube_queue *q, int timeout_ms);
void kube_queue_done(struct kube_queue *q, const char *key);
/* Wakes every waiter; get returns NULL from then on. */
void kube_queue_shutdown(struct kube_queue *q);
/* Keys ready to be handed out now. */
size_t kube_queue_len(struct kube_queue *q);

#endif
