/* The controller's memo per job (client-go's "expectations"): what the caches cannot know yet.
 * The informers lag behind our own writes: right after a status patch the cached job still
 * has the old status, right after deleting pods the cache still lists them, right after
 * creating pods it does not. A memo per job bridges that gap so reconciles do not act twice. */
#include "controller_impl.h"

#include <pthread.h>
#include <stdlib.h>

#include "kube_map.h"

void ctl_memo_free(void *v)
{
    struct memo *m = v;
    if (!m)
        return;
    cJSON_Delete(m->status);
    cJSON_Delete(m->gone);
    cJSON_Delete(m->made);
    free(m);
}

struct memo *ctl_memo_take(struct controller *c, const char *key)
{
    pthread_mutex_lock(&c->memo_lock);
    struct memo *m = kube_map_remove(c->memos, key);
    pthread_mutex_unlock(&c->memo_lock);
    if (!m) {
        m = calloc(1, sizeof *m);
        if (m) {
            m->gone = cJSON_CreateObject();
            m->made = cJSON_CreateObject();
            if (!m->gone || !m->made) {
                ctl_memo_free(m);
                m = NULL;
            }
        }
    }
    return m;
}

/* Drops expired entries; keeps the memo only when it still says something. */
void ctl_memo_put(struct controller *c, const char *key, struct memo *m, double now)
{
    if (!m)
        return;
    for (int pass = 0; pass < 2; pass++) {
        cJSON *set = pass ? m->made : m->gone, *it = set->child;
        while (it) {
            cJSON *next = it->next;
            if (it->valuedouble < now)
                cJSON_Delete(cJSON_DetachItemViaPointer(set, it));
            it = next;
        }
    }
    if (!m->status && !m->gone->child && !m->made->child) {
        ctl_memo_free(m);
        return;
    }
    pthread_mutex_lock(&c->memo_lock);
    struct memo *old = NULL;
    if (kube_map_put(c->memos, key, m, (void **)&old) != 0)
        ctl_memo_free(m);
    ctl_memo_free(old);
    pthread_mutex_unlock(&c->memo_lock);
}

void ctl_memo_mark(cJSON *set, const char *k, double expiry)
{
    if (!k)
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(set, k);
    cJSON_AddNumberToObject(set, k, expiry);
}
