/* A string-keyed hash map (keys copied, values owned by the caller), used by the informer
 * cache (namespace/name -> object) and the work queue (per-key state). Not thread-safe:
 * callers hold their own lock. */
#ifndef HOLMES_KUBE_MAP_H
#define HOLMES_KUBE_MAP_H

#include <stddef.h>

struct kube_map;

struct kube_map *kube_map_new(void);
/* Frees the map and its keys; calls free_value on each value when non-NULL. */
void kube_map_free(struct kube_map *m, void (*free_value)(void *));
void *kube_map_get(const struct kube_map *m, const char *key);
/* Inserts or replaces; the previous value (or NULL) goes to *old when old is non-NULL.
 * Returns -1 when out of memory (the map is unchanged). */
int kube_map_put(struct kube_map *m, const char *key, void *value, void **old);
/* Removes key and returns its value (NULL when absent). */
void *kube_map_remove(struct kube_map *m, const char *key);
size_t kube_map_size(const struct kube_map *m);
/* Calls fn for every entry; fn returns non-zero to stop. The map must not change meanwhile. */
void kube_map_each(const struct kube_map *m, int (*fn)(const char *key, void *value, void *user),
                   void *user);

#endif
