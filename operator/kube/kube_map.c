#include "kube_map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    struct entry *next;
    uint64_t hash;
    void *value;
    char key[];
};

struct kube_map {
    struct entry **buckets;
    size_t nbuckets, count;
};

static uint64_t hash_key(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

struct kube_map *kube_map_new(void)
{
    struct kube_map *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->nbuckets = 64;
    m->buckets = calloc(m->nbuckets, sizeof *m->buckets);
    if (!m->buckets) {
        free(m);
        return NULL;
    }
    return m;
}

void kube_map_free(struct kube_map *m, void (*free_value)(void *))
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct entry *e = m->buckets[i];
        while (e) {
            struct entry *next = e->next;
            if (free_value)
                free_value(e->value);
            free(e);
            e = next;
        }
    }
    free(m->buckets);
    free(m);
}

static struct entry **find(const struct kube_map *m, const char *key, uint64_t h)
{
    struct entry **p = &m->buckets[h & (m->nbuckets - 1)];
    while (*p && ((*p)->hash != h || strcmp((*p)->key, key) != 0))
        p = &(*p)->next;
    return p;
}

void *kube_map_get(const struct kube_map *m, const char *key)
{
    struct entry *e = *find(m, key, hash_key(key));
    return e ? e->value : NULL;
}

static void grow(struct kube_map *m)
{
    size_t n = m->nbuckets * 2;
    struct entry **b = calloc(n, sizeof *b);
    if (!b)
        return; /* keep the longer chains; still correct */
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct entry *e = m->buckets[i];
        while (e) {
            struct entry *next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = n;
}

int kube_map_put(struct kube_map *m, const char *key, void *value, void **old)
{
    uint64_t h = hash_key(key);
    struct entry **p = find(m, key, h);
    if (*p) {
        if (old)
            *old = (*p)->value;
        (*p)->value = value;
        return 0;
    }
    size_t len = strlen(key);
    struct entry *e = malloc(sizeof *e + len + 1);
    if (!e)
        return -1;
    memcpy(e->key, key, len + 1);
    e->hash = h;
    e->value = value;
    e->next = NULL;
    *p = e;
    m->count++;
    if (old)
        *old = NULL;
    if (m->count > m->nbuckets)
        grow(m);
    return 0;
}

void *kube_map_remove(struct kube_map *m, const char *key)
{
    struct entry **p = find(m, key, hash_key(key));
    struct entry *e = *p;
    if (!e)
        return NULL;
    *p = e->next;
    void *v = e->value;
    free(e);
    m->count--;
    return v;
}

size_t kube_map_size(const struct kube_map *m) { return m->count; }

void kube_map_each(const struct kube_map *m, int (*fn)(const char *key, void *value, void *user),
                   void *user)
{
    for (size_t i = 0; i < m->nbuckets; i++)
        for (struct entry *e = m->buckets[i]; e; e = e->next)
            if (fn(e->key, e->value, user))
                return;
}
